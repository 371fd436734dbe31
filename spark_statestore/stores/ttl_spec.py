"""`TtlSpec`: how long a key-value store's entries live, and on which clock.

Each write sets its entry's expiry to the store's clock plus `duration`; an entry whose
expiry is at or below the clock is expired (invisible at once, deleted in bounded work).
A write before the clock first moves is a write at its first time (see `ttl.py`).
The clock (`stores/clock.py`, public and recorded as `ttl_clock`'s spellings) is
`Clock.PROCESSING_TIME` (in Spark, the batch's timestamp, the same for every attempt of a
batch, as Spark's own TTL) or `Clock.WATERMARK` (`"event_time"`: the batch's watermark).
Outside Spark the owner of the store moves it (`advance_time`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from spark_statestore.stores.clock import TTL_CLOCK, Clock
from spark_statestore.validation import MAX_TIME, describe, to_millis


@dataclass(frozen=True)
class TtlSpec:
    """A positive lifetime in milliseconds and the clock it runs on."""

    duration: int
    clock: Clock = Clock.PROCESSING_TIME

    @classmethod
    def of(cls, ttl: Any, clock: Any = Clock.PROCESSING_TIME) -> "TtlSpec":
        """A checked spec (`ttl`: int ms or `timedelta`, more than 0)."""
        duration = to_millis(ttl, "ttl")
        if not 0 < duration <= MAX_TIME:
            raise ValueError(f"ttl must be more than 0 and at most {MAX_TIME} ms, got {describe(ttl)}")
        return cls(duration, TTL_CLOCK.parse(clock))

    def as_dict(self) -> dict[str, Any]:
        return {"duration": self.duration, "clock": TTL_CLOCK.record(self.clock)}

    @staticmethod
    def from_dict(name: str, data: Any) -> "TtlSpec":
        """The TTL of store `name` recorded as `data` (every field checked)."""
        if not isinstance(data, dict) or type(data.get("duration")) is not int:
            raise TypeError(f"the ttl of store {name!r} must be an object with int duration, got {describe(data)}")
        return TtlSpec.of(data["duration"], data.get("clock"))
