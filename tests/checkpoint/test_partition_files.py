"""The kinds of a partition's durable files in one table, and one listing of the partition
(`checkpoint/files.py`): every durable byte counts in one of `inspect`'s totals (the
metrics records counted in none), and retention, history, the metrics records and
`inspect` each list the partition's root once (retention listed it three times)."""

from __future__ import annotations

import os
import time
from dataclasses import asdict

import pyarrow.fs as pafs
import pytest

import partition_workload as wl
from spark_statestore.checkpoint import files
from spark_statestore.checkpoint.filesystem import TEMP_PREFIX, DurableDir
from spark_statestore.checkpoint.names import partition_dir
from spark_statestore.checkpoint.retention import retain
from spark_statestore.partition import Layout, PartitionOptions, PartitionState, WorkerResources, record_query_layout
from spark_statestore.partition.history import DurableHistory
from spark_statestore.partition.reading import StateLocation
from spark_statestore.partition.task_records import TaskRecords, read_partition_records
from spark_statestore.stores.spec import StoreSpec
from spark_statestore.tools.inspection import inspect_state, partition_facts, render

SPECS = [StoreSpec.key_value("kv")]
BATCHES = 7


@pytest.fixture
def location(tmp_path):
    """A partition with changelogs, snapshots of 1, 3 and 5, and each attempt's metrics record."""
    location = str(tmp_path / "checkpoint")
    record_query_layout(location, Layout.of(SPECS, 1))
    for batch in range(BATCHES):
        with PartitionState(location, 0, SPECS, WorkerResources(str(tmp_path / "local")),
                            PartitionOptions(snapshot_interval=2, min_batches_to_retain=100)) as state:
            state.open(batch)
            state.store("kv").put(f"k{batch}".encode(), b"v" * 100)
            state.prepare()
            state.keep_metrics({"batch": batch})
            state.wait_for_snapshots()
    return location


class CountingListings(wl.LocalAsObjectStore):
    """Counts the listings of each folder."""

    def __init__(self) -> None:
        super().__init__()
        self.listed: list[str] = []

    def get_file_info_selector(self, selector):
        self.listed.append(selector.base_dir.rstrip("/"))
        return super().get_file_info_selector(selector)


def _bytes_on_disk(root: str) -> int:
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, names in os.walk(root) for f in names)


def test_every_durable_byte_counts_in_one_of_inspects_totals(location):
    (facts,) = inspect_state(location).partitions
    totals = {key: value for key, value in asdict(facts).items() if key.endswith("_bytes")}
    assert sum(totals.values()) == _bytes_on_disk(partition_dir(location, 0)), totals
    records = [f for f in os.listdir(partition_dir(location, 0)) if f.endswith(".metrics")]
    assert len(records) == BATCHES
    assert totals["metrics_bytes"] == sum(os.path.getsize(os.path.join(partition_dir(location, 0), f)) for f in records)
    assert "metrics bytes" in render(inspect_state(location))


def test_retention_lists_the_partition_once_and_deletes_every_kind_below_its_base(location):
    handler = CountingListings()
    root = partition_dir(location, 0)
    stale = os.path.join(root, f"{TEMP_PREFIX}crashed-publish")
    with open(stale, "wb") as f:
        f.write(b"half")
    os.utime(stale, (time.time() - 7200, time.time() - 7200))
    removed = retain(DurableDir(pafs.PyFileSystem(handler), root), BATCHES - 1, 2, 0)
    assert handler.listed.count(root) == 1, handler.listed
    assert removed["changelogs"] == 5 and removed["snapshots"] == 2  # snapshot 5 stands in for 0..4
    left = sorted(os.listdir(root))
    assert [n for n in left if not n.endswith(".metrics")] == ["5.changelog", "6.changelog", "snapshots", "sst"]
    assert [n.split(".")[0] for n in left if n.endswith(".metrics")] == ["5", "6"]
    snapshots = os.path.join(root, "snapshots")  # an object store's folders stay: empty
    assert [n for n in sorted(os.listdir(snapshots)) if n.isdigit() and os.listdir(os.path.join(snapshots, n))] == ["5"]
    assert [n for n in os.listdir(snapshots) if n.endswith(".manifest")] == ["5.manifest"]
    assert not os.path.exists(stale)


def test_each_reader_of_a_partition_lists_its_root_once(location):
    handler = CountingListings()
    fs = pafs.PyFileSystem(handler)
    root = partition_dir(location, 0)
    durable = DurableDir(fs, root)
    readers = {
        "history": lambda: DurableHistory.read(durable, 0, BATCHES - 1),
        "metrics records": lambda: read_partition_records(durable, 0, BATCHES - 1, set(range(BATCHES)), TaskRecords()),
        "inspect": lambda: partition_facts(StateLocation.open(location, fs), 0),
    }
    for what, read in readers.items():
        handler.listed.clear()
        read()
        assert handler.listed.count(root) == 1, f"{what}: {handler.listed}"


def test_the_table_names_every_kind_once_and_parses_what_it_names():
    assert len({kind.name for kind in files.KINDS}) == len(files.KINDS)
    assert set(files.TOTALS) == {"changelog", "snapshot", "metrics"}
    for kind, name, key in [
        (files.CHANGELOG, "12.changelog", 12),
        (files.ASIDE, "12.00000000000000ab.changelog", (12, 0xAB)),
        (files.METRICS, "12.00000000000000ab.metrics", (12, 0xAB)),
        (files.MANIFEST, "12.manifest", 12),
        (files.TEMPORARY, f"{TEMP_PREFIX}x-12.changelog", f"{TEMP_PREFIX}x-12.changelog"),
    ]:
        assert kind.parse(name) == key
        assert [k for k in files.KINDS if k.folder == kind.folder and k.parse(name) is not None] == [kind], name
    with pytest.raises(ValueError, match="retention does not delete shared SST files by version"):
        files.PartitionFiles.read(DurableDir(pafs.LocalFileSystem(), "/nonexistent")).below(3, files.SHARED)
