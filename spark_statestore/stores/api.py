"""Store interfaces (API.md): `StateStore`, what every store shares, and `KeyValueStore`.

`KeyValueStore` and `WindowStore` (in `window_api`) are abstract bases: implementations
override the abstract methods and inherit the common surface (`name`, `is_open`, context
manager, `typed()`, iterator tracking so that `close()` ends open iterators).
"""

from __future__ import annotations

import logging
import weakref
from abc import ABC, abstractmethod
from types import GeneratorType
from typing import Any, Callable, Iterable, Iterator, Sequence

from spark_statestore.errors import StoreClosedError
from spark_statestore.stores.iterators import StoreIterator
from spark_statestore.stores.typed import TypedKeyValueStore
from spark_statestore.validation import check_bound, check_iterable, check_key, check_pairs

log = logging.getLogger("spark_statestore.stores")


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
        self._iterators: weakref.WeakSet[StoreIterator | GeneratorType] = weakref.WeakSet()

    @property
    def name(self) -> str:
        return self._name

    @property
    def is_open(self) -> bool:
        return self._open

    def _closed(self) -> StoreClosedError:
        return StoreClosedError(f"store {self._name!r} is closed")

    def _iterator(self, source: Iterator[Any]) -> StoreIterator:
        """Wrap a generator so that `close()` of the store ends it. The generator is kept
        too: a `for` loop draws from it directly and lets the wrapper go."""
        it = StoreIterator(source)
        self._iterators.add(it)
        if isinstance(source, GeneratorType):
            self._iterators.add(source)
        return it

    def _end_iterators(self) -> None:
        for it in list(self._iterators):
            if not getattr(it, "gi_running", False):  # a read that closes the store ends itself
                it.close()

    def flush(self) -> None:
        """Persist buffered data (nothing to do for stores that buffer nothing)."""
        if not self._open:
            raise self._closed()

    def close(self) -> None:
        """Close the store; its open iterators end. Closing twice is harmless."""
        if not self._open:
            return
        self._open = False
        try:
            self._end_iterators()
        finally:
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

    def put_columns(self, keys: Sequence[bytes], values: Sequence[bytes | None]) -> None:
        """`put_all` of two columns of equal length, keys and values (`None` deletes)."""
        if len(keys) != len(values):
            raise ValueError(f"keys and values must have the same length, got {len(keys)} and {len(values)}")
        self.put_all(list(zip(keys, values)))

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

    def typed(self, key_serde: Any, value_serde: Any) -> TypedKeyValueStore:
        """A view that encodes keys and values with the given serdes."""
        return TypedKeyValueStore(self, key_serde, value_serde)
