"""What tasks tell the driver's early-trigger governor: the datagram format and the tasks'
sending side. The receiver and the governor run in the driver's JVM (`jvm-shim/`:
`SignalReceiver`, `Governor`), so they work the same in classic and Spark Connect sessions.

Two kinds of message, each sent at most once per task attempt:

* `CROSSING`: the task's uncommitted bytes passed the limit while it runs (the governor
  may start the query's next batch as soon as this one ends);
* `REPORT`: at the end of the task, when it prepares its batch, its peak uncommitted bytes
  and the limit (the governor reads the reports of a batch when the batch ends), and the
  task's `ReportFigures` (rows written, spills, cache hits...), which the driver sums per
  query and batch for its Spark metrics source `spark_statestore` (`BatchMetrics`).

The driver publishes where to send them and the secret that proves them in its SparkConf
(`spark.statestore.earlyTrigger.target` = host:port, `.signingKey` = the secret as hex: not
named "secret", since Spark Connect hides the keys Spark redacts from its clients); the
operator built on the driver carries them to the tasks as a `SignalTarget`.

Why UDP datagrams rather than a TCP exchange: `send` must never hold up a task nor fail
it. A UDP `sendto` on a non-blocking socket returns as soon as the kernel has the datagram
(or refuses it): there is no connection to set up, so a dead receiver, a closed port or an
unroutable driver address costs the task one system call, not a connect timeout. A lost
datagram costs at most an early trigger.

Only messages proving the secret count: each datagram ends with an HMAC-SHA256 of its
content keyed by the driver's random 32-byte secret (new for every SparkContext). The
receiver accepts each (kind, query, batch, task attempt id) once: Spark's `taskAttemptId()`
is unique per attempt in a SparkContext, where the attempt number starts at 0 again in every
stage (so a batch re-run after a restart in the same session is not taken for a replay).

Wire format 3 (network byte order): magic `SSE3`, kind (1 byte), query id length (1), query
id (UTF-8), batch id (8), partition (4), task attempt id (8), uncommitted bytes (8),
limit (8), for a `REPORT` only the figures (8 each, in `ReportFigures`' field order), tag
(32). The receiver takes only datagrams of exactly the length their kind has.
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
from dataclasses import astuple, dataclass, field, fields

log = logging.getLogger("spark_statestore.spark.signals")

MAGIC = b"SSE3"
CROSSING = 1
REPORT = 2
MAX_QUERY_ID_BYTES = 255
TARGET_KEY = "spark.statestore.earlyTrigger.target"
SECRET_KEY = "spark.statestore.earlyTrigger.signingKey"
_HEAD = struct.Struct("!BB")
_FIELDS = struct.Struct("!qiqqq")


@dataclass(frozen=True)
class ReportFigures:
    """What a task's end-of-task report adds to its peak: counters of its `TaskMetrics`, and
    its open and prepare times in microseconds (the wire carries whole numbers)."""

    rows_written: int = 0
    changelog_bytes: int = 0
    spills: int = 0
    cache_hits: int = 0
    cache_misses: int = 0
    dropped_records: int = 0
    rows_expired: int = 0
    open_micros: int = 0
    prepare_micros: int = 0

    @classmethod
    def of(cls, record: dict) -> ReportFigures:
        """The figures of a task's metrics record (`TaskMetrics.as_dict()`)."""
        micros = {"open_micros": "open_seconds", "prepare_micros": "prepare_seconds"}
        return cls(**{
            f.name: round(record[micros[f.name]] * 1e6) if f.name in micros else int(record[f.name])
            for f in fields(cls)
        })


NO_FIGURES = ReportFigures()  # a crossing's
_FIGURES = struct.Struct("!" + "q" * len(fields(ReportFigures)))


@dataclass(frozen=True)
class Signal:
    """One message of a task attempt (`kind`: `CROSSING` or `REPORT`; only a report
    carries `figures`)."""

    kind: int
    query_id: str
    batch_id: int
    partition: int
    task_attempt_id: int
    uncommitted_bytes: int
    limit: int
    figures: ReportFigures = NO_FIGURES


@dataclass(frozen=True)
class SignalTarget:
    """Where tasks send signals, and the secret that proves them (picklable)."""

    host: str
    port: int
    secret: bytes = field(repr=False)

    @classmethod
    def parse(cls, target: str, secret_hex: str) -> "SignalTarget":
        """The target the driver published (`host:port`, `[v6]:port`; the secret as hex);
        ValueError naming the setting and the value when it is not one."""
        host, _, port = str(target).rpartition(":")
        host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"{TARGET_KEY} must be host:port, got {target!r}")
        try:
            secret = bytes.fromhex(secret_hex)
        except (TypeError, ValueError):
            secret = b""
        if len(secret) != 32:
            raise ValueError(f"{SECRET_KEY} must be 64 hex digits, got {len(str(secret_hex))} characters")
        return cls(host, int(port), secret)


def encode(signal: Signal, secret: bytes) -> bytes:
    """The datagram of a signal, authenticated with `secret`."""
    query = signal.query_id.encode("utf-8")
    if len(query) > MAX_QUERY_ID_BYTES:
        raise ValueError(f"query_id must be at most {MAX_QUERY_ID_BYTES} bytes, got {signal.query_id!r}")
    body = (
        MAGIC
        + _HEAD.pack(signal.kind, len(query))
        + query
        + _FIELDS.pack(
            signal.batch_id, signal.partition, signal.task_attempt_id, signal.uncommitted_bytes, signal.limit
        )
        + (_FIGURES.pack(*astuple(signal.figures)) if signal.kind == REPORT else b"")
    )
    return body + hmac.digest(secret, body, hashlib.sha256)


_send_sockets: dict[tuple[int, int], socket.socket] = {}  # (pid, family) -> socket
_send_lock = threading.Lock()


def send(target: SignalTarget, signal: Signal) -> bool:
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
