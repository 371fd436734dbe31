"""The window store interface (API.md, KIP-428): `WindowStore` and its metrics."""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from itertools import compress, islice
from operator import itemgetter
from typing import Any, Callable, Iterable, Iterator, Sequence

import numpy as np

from spark_statestore.stores.api import StateStore, key_range_is_empty
from spark_statestore.stores.damage import storage_error
from spark_statestore.stores.iterators import StoreIterator
from spark_statestore.stores.spec import Clock, WindowSpec
from spark_statestore.stores.typed import TypedWindowStore
from spark_statestore.stores.windowed import WindowColumns, Windowed, columns_of_records
from spark_statestore.validation import (
    MAX_TIME,
    check_bound,
    check_key,
    check_time,
    check_time_range,
    check_window_columns,
    check_window_write_columns,
    check_window_get,
    check_window_put,
    check_window_records,
    columns_are_bytes,
    times_are_valid,
)

log = logging.getLogger("spark_statestore.stores")
_TUPLE, _THREE = frozenset({tuple}), frozenset({3})
_first, _second, _third = itemgetter(0), itemgetter(1), itemgetter(2)
CHUNK_RECORDS = 256  # the most records of a `fetch_range_chunks` chunk


class WindowStoreMetrics:
    """Counters of a window store (KIP-428 `dropped-records`)."""

    __slots__ = ("dropped_records_total",)

    def __init__(self) -> None:
        self.dropped_records_total = 0

    def __repr__(self) -> str:
        return f"WindowStoreMetrics(dropped_records_total={self.dropped_records_total})"


class WindowStore(StateStore, ABC):
    """A store of values per (key, window start) with retention (KIP-428, see API.md).

    The base class holds what every window store does the same way: argument checks, the
    observed stream time and its clock (`WindowSpec.clock`), dropping and counting late
    records, and narrowing reads to live windows. Implementations provide `_advance`
    (a new stream time: expire what fell out), `_put_live`, `_get_live`, and `_read_key` /
    `_read_range`, which yield the records of an already-valid range.
    """

    def __init__(self, name: str, spec: WindowSpec, on_close: Callable[[], Any] | None = None) -> None:
        super().__init__(name, on_close)
        self.spec = spec
        self.retention_period = spec.retention_period
        self.window_size = spec.window_size
        self.retain_duplicates = spec.retain_duplicates
        self.clock = spec.clock
        self._records_advance = spec.clock is Clock.RECORDS
        self._stream_time = -1
        self.metrics = WindowStoreMetrics()

    @property
    def observed_stream_time(self) -> int:
        """The largest stream time observed so far (-1 before the first)."""
        return self._stream_time

    def put(self, key: bytes, value: bytes | None, window_start: int) -> None:
        """Store `value` for `key` in the window starting at `window_start` (`None`
        deletes); a record that is not live is dropped and counted."""
        if not self._open:
            raise self._closed()
        key, value, window_start = check_window_put(key, value, window_start)
        if window_start > self._stream_time and self._records_advance:
            self._advance(window_start)
        if window_start <= self.observed_stream_time - self.retention_period:
            self.metrics.dropped_records_total += 1
            log.debug("store %r dropped a record for expired window start %d", self._name, window_start)
            return
        self._put_live(key, value, window_start)

    def get(self, key: bytes, window_start: int) -> bytes | None:
        """The value of one window (the latest put, with `retain_duplicates`)."""
        if not self._open:
            raise self._closed()
        key, window_start = check_window_get(key, window_start)
        if window_start <= self.observed_stream_time - self.retention_period:
            return None
        try:
            return self._get_live(key, window_start)
        except Exception as e:
            raise storage_error(e) from None

    def get_all(self, keys: list[bytes], window_starts: list[int]) -> list[bytes | None]:
        """The values of many (key, window start) pairs, in the order given."""
        get = self.get
        return [get(key, start) for key, start in check_window_columns(keys, window_starts)]

    def put_all(self, records: Iterable[tuple[bytes, bytes | None, int]]) -> None:
        """Put every `(key, value, window_start)` record, in order. Every record is checked
        first: a bad one raises (naming its index) before anything is written."""
        if not self._open:
            raise self._closed()
        if type(records) is list and set(map(type, records)) <= _TUPLE and set(map(len, records)) <= _THREE:
            keys, values = list(map(_first, records)), list(map(_second, records))
            starts = list(map(_third, records))
            if columns_are_bytes(keys, values) and times_are_valid(starts):
                self._put_checked_columns(keys, values, starts)
                return
        checked = check_window_records(records)
        self._put_checked_columns(
            list(map(_first, checked)), list(map(_second, checked)), list(map(_third, checked))
        )

    def put_columns(
        self, keys: Sequence[bytes], values: Sequence[bytes | None], window_starts: Sequence[int]
    ) -> None:
        """`put_all` of three columns of equal length: keys (bytes), values (bytes, or
        None to delete) and window starts (int milliseconds). Every record is checked
        before any is written (an error names the column and the index)."""
        if not self._open:
            raise self._closed()
        self._put_checked_columns(*check_window_write_columns(keys, values, window_starts))

    def _put_checked_columns(self, keys: list[bytes], values: list[bytes | None], starts: list[int]) -> None:
        """What `put` does record by record, for checked columns at once: the stream time
        advances with each record (a running maximum), a record not live at its turn is
        dropped and counted, and the live ones are written before the stream time moves to
        the columns' largest start (the same end state: expiry removes only windows below
        the final live range, which no later live record can be in)."""
        if not starts:
            return
        before = self.observed_stream_time
        times = np.array(starts, dtype=np.int64)
        if self._records_advance:
            now = np.maximum.accumulate(times)
            np.maximum(now, before, out=now)
        else:
            now = np.full(len(times), before, dtype=np.int64)
        live = times > now - self.retention_period
        dropped = len(starts) - int(np.count_nonzero(live))
        if dropped:
            self.metrics.dropped_records_total += dropped
            log.debug("store %r dropped %d records for expired window starts", self._name, dropped)
            mask = live.tolist()
            keys, values = list(compress(keys, mask)), list(compress(values, mask))
            starts = list(compress(starts, mask))
        if starts:
            self._put_live_columns(keys, values, starts)
        latest = int(times.max())
        if self._records_advance and latest > self._stream_time:
            self._advance(latest)

    def _put_live_columns(self, keys: list[bytes], values: list[bytes | None], starts: list[int]) -> None:
        """Write records of live windows (checked columns); a store may do it in bulk."""
        put_live = self._put_live
        for key, value, start in zip(keys, values, starts):
            put_live(key, value, start)

    def advance_stream_time(self, time: int) -> None:
        """Observe stream time `time` without a record, as a put at `time` would (expiring
        what falls out of the retention period). Earlier times change nothing."""
        if not self._open:
            raise self._closed()
        time = check_time(time, "time")
        if time > self._stream_time:
            self._advance(time)

    @abstractmethod
    def _advance(self, time: int) -> None:
        """Take `time` (greater than the current one) as the stream time."""

    @abstractmethod
    def _put_live(self, key: bytes, value: bytes | None, window_start: int) -> None:
        """Write a record of a live window (checked arguments)."""

    @abstractmethod
    def _get_live(self, key: bytes, window_start: int) -> bytes | None:
        """Read a record of a live window (checked arguments)."""

    @abstractmethod
    def _read_key(self, key: bytes, lo: int, hi: int, reverse: bool) -> Iterator[tuple[int, bytes]]:
        """`(window_start, value)` of `key` for live windows in [lo, hi]."""

    @abstractmethod
    def _read_range(
        self, key_from: bytes | None, key_to: bytes | None, lo: int, hi: int, reverse: bool
    ) -> Iterator[tuple[Windowed, bytes]]:
        """`(Windowed, value)` for live windows in [lo, hi] and keys in the (valid) range."""

    def fetch(self, key: bytes, time_from: int, time_to: int) -> StoreIterator:
        """`(window_start, value)` of `key` for windows starting in [time_from, time_to]."""
        return self._fetch(key, time_from, time_to, False)

    def backward_fetch(self, key: bytes, time_from: int, time_to: int) -> StoreIterator:
        """`fetch` in descending time order."""
        return self._fetch(key, time_from, time_to, True)

    def fetch_range(
        self, key_from: bytes | None, key_to: bytes | None, time_from: int, time_to: int
    ) -> StoreIterator:
        """`(Windowed, value)` for keys in the range, ordered by window start, then key."""
        return self._fetch_range(key_from, key_to, time_from, time_to, False, "fetch_range")

    def backward_fetch_range(
        self, key_from: bytes | None, key_to: bytes | None, time_from: int, time_to: int
    ) -> StoreIterator:
        """`fetch_range` in the reverse order."""
        return self._fetch_range(key_from, key_to, time_from, time_to, True, "backward_fetch_range")

    def fetch_all(self, time_from: int, time_to: int) -> StoreIterator:
        return self.fetch_range(None, None, time_from, time_to)

    def backward_fetch_all(self, time_from: int, time_to: int) -> StoreIterator:
        return self.backward_fetch_range(None, None, time_from, time_to)

    def all(self) -> StoreIterator:
        return self.fetch_range(None, None, 0, MAX_TIME)

    def backward_all(self) -> StoreIterator:
        return self.backward_fetch_range(None, None, 0, MAX_TIME)

    def _fetch(self, key: bytes, time_from: int, time_to: int, reverse: bool) -> StoreIterator:
        if not self._open:
            raise self._closed()
        key = check_key(key)
        time_from, time_to = check_time_range(time_from, time_to)
        lo = self._live_from(time_from)
        if lo > time_to:  # every window in the range expired
            return StoreIterator(iter(()))
        return self._iterator(self._read_key(key, lo, time_to, reverse))

    def _fetch_range(
        self,
        key_from: bytes | None,
        key_to: bytes | None,
        time_from: int,
        time_to: int,
        reverse: bool,
        method: str,
    ) -> StoreIterator:
        live = self._live_range(key_from, key_to, time_from, time_to, method)
        if live is None:
            return StoreIterator(iter(()))
        return self._iterator(self._read_range(*live, reverse))

    def fetch_range_columns(
        self, key_from: bytes | None, key_to: bytes | None, time_from: int, time_to: int
    ) -> WindowColumns:
        """What `fetch_range` yields, as columns (`WindowColumns`): for code that works
        on columns (Arrow, numpy), without a Python step per record where the store can."""
        live = self._live_range(key_from, key_to, time_from, time_to, "fetch_range_columns")
        if live is None:
            return WindowColumns([], [], [])
        try:
            return self._read_range_columns(*live)
        except Exception as e:
            raise storage_error(e) from None

    def fetch_range_chunks(
        self, key_from: bytes | None, key_to: bytes | None, time_from: int, time_to: int
    ) -> StoreIterator:
        """What `fetch_range` yields, lazily, as `WindowColumns` of up to `CHUNK_RECORDS`
        records each (a store may cut them at window starts): for a layer that decodes by
        columns (the typed stores) without a Python step per record."""
        live = self._live_range(key_from, key_to, time_from, time_to, "fetch_range_chunks")
        if live is None:
            return StoreIterator(iter(()))
        return self._iterator(self._read_range_chunks(*live))

    def _live_range(
        self, key_from: bytes | None, key_to: bytes | None, time_from: int, time_to: int, method: str
    ) -> tuple[bytes | None, bytes | None, int, int] | None:
        """The checked arguments of a range read, narrowed to live windows; None when
        nothing can match (an empty key range, or every window in the range expired)."""
        if not self._open:
            raise self._closed()
        key_from = check_bound(key_from, "key_from")
        key_to = check_bound(key_to, "key_to")
        time_from, time_to = check_time_range(time_from, time_to)
        if key_range_is_empty(key_from, key_to, method):
            return None
        lo = self._live_from(time_from)
        return None if lo > time_to else (key_from, key_to, lo, time_to)

    def fetch_all_columns(self, time_from: int, time_to: int) -> WindowColumns:
        """What `fetch_all` yields, as columns (see `fetch_range_columns`)."""
        return self.fetch_range_columns(None, None, time_from, time_to)

    def _read_range_columns(
        self, key_from: bytes | None, key_to: bytes | None, lo: int, hi: int
    ) -> WindowColumns:
        """`_read_range` (forward) as columns; a store may read them in bulk."""
        return columns_of_records(list(self._read_range(key_from, key_to, lo, hi, False)))

    def _read_range_chunks(
        self, key_from: bytes | None, key_to: bytes | None, lo: int, hi: int
    ) -> Iterator[WindowColumns]:
        """`_read_range` (forward) as chunks of columns; a store may read them in bulk."""
        records = self._read_range(key_from, key_to, lo, hi, False)
        while chunk := list(islice(records, CHUNK_RECORDS)):
            yield columns_of_records(chunk)

    def _live_from(self, time_from: int) -> int:
        """The earliest window start a new read may return (expired windows excluded)."""
        earliest = self.observed_stream_time - self.retention_period + 1
        return time_from if time_from > earliest else earliest

    def typed(self, key_serde: Any, value_serde: Any) -> TypedWindowStore:
        """A view that encodes keys and values with the given serdes."""
        return TypedWindowStore(self, key_serde, value_serde)
