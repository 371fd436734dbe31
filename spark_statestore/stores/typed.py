"""Typed facades: a store seen through a key serde and a value serde.

`store.typed(Serdes.string(), Serdes.json())` gives the same operations over Python
values. Ranges follow byte order of the encoded keys, so use an order-preserving key
serde (`Serdes.string()`, `Serdes.int64_key()`, `Serdes.tuple(...)`) where order matters.

Every other operation a typed store offers is written out in its class and passed to
the store: the common surface (`name`, `persistent`, `is_open`, `flush`, `close`), the
transactional one where the store has it (`commit`, `committed_offset`, `rollback`,
`approximate_num_uncommitted_bytes`, `transaction_metrics`, and `read_only`, which gives
a typed read-only view), and a window store's stream time, parameters and metrics.
"""

from __future__ import annotations

from operator import itemgetter
from typing import Any, Callable, Generator, Iterable, Mapping

from spark_statestore.serde import JsonSerde, PickleSerde, Serde, TupleKeySerde
from spark_statestore.serde.values import as_list
from spark_statestore.stores.iterators import StoreIterator
from spark_statestore.stores.spec import Clock
from spark_statestore.stores.windowed import WindowColumns, Windowed, records_of
from spark_statestore.validation import MAX_TIME, check_items


def _decoded(source: StoreIterator, decode_item: Callable[[Any], Any]) -> StoreIterator:
    """`source`'s items decoded; a `for` loop runs the store's generator through a `map`,
    with no Python frame of this layer per item."""
    return StoreIterator(map(decode_item, source), inner=source)


def _builtin(serde: Any) -> bool:
    """A built-in serde other than JSON and pickle: no user code runs in it, and it
    refuses `None` itself with the API's message."""
    return isinstance(serde, Serde) and serde.builtin and not isinstance(serde, (JsonSerde, PickleSerde))


def _key_encoder(serde: Serde) -> Callable[[Any], bytes]:
    """Encode keys, with errors that say "key" (and `None` refused, as API.md says)."""
    if _builtin(serde):
        return serde.encoder("key")  # type: ignore[return-value]
    encode = serde.encode

    def encode_key(key: Any) -> bytes:
        if key is None:
            raise TypeError("key cannot be None")
        return encode(key)

    return encode_key


def _value_encoder(serde: Any) -> Callable[[Any], bytes | None]:
    """Encode values; `None` stays `None` (a delete)."""
    if isinstance(serde, Serde):
        return serde.encoder("value", nullable=True)
    encode = serde.encode
    return lambda value: None if value is None else encode(value)


def _decoder(serde: Any, nullable: bool = False) -> Callable[[Any], Any]:
    if isinstance(serde, Serde):
        return serde.decoder(nullable)
    decode = serde.decode
    return (lambda data: None if data is None else decode(data)) if nullable else decode


def _item_decoders(dk: Callable[[bytes], Any], dv: Callable[[bytes], Any]) -> tuple[Callable, ...]:
    """Decoders of what the stores' iterators yield: `(key, value)` pairs, `(window start,
    value)` pairs and `(Windowed, value)` pairs (one Python call per item, plus the serdes')."""
    new = tuple.__new__

    def pair(item: tuple[bytes, bytes]) -> tuple[Any, Any]:
        return dk(item[0]), dv(item[1])

    def timed(item: tuple[int, bytes]) -> tuple[int, Any]:
        return item[0], dv(item[1])

    def windowed(item: tuple[Windowed, bytes]) -> tuple[Windowed, Any]:
        inner = item[0]
        return new(Windowed, (dk(inner[0]), inner[1])), dv(item[1])

    return pair, timed, windowed


_first, _second = itemgetter(0), itemgetter(1)


def _pairs_of(pairs: Any) -> bool:
    """Whether `pairs` is a list of 2-tuples (checked at C level, no Python call per item)."""
    return type(pairs) is list and set(map(type, pairs)) <= {tuple} and set(map(len, pairs)) <= {2}


class _Typed:
    """What typed key-value and window stores share: the serdes, and the operations that
    pass straight to the store (see module docstring)."""

    def __init__(self, store: Any, key_serde: Serde, value_serde: Serde) -> None:
        self.store = store
        self.key_serde = key_serde
        self.value_serde = value_serde
        self._ek = _key_encoder(key_serde)
        self._ev = _value_encoder(value_serde)  # None -> None: a delete
        self._dk = _decoder(key_serde)
        self._dv = _decoder(value_serde)
        self._dv_or_none = _decoder(value_serde, nullable=True)  # what a read returns
        # built-in serdes: a bulk write may encode pairs without the per-item check first,
        # and on an error take the checked path (which names the item)
        self._builtin = _builtin(key_serde) and isinstance(value_serde, Serde) and value_serde.builtin
        self._pair, self._timed, self._windowed = _item_decoders(self._dk, self._dv)

    def _encode_keys(self, keys: Any) -> list[bytes]:
        """A column of keys, encoded (without a Python call per key where the serde can)."""
        serde = self.key_serde
        if _builtin(serde):
            return serde.encode_many(keys, "key")
        return list(map(self._ek, as_list(keys)))

    def _encode_values(self, values: Any) -> list[bytes | None]:
        """A column of values, encoded (`None` deletes)."""
        values = values if isinstance(values, list) else as_list(values)
        if None in values:
            return list(map(self._ev, values))
        serde = self.value_serde
        if isinstance(serde, Serde):
            return serde.encode_many(values)
        return list(map(self._ev, values))

    def _decode_values(self, raw: list[bytes | None]) -> list[Any]:
        serde = self.value_serde
        if isinstance(serde, Serde):
            return serde.decode_many(raw)
        return list(map(self._dv_or_none, raw))

    def _decode_keys(self, raw: list[bytes]) -> list[Any]:
        serde = self.key_serde
        if isinstance(serde, Serde):
            return serde.decode_many(raw)
        return list(map(self._dk, raw))

    def _bound(self, key: Any) -> bytes | None:
        return None if key is None else self._ek(key)

    # -- the common surface ---------------------------------------------------------------

    @property
    def name(self) -> str:
        return self.store.name

    @property
    def persistent(self) -> bool:
        return self.store.persistent

    @property
    def is_open(self) -> bool:
        return self.store.is_open

    def flush(self) -> None:
        self.store.flush()

    def close(self) -> None:
        self.store.close()

    # -- transactional stores (KIP-892) ------------------------------------------------------

    def commit(self, offsets: Mapping[str, int] | None = None) -> None:
        self.store.commit(offsets)

    def committed_offset(self, name: str) -> int | None:
        return self.store.committed_offset(name)

    def rollback(self) -> None:
        self.store.rollback()

    def approximate_num_uncommitted_bytes(self) -> int:
        return self.store.approximate_num_uncommitted_bytes()

    @property
    def transaction_metrics(self) -> Any:
        return self.store.transaction_metrics

    def read_only(self, isolation: Any = "READ_COMMITTED") -> Any:
        """A typed read-only view of the store (same serdes) at the given isolation level."""
        return self.store.read_only(isolation).typed(self.key_serde, self.value_serde)

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<typed {self.store!r} keys={self.key_serde!r} values={self.value_serde!r}>"


class TypedKeyValueStore(_Typed):
    """A `KeyValueStore` over typed keys and values."""

    def put(self, key: Any, value: Any) -> None:
        self.store.put(self._ek(key), self._ev(value))

    def get(self, key: Any) -> Any:
        return self._dv_or_none(self.store.get(self._ek(key)))

    def put_if_absent(self, key: Any, value: Any) -> Any:
        return self._dv_or_none(self.store.put_if_absent(self._ek(key), self._ev(value)))

    def put_all(self, pairs: Iterable[tuple[Any, Any]]) -> None:
        """Put every `(key, value)` pair; every one is encoded before any is written."""
        if self._builtin and _pairs_of(pairs):
            try:  # by columns; on any error the checked path below names the item
                keys = self._encode_keys(list(map(_first, pairs)))
                values = self._encode_values(list(map(_second, pairs)))
            except (TypeError, ValueError):
                pass
            else:
                self.store.put_columns(keys, values)
                return
        self.store.put_all(check_items(pairs, "pairs", ("key", "value"), self._encode_pair))

    def _encode_pair(self, key: Any, value: Any) -> tuple[bytes, bytes | None]:
        return self._ek(key), self._ev(value)

    def get_all(self, keys: Any) -> list[Any]:
        """The values of many keys (a list, numpy array, pandas Series or Arrow array)."""
        return self._decode_values(self.store.get_all(self._encode_keys(keys)))

    def put_columns(self, keys: Any, values: Any) -> None:
        """`put_all` over two columns of equal length (lists, numpy, pandas or Arrow)."""
        encoded_keys, encoded_values = self._encode_keys(keys), self._encode_values(values)
        if len(encoded_keys) != len(encoded_values):
            raise ValueError(
                f"keys and values must have the same length, got {len(encoded_keys)} and {len(encoded_values)}"
            )
        self.store.put_columns(encoded_keys, encoded_values)

    def delete(self, key: Any) -> Any:
        return self._dv_or_none(self.store.delete(self._ek(key)))

    def range(self, key_from: Any, key_to: Any) -> StoreIterator:
        return _decoded(self.store.range(self._bound(key_from), self._bound(key_to)), self._pair)

    def reverse_range(self, key_from: Any, key_to: Any) -> StoreIterator:
        return _decoded(
            self.store.reverse_range(self._bound(key_from), self._bound(key_to)), self._pair
        )

    def all(self) -> StoreIterator:
        return _decoded(self.store.all(), self._pair)

    def reverse_all(self) -> StoreIterator:
        return _decoded(self.store.reverse_all(), self._pair)

    def approximate_num_entries(self) -> int:
        return self.store.approximate_num_entries()

    def advance_time(self, now: int, *limit: int) -> int:
        """A TTL store: move its clock and delete expired entries (see `TtlKeyValueStore`)."""
        return self.store.advance_time(now, *limit)

    @property
    def time(self) -> int:
        """A TTL store's clock."""
        return self.store.time

    def prefix_scan(self, prefix: Any) -> StoreIterator:
        """Keys starting with `prefix`; for tuple keys, `prefix` is a tuple of leading components."""
        if isinstance(prefix, tuple) and isinstance(self.key_serde, TupleKeySerde):
            raw = self.key_serde.prefix(*prefix)
        else:
            raw = self._ek(prefix)
        return _decoded(self.store.prefix_scan(raw), self._pair)


class _TypedOnStreamTime(_Typed):
    """The stream-time members a typed window or session store passes to its store."""

    @property
    def observed_stream_time(self) -> int:
        return self.store.observed_stream_time

    def advance_stream_time(self, time: int) -> None:
        self.store.advance_stream_time(time)

    @property
    def retention_period(self) -> int:
        return self.store.retention_period

    @property
    def clock(self) -> Clock:
        return self.store.clock

    @property
    def metrics(self) -> Any:
        return self.store.metrics


class TypedWindowStore(_TypedOnStreamTime):
    """A `WindowStore` over typed keys and values."""

    @property
    def window_size(self) -> int:
        return self.store.window_size

    @property
    def retain_duplicates(self) -> bool:
        return self.store.retain_duplicates

    def put(self, key: Any, value: Any, window_start: int) -> None:
        self.store.put(self._ek(key), self._ev(value), window_start)

    def get(self, key: Any, window_start: int) -> Any:
        return self._dv_or_none(self.store.get(self._ek(key), window_start))

    def put_all(self, records: Iterable[tuple[Any, Any, int]]) -> None:
        """Put every `(key, value, window_start)` record; every one is encoded (and then
        checked by the store) before any is written."""
        fields = ("key", "value", "window_start")
        self.store.put_all(check_items(records, "records", fields, self._encode_record))

    def _encode_record(self, key: Any, value: Any, window_start: int) -> tuple[bytes, bytes | None, int]:
        return self._ek(key), self._ev(value), window_start

    def get_all(self, keys: Any, window_starts: Any) -> list[Any]:
        """The values of many (key, window start) pairs, given as two columns."""
        starts = as_list(window_starts)
        return self._decode_values(self.store.get_all(self._encode_keys(keys), starts))

    def put_columns(self, keys: Any, values: Any, window_starts: Any) -> None:
        """`put` over three columns of equal length: keys, values and window starts."""
        encoded_keys, encoded_values = self._encode_keys(keys), self._encode_values(values)
        starts = as_list(window_starts)
        if not len(encoded_keys) == len(encoded_values) == len(starts):
            raise ValueError(
                f"keys, values and window_starts must have the same length, got {len(encoded_keys)}, "
                f"{len(encoded_values)} and {len(starts)}"
            )
        self.store.put_columns(encoded_keys, encoded_values, starts)

    def fetch_range_columns(self, key_from: Any, key_to: Any, time_from: int, time_to: int) -> WindowColumns:
        """What `fetch_range` yields, as columns (`WindowColumns`: keys, values and window
        starts, decoded by columns)."""
        raw = self.store.fetch_range_columns(self._bound(key_from), self._bound(key_to), time_from, time_to)
        return WindowColumns(self._decode_keys(raw.keys), self._decode_values(raw.values), raw.window_starts)

    def fetch_all_columns(self, time_from: int, time_to: int) -> WindowColumns:
        """What `fetch_all` yields, as columns (see `fetch_range_columns`)."""
        return self.fetch_range_columns(None, None, time_from, time_to)

    def fetch(self, key: Any, time_from: int, time_to: int) -> StoreIterator:
        return _decoded(self.store.fetch(self._ek(key), time_from, time_to), self._timed)

    def backward_fetch(self, key: Any, time_from: int, time_to: int) -> StoreIterator:
        return _decoded(self.store.backward_fetch(self._ek(key), time_from, time_to), self._timed)

    def fetch_range(self, key_from: Any, key_to: Any, time_from: int, time_to: int) -> StoreIterator:
        """Read by chunks of columns (`fetch_range_chunks`) and decoded by columns: no
        Python step per record in this layer."""
        chunks = self.store.fetch_range_chunks(self._bound(key_from), self._bound(key_to), time_from, time_to)
        records = self._decoded_chunks(chunks)
        chunks.close_with(records)
        return StoreIterator(records, inner=chunks)

    def _decoded_chunks(self, chunks: Iterable[WindowColumns]) -> Generator[tuple[Windowed, Any], None, None]:
        size = self.store.window_size
        for chunk in chunks:
            try:
                keys, values = self._decode_keys(chunk.keys), self._decode_values(chunk.values)
            except Exception:  # noqa: BLE001 - a serde's error: raised below, record by record
                keys = values = None
            if keys is None or values is None:
                # the records before the first that does not decode, then its error, as a
                # record-by-record read gives them
                yield from map(self._windowed, records_of(chunk, size))
            else:
                yield from records_of(WindowColumns(keys, values, chunk.window_starts), size)

    def backward_fetch_range(
        self, key_from: Any, key_to: Any, time_from: int, time_to: int
    ) -> StoreIterator:
        inner = self.store.backward_fetch_range(
            self._bound(key_from), self._bound(key_to), time_from, time_to
        )
        return _decoded(inner, self._windowed)

    def fetch_all(self, time_from: int, time_to: int) -> StoreIterator:
        return self.fetch_range(None, None, time_from, time_to)

    def backward_fetch_all(self, time_from: int, time_to: int) -> StoreIterator:
        return _decoded(self.store.backward_fetch_all(time_from, time_to), self._windowed)

    def all(self) -> StoreIterator:
        return self.fetch_range(None, None, 0, MAX_TIME)

    def backward_all(self) -> StoreIterator:
        return _decoded(self.store.backward_all(), self._windowed)
