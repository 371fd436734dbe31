"""The driver's receiving side of the in-flight signals (the format and the tasks'
sending side are in `spark_statestore.spark.signals`): a thread with a UDP socket that
checks each datagram's tag, rejects replays and stale batches, and hands accepted signals
to its callback (the governor)."""

from __future__ import annotations

import collections
import logging
import secrets
import select
import socket
import threading
from typing import Callable

from spark_statestore.spark.signals import (
    LOOPBACK,
    MAX_DATAGRAM,
    REPLAY_WINDOW_BATCHES,
    BadSignal,
    CrossingSignal,
    SignalTarget,
    decode,
    resolve,
)

log = logging.getLogger("spark_statestore.spark.signals")


def driver_addresses(get: Callable[[str], str | None]) -> tuple[str, str]:
    """(address to bind, address executors send to) from Spark's settings:
    `spark.driver.bindAddress` (else `spark.driver.host`) and `spark.driver.host`,
    loopback when neither is set."""
    host = get("spark.driver.host")
    bind = get("spark.driver.bindAddress") or host or LOOPBACK
    return bind, host or bind


class SignalServer:
    """Receives signals on a thread and passes accepted ones to `callback` (see module
    docstring). `stats()` counts accepted and rejected datagrams by reason."""

    def __init__(
        self,
        callback: Callable[[CrossingSignal], object],
        bind_host: str = LOOPBACK,
        advertised_host: str | None = None,
        port: int = 0,
    ) -> None:
        if not isinstance(port, int) or not 0 <= port < 65536:
            raise ValueError(f"port must be an integer in 0..65535, got {port!r}")
        self._callback = callback
        self._secret = secrets.token_bytes(32)
        family, sockaddr = resolve(bind_host, port, name="bind_host")
        advertised = resolve(advertised_host or bind_host, name="advertised_host")[1][0]
        self._sock = socket.socket(family, socket.SOCK_DGRAM)
        try:
            self._sock.bind(sockaddr)
        except OSError as e:
            self._sock.close()
            raise OSError(f"cannot bind the signal server to {bind_host!r} port {port}: {e}") from e
        self.target = SignalTarget(advertised, self._sock.getsockname()[1], self._secret)
        self._stats: collections.Counter[str] = collections.Counter()
        self._stats_lock = threading.Lock()
        self._seen: set[tuple[str, int, int, int]] = set()
        self._newest: dict[str, int] = {}
        self._stop_r, self._stop_w = socket.socketpair()
        self._closed = False
        self._close_lock = threading.Lock()
        self._thread = threading.Thread(target=self._serve, name="spark_statestore-signals", daemon=True)
        self._thread.start()

    def __enter__(self) -> "SignalServer":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def stats(self) -> dict[str, int]:
        """Datagrams by outcome: accepted, bad_tag, malformed, replayed, stale, callback_errors."""
        with self._stats_lock:
            return dict(self._stats)

    def close(self) -> None:
        """Stop the thread and release the port (when called from the callback, as soon as
        the callback returns); idempotent."""
        with self._close_lock:
            if self._closed:
                return
            self._closed = True
            self._stop_w.send(b"x")
            self._stop_w.close()
        if threading.current_thread() is not self._thread:  # a callback may close its server
            self._thread.join()

    def _count(self, outcome: str) -> None:
        with self._stats_lock:
            self._stats[outcome] += 1

    def _serve(self) -> None:
        try:
            while True:
                ready, _, _ = select.select([self._sock, self._stop_r], [], [])
                if self._stop_r in ready:
                    return
                self._receive()
        finally:
            self._sock.close()
            self._stop_r.close()

    def _receive(self) -> None:
        try:
            datagram, peer = self._sock.recvfrom(MAX_DATAGRAM + 1)
        except OSError:
            return
        try:
            signal = self._admit(decode(datagram, self._secret))
        except BadSignal as e:
            self._count(e.reason)
            log.debug("signal from %s rejected: %s", peer, e)
            return
        self._count("accepted")
        try:
            self._callback(signal)
        except Exception:  # noqa: BLE001 - one bad callback must not stop the server
            self._count("callback_errors")
            log.exception("spark_statestore signal callback failed for %s", signal)

    def _admit(self, signal: CrossingSignal) -> CrossingSignal:
        """Reject replays: each (query, batch, partition, attempt) once, nothing far behind."""
        newest = self._newest.get(signal.query_id, signal.batch_id)
        if signal.batch_id < newest - REPLAY_WINDOW_BATCHES:
            raise BadSignal("stale", f"batch {signal.batch_id} is far behind batch {newest}")
        key = (signal.query_id, signal.batch_id, signal.partition, signal.attempt)
        if key in self._seen:
            raise BadSignal("replayed", f"already accepted {key}")
        self._seen.add(key)
        if signal.batch_id > newest or signal.query_id not in self._newest:
            self._newest[signal.query_id] = signal.batch_id
            horizon = signal.batch_id - REPLAY_WINDOW_BATCHES
            self._seen = {k for k in self._seen if k[0] != signal.query_id or k[1] >= horizon}
        return signal
