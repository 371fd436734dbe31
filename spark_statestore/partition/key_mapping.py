"""Which new partition a store's entry moves to in a rescale.

Spark sends a grouping key to `pmod(hash(columns), n)` (`murmur3.py`), so an entry goes
where its key's grouping columns go. The store key is the grouping key by default when
its serde says what the columns are: `string` (one string column), `int64_key` or
`int64` (one bigint column), `bytes` (one binary column), `tuple(str,int,bytes)` (one
column each, in order). For any other key serde, or keys that are not the grouping key,
the caller gives `key_mapping`: a function of the decoded store key (a window store's
user key) returning the grouping key's column values as a tuple (`murmur3.Int32` marks
an `int` column) or the partition itself as an int; or a dict of such functions by store.

A raw entry's user key is its kind's to find (`StoreKind.user_key`: a window store's is
after the window start, a TTL store's after the layout's bytes); the store's own
bookkeeping keys have none, and every new partition gets a copy of them.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

import numpy as np

from spark_statestore import murmur3
from spark_statestore.serde import serde_for
from spark_statestore.stores.spec import StoreSpec

KeyMapping = Callable[[Any], Any]
_DEFAULT = {"string", "int64_key", "int64", "bytes"}
_BOOKKEEPING = -1  # "every partition"


def _as_columns(key: Any) -> tuple:
    return key if isinstance(key, tuple) else (key,)


def mapping_for(
    spec: StoreSpec, key_mapping: KeyMapping | Mapping[str, KeyMapping] | None
) -> KeyMapping | None:
    """The mapping given for store `spec` (None: its key is the grouping key); `ValueError`
    naming the store and its key serde when a mapping is needed and missing, `TypeError`
    for one that is not callable."""
    given = key_mapping.get(spec.name) if isinstance(key_mapping, Mapping) else key_mapping
    if given is not None:
        if not callable(given):
            raise TypeError(
                f"key_mapping for store {spec.name!r} must be a function of the store key, got "
                f"{type(given).__name__}: {given!r:.100}"
            )
        return given
    if spec.key_serde in _DEFAULT or spec.key_serde.startswith("tuple("):
        return None
    raise ValueError(
        f"store {spec.name!r} has key serde {spec.key_serde!r}, which does not say which grouping columns "
        f"its keys are: pass key_mapping (a function from the store key to the grouping key tuple or to "
        f"the partition), for example key_mapping={{{spec.name!r}: lambda key: (key.user,)}}"
    )


class Router:
    """Sends the raw entries of one store to new partitions (see module docstring)."""

    def __init__(self, spec: StoreSpec, mapping: KeyMapping | None, partitions: int) -> None:
        self.spec = spec
        self.mapping = mapping or _as_columns
        self.partitions = partitions
        self.serde = serde_for(spec.key_serde)
        self._user_key = spec.store_kind.user_key  # the kind's key schema
        self._fast = mapping is None and spec.key_serde in ("int64_key", "int64")  # one bigint column: numpy

    def user_key(self, raw: bytes) -> bytes | None:
        """The encoded user key of a raw entry (None: the store's bookkeeping)."""
        return self._user_key(self.spec, raw)

    def route(self, raws: list[bytes]) -> list[int]:
        """The new partition of each raw key (-1: every partition)."""
        keys = [self.user_key(raw) for raw in raws]
        if self._fast and all(k is not None for k in keys):
            values = np.array([self.serde.decode(k) for k in keys], dtype=np.int64)
            return murmur3.pmod_array(murmur3.hash_longs(values), self.partitions).tolist()
        return [_BOOKKEEPING if k is None else self._one(k) for k in keys]

    def _one(self, encoded: bytes) -> int:
        key = self.serde.decode(encoded)
        mapped = self.mapping(key)
        if isinstance(mapped, tuple):
            return murmur3.partition_of(mapped, self.partitions)
        if type(mapped) is int and 0 <= mapped < self.partitions:
            return mapped
        raise ValueError(
            f"key_mapping of store {self.spec.name!r} returned {mapped!r:.100} for key {key!r:.100}: it must return "
            f"the grouping key as a tuple or a partition in 0..{self.partitions - 1}"
        )


def every_partition(target: int) -> bool:
    return target == _BOOKKEEPING
