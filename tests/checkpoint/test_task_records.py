"""Metrics records kept with the changelogs and read back without Spark (no SparkContext:
as a Spark Connect client or a new driver after a restart reads them): the record of the
attempt whose changelog is durable, killed and crafted files, retention, and the driver's
per-batch facts (`_batches/<N>.json`)."""

from __future__ import annotations

import json
import logging
import os
import re

import pandas as pd
import pytest

import partition_workload as wl
from spark_statestore.checkpoint.names import batch_facts_name, commits_dir, metrics_name, statestore_dir
from spark_statestore.checkpoint.retention import retain
from spark_statestore.errors import AttemptSupersededError
from spark_statestore.faults import injected
from spark_statestore.partition.layout import Layout, record_query_layout
from spark_statestore.partition.reading import NoStateError
from spark_statestore.partition.stats import PartitionMetrics
from spark_statestore.checkpoint.files import PartitionFiles
from spark_statestore.spark.batch_facts import parse_batch_facts
from spark_statestore.spark.driver.metrics import StateStoreMetrics
from spark_statestore.spark.task_metrics import TaskMetrics

pytestmark = pytest.mark.versioned  # StateStoreMetrics is the Spark layer's: checked on every pyspark minor


def _record(batch: int, partition: int = 0, task: int = 0, rows: int = 1) -> dict:
    measured = PartitionMetrics(rows_written=rows, open_seconds=0.5)
    return TaskMetrics.of(measured, query_id="q", batch_id=batch, partition=partition, task_attempt_id=task).as_dict()


def _commit(checkpoint: str, batch: int) -> None:
    os.makedirs(commits_dir(checkpoint), exist_ok=True)
    with open(os.path.join(commits_dir(checkpoint), str(batch)), "w") as f:
        f.write("v1\n{}\n")


def _attempt(checkpoint: str, local: str, batch: int, value: bytes, partition: int = 0, **options):
    """An attempt of `batch` (open, one write), not prepared yet."""
    state = wl.partition_state(checkpoint, local, partition, **options)
    state.open(batch)
    state.store("kv").put(b"attempt", value)
    return state


def _finish(state, record: dict) -> None:
    """Prepare, keep the record, close: what `TaskState.finish` does."""
    state.prepare()
    state.keep_metrics(record)
    state.close()
    state.wait_for_snapshots()


def _batch(checkpoint: str, local: str, batch: int, task: int, partition: int = 0, **options) -> None:
    _finish(_attempt(checkpoint, local, batch, b"%d" % task, partition, **options), _record(batch, partition, task))
    _commit(checkpoint, batch)


@pytest.fixture
def state_dirs(dirs):
    checkpoint, local = dirs
    record_query_layout(checkpoint, Layout.of(wl.SPECS, None))
    return checkpoint, local


def _tasks(checkpoint: str) -> list[tuple[int, int, int]]:
    return [(r["batch_id"], r["partition"], r["task_attempt_id"]) for r in StateStoreMetrics(checkpoint).task_records()]


def test_the_record_of_the_attempt_whose_changelog_is_durable_is_reported(state_dirs, tmp_path):
    checkpoint, _ = state_dirs
    first, second = (_attempt(checkpoint, str(tmp_path / n), 0, n.encode()) for n in ("A", "B"))
    _finish(first, _record(0, task=1, rows=11))
    _finish(second, _record(0, task=2, rows=22))  # publishes over A's changelog: B's is durable
    assert _tasks(checkpoint) == []  # nothing committed yet
    _commit(checkpoint, 0)
    assert _tasks(checkpoint) == [(0, 0, 2)]
    assert StateStoreMetrics(checkpoint).recent()["rows_written"].tolist() == [22]


def test_a_late_attempt_after_the_next_batch_built_on_the_winner_does_not_take_its_place(state_dirs, tmp_path):
    """A zombie attempt that passed the commit check just before the driver committed,
    and published after the next batch was built on the winner: recovery follows the
    chain to the winner's set-aside changelog, and so do the metrics."""
    checkpoint, local = state_dirs
    _batch(checkpoint, local, 0, task=0)
    zombie = _attempt(checkpoint, str(tmp_path / "Z"), 1, b"Z")
    _batch(checkpoint, local, 1, task=7)
    _batch(checkpoint, local, 2, task=8)
    marker = os.path.join(commits_dir(checkpoint), "1")
    os.rename(marker, marker + ".hidden")
    _finish(zombie, _record(1, task=99, rows=99))
    os.rename(marker + ".hidden", marker)
    assert _tasks(checkpoint) == [(0, 0, 0), (1, 0, 7), (2, 0, 8)]
    state = wl.partition_state(checkpoint, str(tmp_path / "fresh"))
    state.open(3)  # recovery agrees: batch 1's value is the winner's
    assert state.store("kv").get(b"attempt") == b"8"
    state.close()
    with pytest.raises(AttemptSupersededError):  # and after the commit a late attempt cannot publish at all
        _finish(_attempt(checkpoint, str(tmp_path / "Y"), 2, b"Y"), _record(2, task=100))


def test_a_killed_task_leaves_no_record_and_its_retry_reports(state_dirs, tmp_path):
    checkpoint, local = state_dirs
    _batch(checkpoint, local, 0, task=0)

    def kill(point: str) -> None:
        if point == "prepare:after-publish":
            raise SystemExit("killed")

    killed = _attempt(checkpoint, str(tmp_path / "K"), 1, b"K", partition=0)
    with injected(kill), pytest.raises(SystemExit):
        _finish(killed, _record(1, task=5))
    killed.close()
    durable = os.path.join(statestore_dir(checkpoint), "0")
    with open(os.path.join(durable, ".tmp-" + metrics_name(1, 12345)), "w") as f:
        f.write('{"format": 1, "partit')  # a publish cut short leaves its temporary file
    assert [v for v, _ in PartitionFiles.read(wl.partition_state(checkpoint, local).durable).records] == [0]
    _commit(checkpoint, 1)  # (what recovery sees were it committed: a changelog without a record)
    assert _tasks(checkpoint) == [(0, 0, 0)]
    os.remove(os.path.join(commits_dir(checkpoint), "1"))
    _batch(checkpoint, local, 1, task=6)  # the retry
    assert _tasks(checkpoint) == [(0, 0, 0), (1, 0, 6)]


def _winner_record_name(checkpoint: str, batch: int) -> str:
    durable = wl.partition_state(checkpoint, "unused").durable
    (name,) = [metrics_name(v, i) for v, i in PartitionFiles.read(durable).records if v == batch]
    return os.path.join(statestore_dir(checkpoint), "0", name)


CRAFTED = [
    (b"not json", "is not JSON"),
    (b"[1, 2]", "is not a metrics record"),
    (b" " * (1 << 17), "is 131072 bytes"),
    ("partition", "has partition 3, expected 0"),
    ("record:rows_written", "has rows_written '7', expected int"),
    ("record:unknown", "unknown ['evil']"),
    ("record:batch", "is of batch 9"),
]


@pytest.mark.parametrize("crafted,problem", CRAFTED)
def test_a_crafted_record_is_skipped_and_named_and_recovery_goes_on(state_dirs, tmp_path, caplog, crafted, problem):
    checkpoint, local = state_dirs
    for batch in range(3):
        _batch(checkpoint, local, batch, task=batch)
    path = _winner_record_name(checkpoint, 1)
    if isinstance(crafted, bytes):
        data = crafted
    else:
        with open(path) as f:
            document = json.load(f)
        if crafted == "partition":
            document["partition"] = 3
        elif crafted == "record:rows_written":
            document["record"]["rows_written"] = "7"
        elif crafted == "record:unknown":
            document["record"]["evil"] = 1
        else:
            document["record"]["batch_id"] = 9
        data = json.dumps(document).encode()
    with open(path, "wb") as f:
        f.write(data)
    with open(os.path.join(statestore_dir(checkpoint), "0", "0.zzzz.metrics"), "w") as f:
        f.write("a name this package never writes")
    with caplog.at_level(logging.WARNING, logger="spark_statestore.spark"):
        assert _tasks(checkpoint) == [(0, 0, 0), (2, 0, 2)]
    assert problem in caplog.text and os.path.basename(path) in caplog.text
    state = wl.partition_state(checkpoint, str(tmp_path / "fresh"))
    state.open(3)
    assert state.store("kv").get(b"attempt") == b"2"
    state.close()


def test_retention_deletes_records_with_their_changelogs_and_a_restart_reads_the_same(state_dirs):
    checkpoint, local = state_dirs
    for batch in range(6):
        _batch(checkpoint, local, batch, task=batch, snapshot_interval=1, min_batches_to_retain=2)
    state = wl.partition_state(checkpoint, local)
    retain(state.durable, 5, 2, grace_seconds=0)
    assert sorted(v for v, _ in PartitionFiles.read(state.durable).records) == [4, 5]
    before = StateStoreMetrics(checkpoint).recent(3)
    after = StateStoreMetrics(checkpoint).recent(3)  # a new object, as after a driver restart
    assert before.equals(after) and before["batch_id"].tolist() == [4, 5]
    assert StateStoreMetrics(checkpoint).recent(1)["batch_id"].tolist() == [5]


def test_printed_recent_metrics_are_a_compact_table_of_the_main_columns(state_dirs):
    """`print(metrics.recent())` shows the figures a reader looks at first, one line per
    batch under a header, instead of pandas' first and last two of about 30 columns; the
    frame keeps every column."""
    checkpoint, local = state_dirs
    for batch in range(3):
        _batch(checkpoint, local, batch, task=batch)
    recent = StateStoreMetrics(checkpoint).recent()
    lines = repr(recent).splitlines()
    header = lines[0].split()
    assert header[:4] == ["batch", "partitions", "rows", "changelog_B"]
    assert {"open_s", "prepare_s", "spills", "late_rows"} <= set(header) and "..." not in lines[0]
    assert [line.split()[0] for line in lines[1:4]] == ["0", "1", "2"]
    assert lines[4].startswith("(3 batches;") and len(lines) == 5
    assert max(map(len, lines)) <= 160
    assert str(recent) == repr(recent)
    assert "query_id" in recent.columns and "cache_flushes" in recent.columns  # every column is kept
    assert type(recent.set_index("batch_id")) is pd.DataFrame  # what is computed from it prints in full


def _facts(batch: int, **changes) -> dict:
    facts = {"query_id": "q", "run_id": "r", "batch_id": batch, "timestamp_ms": 1_700_000_000_000,
             "rows_dropped_by_watermark": 4, "early_trigger": {
                 "source": "in_flight", "partition": 0, "uncommitted_bytes": 900, "limit": 500,
                 "woken": True, "reason": "partition 0 passed 500 bytes"}}
    facts.update(changes)
    return facts


def _write_facts(checkpoint: str, batch: int, facts: object) -> None:
    path = os.path.join(statestore_dir(checkpoint), batch_facts_name(batch))
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(facts if isinstance(facts, str) else json.dumps(facts))


def test_the_drivers_batch_facts_fill_their_columns_and_absent_ones_are_null(state_dirs):
    checkpoint, local = state_dirs
    for batch in range(3):
        _batch(checkpoint, local, batch, task=batch)
    _write_facts(checkpoint, 0, _facts(0))
    _write_facts(checkpoint, 1, _facts(1, early_trigger=None, rows_dropped_by_watermark=0))
    recent = StateStoreMetrics(checkpoint).recent()
    assert recent["rows_dropped_by_watermark"].tolist()[:2] == [4, 0]
    assert recent["rows_dropped_by_watermark"].isna().tolist() == [False, False, True]
    assert recent["early_triggers"].tolist() == [1, 0, 0]
    assert recent["early_trigger_reason"].tolist() == ["partition 0 passed 500 bytes", None, None]


BAD_FACTS = [
    ("{", "is not JSON"),
    (_facts(0, batch_id=1), "has batch_id 1, but its name says batch 0"),
    (_facts(0, extra=1), "the batch has keys"),
    (_facts(0, rows_dropped_by_watermark=True), "has rows_dropped_by_watermark True, expected int"),
    (_facts(0, rows_dropped_by_watermark=-1), "(negative)"),
    (_facts(0, early_trigger={**_facts(0)["early_trigger"], "source": "guess"}), "source 'guess'"),
    (_facts(0, early_trigger={**_facts(0)["early_trigger"], "woken": 1}), "has woken 1, expected bool"),
    (_facts(0, early_trigger=[]), "has early_trigger [], expected dict"),
]


@pytest.mark.parametrize("facts,problem", BAD_FACTS)
def test_bad_batch_facts_are_skipped_and_named(state_dirs, caplog, facts, problem):
    checkpoint, local = state_dirs
    _batch(checkpoint, local, 0, task=0)
    _write_facts(checkpoint, 0, facts)
    with caplog.at_level(logging.WARNING, logger="spark_statestore.spark"):
        recent = StateStoreMetrics(checkpoint).recent()
    assert recent["rows_dropped_by_watermark"].isna().all() and recent["early_triggers"].tolist() == [0]
    assert problem in caplog.text and "_batches/0.json" in caplog.text


def test_batch_facts_parse_the_jvm_format():
    facts = parse_batch_facts(json.dumps(_facts(3)).encode(), 3)
    assert facts.early_trigger is not None and facts.early_trigger.source == "in_flight"
    assert facts.metrics() == {"rows_dropped_by_watermark": 4, "early_triggers": 1,
                               "early_trigger_reason": "partition 0 passed 500 bytes", "admission_limit": None,
                               "admission_cut_short": 0, "admission_reason": None}  # a file of an older shim
    trigger = {**_facts(3)["early_trigger"], "woken": False}
    unwoken = parse_batch_facts(json.dumps(_facts(3, early_trigger=trigger)).encode(), 3)
    assert unwoken.metrics()["early_triggers"] == 0


ADMISSION = [{"source": "FileStreamSource[a]", "unit": "files", "admitted": 4, "limit": 4, "cut_short": True,
              "reason": "kept: 4 files"},
             {"source": "KafkaMicroBatchStream[b]", "unit": "rows", "admitted": 9, "limit": 3, "cut_short": False,
              "reason": "lowered: 3 rows"}]


def test_batch_facts_carry_the_admission_limits():
    facts = parse_batch_facts(json.dumps(_facts(3, admission=ADMISSION)).encode(), 3)
    assert [a.limit for a in facts.admission] == [4, 3]
    columns = facts.metrics()
    assert (columns["admission_limit"], columns["admission_cut_short"]) == (3, 1)
    assert columns["admission_reason"] == "kept: 4 files; lowered: 3 rows"
    lifted = parse_batch_facts(json.dumps(_facts(3, admission=[{**ADMISSION[0], "limit": -1}])).encode(), 3)
    assert lifted.metrics()["admission_limit"] is None


@pytest.mark.parametrize("admission,problem", [
    ({}, "has admission {}, expected a list"),
    ([{**ADMISSION[0], "cut_short": 1}], "has cut_short 1, expected bool"),
    ([{"source": "x"}], "an admission entry has keys ['source']"),
])
def test_bad_admission_entries_name_what_is_wrong(admission, problem):
    with pytest.raises(ValueError, match=re.escape(problem)):
        parse_batch_facts(json.dumps(_facts(3, admission=admission)).encode(), 3)


def test_no_state_is_refused_and_nothing_committed_reads_as_no_batches(tmp_path, state_dirs):
    nowhere = str(tmp_path / "nowhere")
    for read in (StateStoreMetrics(nowhere).recent, StateStoreMetrics(nowhere).tasks):
        with pytest.raises(NoStateError, match=f"there is no spark_statestore state under {re.escape(nowhere)}"):
            read()
    checkpoint, local = state_dirs
    _finish(_attempt(checkpoint, local, 0, b"x"), _record(0))
    assert StateStoreMetrics(checkpoint).tasks().empty
