"""`SessionWindow` and the byte layout of sessions (persistent store and record cache).

A session's stored key is ``0x01 | escape(key) | end (8 bytes) | start (8 bytes)``
(big-endian times; `serde.escape` keeps a key that is a prefix of another from
interleaving with it). Byte order is then (key, end, start): one key's sessions by end
time are one range scan from a seek (`find_sessions`), a key range is one ordered scan
(`find_sessions_range`), and a reverse scan reads them backward.

The persistent store also keeps an index by end time, ``0x02 | end | escape(key) |
start`` with an empty value, so that expired sessions are found (and freed) by scanning
exactly the expired ones, however the keys interleave. Store metadata lives under 0xff.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from spark_statestore.serde import escape, unescape
from spark_statestore.stores.api import prefix_end

SESSIONS = b"\x01"
BY_END = b"\x02"

# the items of the bulk calls (`write_sessions`, `sessions_of_keys`), as errors name them
CHANGE_FIELDS = ("key", "start", "end", "value")
REQUEST_FIELDS = ("key", "earliest_session_end", "latest_session_start")


class SessionWindow(NamedTuple):
    """One session of a key: records from `start` to `end` (inclusive, int ms)."""

    key: Any
    start: int
    end: int


Window = tuple[int, int]  # a session of a known key: (start, end)


def by_end(window: Window) -> Window:
    """The read order of one key's sessions: by end, then start."""
    return window[1], window[0]


def session_key(key: bytes, start: int, end: int) -> bytes:
    """The stored key of a session."""
    return stored_keys(escape(key), start, end)[0]


def stored_keys(escaped: bytes, start: int, end: int) -> tuple[bytes, bytes]:
    """A session's stored key and its index entry, for its key already escaped (a bulk
    write escapes each key once)."""
    e, s = end.to_bytes(8, "big"), start.to_bytes(8, "big")
    return SESSIONS + escaped + e + s, BY_END + e + escaped + s


def session_key_of_index(entry: bytes) -> bytes:
    """The stored key of the session an index entry points at (bytes moved, nothing decoded)."""
    return SESSIONS + entry[9:-8] + entry[1:9] + entry[-8:]


def key_prefix(key: bytes) -> bytes:
    """What every stored key of `key`'s sessions starts with."""
    return SESSIONS + escape(key)


def key_prefix_end(key: bytes) -> bytes:
    """The smallest stored key above every session of `key` (and below the next key's)."""
    return prefix_end(key_prefix(key))  # type: ignore[return-value]


def range_bounds(key_from: bytes | None, key_to: bytes | None) -> tuple[bytes, bytes]:
    """[lo, hi) of the stored keys of the sessions of keys in [key_from, key_to]."""
    lo = SESSIONS if key_from is None else key_prefix(key_from)
    hi = BY_END if key_to is None else key_prefix_end(key_to)
    return lo, hi


def session_of(stored: bytes) -> SessionWindow:
    """The session a stored key holds."""
    key, at = unescape(stored, 1)
    return SessionWindow(
        key, int.from_bytes(stored[at + 8 : at + 16], "big"), int.from_bytes(stored[at : at + 8], "big")
    )


def end_index_key(key: bytes, start: int, end: int) -> bytes:
    """The entry of a session in the index by end time."""
    return stored_keys(escape(key), start, end)[1]


def session_of_index(entry: bytes) -> SessionWindow:
    """The session an index entry points at."""
    key, at = unescape(entry, 9)
    return SessionWindow(key, int.from_bytes(entry[at : at + 8], "big"), int.from_bytes(entry[1:9], "big"))


def index_bound(end: int) -> bytes:
    """The smallest index entry of sessions ending at `end` or later (any end, below 0)."""
    return BY_END + max(end, 0).to_bytes(8, "big")
