"""What defines a window store besides its name: `WindowSpec`, validated once.

Every window store (in-memory, RocksDB, caching, read-only views, the partition state's
declarations) takes one frozen `WindowSpec`, so the parameters are checked in one place,
in the order and with the messages API.md gives, and never retyped.

`Clock` says what advances a store's observed stream time: `RECORDS` (KIP-428: every
put, up to its window start) or `EXTERNAL` (only `advance_stream_time`, for callers that
own the clock, such as Spark's watermark: records then never expire each other in the
order they happen to be processed).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

from spark_statestore.validation import MAX_TIME, check_int, check_name, describe, to_millis


class Clock(enum.Enum):
    """What advances a window store's stream time (see module docstring)."""

    RECORDS = "records"
    EXTERNAL = "external"

    @classmethod
    def parse(cls, value: Any, name: str = "clock") -> "Clock":
        """A `Clock` from itself or its value (`"records"`, `"external"`)."""
        if isinstance(value, cls):
            return value
        if isinstance(value, str):
            try:
                return cls(value.strip().lower())
            except ValueError:
                pass
        choices = ", ".join(repr(c.value) for c in cls)
        raise ValueError(f"{name} must be one of {choices}, got {describe(value)}")


def default_segment_interval(retention_period: int) -> int:
    """Kafka Streams' default: half the retention period, at least one minute."""
    return max(retention_period // 2, 60_000)


@dataclass(frozen=True)
class WindowSpec:
    """Retention, window size, duplicates, segment interval and clock of a window store.

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
        return cls(retention, size, retain_duplicates, segment_interval, Clock.parse(clock))

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
            "clock": self.clock.value,
        }

