"""A session store fronted by a record cache (KIP-63).

Cache keys use the persistent session layout (`session_layout.session_key`: key, end,
start), so cached entries are ordered like the store's reads and merge with them
directly. The stream time reaches the store at once (late sessions are dropped and counted when
they are put; what the store then expires, reads of the cache exclude too). A flush
forwards one `Change` per session, its key the `SessionWindow`.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from spark_statestore.cache.caching import CachingLayer, Entry, OnFlush
from spark_statestore.cache.change import Change
from spark_statestore.cache.thread_cache import MISSING, ThreadCache
from spark_statestore.stores.merge import merge_sorted
from spark_statestore.stores.session_api import Sessions, SessionStore
from spark_statestore.stores.session_layout import (
    SessionWindow,
    key_prefix,
    key_prefix_end,
    range_bounds,
    session_key,
    session_of,
)


class CachingSessionStore(CachingLayer, SessionStore):
    """See module docstring."""

    def __init__(
        self,
        inner: SessionStore,
        cache: ThreadCache,
        on_flush: OnFlush | None = None,
        send_old_values: bool = False,
        namespace: str | None = None,
    ) -> None:
        SessionStore.__init__(self, inner.name, inner.spec, self._close_inner)
        self._attach(inner, cache, on_flush, send_old_values, namespace)
        self.metrics = inner.metrics

    @property
    def observed_stream_time(self) -> int:
        inner = self._inner.observed_stream_time
        return max(self._stream_time, inner)

    def _advance(self, time: int) -> None:
        """The store learns the time at once: what it expires, reads of the cache exclude
        already, and a flush writes no session that is not live."""
        self._stream_time = time
        self._inner.advance_stream_time(time)

    def _put_live(self, key: bytes, start: int, end: int, value: bytes | None) -> None:
        self._named.put(session_key(key, start, end), value, True)

    def _get_live(self, key: bytes, start: int, end: int) -> bytes | None:
        cache_key = session_key(key, start, end)
        value = self._named.get(cache_key)
        if value is not MISSING:
            return value
        value = self._inner.fetch_session(key, start, end)
        if value is not None:
            self._named.put(cache_key, value, False)
        return value

    def _read(
        self,
        key_from: bytes | None,
        key_to: bytes | None,
        earliest_end: int,
        latest_start: int,
        reverse: bool,
    ) -> Sessions:
        named, inner = self._named, self._inner
        if key_from is not None and key_from == key_to:
            lo = key_prefix(key_from) + earliest_end.to_bytes(8, "big")
            hi = key_prefix_end(key_from)
        else:
            lo, hi = range_bounds(key_from, key_to)
        read = inner.backward_find_sessions_range if reverse else inner.find_sessions_range

        def open_(after: bytes | None) -> Iterator[Entry]:
            first, last, last_inclusive = lo, hi, False
            if after is not None:
                if reverse:
                    last, last_inclusive = after, False
                else:
                    first = after + b"\x00"
            cached = (
                (k, v)
                for k, v in named.items(first, last, last_inclusive, reverse)
                if _wanted(session_of(k), earliest_end, latest_start)
            )
            stored: Iterator[Entry] = (
                (session_key(*w), v) for w, v in read(key_from, key_to, earliest_end, latest_start)
            )
            if after is not None:
                stored = ((k, v) for k, v in stored if (k < after if reverse else k > after))
            return merge_sorted(cached, stored, reverse)

        for entry_key, value in self._held(open_):
            window = session_of(entry_key)
            if window.end > self._expired_up_to():
                yield window, value

    def _read_ended(self, latest_end: int) -> Sessions:
        """The store's, after flushing the cache (forwarding its changes), so that the
        store's order by end holds every session."""
        self._named.flush()
        return self._inner.find_ended_sessions(latest_end)

    def _write_to_store(self, entries: list[tuple[Any, bytes | None]]) -> list[Change]:
        """Write what is still live; forward every change (a session updated while live
        reaches downstream even if it expired while cached). Without a listener no `Change` is made."""
        inner = self._inner
        send_old = self._send_old_values
        forward = self._on_flush is not None
        expired_up_to = self._expired_up_to()
        changes = []
        for entry_key, new in entries:
            window = session_of(entry_key)
            if window.end <= expired_up_to:
                if new is not None and forward:
                    changes.append(Change(window, new, None, window.start))
                continue
            old = inner.fetch_session(*window) if send_old or new is None else None
            if new is None and old is None:
                continue  # written and removed again: the store never had it
            inner.put(*window, new)
            if forward:
                changes.append(Change(window, new, old if send_old else None, window.start))
        return changes

    def _after_rollback(self) -> None:
        self._stream_time = -1


def _wanted(window: SessionWindow, earliest_end: int, latest_start: int) -> bool:
    return window.end >= earliest_end and window.start <= latest_start
