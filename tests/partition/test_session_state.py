"""A session store in durable partition state, without Spark: `inspect`, `read` (records and
changes), `verify` and `rescale` of the CLI, across snapshots and changelogs, with expiry on the
watermark clock."""

from __future__ import annotations

import io
import json
import os

from spark_statestore import murmur3
from spark_statestore.partition import (
    Layout,
    PartitionOptions,
    PartitionState,
    WorkerResources,
    record_query_layout,
)
from spark_statestore.partition.reading import StateLocation, VersionReader
from spark_statestore.serde import Serdes
from spark_statestore.spark.session import Session
from spark_statestore.stores.persistent_window import STREAM_TIME_KEY
from spark_statestore.stores.session_layout import end_index_key, session_key
from spark_statestore.tools.cli import main

GAP = 10
DECLARATION = Session("sessions", Serdes.string(), Serdes.int64(), gap=GAP, retention=4 * GAP)
BATCHES = [[("a", 1), ("a", 5), ("b", 3)], [("a", 12), ("c", 40)], [("a", 30), ("b", 60)], [("d", 70)]]


def _run(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    return main(list(argv), out), out.getvalue()


def test_the_cli_reads_a_session_store_at_each_batch(tmp_path):
    location = str(tmp_path / "checkpoint")
    os.makedirs(os.path.join(location, "commits"))
    spec = DECLARATION.spec()
    record_query_layout(location, Layout.of([spec], 1))
    for b, records in enumerate(BATCHES):
        state = PartitionState(
            location,
            0,
            [spec],
            WorkerResources(str(tmp_path / "local")),
            PartitionOptions(snapshot_interval=2),
        )
        state.open(b)
        sessions = DECLARATION.typed(state.store("sessions"))
        for key, time in records:
            sessions.merge(key, time, 1, lambda x, y: x + y)
        spec.store_kind.at_watermark(spec, state.store("sessions"), max(0, max(t for _, t in records) - GAP))
        state.prepare()
        state.close()
        state.wait_for_snapshots()
        with open(os.path.join(location, "commits", str(b)), "w") as f:
            f.write("v1\n{}\n")
    code, text = _run("inspect", location)
    assert code == 0 and "sessions: session store (retention 40, clock external)" in text, text
    code, text = _run("read", location, "--store", "sessions", "--batch", "1", "--format", "json")
    rows = [json.loads(line) for line in text.splitlines()]
    got = {(r["key"], r["session_start"], r["session_end"]): r["value"] for r in rows}
    assert code == 0 and got == {("a", 1, 12): 3, ("b", 3, 3): 1, ("c", 40, 40): 1}
    code, text = _run("read", location, "--store", "sessions", "--batch", "3", "--format", "json")
    got = {(r["key"], r["session_start"], r["session_end"]) for r in map(json.loads, text.splitlines())}
    assert got == {("a", 30, 30), ("c", 40, 40), ("b", 60, 60), ("d", 70, 70)}  # watermark 60: live after 20
    code, text = _run(
        "read", location, "--store", "sessions", "--changes", "--start", "2", "--end", "2", "--format", "json"
    )
    changes = {
        (r["change"], r["key"], r["session_start"], r["session_end"])
        for r in map(json.loads, text.splitlines())
    }
    # a record too far from (a, 1, 12) starts its own session; watermark 50 expires (b, 3, 3)
    assert changes == {("put", "a", 30, 30), ("put", "b", 60, 60), ("delete", "b", 3, 3)}, changes
    code, text = _run("verify", location)
    assert code == 0, text
    code, text = _run("rescale", location, "3")
    assert code == 0 and "from 1 to 3 partitions at batch 3" in text, text
    moved = StateLocation.open(location).at_batch(4)  # the partitions the next batch runs on
    found = set()
    for p in moved.partitions:
        with VersionReader(moved, p, 3) as reader:
            for key, _, start, end in reader.records(spec):
                assert murmur3.partition_of([key.decode()], 3) == p
                found.add((key.decode(), start, end))
    assert found == got and len(moved.partitions) > 1


def test_a_sessions_index_entry_goes_where_its_key_goes():
    """Rescaling routes raw keys by `user_key`: a session's index entry by end has its key."""
    spec = DECLARATION.spec()
    kind = spec.store_kind
    for key in (b"", b"a\x00\x01", b"\xff"):
        assert kind.user_key(spec, session_key(key, 3, 9)) == key
        assert kind.user_key(spec, end_index_key(key, 3, 9)) == key
    assert kind.user_key(spec, STREAM_TIME_KEY) is None  # bookkeeping: a copy in every partition
