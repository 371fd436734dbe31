"""The driver's facts of each micro-batch, as the JVM shim's listener keeps them.

Per batch N of a query, `<checkpointLocation>/statestore/_batches/<N>.json`
(`names.batch_facts_name`) holds what only the driver knows: when the batch started, the
input rows Spark dropped behind the watermark, the early-trigger governor's decision
about the batch (or null), and the adaptive admission's limit per source for the next batch
(`limit` -1: none of ours, the source's own limit alone; absent in files of older shims)::

    {"query_id": str, "run_id": str, "batch_id": int, "timestamp_ms": int,
     "rows_dropped_by_watermark": int,
     "early_trigger": null | {"source": "in_flight" | "end_of_batch" | "projected",
                              "partition": int, "uncommitted_bytes": int, "limit": int,
                              "woken": bool, "reason": str},
     "admission": [{"source": str, "unit": "files" | "rows", "admitted": int, "limit": int,
                    "cut_short": bool, "reason": str}, ...]}

Parsing is strict (exactly these keys, these types, the batch its name says): a file that
is not one is skipped, and named with what is wrong; it never breaks the metrics.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable

import pyarrow.fs as pafs

from spark_statestore.checkpoint.filesystem import DurableDir, resolve_location, small_json
from spark_statestore.checkpoint.names import BATCHES, batch_facts_batch, batch_facts_name, statestore_dir

SOURCES = ("in_flight", "end_of_batch", "projected")
MAX_FACTS_BYTES = 1 << 16
_FACTS = {"query_id": str, "run_id": str, "batch_id": int, "timestamp_ms": int, "rows_dropped_by_watermark": int,
          "early_trigger": dict}
_ADMISSION = {"source": str, "unit": str, "admitted": int, "limit": int, "cut_short": bool, "reason": str}
_TRIGGER = {"source": str, "partition": int, "uncommitted_bytes": int, "limit": int, "woken": bool, "reason": str}


@dataclass(frozen=True)
class EarlyTrigger:
    """The governor's decision to start the batch after this one early."""

    source: str
    partition: int
    uncommitted_bytes: int
    limit: int
    woken: bool
    reason: str


@dataclass(frozen=True)
class Admission:
    """The admission limit of one source for the batch after this one."""

    source: str
    unit: str
    admitted: int
    limit: int
    cut_short: bool
    reason: str


@dataclass(frozen=True)
class BatchFacts:
    """One batch's facts (see module docstring)."""

    query_id: str
    run_id: str
    batch_id: int
    timestamp_ms: int
    rows_dropped_by_watermark: int
    early_trigger: EarlyTrigger | None
    admission: tuple[Admission, ...] = ()

    def metrics(self) -> dict:
        """The batch's columns in `metrics.recent()` (the admission limit: the smallest of the
        sources' limits for the next batch, None when none is set)."""
        trigger = self.early_trigger
        limits = [a.limit for a in self.admission if a.limit >= 0]
        return {
            "rows_dropped_by_watermark": self.rows_dropped_by_watermark,
            "early_triggers": int(trigger is not None and trigger.woken),
            "early_trigger_reason": None if trigger is None else trigger.reason,
            "admission_limit": min(limits) if limits else None,
            "admission_cut_short": int(any(a.cut_short for a in self.admission)),
            "admission_reason": "; ".join(a.reason for a in self.admission) or None,
        }


ABSENT = {"rows_dropped_by_watermark": None, "early_triggers": 0, "early_trigger_reason": None,
          "admission_limit": None, "admission_cut_short": 0, "admission_reason": None}


def _checked(document: Any, schema: dict, what: str, nullable: tuple[str, ...] = ()) -> dict:
    if not isinstance(document, dict) or set(document) != set(schema):
        keys = sorted(document) if isinstance(document, dict) else type(document).__name__
        raise ValueError(f"{what} has keys {keys}, expected {sorted(schema)}")
    for key, kind in schema.items():
        value = document[key]
        if value is None and key in nullable:
            continue
        if type(value) is not kind:  # exact: a bool is not an int here, nor an int a bool
            raise ValueError(f"{what} has {key} {value!r}, expected {kind.__name__}")
    return document


def parse_batch_facts(data: bytes, batch: int) -> BatchFacts:
    """The facts of `batch` in `data` (`ValueError` saying what is wrong)."""
    document = small_json(data, MAX_FACTS_BYTES)
    admission = document.pop("admission", []) if isinstance(document, dict) else []
    facts = _checked(document, _FACTS, "the batch", nullable=("early_trigger",))
    if not isinstance(admission, list):
        raise ValueError(f"has admission {admission!r}, expected a list")
    limits = tuple(Admission(**_checked(a, _ADMISSION, "an admission entry")) for a in admission)
    if facts["batch_id"] != batch:
        raise ValueError(f"has batch_id {facts['batch_id']}, but its name says batch {batch}")
    if facts["rows_dropped_by_watermark"] < 0:
        raise ValueError(f"has rows_dropped_by_watermark {facts['rows_dropped_by_watermark']} (negative)")
    trigger = facts["early_trigger"]
    if trigger is not None:
        trigger = EarlyTrigger(**_checked(trigger, _TRIGGER, "early_trigger"))
        if trigger.source not in SOURCES:
            raise ValueError(f"has early_trigger source {trigger.source!r}, expected one of {list(SOURCES)}")
    return BatchFacts(**{**facts, "early_trigger": trigger, "admission": limits})


def read_batch_facts(
    location: str, batches: Iterable[int], filesystem: pafs.FileSystem | None = None
) -> tuple[dict[int, BatchFacts], list[str]]:
    """The facts of those of `batches` that have a file under the checkpoint `location`,
    and the files skipped, with why."""
    fs, root = resolve_location(location, filesystem)
    durable = DurableDir(fs, statestore_dir(root))
    present = {batch_facts_batch(info.base_name): info for info in durable.list(BATCHES)}
    facts: dict[int, BatchFacts] = {}
    problems: list[str] = []
    for batch in sorted(set(batches) & set(present)):
        name = batch_facts_name(batch)
        try:
            facts[batch] = parse_batch_facts(durable.read_range(name, 0, MAX_FACTS_BYTES + 1), batch)
        except FileNotFoundError:
            continue
        except (ValueError, OSError) as e:
            problems.append(f"batch facts {durable.uri(name)} {e}: skipped")
    return facts, problems
