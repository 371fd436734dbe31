"""`StoreSpec`: the one description of a store, validated once and recorded durably.

A spec holds what defines a store's data: its name, its kind (a `StoreKind`, see
`stores/kinds.py`: every difference between kinds is the kind's to say), the kind's
parameters (a window store's `WindowSpec`), the identities of the serdes its keys and
values are written with (so that a reader can decode the state without the processor,
and a query cannot reopen the state with a different declaration). Whether the store is
cached is a runtime choice, kept in the spec but never recorded.

Two records are derived from a spec, and both must stay byte-compatible with the files
and databases already written: `as_dict` (the partition layout and changelog headers;
`from_dict` reads it back, checking every field) and `store_record` (what a RocksDB
database records for the store's column family, see `RocksDatabase.register_store`).
A new optional field is a dataclass field with a default that `as_dict` writes only
when it is set and `from_dict` reads with that default, so older records still read
and records without it stay the same bytes.

A window store's `clock` (`stores/clock.py`) says what advances its observed stream time:
`Clock.RECORDS` (KIP-428: every put, up to its window start) or `Clock.WATERMARK` (only
`advance_stream_time`: in Spark, the batch's watermark); it is recorded as `"records"` or
`"external"`.

`value_schemas` (record values, see `serde/records.py`): the versions of the values'
schema, oldest first, as canonical JSON texts (an optional field: absent for other serdes).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from typing import Any

from spark_statestore.serde import check_identity
from spark_statestore.serde.schemas import check_schemas
from spark_statestore.stores.clock import STREAM_CLOCK, Clock
from spark_statestore.stores.kinds import KINDS, StoreKind, kind_named
from spark_statestore.stores.names import check_store_name
from spark_statestore.stores.ttl_spec import TtlSpec
from spark_statestore.validation import MAX_TIME, check_bool, check_int, check_name, describe, to_millis

KEY_VALUE = "key_value"  # the names of the built-in kinds (`spark_statestore.kinds`)
WINDOW = "window"


def default_segment_interval(retention_period: int) -> int:
    """Kafka Streams' default: half the retention period, at least one minute."""
    return max(retention_period // 2, 60_000)


@dataclass(frozen=True)
class WindowSpec:
    """The window part of a store's description: retention, window size, duplicates,
    segment interval and clock. Every window store (in-memory, RocksDB, caching, views)
    takes one, so the parameters are checked in one place, in the order and with the
    messages API.md gives.

    A record is live while `window_start > observed_stream_time - retention_period`.
    `segment_interval` (RocksDB stores) is how much expired data one range deletion drops.
    """

    retention_period: int
    window_size: int
    retain_duplicates: bool = False
    segment_interval: int | None = None
    clock: Clock = Clock.RECORDS

    @classmethod
    def of(
        cls,
        name: Any,
        retention_period: Any,
        window_size: Any,
        retain_duplicates: Any = False,
        segment_interval: Any = None,
        clock: Any = Clock.RECORDS,
    ) -> "WindowSpec":
        """A checked spec for the store `name` (durations: int ms or `timedelta`)."""
        if name is None:
            raise TypeError("name cannot be None")
        name = check_name(name)
        retention = to_millis(retention_period, "retention_period")
        if retention < 0:
            raise ValueError("retention_period cannot be negative")
        if retention > MAX_TIME:
            raise ValueError(f"retention_period must be at most {MAX_TIME} ms, got {retention}")
        size = to_millis(window_size, "window_size")
        if size < 0:
            raise ValueError("window_size cannot be negative")
        if size > retention:
            raise ValueError(
                f"The retention period of the window store {name} must be no smaller than its "
                f"window size. Got size=[{size}], retention=[{retention}]"
            )
        if not isinstance(retain_duplicates, bool):
            raise TypeError(f"retain_duplicates must be a bool, got {describe(retain_duplicates)}")
        if segment_interval is not None:
            segment_interval = check_int(to_millis(segment_interval, "segment_interval"), "segment_interval", 1)
            if segment_interval > MAX_TIME:
                raise ValueError(f"segment_interval must be at most {MAX_TIME} ms, got {segment_interval}")
        return cls(retention, size, retain_duplicates, segment_interval, STREAM_CLOCK.parse(clock))

    @property
    def segment(self) -> int:
        """The segment interval in use (the default when none was given)."""
        return self.segment_interval or default_segment_interval(self.retention_period)

    def as_dict(self) -> dict[str, Any]:
        """A JSON-able form (for durable metadata)."""
        return {
            "retention_period": self.retention_period,
            "window_size": self.window_size,
            "retain_duplicates": self.retain_duplicates,
            "segment_interval": self.segment_interval,
            "clock": STREAM_CLOCK.record(self.clock),
        }

    @staticmethod
    def from_dict(name: str, window: Any) -> "WindowSpec":
        """The window parameters of store `name` recorded as `window` (every field checked)."""
        if not isinstance(window, dict):
            raise TypeError(f"the window parameters of store {name!r} must be an object, got {describe(window)}")
        return WindowSpec.of(
            name,
            _recorded_int(window.get("retention_period"), "retention_period"),
            _recorded_int(window.get("window_size"), "window_size"),
            window.get("retain_duplicates"),
            window.get("segment_interval"),
            window.get("clock", Clock.RECORDS),
        )


def _recorded_int(value: Any, name: str) -> int:
    """A duration recorded as int milliseconds (not a bool, a float or a string)."""
    if type(value) is not int:
        raise TypeError(f"{name} must be recorded as int milliseconds, got {describe(value)}")
    return value


@dataclass(frozen=True)
class StoreSpec:
    """A store: build with `StoreSpec.key_value`, `StoreSpec.window` or `StoreSpec.of`
    (checked), or read one back with `StoreSpec.from_dict`. `kind` names its `StoreKind`
    (`stores/kinds.py`); `params` are the kind's parameters (a window store's `WindowSpec`;
    None for a key-value store)."""

    name: str
    kind: str = KEY_VALUE
    params: Any = None
    cached: bool = True
    key_serde: str = "bytes"
    value_serde: str = "bytes"
    value_schemas: tuple[str, ...] = ()  # record values: their schema versions, oldest first (JSON)
    ttl: TtlSpec | None = None  # kinds that take one only (key-value stores): entries expire (see ttl_spec)

    @property
    def store_kind(self) -> StoreKind:
        """The `StoreKind` of the store."""
        return kind_named(self.kind, self.name)

    @staticmethod
    def of(
        kind: str,
        name: str,
        params: Any = None,
        cached: bool = True,
        key_serde: str = "bytes",
        value_serde: str = "bytes",
    ) -> "StoreSpec":
        """A store of `kind` with its checked `params` (a store whose parameters its kind
        does not cache is never cached)."""
        store_kind = kind_named(kind)
        return StoreSpec(
            check_store_name(name),
            store_kind.name,
            params,
            check_bool(cached, "cached") and store_kind.cacheable(params),
            check_identity(key_serde, "key_serde"),
            check_identity(value_serde, "value_serde"),
        )

    @staticmethod
    def key_value(
        name: str,
        cached: bool = True,
        key_serde: str = "bytes",
        value_serde: str = "bytes",
        ttl: Any = None,
        ttl_clock: Any = "processing_time",
    ) -> "StoreSpec":
        """A key-value store (`ttl`: int ms or `timedelta`, None: entries never expire)."""
        spec = StoreSpec.of(KEY_VALUE, name, None, cached, key_serde, value_serde)
        return spec if ttl is None else replace(spec, ttl=TtlSpec.of(ttl, ttl_clock))

    @staticmethod
    def window(
        name: str,
        retention_period: Any,
        window_size: Any,
        retain_duplicates: bool = False,
        segment_interval: Any = None,
        cached: bool = True,
        clock: Clock | str = Clock.RECORDS,
        key_serde: str = "bytes",
        value_serde: str = "bytes",
    ) -> "StoreSpec":
        """A window store (a store that retains duplicates is never cached)."""
        window = WindowSpec.of(name, retention_period, window_size, retain_duplicates, segment_interval, clock)
        return StoreSpec.of(WINDOW, name, window, cached, key_serde, value_serde)

    def as_dict(self) -> dict[str, Any]:
        """What defines the store's data (not its name, the key it is recorded under, nor
        whether it is cached), JSON-able."""
        out: dict[str, Any] = {"kind": self.kind, "key_serde": self.key_serde, "value_serde": self.value_serde}
        kind = self.store_kind
        if kind.params_key is not None:
            out[kind.params_key] = kind.params_as_dict(self.params)
        if self.value_schemas:
            out["value_schemas"] = [json.loads(text) for text in self.value_schemas]
        if self.ttl is not None:
            out["ttl"] = self.ttl.as_dict()
        return out

    @staticmethod
    def from_dict(name: str, data: Any) -> "StoreSpec":
        """The spec recorded as `data` (from a durable file: every field is checked;
        TypeError/ValueError name what is wrong)."""
        if not isinstance(data, dict):
            raise TypeError(f"store {name!r} must be recorded as an object, got {describe(data)}")
        kind = kind_named(data.get("kind"), name)
        for other in KINDS.values():  # the kind's own parameters, and no other kind's
            key = other.params_key
            if key is not None and (other is kind) != (data.get(key) is not None):
                raise ValueError(f"store {name!r} of kind {kind.name!r} has {key} parameters {data.get(key)!r}")
        params = None if kind.params_key is None else kind.params_from_dict(name, data[kind.params_key])
        value_serde = check_identity(data.get("value_serde", "bytes"), "value_serde")
        schemas = check_schemas(data.get("value_schemas", ()))
        if (value_serde == "record") != bool(schemas):
            raise ValueError(f"store {name!r} has value serde {value_serde!r} with value schemas {schemas!r:.200}")
        ttl = data.get("ttl")
        if ttl is not None and not kind.takes_ttl:
            raise ValueError(f"store {name!r} of kind {kind.name!r} has a ttl {ttl!r}; only key-value stores have one")
        return StoreSpec(
            check_store_name(name),
            kind.name,
            params,
            True,
            check_identity(data.get("key_serde", "bytes"), "key_serde"),
            value_serde,
            schemas,
            None if ttl is None else TtlSpec.from_dict(name, ttl),
        )

    def store_record(self) -> dict[str, Any]:
        """What a RocksDB database records for the store's column family: what its bytes
        mean to the store code (the serdes are the layout's to check)."""
        return self.store_kind.store_record(self)
