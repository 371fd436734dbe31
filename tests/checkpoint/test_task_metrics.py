"""The task metrics record (`TaskMetrics`): one description of every metric, whose fields
say how a batch's task records combine into the batch's row of `metrics.recent()`."""

from __future__ import annotations

import dataclasses

import pytest

from spark_statestore.partition.stats import COMBINE, MAX, SUM, PartitionMetrics, combined_fields, metric
from spark_statestore.spark.task_metrics import MAXED, SUMMED, TaskMetrics, checked_record, metric_name, summarize

# the per-batch columns notebooks, benchmarks and the driver log read
BATCH_COLUMNS = {
    "rows_written", "changelog_bytes", "spills", "cache_hits", "cache_misses", "cache_evictions", "cache_flushes",
    "dropped_records", "changelogs_applied", "restored", "kept_open", "open_seconds", "apply_seconds",
    "restore_seconds", "prepare_seconds", "uncommitted_bytes_peak",
    "rows_expired", "expiry_seconds",  # TTL stores
}


def _record(**values):
    return TaskMetrics(**values).as_dict()


def test_every_metric_has_a_rule_and_the_batch_columns_stay():
    assert all(COMBINE in f.metadata for f in dataclasses.fields(TaskMetrics))
    assert set(SUMMED) | set(MAXED) == BATCH_COLUMNS
    assert not set(SUMMED) & set(MAXED)


def test_a_batch_sums_counters_and_takes_the_maximum_of_the_rest():
    first = _record(query_id="q", batch_id=4, partition=0, rows_written=3, cache_hits=2, open_seconds=0.5,
                    uncommitted_bytes_peak=100, changelogs_downloaded=7)
    second = _record(query_id="q", batch_id=4, partition=1, attempt=1, rows_written=5, cache_hits=1,
                     open_seconds=0.25, uncommitted_bytes_peak=300, changelogs_downloaded=1)
    summary = summarize([first, second])
    assert summary["query_id"] == "q" and summary["batch_id"] == 4
    assert (summary["partitions"], summary["attempts"]) == (2, 1)
    assert (summary["rows_written"], summary["cache_hits"]) == (8, 3)
    assert (summary["open_seconds"], summary["uncommitted_bytes_peak"]) == (0.5, 300)
    assert set(summary) == {"query_id", "batch_id", "partitions", "attempts"} | BATCH_COLUMNS
    for key in SUMMED:
        assert summary[key] == first[key] + second[key], key
    for key in MAXED:
        assert summary[key] == max(first[key], second[key]), key


def test_a_task_record_takes_the_partition_metrics_and_counts_flags():
    measured = PartitionMetrics(open_seconds=0.1, kept_open=True, restored=False, rows_written=9)
    record = TaskMetrics.of(measured, batch_id=2, partition=1).as_dict()
    assert (record["kept_open"], record["restored"], record["rows_written"]) == (1, 0, 9)
    assert type(record["kept_open"]) is int
    assert list(record)[:3] == ["query_id", "batch_id", "partition"]  # the task first, in tasks()
    assert combined_fields(PartitionMetrics, SUM) == ("kept_open", "restored", "changelogs_applied",
                                                      "changelog_bytes", "rows_written", "spills", "rows_expired")


def test_metric_names_are_checked():
    assert metric_name("rows_written") == "rows_written"
    with pytest.raises(ValueError, match="no metric 'changelog_records'"):
        metric_name("changelog_records")
    with pytest.raises(ValueError, match="combine must be 'sum', 'max' or None, got 'last'"):
        metric(0, "last")
    assert MAX == "max"


def test_a_record_read_back_is_checked_field_by_field():
    """Records come back from files anyone could have written: each field must be there,
    with its type (flags as 0/1), and no other."""
    record = TaskMetrics.of(PartitionMetrics(kept_open=True), batch_id=1, partition=0).as_dict()
    assert checked_record(dict(record)) == record
    for change, message in [
        ({"rows_written": 1.5}, "has rows_written 1.5, expected int"),
        ({"kept_open": True}, "has kept_open True, expected bool"),  # as_dict makes 0/1
        ({"query_id": 7}, "has query_id 7, expected str | None"),
        ({"open_seconds": "0.1"}, "has open_seconds '0.1', expected float"),
        ({"extra": 1}, "unknown \\['extra'\\]"),
    ]:
        with pytest.raises(ValueError, match=message):
            checked_record({**record, **change})
    with pytest.raises(ValueError, match="missing \\['watermark'\\]"):
        checked_record({k: v for k, v in record.items() if k != "watermark"})
