"""`StoreSpec`: one store of a partition, as the partition state declares it.

A spec holds what defines the store's data: its kind, name, window parameters and the
identities of the serdes its keys and values are written with (so that a reader can
decode the state without the processor, and a query cannot reopen the state with a
different declaration). Whether it is cached is a runtime choice and not part of that.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from spark_statestore.stores.rocksdb import check_store_name
from spark_statestore.stores.window_spec import Clock, WindowSpec
from spark_statestore.validation import describe

KEY_VALUE = "key_value"
WINDOW = "window"


def _serde_identity(value: Any, name: str) -> str:
    if not isinstance(value, str) or not value:
        raise TypeError(f"{name} must be a serde identity (a non-empty str), got {describe(value)}")
    return value


@dataclass(frozen=True)
class StoreSpec:
    """A store of a partition (build with `StoreSpec.key_value` or `StoreSpec.window`)."""

    name: str
    kind: str = KEY_VALUE
    window_spec: WindowSpec | None = None
    cached: bool = True
    key_serde: str = "bytes"
    value_serde: str = "bytes"

    @staticmethod
    def key_value(name: str, cached: bool = True, key_serde: str = "bytes", value_serde: str = "bytes") -> "StoreSpec":
        return StoreSpec(
            check_store_name(name),
            KEY_VALUE,
            None,
            bool(cached),
            _serde_identity(key_serde, "key_serde"),
            _serde_identity(value_serde, "value_serde"),
        )

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
        spec = WindowSpec.of(name, retention_period, window_size, retain_duplicates, segment_interval, clock)
        return StoreSpec(
            check_store_name(name),
            WINDOW,
            spec,
            bool(cached) and not spec.retain_duplicates,
            _serde_identity(key_serde, "key_serde"),
            _serde_identity(value_serde, "value_serde"),
        )

    def as_dict(self) -> dict[str, Any]:
        """What defines the store's data (not whether it is cached), JSON-able."""
        out: dict[str, Any] = {"kind": self.kind, "key_serde": self.key_serde, "value_serde": self.value_serde}
        if self.window_spec is not None:
            out["window"] = self.window_spec.as_dict()
        return out

    @staticmethod
    def from_dict(name: str, data: dict[str, Any]) -> "StoreSpec":
        window = data.get("window")
        return StoreSpec(
            name,
            data["kind"],
            None if window is None else WindowSpec.from_dict(window),
            True,
            data.get("key_serde", "bytes"),
            data.get("value_serde", "bytes"),
        )
