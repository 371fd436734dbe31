"""The iterator type every store returns.

A `StoreIterator` wraps a generator of `(key, value)` pairs and adds what Kafka Streams'
`KeyValueIterator` has: `peek_next_key()` and `close()`; it is also a context manager.
Closing it closes the generator, which releases whatever the generator holds (RocksDB
iterators, expiry holds of a window store).

Speed: `iter(it)` returns the underlying generator when no item is peeked, so a `for`
loop over a store iterator runs without a Python-level `__next__` per item. `next(it)`
and the loop draw from the same generator, so mixing them stays consistent.
"""

from __future__ import annotations

import weakref
from typing import Any, Generator, Generic, Iterator, TypeVar

T = TypeVar("T")

_EMPTY: Any = object()
_DONE: Iterator[Any] = iter(())


class StoreIterator(Generic[T]):
    """An iterator of `(key, value)` pairs with `peek_next_key()` and `close()`."""

    __slots__ = ("__weakref__", "_inner", "_outer", "_peeked", "_source")

    def __init__(self, source: Iterator[T], inner: StoreIterator[Any] | None = None) -> None:
        """`inner`: the store iterator `source` draws from (a `map` over it, say), closed
        with this one; a source that has `close()` is closed itself."""
        self._source = source
        self._peeked: Any = _EMPTY
        self._inner = inner
        self._outer: weakref.ref[Generator[Any, None, None]] | None = None

    def __iter__(self) -> Iterator[T]:
        if self._peeked is _EMPTY:
            return self._source
        return self

    def __next__(self) -> T:
        item = self._peeked
        if item is not _EMPTY:
            self._peeked = _EMPTY
            return item
        return next(self._source)

    def peek_next_key(self) -> Any:
        """The key of the next item without consuming it; `StopIteration` when exhausted."""
        if self._peeked is _EMPTY:
            self._peeked = next(self._source)
        return self._peeked[0]

    def has_next(self) -> bool:
        """Whether another item follows."""
        try:
            self.peek_next_key()
        except StopIteration:
            return False
        return True

    def close(self) -> None:
        """Release the iterator; later `next()` calls raise `StopIteration`."""
        source = self._source
        if source is _DONE:
            return
        self._source = _DONE
        self._peeked = _EMPTY
        close = getattr(source, "close", None)
        if close is not None and not getattr(source, "gi_running", False):
            close()
        if self._inner is not None:
            self._inner.close()
        outer = None if self._outer is None else self._outer()
        if outer is not None and not outer.gi_running:  # running: it finds this one closed
            outer.close()

    def close_with(self, outer: Generator[Any, None, None]) -> None:
        """Close `outer` too when this one closes: a generator that draws from this one
        and holds items it has read ahead (a chunk being decoded) must end when the store
        ends this one at its `close()`, also when a `for` loop holds only the generator."""
        self._outer = weakref.ref(outer)

    def __enter__(self) -> "StoreIterator[T]":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
