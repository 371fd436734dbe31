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

from collections.abc import Callable, Iterable, Sequence
from itertools import islice
from typing import Any

from spark_statestore.serde import escape, unescape
from spark_statestore.stores.api import prefix_end
from spark_statestore.stores.keyspace import KeySeeker, KeySpace, KeySpaceSeeker
from spark_statestore.stores.persistent_window import STREAM_TIME_KEY
from spark_statestore.stores.session_api import (
    Sessions,
    SessionSpec,
    SessionStore,
    checked_change,
    checked_request,
)
from spark_statestore.stores.session_layout import (
    BY_END,
    CHANGE_FIELDS,
    REQUEST_FIELDS,
    SESSIONS,
    SessionWindow,
    Window,
    by_end,
    index_bound,
    key_prefix,
    key_prefix_end,
    range_bounds,
    session_key,
    session_key_of_index,
    session_of,
    session_of_index,
    stored_keys,
)
from spark_statestore.stores.session_view import HeldSessions
from spark_statestore.stores.window_api import CHUNK_RECORDS
from spark_statestore.validation import MAX_TIME, check_items, check_time

EXPIRE_CHUNK = 256  # expired sessions read from the index at a time


class RocksDBSessionStore(SessionStore):
    """A session store on a `KeySpace` (see module docstring)."""

    persistent = True

    def __init__(
        self, name: str, keyspace: KeySpace, spec: SessionSpec, on_close: Callable[[], Any] | None = None
    ) -> None:
        super().__init__(name, spec, on_close)
        self._ks = keyspace
        # a transactional keyspace (its `epoch`): recently touched keys' sessions are held
        self._view = HeldSessions(keyspace) if hasattr(keyspace, "epoch") else None
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
                window = session_of_index(entry)
                ks.delete(session_key(*window))
                ks.delete(entry)
                if self._view is not None:
                    self._view.expired(*window)
            if len(entries) < EXPIRE_CHUNK:
                return

    def _put_live(self, key: bytes, start: int, end: int, value: bytes | None) -> None:
        stored, indexed = stored_keys(escape(key), start, end)
        if value is None:
            self._ks.delete(stored)
            self._ks.delete(indexed)
        else:
            self._ks.put(stored, value)
            self._ks.put(indexed, b"")
        if self._view is not None:
            self._view.wrote(key, start, end, value)

    def write_sessions(self, changes: Iterable[tuple[bytes, int, int, bytes | None]]) -> None:
        """Every checked write, its session and index entries, into the keyspace as one
        block (under `Clock.RECORDS`, where each put may move the stream time, one by one)."""
        if self._records_advance:
            super().write_sessions(changes)
            return
        if not self._open:
            raise self._closed()
        expired_up_to = self._expired_up_to()
        stored: list[bytes] = []
        values: list[bytes | None] = []
        escaped: dict[bytes, bytes] = {}
        written = []
        for key, start, end, value in check_items(changes, "changes", CHANGE_FIELDS, checked_change):
            if end <= expired_up_to:
                self.metrics.dropped_records_total += 1
                continue
            at = escaped.get(key)
            if at is None:
                at = escaped[key] = escape(key)
            stored += stored_keys(at, start, end)
            values += (value, None if value is None else b"")
            written.append((key, start, end, value))
        self._ks.put_columns(stored, values)
        if self._view is not None:
            self._view.wrote_many(written)

    def take_ended_sessions(self, latest_session_end: int) -> list[tuple[SessionWindow, bytes]]:
        """Through the index by end, each chunk's values by one multi-get (their stored
        keys made from the entries' bytes, nothing decoded twice); then every session and
        index entry found deleted as one block."""
        if not self._open:
            raise self._closed()
        latest = check_time(latest_session_end, "latest_session_end")
        ks = self._ks
        entries = ks.scan(index_bound(self._expired_up_to() + 1), index_bound(latest + 1))
        ended = []
        windows: list[SessionWindow] = []
        removed: list[bytes] = []
        while chunk := [entry for entry, _ in islice(entries, CHUNK_RECORDS)]:
            stored = list(map(session_key_of_index, chunk))
            found = list(map(session_of_index, chunk))
            ended += [(w, v) for w, v in zip(found, ks.get_many(stored)) if v is not None]
            windows += found
            removed += stored
            removed += chunk
        ks.put_columns(removed, [None] * len(removed))
        if self._view is not None:
            self._view.wrote_many([(*window, None) for window in windows])
        return ended

    # -- reads --------------------------------------------------------------------------

    def sessions_of_keys(self, requests: Sequence[tuple[bytes, int, int]]) -> list[dict[Window, bytes]]:
        """Each key's sessions by one seek of one seeker (not an iterator per key), the
        times read straight from the stored keys."""
        if not self._open:
            raise self._closed()
        live_from = self._expired_up_to() + 1
        # one request (a record's merge): its own scan; more: one reseeked iterator
        requests = check_items(requests, "requests", REQUEST_FIELDS, checked_request)
        readers = _Readers(self._ks, len(requests) > 1)
        out = []
        for key, earliest, latest in requests:
            earliest = max(earliest, live_from)
            held = self._held(key, readers)
            if held is not None:
                out.append({w: v for w, v in held.items() if w[1] >= earliest and w[0] <= latest})
            else:
                out.append(_sessions_read(readers.merged(), key, earliest, latest))
        return out

    def _held(self, key: bytes, readers: _Readers | None = None) -> dict[Window, bytes] | None:
        """`key`'s sessions (`(start, end)`: value) as the transaction sees them, from the
        view (read from committed data, by `readers`, where the view lacks the key; live
        ones, and perhaps some expired since); None: read the keyspace."""
        view = self._view
        if view is None:
            return None
        sessions = view.get(key)
        if sessions is None and view.may_load(key):
            seeker = (readers or _Readers(self._ks, False)).committed()
            sessions = _sessions_read(seeker, key, max(self._expired_up_to() + 1, 0), MAX_TIME)
            view.load(key, sessions)
        return sessions

    def _get_live(self, key: bytes, start: int, end: int) -> bytes | None:
        held = self._held(key)
        if held is not None:
            return held.get((start, end))
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
            held = self._held(key_from)
            if held is not None:
                return self._held_live(key_from, held, earliest_end, latest_start, reverse)
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

    def _held_live(
        self, key: bytes, held: dict[Window, bytes], earliest_end: int, latest_start: int, reverse: bool
    ) -> Sessions:
        """The held sessions of `key` in the wanted range, in read order, as they are now
        (each checked for liveness as it is yielded)."""
        wanted = sorted(
            ((w, v) for w, v in held.items() if w[1] >= earliest_end and w[0] <= latest_start),
            key=lambda item: by_end(item[0]),
            reverse=reverse,
        )
        new = tuple.__new__
        for (start, end), value in wanted:
            if end > self._expired_up_to():
                yield new(SessionWindow, (key, start, end)), value

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


def _sessions_read(seeker: KeySeeker, key: bytes, earliest_end: int, latest_start: int) -> dict[Window, bytes]:
    """`key`'s stored sessions with `end >= earliest_end` and `start <= latest_start`, by
    one seek of `seeker`, the times read straight from the stored keys."""
    prefix = key_prefix(key)
    upper = prefix_end(prefix)
    at = len(prefix)
    sessions = {}
    pairs = seeker.run(prefix + earliest_end.to_bytes(8, "big"), upper, CHUNK_RECORDS)
    while True:
        for stored, value in pairs:
            start = int.from_bytes(stored[at + 8 : at + 16], "big")
            if start <= latest_start:
                sessions[(start, int.from_bytes(stored[at : at + 8], "big"))] = value
        if len(pairs) < CHUNK_RECORDS:
            return sessions
        pairs = seeker.more(upper, CHUNK_RECORDS)


class _Readers:
    """The seekers of one read of many keys' sessions, each made on first use (none at
    all when every key is held): over committed data, and over the transaction's view
    (for one key, its own scan; for many, one reseeked iterator)."""

    __slots__ = ("_committed", "_ks", "_many", "_merged")

    def __init__(self, keyspace: Any, many: bool) -> None:
        self._ks = keyspace
        self._many = many
        self._committed: KeySeeker | None = None
        self._merged: KeySeeker | None = None

    def committed(self) -> KeySeeker:
        if self._committed is None:
            self._committed = self._ks.committed.seeker(SESSIONS, BY_END)
        return self._committed

    def merged(self) -> KeySeeker:
        if self._merged is None:
            ks = self._ks
            self._merged = ks.seeker(SESSIONS, BY_END) if self._many else KeySpaceSeeker(ks, BY_END)
        return self._merged
