"""How a Spark processor declares its stores: kind, name, parameters and serdes.

Window stores in Spark run on the *watermark clock* by default: records do not advance
their stream time; at the end of each micro-batch it advances to that batch's watermark.
So during batch N the stream time is the watermark of batch N-1, the same for every
partition and every attempt: a record is late when its window ended more than the
retention period (window size + grace) before that, wherever and in whatever order it is
processed, and a window whose event-time timer fires in batch N (its end + grace passed
the watermark of N, not of N-1) is still there to be emitted.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from spark_statestore.kinds.build import typed_layer
from spark_statestore.serde import BytesSerde, RecordSerde, Serde
from spark_statestore.stores.clock import Clock
from spark_statestore.stores.spec import StoreSpec
from spark_statestore.validation import describe


def _check_serde(serde: Any, name: str) -> None:
    if not isinstance(serde, Serde):
        raise TypeError(f"{name} must be a Serde (see spark_statestore.Serdes), got {describe(serde)}")
    if name == "key_serde" and isinstance(serde, RecordSerde):
        raise TypeError("key_serde cannot be a record serde: keys never change shape (use Serdes.tuple(...))")


def _with_schemas(spec: StoreSpec, value_serde: Serde) -> StoreSpec:
    """A record store's spec carries its value schema versions."""
    if isinstance(value_serde, RecordSerde):
        return dataclasses.replace(spec, value_schemas=value_serde.history_json())
    return spec


class StoreDeclaration:
    """What every declaration gives: its `name`, serdes, `spec()`, and `typed(store)`: a
    bytes store of the partition (or a read-only view of one) through the serdes."""

    name: str
    key_serde: Serde
    value_serde: Serde

    def spec(self) -> StoreSpec:
        raise NotImplementedError

    def typed(self, store: Any) -> Any:
        return typed_layer(self.spec(), store, self.key_serde, self.value_serde)


@dataclass(frozen=True)
class KeyValue(StoreDeclaration):
    """A key-value store of the partition; with `ttl` (a `timedelta` or int ms) each write
    lives that long on `ttl_clock`: `"processing_time"` (the batch's timestamp, from
    Spark's offset log: the same for every attempt) or `"event_time"` (the batch's
    watermark). See `TaskState.open`."""

    name: str
    key_serde: Serde = field(default_factory=BytesSerde)
    value_serde: Serde = field(default_factory=BytesSerde)
    cached: bool = True
    ttl: Any = None
    ttl_clock: Clock | str = "processing_time"

    def __post_init__(self) -> None:
        _check_serde(self.key_serde, "key_serde")
        _check_serde(self.value_serde, "value_serde")
        self.spec()

    def spec(self) -> StoreSpec:
        spec = StoreSpec.key_value(
            self.name, self.cached, self.key_serde.identity, self.value_serde.identity, self.ttl, self.ttl_clock
        )
        return _with_schemas(spec, self.value_serde)


@dataclass(frozen=True)
class Window(StoreDeclaration):
    """A window store of the partition (`clock`: `"watermark"` or `"records"`)."""

    name: str
    retention_period: Any
    window_size: Any
    retain_duplicates: bool = False
    segment_interval: Any = None
    key_serde: Serde = field(default_factory=BytesSerde)
    value_serde: Serde = field(default_factory=BytesSerde)
    cached: bool = True
    clock: Clock | str = "watermark"

    def __post_init__(self) -> None:
        _check_serde(self.key_serde, "key_serde")
        _check_serde(self.value_serde, "value_serde")
        self.spec()

    def spec(self) -> StoreSpec:
        return _with_schemas(self._spec(), self.value_serde)

    def _spec(self) -> StoreSpec:
        return StoreSpec.window(
            self.name,
            self.retention_period,
            self.window_size,
            self.retain_duplicates,
            self.segment_interval,
            self.cached,
            self.clock,
            self.key_serde.identity,
            self.value_serde.identity,
        )


Declaration = StoreDeclaration  # KeyValue(...), Window(...)
