"""`Clock`: what moves a store's time, one member per clock for every store that has one.

* `RECORDS`: the records put (a window or session store's stream time, KIP-428: up to
  each record's window start or session end).
* `WATERMARK`: event time as Spark's watermark gives it: in Spark, the batch's watermark,
  the same for every partition and attempt, so records never expire each other in the
  order they happen to be processed; outside Spark the store's owner moves it
  (`advance_stream_time`, `advance_time`).
* `PROCESSING_TIME`: in Spark, the batch's timestamp (as Spark's own TTL); outside Spark
  the store's owner moves it (`advance_time`).

Each parameter that takes a clock is a `ClockParam`: the clocks it takes under their
accepted spellings (public since their release), and the spelling each is recorded with
in durable state (specs in layouts, changelog headers and databases), which stays what
older versions wrote: a stream-time `clock` records the watermark as `"external"`, a
`ttl_clock` as `"event_time"`.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from spark_statestore.validation import describe


class Clock(enum.Enum):
    """What moves a store's time (see module docstring)."""

    RECORDS = "records"
    WATERMARK = "watermark"
    PROCESSING_TIME = "processing_time"


@dataclass(frozen=True)
class ClockParam:
    """A parameter that takes a clock: `accepted` spellings (in the order errors list them)
    and the `recorded` spelling of each clock it takes (its durable form)."""

    name: str
    accepted: Mapping[str, Clock]
    recorded: Mapping[Clock, str]

    def parse(self, value: Any) -> Clock:
        """The clock `value` names (a `Clock` or a spelling, any case); anything else is a
        ValueError naming the parameter, the value and the accepted spellings."""
        if isinstance(value, Clock) and value in self.recorded:
            return value
        if isinstance(value, str) and value.strip().lower() in self.accepted:
            return self.accepted[value.strip().lower()]
        allowed = ", ".join(repr(spelling) for spelling in self.accepted)
        raise ValueError(f"{self.name} must be one of {allowed}, got {describe(value)}")

    def record(self, clock: Clock) -> str:
        """The durable spelling of `clock`."""
        return self.recorded[clock]


STREAM_CLOCK = ClockParam(
    "clock",
    {"records": Clock.RECORDS, "watermark": Clock.WATERMARK, "external": Clock.WATERMARK},
    {Clock.RECORDS: "records", Clock.WATERMARK: "external"},
)
"""What moves a window or session store's observed stream time."""

TTL_CLOCK = ClockParam(
    "ttl_clock",
    {"processing_time": Clock.PROCESSING_TIME, "event_time": Clock.WATERMARK},
    {Clock.PROCESSING_TIME: "processing_time", Clock.WATERMARK: "event_time"},
)
"""What moves a TTL store's clock."""
