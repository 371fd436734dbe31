"""The in-flight signal channel: real UDP sockets on loopback, a real server thread."""

from __future__ import annotations

import queue
import socket
import threading
import time

import pytest

from spark_statestore.spark.driver.signal_server import SignalServer, driver_addresses
from spark_statestore.spark.signals import (
    REPLAY_WINDOW_BATCHES,
    CrossingSignal,
    SignalTarget,
    decode,
    encode,
    send,
)

SIGNAL = CrossingSignal("5f1c0d9e-query", batch_id=7, partition=3, attempt=1, uncommitted_bytes=70 << 20, limit=64 << 20)


def wait_for(predicate, timeout: float = 10.0):
    """Poll until `predicate()` is truthy (UDP on loopback is delivered at once, but the
    server's thread handles it on its own time)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.01)
    raise AssertionError(f"timed out after {timeout}s waiting for {predicate}")


def stats_after(server: SignalServer, datagrams: int) -> dict[str, int]:
    """The server's counters once it has handled `datagrams` datagrams."""
    wait_for(lambda: sum(server.stats().values()) >= datagrams)
    return server.stats()


@pytest.fixture
def server():
    received: queue.Queue = queue.Queue()
    with SignalServer(received.put) as running:
        running.received = received
        yield running


def raw_send(target: SignalTarget, datagram: bytes) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.sendto(datagram, (target.host, target.port))


def test_signal_with_the_secret_reaches_the_callback(server):
    assert send(server.target, SIGNAL) is True
    assert server.received.get(timeout=10) == SIGNAL
    other = CrossingSignal("ünïcode-query", 0, 0, 0, 1, 0)  # any UTF-8 query id, batch 0
    assert send(server.target, other)
    assert server.received.get(timeout=10) == other
    assert server.stats() == {"accepted": 2}


def test_signal_round_trips_through_its_encoding():
    secret = b"s" * 32
    assert decode(encode(SIGNAL, secret), secret) == SIGNAL
    with pytest.raises(ValueError, match="query_id"):
        encode(CrossingSignal("q" * 256, 0, 0, 0, 0, 0), secret)


def test_wrong_secret_garbage_and_truncated_datagrams_are_rejected(server):
    forged = SignalTarget(server.target.host, server.target.port, b"not the secret" * 3)
    assert send(forged, SIGNAL)
    good = encode(SIGNAL, server.target.secret)
    raw_send(server.target, b"\x00garbage" * 7)  # long enough, wrong magic
    raw_send(server.target, b"junk")
    raw_send(server.target, good[:-1])  # tag cut short
    raw_send(server.target, good[:20])
    tampered = bytearray(good)
    tampered[-40] ^= 0x01  # a flipped bit in the limit
    raw_send(server.target, bytes(tampered))
    stats = stats_after(server, 6)
    assert stats == {"bad_tag": 3, "malformed": 3}
    assert server.received.empty()


def test_replayed_and_stale_datagrams_are_rejected(server):
    datagram = encode(SIGNAL, server.target.secret)
    raw_send(server.target, datagram)
    assert server.received.get(timeout=10) == SIGNAL
    raw_send(server.target, datagram)  # the very same datagram again
    later = CrossingSignal(SIGNAL.query_id, SIGNAL.batch_id + REPLAY_WINDOW_BATCHES + 5, 0, 0, 1, 0)
    assert send(server.target, later)
    assert server.received.get(timeout=10) == later
    old = CrossingSignal(SIGNAL.query_id, SIGNAL.batch_id, partition=9, attempt=0, uncommitted_bytes=1, limit=0)
    assert send(server.target, old)  # never seen, but far behind the newest batch: its key may be forgotten
    other_attempt = CrossingSignal(later.query_id, later.batch_id, 0, attempt=1, uncommitted_bytes=1, limit=0)
    assert send(server.target, other_attempt)  # a retry of the task is a new message
    assert server.received.get(timeout=10) == other_attempt
    stats = stats_after(server, 5)
    assert stats == {"accepted": 3, "replayed": 1, "stale": 1}


def test_a_failing_callback_does_not_stop_the_server():
    received = []

    def callback(signal):
        received.append(signal)
        if len(received) == 1:
            raise RuntimeError("callback bug")

    with SignalServer(callback) as server:
        send(server.target, SIGNAL)
        second = CrossingSignal(SIGNAL.query_id, SIGNAL.batch_id + 1, 0, 0, 1, 0)
        send(server.target, second)
        wait_for(lambda: len(received) == 2)
        assert received == [SIGNAL, second]
        assert wait_for(lambda: server.stats().get("accepted") == 2)
        assert server.stats()["callback_errors"] == 1


@pytest.mark.parametrize(
    "target",
    [
        SignalTarget("192.0.2.1", 9, b"k"),  # TEST-NET-1: unroutable
        SignalTarget("127.0.0.1", 70000, b"k"),
        SignalTarget("127.0.0.1", 0, b"k"),
        SignalTarget("", 4000, b"k"),
        SignalTarget("driver.example.invalid", 4000, b"k"),  # names are resolved on the driver, not here
        SignalTarget(None, 4000, b"k"),
        SignalTarget("127.0.0.1", "4000", b"k"),
        SignalTarget("127.0.0.1", 4000, None),
    ],
    ids=["unroutable", "port-too-large", "port-zero", "empty-host", "host-name", "no-host", "str-port", "no-secret"],
)
def test_send_to_a_bad_target_returns_without_raising(target):
    started = time.monotonic()
    result = send(target, SIGNAL)
    if target.host == "192.0.2.1":
        assert result in (True, False)  # the kernel may take the datagram or refuse it at once
    else:
        assert result is False
    assert time.monotonic() - started < 1.0


def test_send_to_a_dead_port_returns_without_raising():
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.bind(("127.0.0.1", 0))
        dead = SignalTarget("127.0.0.1", probe.getsockname()[1], b"k" * 32)
    started = time.monotonic()
    for _ in range(3):  # later sends may see the ICMP error of the first one
        assert send(dead, SIGNAL) in (True, False)
    assert time.monotonic() - started < 1.0


def test_send_of_a_bad_signal_returns_false(server):
    assert send(server.target, CrossingSignal("q", "not a batch", 0, 0, 0, 0)) is False
    assert send(server.target, CrossingSignal("q" * 300, 1, 0, 0, 0, 0)) is False


def test_server_shuts_down_cleanly_and_releases_its_port():
    server = SignalServer(lambda signal: None)
    port = server.target.port
    server.close()
    server.close()  # idempotent
    assert not server._thread.is_alive()
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as again:
        again.bind(("127.0.0.1", port))  # the port is free again
    assert send(server.target, SIGNAL) in (True, False)  # sending to a closed server is harmless


def test_a_callback_may_close_its_own_server():
    closed = threading.Event()
    holder = {}

    def callback(signal):
        holder["server"].close()
        closed.set()

    holder["server"] = server = SignalServer(callback)
    send(server.target, SIGNAL)
    assert closed.wait(10)
    server._thread.join(10)
    assert not server._thread.is_alive()


def test_server_parameters_are_checked():
    with pytest.raises(ValueError, match="port must be an integer in 0..65535, got 70000"):
        SignalServer(lambda s: None, port=70000)
    with pytest.raises(ValueError, match="bind_host 'no such host.invalid' does not resolve"):
        SignalServer(lambda s: None, bind_host="no such host.invalid")


def test_server_binds_the_drivers_address_and_advertises_a_numeric_one():
    conf = {"spark.driver.host": "localhost"}
    bind, advertised = driver_addresses(conf.get)
    assert (bind, advertised) == ("localhost", "localhost")
    assert driver_addresses({"spark.driver.host": "10.1.2.3", "spark.driver.bindAddress": "0.0.0.0"}.get) == (
        "0.0.0.0",
        "10.1.2.3",
    )
    assert driver_addresses({}.get) == ("127.0.0.1", "127.0.0.1")
    received: queue.Queue = queue.Queue()
    with SignalServer(received.put, bind_host=bind, advertised_host=advertised) as server:
        assert server.target.host in ("127.0.0.1", "::1")
        assert send(server.target, SIGNAL)
        assert received.get(timeout=10) == SIGNAL


def test_target_repr_hides_the_secret():
    assert "secret" not in repr(SignalTarget("127.0.0.1", 1, b"topsecret"))
    assert "topsecret" not in repr(SignalTarget("127.0.0.1", 1, b"topsecret"))
