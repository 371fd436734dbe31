"""Persistent session store over a keyspace, with the read semantics of the in-memory one.

Layout (`session_layout`): sessions under ``0x01 | escape(key) | end | start`` (byte order
= (key, end, start), the read order), an index by end time under ``0x02 | end |
escape(key) | start``, and the observed stream time under 0xff (so it commits with the
data). `find_sessions` is one range scan from ``key | earliest end``; a key range is
read forward by one seeker, one seek per key to its earliest wanted end, so sessions
that end too early are skipped rather than read, and backward by one reverse scan per key.

Expiry is bounded work: when the stream time advances, the index below the live range
lists exactly the sessions that expired, which are deleted (with their index entries) in
the same transaction as the new stream time, read `EXPIRE_CHUNK` at a time. Work is what
is freed, never a scan of live sessions; and the durable state of every version holds
live sessions only, as the state readers show them. Reads also check liveness, so an
iterator opened before an advance never returns what expired since.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from itertools import islice
from typing import Any

from spark_statestore.serde import unescape
from spark_statestore.stores.api import prefix_end
from spark_statestore.stores.keyspace import KeySpace
from spark_statestore.stores.persistent_window import STREAM_TIME_KEY
from spark_statestore.stores.session_api import Sessions, SessionSpec, SessionStore
from spark_statestore.stores.session_layout import (
    BY_END,
    SessionWindow,
    end_index_key,
    index_bound,
    key_prefix,
    key_prefix_end,
    range_bounds,
    session_key,
    session_of,
    session_of_index,
)
from spark_statestore.stores.window_api import CHUNK_RECORDS

EXPIRE_CHUNK = 256  # expired sessions read from the index at a time


class RocksDBSessionStore(SessionStore):
    """A session store on a `KeySpace` (see module docstring)."""

    persistent = True

    def __init__(
        self, name: str, keyspace: KeySpace, spec: SessionSpec, on_close: Callable[[], Any] | None = None
    ) -> None:
        super().__init__(name, spec, on_close)
        self._ks = keyspace
        self._load_stream_state()

    def _load_stream_state(self) -> None:
        raw = self._ks.get(STREAM_TIME_KEY)
        self._stream_time = -1 if raw is None else int.from_bytes(raw, "big", signed=True)

    @property
    def keyspace(self) -> KeySpace:
        return self._ks

    # -- writes -------------------------------------------------------------------------

    def _advance(self, time: int) -> None:
        self._stream_time = time
        self._ks.put(STREAM_TIME_KEY, time.to_bytes(8, "big", signed=True))
        self._expire()

    def _expire(self) -> None:
        """Delete every expired session and its index entry (found through the index)."""
        ks = self._ks
        limit = index_bound(self._expired_up_to() + 1)
        while True:
            entries = list(islice(ks.scan(BY_END, limit), EXPIRE_CHUNK))
            for entry, _ in entries:
                ks.delete(session_key(*session_of_index(entry)))
                ks.delete(entry)
            if len(entries) < EXPIRE_CHUNK:
                return

    def _put_live(self, key: bytes, start: int, end: int, value: bytes | None) -> None:
        stored = session_key(key, start, end)
        if value is None:
            self._ks.delete(stored)
            self._ks.delete(end_index_key(key, start, end))
        else:
            self._ks.put(stored, value)
            self._ks.put(end_index_key(key, start, end), b"")

    # -- reads --------------------------------------------------------------------------

    def _get_live(self, key: bytes, start: int, end: int) -> bytes | None:
        return self._ks.get(session_key(key, start, end))

    def _read(
        self,
        key_from: bytes | None,
        key_to: bytes | None,
        earliest_end: int,
        latest_start: int,
        reverse: bool,
    ) -> Sessions:
        first_end = earliest_end.to_bytes(8, "big")
        if key_from is not None and key_from == key_to:
            prefix = key_prefix(key_from)
            pairs = self._ks.scan(prefix + first_end, key_prefix_end(key_from), reverse)
            return self._live(pairs, latest_start)
        lo, hi = range_bounds(key_from, key_to)
        if reverse:
            return self._backward_keys(lo, hi, first_end, latest_start)
        return self._forward_keys(lo, hi, first_end, latest_start)

    def _live(self, pairs: Iterable[tuple[bytes, bytes]], latest_start: int) -> Sessions:
        """The sessions of stored pairs that start by `latest_start` and are live now."""
        new = tuple.__new__
        for stored, value in pairs:
            window = session_of(stored)
            if window[1] <= latest_start and window[2] > self._expired_up_to():
                yield new(SessionWindow, window), value

    def _forward_keys(self, lo: bytes, hi: bytes, first_end: bytes, latest_start: int) -> Sessions:
        """Key by key through one seeker: a seek finds the next key, and its sessions are
        read from its earliest wanted end (where the seek did not land past that already)."""
        seeker = self._ks.seeker(lo, hi)
        at = lo
        while True:
            found = seeker.first(at)
            if found is None:
                return
            stored = found[0]
            prefix = stored[: unescape(stored, 1)[1]]
            upper = min(prefix_end(prefix), hi)  # type: ignore[type-var]
            pairs = seeker.run(max(stored, prefix + first_end), upper, CHUNK_RECORDS)
            while True:
                yield from self._live(pairs, latest_start)
                if len(pairs) < CHUNK_RECORDS:
                    break
                pairs = seeker.more(upper, CHUNK_RECORDS)
            at = upper

    def _backward_keys(self, lo: bytes, hi: bytes, first_end: bytes, latest_start: int) -> Sessions:
        """Key by key from the last: one reverse scan per key, from its last session down to
        its earliest wanted end."""
        ks = self._ks
        at = hi
        while True:
            found = ks.last(lo, at)
            if found is None:
                return
            stored = found[0]
            prefix = stored[: unescape(stored, 1)[1]]
            yield from self._live(ks.scan(prefix + first_end, prefix_end(prefix), True), latest_start)
            at = prefix

    def _read_ended(self, latest_end: int) -> Sessions:
        """Through the index by end, `CHUNK_RECORDS` entries at a time, the values of each
        chunk's sessions by one multi-get (a point read per session dominated closing)."""
        ks = self._ks
        entries = iter(ks.scan(index_bound(self._expired_up_to() + 1), index_bound(latest_end + 1)))
        while chunk := [session_of_index(entry) for entry, _ in islice(entries, CHUNK_RECORDS)]:
            values = ks.get_many([session_key(*window) for window in chunk])
            for window, value in zip(chunk, values):
                if value is not None and window.end > self._expired_up_to():
                    yield window, value

    def flush(self) -> None:
        if not self._open:
            raise self._closed()
        self._ks.flush()
