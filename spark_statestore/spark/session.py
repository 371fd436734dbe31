"""`Session`: a session store declared for a Spark processor, like `KeyValue` and `Window`.

On the watermark clock (the default) the store's stream time is the previous batch's
watermark, the same for every partition and attempt; `retention` (at least the gap, the
default) keeps a session until the watermark closed it. The processor gets the typed store
with its gap (`stores.session_merge.GapSessions`): `merge(key, time, value, fn)` puts a
record into its key's sessions, `merge_batch(keys, times, values, fn)` a batch of them (a
partition's rows in `mapInArrow`), `close_sessions(watermark)` takes out the sessions the watermark
closed, `is_late(time, watermark)` tells a record that can join no session any more.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from spark_statestore.kinds.session import SESSION
from spark_statestore.serde import BytesSerde, Serde
from spark_statestore.spark.declarations import StoreDeclaration, _check_serde, _with_schemas
from spark_statestore.stores.clock import Clock
from spark_statestore.stores.session_api import SessionSpec
from spark_statestore.stores.session_merge import GapSessions, check_gap
from spark_statestore.stores.spec import StoreSpec
from spark_statestore.validation import to_millis


@dataclass(frozen=True)
class Session(StoreDeclaration):
    """A session store of the partition: `Session("name", key_serde, value_serde, gap=...,
    retention=...)` (durations: int ms or `timedelta`; `clock`: `"watermark"` or `"records"`)."""

    name: str
    key_serde: Serde = field(default_factory=BytesSerde)
    value_serde: Serde = field(default_factory=BytesSerde)
    gap: Any = None
    retention: Any = None
    cached: bool = True
    clock: Clock | str = "watermark"

    def __post_init__(self) -> None:
        if self.gap is None:
            raise TypeError(f"Session {self.name!r} needs a gap (int ms or timedelta)")
        _check_serde(self.key_serde, "key_serde")
        _check_serde(self.value_serde, "value_serde")
        gap = check_gap(self.gap)
        if self.retention is not None and to_millis(self.retention, "retention") < gap:
            raise ValueError(
                f"retention of Session {self.name!r} must be at least its gap (a session is kept until the "
                f"watermark closes it), got retention={self.retention!r}, gap={self.gap!r}"
            )
        self.spec()

    @property
    def gap_ms(self) -> int:
        return check_gap(self.gap)

    def spec(self) -> StoreSpec:
        retention = self.gap_ms if self.retention is None else self.retention
        params = SessionSpec.of(self.name, retention, self.clock)
        spec = StoreSpec.of(
            SESSION, self.name, params, self.cached, self.key_serde.identity, self.value_serde.identity
        )
        return _with_schemas(spec, self.value_serde)

    def typed(self, store: Any) -> GapSessions:
        return GapSessions(super().typed(store), self.gap_ms)
