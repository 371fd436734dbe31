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
from spark_statestore.serde import check_identity
from spark_statestore.validation import check_bool, describe

KEY_VALUE = "key_value"
WINDOW = "window"


def _recorded_int(value: Any, name: str) -> int:
    """A duration recorded as int milliseconds (not a bool, a float or a string)."""
    if type(value) is not int:
        raise TypeError(f"{name} must be recorded as int milliseconds, got {describe(value)}")
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
            check_bool(cached, "cached"),
            check_identity(key_serde, "key_serde"),
            check_identity(value_serde, "value_serde"),
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
            check_bool(cached, "cached") and not spec.retain_duplicates,
            check_identity(key_serde, "key_serde"),
            check_identity(value_serde, "value_serde"),
        )

    def as_dict(self) -> dict[str, Any]:
        """What defines the store's data (not whether it is cached), JSON-able."""
        out: dict[str, Any] = {"kind": self.kind, "key_serde": self.key_serde, "value_serde": self.value_serde}
        if self.window_spec is not None:
            out["window"] = self.window_spec.as_dict()
        return out

    @staticmethod
    def from_dict(name: str, data: Any) -> "StoreSpec":
        """The spec recorded as `data` (from a durable file: every field is checked;
        TypeError/ValueError name what is wrong)."""
        if not isinstance(data, dict):
            raise TypeError(f"store {name!r} must be recorded as an object, got {describe(data)}")
        kind, window = data.get("kind"), data.get("window")
        if kind not in (KEY_VALUE, WINDOW):
            raise ValueError(f"store {name!r} has kind {kind!r}; known kinds: {KEY_VALUE!r}, {WINDOW!r}")
        if (kind == WINDOW) != (window is not None):
            raise ValueError(f"store {name!r} of kind {kind!r} has window parameters {window!r}")
        spec = None
        if window is not None:
            if not isinstance(window, dict):
                raise TypeError(f"the window parameters of store {name!r} must be an object, got {describe(window)}")
            spec = WindowSpec.of(
                name,
                _recorded_int(window.get("retention_period"), "retention_period"),
                _recorded_int(window.get("window_size"), "window_size"),
                window.get("retain_duplicates"),
                window.get("segment_interval"),
                window.get("clock", Clock.RECORDS.value),
            )
        return StoreSpec(
            check_store_name(name),
            kind,
            spec,
            True,
            check_identity(data.get("key_serde", "bytes"), "key_serde"),
            check_identity(data.get("value_serde", "bytes"), "value_serde"),
        )