"""The signal channel from tasks to the driver's JVM: datagrams crafted here (forged, replayed,
stale, malformed) sent over real UDP on loopback to the receiver of a real driver, whose
counters say what it made of each; and the tasks' `send`, which never blocks nor raises."""

from __future__ import annotations

import hashlib
import hmac
import socket
import struct
import time
import uuid

import pytest

from spark_statestore.spark.signals import (
    CROSSING,
    MAGIC,
    REPORT,
    SECRET_KEY,
    TARGET_KEY,
    ReportFigures,
    Signal,
    SignalTarget,
    encode,
    send,
)

pytestmark = pytest.mark.versioned
REPLAY_WINDOW_BATCHES = 100  # SignalReceiver.REPLAY_WINDOW_BATCHES
NEVER_BLOCKS = 5.0  # seconds: far more than a send takes on a loaded machine, less than a resolver's timeout


def signal(kind: int = CROSSING, batch: int = 7, attempt_id: int = 40, query: str | None = None) -> Signal:
    return Signal(kind, query or f"query-{uuid.uuid4()}", batch, 3, attempt_id, 70 << 20, 64 << 20)


@pytest.fixture(scope="module")
def receiver(classic_spark):
    """The driver's receiver, started in a session of its own; `counted(n)` waits until it
    handled `n` more datagrams than when the test began and returns the counters' changes."""
    from spark_statestore.spark.driver import jvm

    session = classic_spark.newSession()
    assert jvm.activate_shim(session).available
    target = SignalTarget.parse(session.conf.get(TARGET_KEY), session.conf.get(SECRET_KEY))
    return session, target


@pytest.fixture
def counted(receiver):
    from spark_statestore.spark.driver import jvm

    session, _ = receiver
    start = jvm.signal_stats(session)

    def changes(datagrams: int, timeout: float = 120.0) -> dict[str, int]:  # a bound on a hang
        deadline = time.monotonic() + timeout
        while True:
            now = jvm.signal_stats(session)
            delta = {k: v - start.get(k, 0) for k, v in now.items() if v != start.get(k, 0)}
            if sum(delta.values()) >= datagrams or time.monotonic() > deadline:
                return delta
            time.sleep(0.02)

    return changes


def raw_send(target: SignalTarget, datagram: bytes) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.sendto(datagram, (target.host, target.port))


def signed(body: bytes, secret: bytes) -> bytes:
    return body + hmac.digest(secret, body, hashlib.sha256)


@pytest.mark.spark
def test_signals_with_the_secret_are_accepted(receiver, counted):
    _, target = receiver
    assert send(target, signal())
    assert send(target, Signal(REPORT, "ünïcode-query", 0, 0, 0, 1, 0))  # any UTF-8 query id, batch 0
    assert counted(2) == {"accepted": 2}


@pytest.mark.spark
def test_forged_garbage_and_truncated_datagrams_are_rejected(receiver, counted):
    _, target = receiver
    assert send(SignalTarget(target.host, target.port, b"not the secret" * 3), signal())
    good = encode(signal(), target.secret)
    raw_send(target, b"\x00garbage" * 10)  # long enough, wrong magic
    raw_send(target, b"junk")
    raw_send(target, good[:-1])  # tag cut short
    raw_send(target, good[:20])
    tampered = bytearray(good)
    tampered[-40] ^= 0x01  # a flipped bit in the limit
    raw_send(target, bytes(tampered))
    raw_send(target, b"SSE2" + good[4:])  # wire format 2
    raw_send(target, signed(b"SSE2" + good[4:-32], target.secret))  # wire format 2, signed
    fields = struct.pack("!qiqqq", 1, 0, 1, 1, 0)
    figures = struct.pack("!9q", *range(9))
    raw_send(target, signed(MAGIC + struct.pack("!BB", 9, 1) + b"q" + fields, target.secret))  # unknown kind
    raw_send(target, signed(MAGIC + struct.pack("!BB", 1, 5) + b"q" + fields, target.secret))  # length lies
    raw_send(target, signed(MAGIC + struct.pack("!BB", 1, 2) + b"\xff\xfe" + fields, target.secret))  # not UTF-8
    raw_send(target, signed(MAGIC + struct.pack("!BB", REPORT, 1) + b"q" + fields, target.secret))  # no figures
    raw_send(target, signed(MAGIC + struct.pack("!BB", REPORT, 1) + b"q" + fields + figures[:-8], target.secret))
    raw_send(target, signed(MAGIC + struct.pack("!BB", CROSSING, 1) + b"q" + fields + figures, target.secret))
    assert counted(14) == {"bad_tag": 3, "malformed": 11}


@pytest.mark.spark
def test_replays_are_keyed_on_the_task_attempt_id(receiver, counted):
    """A datagram seen before is a replay; the same batch and partition from another task
    attempt (a re-run batch of a restarted query: its attempt number is 0 again, its task
    attempt id is new) is not, nor the other kind of message of the same attempt."""
    _, target = receiver
    first = signal(attempt_id=40)
    datagram = encode(first, target.secret)
    raw_send(target, datagram)
    raw_send(target, datagram)
    assert send(target, signal(attempt_id=41, query=first.query_id))
    assert send(target, signal(REPORT, attempt_id=40, query=first.query_id))
    assert counted(4) == {"accepted": 3, "replayed": 1}


@pytest.mark.spark
def test_signals_far_behind_the_newest_batch_are_stale(receiver, counted):
    _, target = receiver
    newest = signal(batch=REPLAY_WINDOW_BATCHES + 50)
    assert send(target, newest)
    assert send(target, signal(batch=newest.batch_id - REPLAY_WINDOW_BATCHES, query=newest.query_id))  # still in
    assert send(target, signal(batch=newest.batch_id - REPLAY_WINDOW_BATCHES - 2, query=newest.query_id))  # far behind
    assert counted(3) == {"accepted": 2, "stale": 1}


def test_only_a_report_carries_its_figures_after_the_common_fields():
    figures = ReportFigures(*range(1, 10))
    crossing = encode(Signal(CROSSING, "q", 5, 1, 7, 100, 10, figures), b"s" * 32)
    report = encode(Signal(REPORT, "q", 5, 1, 7, 100, 10, figures), b"s" * 32)
    assert len(crossing) == 4 + 2 + 1 + 36 + 32 and len(report) == len(crossing) + 9 * 8
    assert report[:7] == MAGIC + bytes([REPORT, 1]) + b"q" and report[4 + 2 + 1 + 36:-32] == struct.pack("!9q", *range(1, 10))


def test_a_reports_figures_are_the_tasks_record_in_whole_units():
    record = {"rows_written": 5, "changelog_bytes": 300, "spills": 2, "cache_hits": 7, "cache_misses": 1,
              "dropped_records": 0, "rows_expired": 3, "open_seconds": 0.0012344, "prepare_seconds": 2.5}
    assert ReportFigures.of(record) == ReportFigures(5, 300, 2, 7, 1, 0, 3, 1234, 2_500_000)


def test_a_query_id_longer_than_the_format_allows_is_refused():
    with pytest.raises(ValueError, match="query_id must be at most 255 bytes"):
        encode(Signal(CROSSING, "q" * 256, 0, 0, 0, 0, 0), b"s" * 32)


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
    result = send(target, signal())
    if target.host == "192.0.2.1":
        assert result in (True, False)  # the kernel may take the datagram or refuse it at once
    else:
        assert result is False
    assert time.monotonic() - started < NEVER_BLOCKS


def test_send_to_a_dead_port_returns_without_raising():
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.bind(("127.0.0.1", 0))
        dead = SignalTarget("127.0.0.1", probe.getsockname()[1], b"k" * 32)
    started = time.monotonic()
    for _ in range(3):  # later sends may see the ICMP error of the first one
        assert send(dead, signal()) in (True, False)
    assert time.monotonic() - started < NEVER_BLOCKS


def test_send_of_a_bad_signal_returns_false():
    target = SignalTarget("127.0.0.1", 9, b"k" * 32)
    assert send(target, Signal(CROSSING, "q", "not a batch", 0, 0, 0, 0)) is False
    assert send(target, Signal(CROSSING, "q" * 300, 1, 0, 0, 0, 0)) is False


def test_the_published_target_is_parsed_and_checked():
    secret = "ab" * 32
    assert SignalTarget.parse("10.1.2.3:4040", secret) == SignalTarget("10.1.2.3", 4040, bytes.fromhex(secret))
    assert SignalTarget.parse("[::1]:5000", secret).host == "::1"
    for bad in ("10.1.2.3", "10.1.2.3:http", ":4040", "10.1.2.3:0", "10.1.2.3:70000"):
        with pytest.raises(ValueError, match=f"{TARGET_KEY} must be host:port, got '{bad}'"):
            SignalTarget.parse(bad, secret)
    for bad in ("abc", "zz" * 32, "ab" * 31):
        with pytest.raises(ValueError, match=f"{SECRET_KEY} must be 64 hex digits, got {len(bad)} characters"):
            SignalTarget.parse("10.1.2.3:4040", bad)


def test_target_repr_hides_the_secret():
    assert "topsecret" not in repr(SignalTarget("127.0.0.1", 1, b"topsecret"))
