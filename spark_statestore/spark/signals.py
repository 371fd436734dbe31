"""In-flight signals: a task tells the driver that its uncommitted bytes crossed the limit.

This module holds what both sides share (the datagram format and its check) and the
tasks' sending side; the receiving `SignalServer` is in `spark.driver.signal_server`.

A `SignalServer` runs on the driver (a thread with a UDP socket bound to the driver's
address, ephemeral port); its `target` (host, port, secret) travels to the executors in
the pickled operator config, and a task calls `send(target, CrossingSignal(...))` once when
it crosses the limit. The server checks each datagram and hands accepted signals to its
callback (the governor).

Why UDP datagrams rather than a TCP exchange: `send` must never hold up a task nor fail
it. A UDP `sendto` on a non-blocking socket returns as soon as the kernel has the datagram
(or refuses it): there is no connection to set up, so a dead server, a closed port or an
unroutable driver address costs the task one system call, not a connect timeout, and it
works across hosts with nothing shared but the network. A lost datagram is acceptable:
the signal only makes the next batch start sooner, and the end-of-task metrics carry each
task's true peak to the driver anyway, so the governor still sees the crossing when the
batch ends.

Only messages proving the secret count: each datagram ends with an HMAC-SHA256 of its
content keyed by the server's random 32-byte secret (new for every server, so messages
of an earlier run or another query's server fail the check). A task attempt sends one
signal per batch, so the server accepts each (query, batch, partition, attempt) once:
a repeated datagram is a replay and is rejected, as is one for a batch far behind the
newest batch seen for its query (its key may have been forgotten). Everything else that
does not decode (garbage, truncation, another version) is counted and dropped.

Wire format (network byte order): magic `SSE1`, query id length (1 byte), query id
(UTF-8), batch id (8), partition (4), attempt (4), uncommitted bytes (8), limit (8), tag (32).
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import logging
import os
import socket
import struct
import threading
from dataclasses import dataclass, field

log = logging.getLogger("spark_statestore.spark.signals")

MAGIC = b"SSE1"
TAG_BYTES = 32
MAX_QUERY_ID_BYTES = 255
REPLAY_WINDOW_BATCHES = 100  # batches behind the newest one of a query still accepted
_LENGTH = struct.Struct("!B")
_FIELDS = struct.Struct("!qiiqq")
MAX_DATAGRAM = len(MAGIC) + _LENGTH.size + MAX_QUERY_ID_BYTES + _FIELDS.size + TAG_BYTES
LOOPBACK = "127.0.0.1"


class BadSignal(ValueError):
    """A datagram that is not an authentic signal; `reason` is one of the server's counters."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason


@dataclass(frozen=True)
class CrossingSignal:
    """A task's uncommitted bytes passed `spark.statestore.uncommitted.maxBytes` (`limit`)."""

    query_id: str
    batch_id: int
    partition: int
    attempt: int
    uncommitted_bytes: int
    limit: int


@dataclass(frozen=True)
class SignalTarget:
    """Where tasks send signals, and the secret that proves them (picklable)."""

    host: str
    port: int
    secret: bytes = field(repr=False)


def encode(signal: CrossingSignal, secret: bytes) -> bytes:
    """The datagram of a signal, authenticated with `secret`."""
    query = signal.query_id.encode("utf-8")
    if len(query) > MAX_QUERY_ID_BYTES:
        raise ValueError(f"query_id must be at most {MAX_QUERY_ID_BYTES} bytes, got {signal.query_id!r}")
    body = (
        MAGIC
        + _LENGTH.pack(len(query))
        + query
        + _FIELDS.pack(signal.batch_id, signal.partition, signal.attempt, signal.uncommitted_bytes, signal.limit)
    )
    return body + hmac.digest(secret, body, hashlib.sha256)


def decode(datagram: bytes, secret: bytes) -> CrossingSignal:
    """The signal in a datagram; `BadSignal` if it is malformed or not authentic."""
    if len(datagram) < len(MAGIC) + _LENGTH.size + _FIELDS.size + TAG_BYTES:
        raise BadSignal("malformed", f"{len(datagram)} bytes is too short")
    if not datagram.startswith(MAGIC):
        raise BadSignal("malformed", f"unknown magic {datagram[:4]!r}")
    body, tag = datagram[:-TAG_BYTES], datagram[-TAG_BYTES:]
    if not hmac.compare_digest(tag, hmac.digest(secret, body, hashlib.sha256)):
        raise BadSignal("bad_tag", "the HMAC does not match this server's secret")
    (length,) = _LENGTH.unpack_from(body, len(MAGIC))
    start = len(MAGIC) + _LENGTH.size
    if len(body) != start + length + _FIELDS.size:
        raise BadSignal("malformed", f"query id length {length} does not fit {len(body)} bytes")
    try:
        query_id = body[start : start + length].decode("utf-8")
    except UnicodeDecodeError as e:
        raise BadSignal("malformed", f"query id is not UTF-8: {e}") from None
    return CrossingSignal(query_id, *_FIELDS.unpack_from(body, start + length))


# -- executor side ---------------------------------------------------------------------

_send_sockets: dict[tuple[int, int], socket.socket] = {}  # (pid, family) -> socket
_send_lock = threading.Lock()


def send(target: SignalTarget, signal: CrossingSignal) -> bool:
    """Send a signal without waiting: True if the datagram left, False if it could not
    (bad target, no route, full socket buffer). Never raises and never blocks: the target
    is a numeric address (the driver resolved its name), so there is no name lookup."""
    try:
        address = _numeric_address(target.host, target.port)
        if address is None:
            return False
        family, sockaddr = address
        _socket(family).sendto(encode(signal, target.secret), sockaddr)
        return True
    except Exception as e:  # noqa: BLE001 - a signal must never fail the task
        log.debug("signal to %r not sent: %s", target, e)
        return False


@functools.lru_cache(maxsize=64)
def _numeric_address(host: str, port: int) -> tuple[int, tuple] | None:
    if not isinstance(port, int) or not 0 < port < 65536 or not isinstance(host, str):
        return None
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_DGRAM, flags=socket.AI_NUMERICHOST)
    except (OSError, UnicodeError):
        return None
    family, _, _, _, sockaddr = infos[0]
    return family, sockaddr


def resolve(host: str, port: int = 0, name: str = "host") -> tuple[int, tuple]:
    """(address family, socket address) of a host name, looked up on the driver so that
    tasks never look names up; ValueError naming the parameter `name` if it does not resolve."""
    try:
        family, _, _, _, sockaddr = socket.getaddrinfo(host, port, type=socket.SOCK_DGRAM)[0]
    except (OSError, UnicodeError) as e:
        raise ValueError(f"{name} {host!r} does not resolve: {e}") from None
    return family, sockaddr


def _socket(family: int) -> socket.socket:
    """This process's non-blocking sending socket (Python workers fork: one per pid)."""
    key = (os.getpid(), family)
    with _send_lock:
        sock = _send_sockets.get(key)
        if sock is None:
            sock = socket.socket(family, socket.SOCK_DGRAM)
            sock.setblocking(False)
            _send_sockets[key] = sock
        return sock
