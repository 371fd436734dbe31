"""TTL stores inside `PartitionState`: restore (same and fresh local directory), kept-open
copies, retried attempts, the state reader and the change feed all see exactly what the
reference model (`ttl_reference`) says an uninterrupted run has; and SIGKILLs at the
protocol's commit steps leave it so (the kill workload with `--ttl`)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest

import partition_workload as wl
from spark_statestore import ThreadCache
from spark_statestore.partition import PartitionOptions, PartitionState, WorkerResources
from spark_statestore.partition.layout import Layout, record_query_layout
from spark_statestore.partition.open_copies import OpenCopies
from spark_statestore.partition.reading import StateLocation, VersionReader, changes
from ttl_reference import TtlReference
from paths import SUPPORT

SEED = 3


def _run(checkpoint, local, batches, **kwargs):
    for batch in range(wl.last_committed(checkpoint) + 1, batches):
        state = wl.partition_state(checkpoint, local, ttl=True, snapshot_interval=3, min_batches_to_retain=20, **kwargs)
        wl.run_batch(state, SEED, batch, checkpoint)
        state.wait_for_snapshots()
        assert state.metrics.rows_expired <= wl.TTL_LIMIT
        _spark_commit(checkpoint, batch)


def _spark_commit(checkpoint, batch):
    os.makedirs(os.path.join(checkpoint, "commits"), exist_ok=True)
    with open(os.path.join(checkpoint, "commits", str(batch)), "w") as f:
        f.write("v1\n{}\n")


def _expected(batch):
    return wl.expected(SEED, batch) + wl.ttl_expected(SEED, batch)


@pytest.mark.parametrize("kept_open", [False, True])
def test_restore_kept_copies_and_retries_see_the_reference(tmp_path, kept_open):
    checkpoint, local = str(tmp_path / "ckpt"), str(tmp_path / "local")
    record_query_layout(checkpoint, Layout.of(wl.TTL_SPECS, 1))
    copies = OpenCopies(2, 3600) if kept_open else None
    cache = ThreadCache(600)
    for batch in range(14):
        if batch % 4 == 2:  # a failed attempt first: other writes, the clock moved, never prepared
            state = wl.partition_state(checkpoint, local, ttl=True, cache=cache, open_copies=copies)
            state.open(batch)
            state.advance_clocks(batch * 10, None)
            state.store("ttl").put(b"t00", b"junk")
            state.close()
        _run(checkpoint, local, batch + 1, cache=cache, open_copies=copies)
        assert wl.read_state(checkpoint, local, ttl=True, cache=cache, open_copies=copies) == _expected(batch)
        assert wl.read_state(checkpoint, str(tmp_path / f"fresh{batch}"), ttl=True) == _expected(batch)
    if copies is not None:
        copies.close()


def test_the_reader_and_the_change_feed_follow_the_reference(tmp_path):
    checkpoint, local = str(tmp_path / "ckpt"), str(tmp_path / "local")
    record_query_layout(checkpoint, Layout.of(wl.TTL_SPECS, 1))
    _run(checkpoint, local, 12, cache=ThreadCache(600))
    location = StateLocation.open(checkpoint)
    spec = location.store("ttl")
    model = TtlReference(wl.TTL, wl.TTL_LIMIT)
    records = list(changes(location, 0, spec, 0, 11))
    for batch in range(12):
        expired = set(model.advance(wl.ttl_clock(batch) or -1))
        final = dict(wl.ttl_ops(SEED, batch))
        # expired entries still stored that the batch deletes itself are expiries too
        expired |= {k for k in model.stored if model.expiry(k) <= model.now and final.get(k, b"") is None}
        for key, value in wl.ttl_ops(SEED, batch):
            model.put(key, value)
        mine = [r for r in records if r.batch_id == batch]
        assert {r.key for r in mine if r.change == "expire"} == expired - {k for k, v in final.items() if v}
        assert {(r.key, r.value) for r in mine if r.change == "put"} == {(k, v) for k, v in final.items() if v}
        assert all(r.change != "delete" or r.key not in expired for r in mine)
        with VersionReader(location, 0, batch) as reader:
            assert list(reader.records(spec)) == model.items()


def test_expiry_is_counted_and_bounded_per_batch(tmp_path):
    checkpoint, local = str(tmp_path / "ckpt"), str(tmp_path / "local")
    state = wl.partition_state(checkpoint, local, ttl=True)
    state.open(0)
    state.advance_clocks(0, None)
    state.store("ttl").put_all([(b"k%03d" % i, b"v") for i in range(10)])
    state.prepare()
    state.close()
    counts = []
    for batch in range(1, 6):
        state = wl.partition_state(checkpoint, local, ttl=True)
        state.open(batch)
        counts.append(state.advance_clocks(1000, None))
        assert list(state.store("ttl").all()) == []  # invisible at once, however many are left
        state.prepare()
        state.close()
        assert state.metrics.rows_expired == counts[-1]
    assert counts == [3, 3, 3, 1, 0]


WORKLOAD = str(SUPPORT / "partition_workload.py")
ARGS = ["--ttl", "--seed", "5", "--batches", "12", "--snapshot-interval", "3", "--retain", "3"]
ARGS += ["--limit", "300", "--apply-chunk-bytes", "200", "--cache-bytes", "4000"]


@pytest.mark.parametrize(
    "point,nth", [("prepare:after-local-write", 4), ("prepare:after-publish", 5), ("apply:after-chunk", 6), ("open:after-apply", 5), ("snapshot:after-file", 2)]
)
def test_kill_at_commit_steps(tmp_path, point, nth):
    checkpoint, local = str(tmp_path / "ckpt"), str(tmp_path / "local")
    os.makedirs(checkpoint)

    def run(env):
        proc = subprocess.run(
            [sys.executable, WORKLOAD, checkpoint, local, *ARGS], env={**os.environ, **env}, capture_output=True, text=True
        )
        last = wl.last_committed(checkpoint)
        want = wl.expected(5, last) + wl.ttl_expected(5, last)
        assert wl.read_state(checkpoint, local, ttl=True) == want
        assert wl.read_state(checkpoint, str(tmp_path / f"fresh{last}"), ttl=True) == want
        return proc

    killed = run({"SPARK_STATESTORE_FAULT": f"{point}@{nth}"})
    assert killed.returncode == -signal.SIGKILL, f"{point} was not reached: {killed.stderr[-2000:]}"
    finished = run({})
    assert finished.returncode == 0, finished.stderr[-2000:]
    assert wl.last_committed(checkpoint) == 11


def test_a_cached_ttl_store_forwards_its_users_changes(tmp_path):
    forwarded = []
    state = wl.PartitionState(
        str(tmp_path / "ckpt"),
        0,
        wl.TTL_SPECS,
        wl.WorkerResources(str(tmp_path / "local"), cache=ThreadCache(1 << 20)),
        wl.PartitionOptions(),
        on_changes=lambda name, changes: forwarded.extend((name, c) for c in changes),
    )
    for batch, writes in enumerate([[(b"a", b"1"), (b"b", b"2")], [(b"a", b"3"), (b"b", None)]]):
        state.open(batch)
        state.advance_clocks(batch * 10, None)
        state.store("ttl").put_all(writes)
        state.prepare()
        state.close()
    changes = [(c.key, c.new_value, c.old_value) for name, c in forwarded if name == "ttl"]
    assert changes == [(b"a", b"1", None), (b"b", b"2", None), (b"a", b"3", b"1"), (b"b", None, b"2")]


def test_event_time_entries_of_the_batches_before_a_watermark_live_ttl_from_the_first_one(tmp_path):
    """Spark's watermark is 0 until the query has one: the event-time clock does not move
    (None), and what those batches wrote is written at the clock's first time. The state
    reader (row and column paths, with changelogs merged or not) and the change feed agree."""
    from spark_statestore.stores.spec import StoreSpec

    checkpoint, hour, first = str(tmp_path / "ckpt"), 3_600_000, 1_700_000_000_000
    spec = StoreSpec.key_value("seen", ttl=hour, ttl_clock="event_time")
    record_query_layout(checkpoint, Layout.of([spec], 1))
    # (watermark of the batch or None, writes)
    batches = [
        (None, [(b"a", b"1"), (b"b", b"1"), (b"c", b"1")]),
        (None, [(b"a", b"2")]),
        (first, [(b"b", None), (b"d", b"1")]),  # b: a user's delete of an entry written before the watermark
        (first + hour - 1, []),
        (first + hour, []),  # a, c expire (written before the first watermark); d too (written at it)
    ]
    for batch, (watermark, writes) in enumerate(batches):
        resources = WorkerResources(str(tmp_path / "local"))
        state = PartitionState(checkpoint, 0, [spec], resources, PartitionOptions())
        state.open(batch)
        state.advance_clocks(1_000 + batch, watermark)
        state.store("seen").put_all(writes)
        state.prepare()
        state.close()
        _spark_commit(checkpoint, batch)
    location = StateLocation.open(checkpoint)
    want = {1: [(b"a", b"2"), (b"b", b"1"), (b"c", b"1")], 2: [(b"a", b"2"), (b"c", b"1"), (b"d", b"1")]}
    want[3], want[4] = want[2], []
    for batch, live in want.items():
        for merge in (0, 1000):
            with VersionReader(location, 0, batch, merge_records=merge) as reader:
                chunks = list(reader.columns(spec))
                columns = [kv for c in chunks for kv in zip(c.keys.to_pylist(), c.values.to_pylist())]
                assert columns == live and bool(reader.pending) == bool(merge), (batch, merge)
        with VersionReader(location, 0, batch) as reader:
            assert list(reader.records(spec)) == live, batch
    feed = {(r.batch_id, r.change, r.key) for r in changes(location, 0, spec, 0, 4)}
    assert {(b, k) for b, c, k in feed if c == "expire"} == {(4, b"a"), (4, b"c"), (4, b"d")}
    assert (2, "delete", b"b") in feed


def test_a_task_leaves_the_event_time_clock_unset_while_spark_has_no_watermark(tmp_path):
    """The adapters' task reads the batch's watermark from Spark's offset log: 0 there means
    the query has none yet, so an entry written then lives ttl from the first watermark."""
    from spark_statestore import Serdes
    from spark_statestore.spark import KeyValue
    from spark_statestore.spark.driver.operator import OperatorConfig
    from spark_statestore.spark.driver.settings import LOCAL_DIR, StateStoreSettings
    from spark_statestore.spark.worker.task import TaskInfo
    from spark_statestore.spark.worker.task_state import TaskState

    checkpoint = str(tmp_path / "ckpt")
    settings = StateStoreSettings.from_conf({LOCAL_DIR: str(tmp_path / "local")}.get)
    seen = KeyValue("seen", Serdes.string(), Serdes.int64(), ttl=15_000, ttl_clock="event_time")
    config = OperatorConfig(checkpoint, (seen,), settings)
    os.makedirs(os.path.join(checkpoint, "offsets"))
    got = []
    for batch, watermark in enumerate([0, 0, 6_002, 21_001, 21_002]):
        with open(os.path.join(checkpoint, "offsets", str(batch)), "w") as f:  # as Spark's driver writes it
            times = {"batchWatermarkMs": watermark, "batchTimestampMs": 1_000 + batch, "conf": {}}
            f.write(f"v1\n{json.dumps(times)}\n{{}}\n")
        state = TaskState(config, TaskInfo(batch, 0, 0, batch, "q", 1)).open()
        got.append(state["seen"].get("k"))
        if batch == 0:
            state["seen"].put("k", 1)
        state.finish()
        _spark_commit(checkpoint, batch)
    assert got == [None, 1, 1, 1, None]  # written at the first watermark, 6002: expires at 21002


def test_a_batch_time_past_the_largest_is_refused_before_any_clock_moves(tmp_path):
    from spark_statestore.stores.spec import StoreSpec

    specs = [StoreSpec.key_value("p", ttl=10), StoreSpec.key_value("e", ttl=10, ttl_clock="event_time")]
    state = PartitionState(str(tmp_path / "ckpt"), 0, specs, WorkerResources(str(tmp_path / "local")))
    state.open(0)
    state.advance_clocks(0, 0)
    state.store("p").put(b"k", b"v")
    state.store("e").put(b"k", b"v")
    with pytest.raises(ValueError, match=rf"watermark must be at most {2**63 - 1}, got {2**64}"):
        state.advance_clocks(5, 2**64)
    with pytest.raises(ValueError, match=rf"processing_time must be at most {2**63 - 1}, got {2**63}"):
        state.advance_clocks(2**63, None)
    assert (state.store("p").time, state.store("e").time) == (0, 0)  # neither moved
    assert state.advance_clocks(1000, 1000) == 2 and state.store("p").get(b"k") is None
    state.close()
