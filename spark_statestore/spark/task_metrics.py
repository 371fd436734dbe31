"""`TaskMetrics`: the record of one task, the one description of every metric the state
layer reports: tasks make it (`TaskState.finish`), the driver combines a batch's records
by each field's rule (`summarize`, for `metrics.recent()`), and `metrics.tasks()` shows
them as they are.

It extends the partition's `PartitionMetrics` (open, restore, apply, prepare) with what
the task knows: which task it was, the record cache's counters during the task, records
the window stores dropped, the batch's watermark. Records are kept as dicts (`as_dict()`)
next to the task's changelog (`partition.task_records`) and checked when read back
(`checked_record`).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from spark_statestore.partition.stats import MAX, SUM, PartitionMetrics, combined_fields, metric


@dataclass
class TaskIdentity:
    """Which task a record is of (its first columns in `metrics.tasks()`)."""

    query_id: str | None = metric(None, None)
    batch_id: int = metric(-1, None)
    partition: int = metric(-1, None)
    attempt: int = metric(0, None)
    task_attempt_id: int = metric(-1, None)
    operator: str = metric("", None)


@dataclass
class TaskMetrics(PartitionMetrics, TaskIdentity):
    """One task's metrics (see module docstring); fields without a rule are per task only.
    Its fields are the identity's, then the partition's, then these."""

    uncommitted_limit: int = metric(-1, None)  # spark.statestore.uncommitted.maxBytes (-1: none)
    cache_hits: int = metric(0, SUM)
    cache_misses: int = metric(0, SUM)
    cache_evictions: int = metric(0, SUM)
    cache_flushes: int = metric(0, SUM)
    dropped_records: int = metric(0, SUM)  # records the window stores dropped as late
    watermark: int = metric(-1, None)
    finished_at: float = metric(0.0, None)  # epoch seconds

    @classmethod
    def of(cls, measured: PartitionMetrics, **task: Any) -> TaskMetrics:
        """The record of a task whose partition measured `measured` (flags become 0/1,
        so that summing them counts tasks)."""
        values = {f.name: getattr(measured, f.name) for f in fields(PartitionMetrics)}
        return cls(**{k: int(v) if isinstance(v, bool) else v for k, v in values.items()}, **task)


def metric_name(name: str) -> str:
    """`name`, checked to be a field of `TaskMetrics` (for code that names metrics as
    columns: a renamed metric fails where it is named, at import)."""
    if name not in {f.name for f in fields(TaskMetrics)}:
        raise ValueError(f"no metric {name!r}; TaskMetrics has {[f.name for f in fields(TaskMetrics)]}")
    return name


_KINDS: dict[str, tuple[type, ...]] = {
    "int": (int,),
    "bool": (int,),  # flags are kept as 0/1 (`TaskMetrics.of`)
    "float": (float, int),
    "str": (str,),
    "str | None": (str, type(None)),
    "int | None": (int, type(None)),
}


def checked_record(record: dict) -> dict:
    """`record` if it is a `TaskMetrics` as `as_dict()` makes it (every field, no other,
    each of its type); else `ValueError` naming the field and the value."""
    names = [f.name for f in fields(TaskMetrics)]
    missing, unknown = [n for n in names if n not in record], sorted(set(record) - set(names))
    if missing or unknown:
        raise ValueError(f"is not a task record (missing {missing}, unknown {unknown})")
    for f in fields(TaskMetrics):
        value = record[f.name]
        if type(value) not in _KINDS[str(f.type)]:
            raise ValueError(f"has {f.name} {value!r}, expected {f.type}")
    return record


SUMMED = combined_fields(TaskMetrics, SUM)
MAXED = combined_fields(TaskMetrics, MAX)


def summarize(records: list[dict]) -> dict:
    """One batch from its task records: sums of counters and maxima of latencies over its
    partitions, by each metric's rule."""
    out: dict[str, Any] = {
        "query_id": records[0].get("query_id"),
        "batch_id": records[0]["batch_id"],
        "partitions": len(records),
        "attempts": sum(1 for r in records if r.get("attempt", 0) > 0),
    }
    for key in SUMMED:
        out[key] = sum(int(r.get(key, 0) or 0) for r in records)
    for key in MAXED:
        out[key] = max(float(r.get(key, 0) or 0) for r in records)
    return out
