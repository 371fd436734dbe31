"""The early-trigger governor: the driver-side decision to start a query's next
micro-batch as soon as the current one ends (KIP-892's early commit, the way Spark can).

Kafka Streams commits a task early when its uncommitted bytes pass
`statestore.uncommitted.max.bytes`. Spark cannot end a running micro-batch, but a
`processingTime` query waits between batches, and the governor cuts that wait short for
the next batch whenever a batch crosses `spark.statestore.uncommitted.maxBytes`, so the
transactions of each batch stay small under a burst.

Inputs, however they are delivered: in-flight crossing signals (`on_signal`, from the
signal channel while the batch runs) and end-of-batch reports (`on_batch_end`, each
task's peak uncommitted bytes). Rule: the first crossing of a batch (in flight or at its
end) wakes its query once through the shim; the clock remembers a wake that arrives
while the batch still runs, so the next batch starts when this one ends. Batches that
keep crossing keep being followed at once; the first batch that stays under the limit
wakes nobody, so the configured interval comes back by itself. Each early trigger is
logged once with its reason and kept per batch for the metrics (`batch_metrics`).

Where the shim is unavailable the governor says once (WARN) that early triggers are off
and why; for a query whose trigger never waits (`availableNow`, `once`, ...) it says
once that there is nothing to do.
"""

from __future__ import annotations

import collections
import logging
import threading
from dataclasses import dataclass
from typing import Mapping, Protocol

from spark_statestore.spark.driver.jvm import QueryTrigger, ShimStatus
from spark_statestore.spark.driver.settings import EARLY_TRIGGER_ENABLED
from spark_statestore.spark.signals import CrossingSignal

log = logging.getLogger("spark_statestore.spark.driver.governor")



@dataclass(frozen=True)
class BatchReport:
    """The end of a micro-batch: each task's peak uncommitted bytes by partition, and how
    long the batch's input had accumulated (from the previous batch's start to its own;
    None when unknown)."""

    query_id: str
    batch_id: int
    peaks: Mapping[int, int]
    limit: int
    accumulated_ms: int | None = None


@dataclass(frozen=True)
class EarlyTrigger:
    """One batch that crossed the limit and had its next batch started early: where it was
    first seen (`in_flight` or `end_of_batch`), by which partition, with how many bytes."""

    query_id: str
    batch_id: int
    source: str
    partition: int
    uncommitted_bytes: int
    limit: int
    woken: bool

    @property
    def reason(self) -> str:
        if self.source == "projected":
            return (
                f"partition {self.partition} would reach {self.uncommitted_bytes} uncommitted bytes > limit "
                f"{self.limit} over a whole trigger interval (projected from an early batch)"
            )
        return (
            f"partition {self.partition} had {self.uncommitted_bytes} uncommitted bytes > limit {self.limit} "
            f"({self.source.replace('_', ' ')})"
        )


class Shim(Protocol):
    """How the governor wakes queries (`spark_statestore.spark.driver.jvm.SessionShim`)."""

    status: ShimStatus

    def wake(self, query_id: str) -> bool: ...

    def trigger(self, query_id: str) -> QueryTrigger | None: ...


class EarlyTriggerGovernor:
    """Decides, per query and batch, whether the next batch starts early (module docstring).
    Thread-safe: signals and reports may arrive on different threads."""

    def __init__(self, enabled: bool, shim: Shim, keep_batches: int = 1000) -> None:
        self.enabled = enabled
        self.shim = shim
        self.active = enabled and shim.status.available
        if not enabled:
            log.info("spark_statestore early triggers are off: %s=false", EARLY_TRIGGER_ENABLED)
        elif not shim.status.available:
            log.warning(
                "spark_statestore early triggers are off: %s. Batches that pass "
                "spark.statestore.uncommitted.maxBytes spill and wait out the trigger interval.",
                shim.status.reason,
            )
        self._lock = threading.Lock()
        self._decided: collections.OrderedDict[tuple[str, int], EarlyTrigger | None] = collections.OrderedDict()
        self._keep = keep_batches
        self._explained: set[tuple[str, str]] = set()

    def on_signal(self, signal: CrossingSignal) -> bool:
        """A task crossed the limit while its batch runs. True if this woke the query."""
        return self._crossing(
            signal.query_id, signal.batch_id, "in_flight", signal.partition, signal.uncommitted_bytes, signal.limit
        )

    def on_batch_end(self, report: BatchReport) -> bool:
        """A batch ended; its largest task peak decides. True if this woke the query.

        A batch that itself stayed under the limit still keeps the next one early while
        the previous batch was started early and the input keeps coming as fast: its peak,
        scaled from the time its input accumulated to a whole trigger interval, would
        cross (so a burst is drained in small batches instead of waiting out an interval
        that fills a large one)."""
        if not report.peaks:
            return False
        partition, peak = max(report.peaks.items(), key=lambda item: (item[1], -item[0]))
        if self._crossing(report.query_id, report.batch_id, "end_of_batch", partition, peak, report.limit):
            return True
        projected = self._projected(report, peak)
        if projected is None:
            return False
        return self._crossing(report.query_id, report.batch_id, "projected", partition, projected, report.limit)

    def _projected(self, report: BatchReport, peak: int) -> int | None:
        """The peak a whole interval of input would give, while in a run of early batches."""
        with self._lock:
            previous = self._decided.get((report.query_id, report.batch_id - 1))
        if previous is None or not previous.woken or not report.accumulated_ms or report.accumulated_ms <= 0:
            return None
        trigger = self.shim.trigger(report.query_id)
        if trigger is None or not trigger.wakeable or trigger.interval_ms <= report.accumulated_ms:
            return None
        return peak * trigger.interval_ms // report.accumulated_ms

    def early_triggers(self, query_id: str | None = None) -> list[EarlyTrigger]:
        """The early triggers kept (the latest `keep_batches` decisions), oldest first."""
        with self._lock:
            found = [t for t in self._decided.values() if t is not None]
        return [t for t in found if query_id is None or t.query_id == query_id]

    def batch_metrics(self, query_id: str, batch_id: int) -> dict:
        """`early_triggers` (0 or 1: the batch after this one started early) and
        `early_trigger_reason` of one batch, for the per-batch metrics."""
        with self._lock:
            trigger = self._decided.get((query_id, batch_id))
        return {
            "early_triggers": int(trigger is not None and trigger.woken),
            "early_trigger_reason": trigger.reason if trigger is not None else None,
        }

    def _crossing(self, query_id: str, batch_id: int, source: str, partition: int, size: int, limit: int) -> bool:
        if not self.active or limit < 0 or size <= limit:
            return False
        key = (query_id, batch_id)
        with self._lock:
            if key in self._decided:
                return False  # one decision per batch
            self._remember(key, None)
        trigger = self.shim.trigger(query_id)
        if trigger is None or not trigger.wakeable:
            self._explain_once(query_id, trigger)
            return False
        woken = self.shim.wake(query_id)
        decision = EarlyTrigger(query_id, batch_id, source, partition, size, limit, woken)
        with self._lock:
            self._remember(key, decision)
        if woken:
            log.info(
                "spark_statestore early trigger: query %s batch %d: %s; the next batch starts when this one ends",
                query_id, batch_id, decision.reason,
            )
        else:
            log.warning("spark_statestore early trigger: query %s batch %d crossed the limit (%s) but could "
                        "not be woken (it is no longer running)", query_id, batch_id, decision.reason)
        return woken

    def _remember(self, key: tuple[str, int], decision: EarlyTrigger | None) -> None:
        self._decided[key] = decision
        while len(self._decided) > self._keep:
            self._decided.popitem(last=False)

    def _explain_once(self, query_id: str, trigger: QueryTrigger | None) -> None:
        """Say once per query and kind why its crossings start nothing early."""
        kind = trigger.kind if trigger is not None else "unseen"
        with self._lock:
            if (query_id, kind) in self._explained:
                return
            self._explained.add((query_id, kind))
        if trigger is None:
            log.warning(
                "spark_statestore early triggers are off for query %s: it started before the early-trigger "
                "listener was active (restart the query to enable them)", query_id,
            )
        else:
            log.info(
                "spark_statestore early triggers: nothing to do for query %s (%s trigger): %s",
                query_id, trigger.kind, trigger.reason,
            )
