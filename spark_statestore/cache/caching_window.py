"""A window store fronted by a record cache (KIP-63).

Cache keys use the window layout (`window_start | key`), so cached entries are ordered
like the store's records and merge with its fetches directly. The caching store keeps
its own stream time (writes reach the store only at flush): late records are dropped and
counted when they are put, and reads exclude expired windows by the cache's stream time.
Stores that retain duplicates cannot be cached, as in Kafka Streams.
"""

from __future__ import annotations

from itertools import chain
from typing import Any, Iterable, Iterator, Sequence

from spark_statestore.cache.caching import CachingLayer, Entry, OnFlush, past
from spark_statestore.cache.change import Change
from spark_statestore.cache.thread_cache import MISSING, ThreadCache
from spark_statestore.stores.merge import merge_sorted
from spark_statestore.stores.window_api import WindowStore
from spark_statestore.stores.window_layout import (
    skip_scan,
    skip_scan_backward,
    start_of,
    stored_keys,
    ws_bytes,
)
from spark_statestore.stores.windowed import WindowColumns, Windowed, window_of
from spark_statestore.validation import check_window_get, check_window_records, check_window_write_columns


class CachingWindowStore(CachingLayer, WindowStore):
    """See module docstring."""

    def __init__(
        self,
        inner: WindowStore,
        cache: ThreadCache,
        on_flush: OnFlush | None = None,
        send_old_values: bool = False,
        namespace: str | None = None,
    ) -> None:
        if inner.retain_duplicates:
            raise ValueError(
                f"window store {inner.name!r} retains duplicates and cannot be cached: every put is "
                f"its own record, so there is nothing to de-duplicate (Kafka Streams disables caching "
                f"for such stores too)"
            )
        WindowStore.__init__(self, inner.name, inner.spec, self._close_inner)
        self._attach(inner, cache, on_flush, send_old_values, namespace)
        self.metrics = inner.metrics

    @property
    def observed_stream_time(self) -> int:
        inner = self._inner.observed_stream_time
        return inner if inner > self._stream_time else self._stream_time

    def _advance(self, time: int) -> None:
        self._stream_time = time  # the store learns it at flush (its records arrive then)

    def advance_stream_time(self, time: int) -> None:
        """Advance the cache's and the store's stream time (cached entries of windows that
        expire stay until flushed or evicted, but reads no longer return them)."""
        super().advance_stream_time(time)
        self._inner.advance_stream_time(time)

    def _passes_by(self) -> bool:
        """Also only while the store's stream time is the cache's own (a `clear_cache()`
        drops the writes that advanced the cache's, not the advance)."""
        return super()._passes_by() and self._stream_time <= self._inner.observed_stream_time

    def _put_live(self, key: bytes, value: bytes | None, window_start: int) -> None:
        self._named.put(ws_bytes(window_start) + key, value, True)

    def put_all(self, records: Iterable[tuple[bytes, bytes | None, int]]) -> None:
        """`put` of every `(key, value, window_start)` record in order (every one checked
        first), in one pass through the cache."""
        if not self._open:
            raise self._closed()
        if not self._passes_by():
            super().put_all(records)
            return
        if self._named:  # entries read earlier would hide these writes
            records = check_window_records(records)
            self._named.remove_many(ws_bytes(start) + key for key, _, start in records)
        self._named.moved()
        self._inner.put_all(records)

    def put_columns(
        self, keys: Sequence[bytes], values: Sequence[bytes | None], window_starts: Sequence[int]
    ) -> None:
        """`put_all` of three columns (see `WindowStore.put_columns`), in one pass through
        the cache, or straight to the store where the cache cannot help."""
        if not self._open:
            raise self._closed()
        if not self._passes_by():
            super().put_columns(keys, values, window_starts)
            return
        keys, values, starts = check_window_write_columns(keys, values, window_starts)
        if self._named:  # entries read earlier would hide these writes
            self._named.remove_many(stored_keys(keys, starts))
        self._named.moved()
        self._inner.put_columns(keys, values, starts)

    def _put_live_columns(self, keys: list[bytes], values: list[bytes | None], starts: list[int]) -> None:
        """Live records as dirty cache entries, in one pass through the cache, the cache's
        stream time taken record by record as `put` takes it (which records are live was
        decided so already: see `WindowStore._put_checked_columns`): an eviction among them
        flushes with the time of the record that caused it, so it forwards what puts one
        by one forward, and hands the store that time."""
        if not self._records_advance:
            self._named.put_many(zip(stored_keys(keys, starts), values), True)
            return
        advance = self._advance

        def entries() -> Iterator[tuple[bytes, bytes | None]]:
            for stored, value, start in zip(stored_keys(keys, starts), values, starts):
                if start > self._stream_time:
                    advance(start)
                yield stored, value

        self._named.put_many(entries(), True)

    def _get_live(self, key: bytes, window_start: int) -> bytes | None:
        cache_key = ws_bytes(window_start) + key
        value = self._named.get(cache_key)
        if value is not MISSING:
            return value
        value = self._inner.get(key, window_start)
        if value is not None:
            self._named.put(cache_key, value, False)
        return value

    def get_all(self, keys: list[bytes], window_starts: list[int]) -> list[bytes | None]:
        """Cached values where present; one `get_all` of the store for the rest."""
        if not self._open:
            raise self._closed()
        if len(keys) != len(window_starts):
            raise ValueError(f"keys and window_starts must have the same length, got {len(keys)} and {len(window_starts)}")
        if self._passes_by():  # the cache holds no writes: the store has every latest value
            return self._inner.get_all(keys, window_starts)
        checked = [check_window_get(k, s) for k, s in zip(keys, window_starts)]
        cache_keys = [ws_bytes(s) + k for k, s in checked]
        inner = self._inner

        def fetch(missing: list[int]) -> list:
            return inner.get_all([checked[i][0] for i in missing], [checked[i][1] for i in missing])

        expired_up_to = self.observed_stream_time - self.retention_period
        values = self._read_through(cache_keys, fetch)
        return [None if s <= expired_up_to else v for v, (_, s) in zip(values, checked)]

    def _read_key(self, key: bytes, lo: int, hi: int, reverse: bool) -> Iterator[tuple[int, bytes]]:
        named, inner = self._named, self._inner

        def open_(after: bytes | None) -> Iterator[Entry]:
            first, last = lo, hi
            if after is not None:  # the windows past the last one yielded
                if reverse:
                    last = start_of(after) - 1
                else:
                    first = start_of(after) + 1
                if first > last:
                    return iter(())
            if reverse:
                cached = skip_scan_backward(named.last, key, key + b"\x00", first, last, False)
                stored = inner.backward_fetch(key, first, last)
            else:
                end = ws_bytes(last + 1)
                cached = skip_scan(lambda k: named.first(k, end), key, first, last, False)
                stored = inner.fetch(key, first, last)
            cached_entries = ((entry_key, value) for _, entry_key, value in cached)
            stored_entries = ((ws_bytes(start) + key, value) for start, value in stored)
            return merge_sorted(cached_entries, stored_entries, reverse)

        for entry_key, value in self._held(open_):
            yield start_of(entry_key), value

    def _read_range(
        self, key_from: bytes | None, key_to: bytes | None, lo: int, hi: int, reverse: bool
    ) -> Iterator[tuple[Windowed, bytes]]:
        named = self._named
        fetch = self._inner.backward_fetch_range if reverse else self._inner.fetch_range
        end = ws_bytes(hi + 1)

        def open_(after: bytes | None) -> Iterator[Entry]:
            if after is None:
                cached = named.items(ws_bytes(lo), end, False, reverse)
                stored = fetch(key_from, key_to, lo, hi)
            else:  # the rest of the last window yielded from, then the windows past it
                start, key = start_of(after), after[8:]
                if reverse:
                    cached = named.items(ws_bytes(lo), after, False, True)
                    rest = fetch(key_from, key_to, lo, start - 1) if lo < start else ()
                    stored = chain(fetch(key_from, key, start, start), rest)
                else:
                    cached = named.items(after + b"\x00", end, False, False)
                    rest = fetch(key_from, key_to, start + 1, hi) if start < hi else ()
                    stored = chain(fetch(key, key_to, start, start), rest)
            if key_from is not None or key_to is not None:
                cached = (
                    (k, v)
                    for k, v in cached
                    if (key_from is None or k[8:] >= key_from) and (key_to is None or k[8:] <= key_to)
                )
            stored_entries = ((ws_bytes(w.window.start) + w.key, v) for w, v in stored)
            return merge_sorted(cached, stored_entries if after is None else past(after, stored_entries), reverse)

        size = self.window_size
        window = None
        for entry_key, value in self._held(open_):
            start = start_of(entry_key)
            if window is None or window.start != start:
                window = window_of(start, size)
            yield Windowed(entry_key[8:], window), value

    def _read_range_columns(
        self, key_from: bytes | None, key_to: bytes | None, lo: int, hi: int
    ) -> WindowColumns:
        """The store's own bulk read while the cache holds nothing (no entry to merge)."""
        if self._named:
            return super()._read_range_columns(key_from, key_to, lo, hi)
        return self._inner.fetch_range_columns(key_from, key_to, lo, hi)

    def _write_to_store(self, entries: list[tuple[Any, bytes | None]]) -> list[Change]:
        """Write what is still live; forward every change (an update made while its window
        was live reaches downstream even if the window expired while it was cached); then
        hand the cache's stream time to the store, since records that advanced it may not
        have been written (deleted again, or expired). Without a listener no `Change` is
        made."""
        inner = self._inner
        send_old = self._send_old_values
        forward = self._on_flush is not None
        expired_up_to = self.observed_stream_time - self.retention_period
        changes = []
        for entry_key, new in entries:
            start = start_of(entry_key)
            key = entry_key[8:]
            if start <= expired_up_to:
                if new is not None and forward:
                    changes.append(Change(key, new, None, start))
                continue
            old = inner.get(key, start) if send_old or new is None else None
            if new is None and old is None:
                continue  # written and deleted again: the store never had it
            inner.put(key, new, start)
            if forward:
                changes.append(Change(key, new, old if send_old else None, start))
        if self._stream_time >= 0:
            inner.advance_stream_time(self._stream_time)
        return changes

    def _after_rollback(self) -> None:
        self._stream_time = -1
