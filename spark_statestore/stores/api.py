"""Store interfaces (API.md) and what every store shares.

`KeyValueStore` and `WindowStore` are abstract bases: implementations override the
abstract methods and inherit the common surface (`name`, `is_open`, context manager,
`typed()`, iterator tracking so that `close()` ends open iterators).
"""

from __future__ import annotations

import logging
import weakref
from abc import ABC, abstractmethod
from typing import Any, Callable, Iterable, Iterator, NamedTuple

from spark_statestore.errors import StoreClosedError
from spark_statestore.stores.iterators import StoreIterator
from spark_statestore.stores.damage import storage_error
from spark_statestore.stores.spec import Clock, WindowSpec
from spark_statestore.validation import (
    MAX_TIME,
    check_bound,
    check_iterable,
    check_key,
    check_pairs,
    check_time,
    check_time_range,
    check_window_columns,
    check_window_get,
    check_window_put,
    check_window_records,
)

log = logging.getLogger("spark_statestore.stores")


class Window(NamedTuple):
    """A time window: `start` inclusive, `end` = start + window size (clamped to 2**63-1)."""

    start: int
    end: int


class Windowed(NamedTuple):
    """A key together with the window its value belongs to."""

    key: Any
    window: Window


def window_of(start: int, size: int) -> Window:
    end = start + size
    return Window(start, end if end <= MAX_TIME else MAX_TIME)


def key_range_is_empty(key_from: bytes | None, key_to: bytes | None, method: str) -> bool:
    """True (after logging a warning) when both bounds are given and `key_from > key_to`."""
    if key_from is not None and key_to is not None and key_from > key_to:
        log.warning(
            "%s returns no records: the key range is invalid because key_from %r is greater "
            "than key_to %r. Note that the serdes' byte order may differ from the natural order "
            "of the original keys.",
            method,
            key_from,
            key_to,
        )
        return True
    return False


def prefix_end(prefix: bytes) -> bytes | None:
    """Smallest key greater than every key starting with `prefix` (None if there is none)."""
    stripped = prefix.rstrip(b"\xff")
    if not stripped:
        return None
    return stripped[:-1] + bytes([stripped[-1] + 1])


class StateStore:
    """What every store has: `name`, `persistent`, `is_open`, `flush()`, `close()`.

    `on_close` runs once, after the store closed (factories that give a store its own
    database close the database there).
    """

    persistent: bool = False

    def __init__(self, name: str, on_close: Callable[[], Any] | None = None) -> None:
        self._name = name
        self._open = True
        self._on_close = on_close
        self._iterators: weakref.WeakSet[StoreIterator] = weakref.WeakSet()

    @property
    def name(self) -> str:
        return self._name

    @property
    def is_open(self) -> bool:
        return self._open

    def _closed(self) -> StoreClosedError:
        return StoreClosedError(f"store {self._name!r} is closed")

    def _iterator(self, source: Iterator[Any]) -> StoreIterator:
        """Wrap a generator so that `close()` of the store ends it."""
        it = StoreIterator(source)
        self._iterators.add(it)
        return it

    def _end_iterators(self) -> None:
        for it in list(self._iterators):
            it.close()

    def innermost(self) -> "StateStore":
        """The store under every wrapper (a caching layer, say); this store if it wraps none."""
        return self

    def flush(self) -> None:
        """Persist buffered data (nothing to do for stores that buffer nothing)."""
        if not self._open:
            raise self._closed()

    def close(self) -> None:
        """Close the store; its open iterators end. Closing twice is harmless."""
        if not self._open:
            return
        self._open = False
        self._end_iterators()
        if self._on_close is not None:
            self._on_close()

    def __enter__(self) -> "StateStore":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "open" if self._open else "closed"
        return f"<{type(self).__name__} {self._name!r} {state}>"


class KeyValueStore(StateStore, ABC):
    """A sorted key-value store of bytes (see API.md)."""

    @abstractmethod
    def put(self, key: bytes, value: bytes | None) -> None:
        """Store `value` under `key`; `None` deletes."""

    @abstractmethod
    def get(self, key: bytes) -> bytes | None:
        """The value under `key`, or `None`."""

    def put_if_absent(self, key: bytes, value: bytes | None) -> bytes | None:
        """Put only if `key` has no value; returns the value that was there."""
        previous = self.get(key)
        if previous is None:
            self.put(key, value)
        return previous

    def put_all(self, pairs: Iterable[tuple[bytes, bytes | None]]) -> None:
        """Put every `(key, value)` pair, in order; every pair is checked before any is written."""
        put = self.put
        for key, value in check_pairs(pairs):
            put(key, value)

    def get_all(self, keys: Iterable[bytes]) -> list[bytes | None]:
        """The values of many keys at once (None where absent), in the order given."""
        get = self.get
        return [get(key) for key in check_iterable(keys, "keys", "bytes keys")]

    def delete(self, key: bytes) -> bytes | None:
        """Remove `key`; returns the value it had."""
        previous = self.get(key)
        if previous is not None:
            self.put(key, None)
        return previous

    @abstractmethod
    def _read_range(
        self, key_from: bytes | None, key_to: bytes | None, reverse: bool
    ) -> Iterator[tuple[bytes, bytes]]:
        """Pairs in the (valid) inclusive key range, in key order or reversed."""

    @abstractmethod
    def _read_prefix(self, prefix: bytes) -> Iterator[tuple[bytes, bytes]]:
        """Pairs whose key starts with `prefix`, in key order."""

    def range(self, key_from: bytes | None, key_to: bytes | None) -> StoreIterator:
        """Pairs with `key_from <= key <= key_to` in key order (`None` = open end)."""
        return self._range(key_from, key_to, False, "range")

    def reverse_range(self, key_from: bytes | None, key_to: bytes | None) -> StoreIterator:
        """Like `range`, in descending key order."""
        return self._range(key_from, key_to, True, "reverse_range")

    def _range(self, key_from: Any, key_to: Any, reverse: bool, method: str) -> StoreIterator:
        if not self._open:
            raise self._closed()
        key_from = check_bound(key_from, "key_from")
        key_to = check_bound(key_to, "key_to")
        if key_range_is_empty(key_from, key_to, method):
            return StoreIterator(iter(()))
        return self._iterator(self._read_range(key_from, key_to, reverse))

    def all(self) -> StoreIterator:
        return self.range(None, None)

    def reverse_all(self) -> StoreIterator:
        return self.reverse_range(None, None)

    def prefix_scan(self, prefix: bytes) -> StoreIterator:
        """Pairs whose key starts with `prefix`, in key order."""
        if not self._open:
            raise self._closed()
        return self._iterator(self._read_prefix(check_key(prefix, "prefix")))

    @abstractmethod
    def approximate_num_entries(self) -> int:
        """An estimate of the number of live keys."""

    def typed(self, key_serde: Any, value_serde: Any) -> Any:
        """A view that encodes keys and values with the given serdes."""
        from spark_statestore.stores.typed import TypedKeyValueStore

        return TypedKeyValueStore(self, key_serde, value_serde)


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
        put = self.put
        for key, value, start in check_window_records(records):
            put(key, value, start)

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
        if not self._open:
            raise self._closed()
        key_from = check_bound(key_from, "key_from")
        key_to = check_bound(key_to, "key_to")
        time_from, time_to = check_time_range(time_from, time_to)
        if key_range_is_empty(key_from, key_to, method):
            return StoreIterator(iter(()))
        lo = self._live_from(time_from)
        if lo > time_to:  # every window in the range expired
            return StoreIterator(iter(()))
        return self._iterator(self._read_range(key_from, key_to, lo, time_to, reverse))

    def _live_from(self, time_from: int) -> int:
        """The earliest window start a new read may return (expired windows excluded)."""
        earliest = self.observed_stream_time - self.retention_period + 1
        return time_from if time_from > earliest else earliest

    def typed(self, key_serde: Any, value_serde: Any) -> Any:
        """A view that encodes keys and values with the given serdes."""
        from spark_statestore.stores.typed import TypedWindowStore

        return TypedWindowStore(self, key_serde, value_serde)
