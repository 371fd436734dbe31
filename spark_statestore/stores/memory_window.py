"""In-memory window store with the semantics of KIP-428.

Layout: a `SortedMap` from window start to a segment, each segment a `SortedMap` from key
to value (with `retain_duplicates`, to the list of values in put order). Lookups are
O(log n); a window start's records are dropped as a whole when they expire.

Expiry follows the observed stream time (the largest window start put): a record is live
while `window_start > stream_time - retention_period`. Expired segments are removed before
every put and fetch, except where an open iterator has not passed them yet: every
iterator registers a *hold* on the lowest window start it may still visit, and expiry
stops below the lowest hold. Reads opened later never return expired records.

Iterators are live views: they walk the maps with `SortedMap.iter_keys`, so records put
ahead of an iterator's position are seen, and changes never break an open iterator.
"""

from __future__ import annotations

import weakref
from typing import Iterator

from spark_statestore.stores.sorted_map import SortedMap
from spark_statestore.stores.spec import WindowSpec
from spark_statestore.stores.window_api import WindowStore
from spark_statestore.stores.windowed import Windowed, window_of


class _Hold:
    """The lowest window start an open iterator may still visit."""

    __slots__ = ("start", "__weakref__")

    def __init__(self, start: int) -> None:
        self.start = start


class InMemoryWindowStore(WindowStore):
    """KIP-428 in-memory window store (see module docstring)."""

    persistent = False

    def __init__(self, name: str, spec: WindowSpec) -> None:
        super().__init__(name, spec)
        self._segments = SortedMap(eager=True)
        self._holds: weakref.WeakSet[_Hold] = weakref.WeakSet()

    # -- writes -------------------------------------------------------------------------

    def _advance(self, time: int) -> None:
        self._stream_time = time
        self._expire()

    def _put_live(self, key: bytes, value: bytes | None, window_start: int) -> None:
        self._expire()  # what open iterators held back may be free now
        segments = self._segments
        segment = segments.get(window_start)
        if value is None:
            if segment is not None and not self.retain_duplicates:
                segment.pop(key)
                if not segment:
                    segments.pop(window_start)
            return
        if segment is None:
            segment = SortedMap()
            segments.set(window_start, segment)
        if self.retain_duplicates:
            values = segment.get(key)
            if values is None:
                segment.set(key, [value])
            else:
                values.append(value)
        else:
            segment.set(key, value)

    def _expire(self) -> None:
        """Drop expired segments that no open iterator still needs."""
        keys = self._segments.sorted_keys()
        if not keys:
            return
        limit = self._stream_time - self.retention_period
        if keys[0] > limit:
            return
        if self._holds:
            lowest = min(hold.start for hold in self._holds)
            if lowest <= limit:
                limit = lowest - 1
        while keys and keys[0] <= limit:
            self._segments.pop_first()

    # -- reads --------------------------------------------------------------------------

    def _get_live(self, key: bytes, window_start: int) -> bytes | None:
        segment = self._segments.get(window_start)
        if segment is None:
            return None
        value = segment.get(key)
        if value is not None and self.retain_duplicates:
            return value[-1]
        return value

    def _read_key(self, key: bytes, lo: int, hi: int, reverse: bool) -> Iterator[tuple[int, bytes]]:
        self._expire()
        return self._walk_key(key, lo, hi, reverse, self._hold(lo))

    def _read_range(
        self, key_from: bytes | None, key_to: bytes | None, lo: int, hi: int, reverse: bool
    ) -> Iterator[tuple[Windowed, bytes]]:
        self._expire()
        return self._walk_range(key_from, key_to, lo, hi, reverse, self._hold(lo))

    def _hold(self, start: int) -> _Hold:
        hold = _Hold(start)
        self._holds.add(hold)
        return hold

    def _walk_key(
        self, key: bytes, lo: int, hi: int, reverse: bool, hold: _Hold
    ) -> Iterator[tuple[int, bytes]]:
        try:
            segments = self._segments
            dups = self.retain_duplicates
            for start in self._segments.iter_keys(lo, hi, reverse=reverse):
                if not reverse:
                    hold.start = start
                value = segments.get(start).get(key)
                if value is None:
                    continue
                if dups:
                    for one in _values_in_order(value, reverse):
                        yield start, one
                else:
                    yield start, value
        finally:
            self._holds.discard(hold)

    def _walk_range(
        self,
        key_from: bytes | None,
        key_to: bytes | None,
        lo: int,
        hi: int,
        reverse: bool,
        hold: _Hold,
    ) -> Iterator[tuple[Windowed, bytes]]:
        new = tuple.__new__
        try:
            segments = self._segments
            size = self.window_size
            dups = self.retain_duplicates
            for start in self._segments.iter_keys(lo, hi, reverse=reverse):
                if not reverse:
                    hold.start = start
                window = window_of(start, size)
                segment = segments.get(start)
                for key in segment.iter_keys(key_from, key_to, reverse=reverse):
                    if dups:
                        windowed = new(Windowed, (key, window))
                        for one in _values_in_order(segment.get(key), reverse):
                            yield windowed, one
                    else:
                        yield new(Windowed, (key, window)), segment.get(key)
        finally:
            self._holds.discard(hold)

    def close(self) -> None:
        super().close()
        self._segments.clear()
        self._holds = weakref.WeakSet()


def _values_in_order(values: list[bytes], reverse: bool) -> Iterator[bytes]:
    """Duplicates of one key and window: put order (live: sees appends), or its reverse."""
    if reverse:
        yield from reversed(values[:])
        return
    i = 0
    while i < len(values):
        yield values[i]
        i += 1
