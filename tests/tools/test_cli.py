"""`python -m spark_statestore inspect | read | verify` on real durable state: what each
prints matches the state, verify finds every damaged file (exit code 1) and errors name
the option or path (exit code 2)."""

from __future__ import annotations

import csv
import io
import json
import os
import re
import subprocess
import sys

import pytest

from spark_statestore.checkpoint.names import SHARED
from spark_statestore.partition import Layout, PartitionOptions, PartitionState, WorkerResources, record_query_layout
from spark_statestore.serde import serde_for
from spark_statestore.stores.spec import StoreSpec
from spark_statestore.stores.typed import TypedKeyValueStore, TypedWindowStore
from spark_statestore.tools.cli import main

SPECS = [
    StoreSpec.key_value("totals", key_serde="string", value_serde="int64"),
    StoreSpec.window("counts", 1000, 100, key_serde="string", value_serde="int64", segment_interval=500),
]
PARTITIONS = 2
BATCHES = 4


def _truth(batch: int) -> tuple[dict, dict]:
    """Every partition's totals and window counts after `batch` (the workload's reference)."""
    totals: dict = {}
    counts: dict = {}
    for b in range(batch + 1):
        for p in range(PARTITIONS):
            for i in range(5):
                key = f"p{p}-k{(b + i) % 4}"
                totals[(p, key)] = totals.get((p, key), 0) + i
                counts[(p, key, b * 100)] = counts.get((p, key, b * 100), 0) + 1
            totals.pop((p, f"p{p}-k{b % 4}"), None) if b == 2 else None
    return totals, counts


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    root = tmp_path_factory.mktemp("cli")
    location = str(root / "checkpoint")
    os.makedirs(os.path.join(location, "commits"))
    record_query_layout(location, Layout.of(SPECS, PARTITIONS))
    for b in range(BATCHES):
        for p in range(PARTITIONS):
            resources = WorkerResources(str(root / f"local-{p}"))
            state = PartitionState(location, p, SPECS, resources, PartitionOptions(snapshot_interval=2))
            state.open(b)
            string, int64 = serde_for("string"), serde_for("int64")
            totals = TypedKeyValueStore(state.store("totals"), string, int64)
            counts = TypedWindowStore(state.store("counts"), string, int64)
            for i in range(5):
                key = f"p{p}-k{(b + i) % 4}"
                totals.put(key, (totals.get(key) or 0) + i)
                counts.put(key, (counts.get(key, b * 100) or 0) + 1, b * 100)
            if b == 2:
                totals.delete(f"p{p}-k{b % 4}")
            state.prepare()
            state.close()
            state.wait_for_snapshots()
        with open(os.path.join(location, "commits", str(b)), "w") as f:
            f.write("v1\n{}\n")
    return location


def _run(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    return main(list(argv), out), out.getvalue()


def test_inspect_reports_stores_partitions_versions_and_sizes(checkpoint):
    code, text = _run("inspect", checkpoint)
    assert code == 0
    assert "totals: key-value store; key string, value int64" in text
    assert "counts: window store (size 100, retention 1000" in text
    assert "committed batch: 3" in text and "partitions: 2 with state (partition count: 2)" in text
    code, raw = _run("inspect", checkpoint, "--json")
    facts = json.loads(raw)
    for p in facts["partitions"]:
        durable = os.path.join(checkpoint, "statestore", str(p["partition"]))
        on_disk = sorted(int(n.split(".")[0]) for n in os.listdir(durable) if n.endswith(".changelog"))
        assert p["changelogs"] == on_disk
        assert p["changelog_bytes"] == sum(os.path.getsize(os.path.join(durable, f"{v}.changelog")) for v in on_disk)
        assert p["snapshots"] and p["snapshot_bytes"] > 0


@pytest.mark.parametrize("batch", [1, 2, 3])
def test_read_records_as_of_a_batch_in_csv_and_json(checkpoint, batch):
    totals, counts = _truth(batch)
    code, text = _run("read", checkpoint, "--store", "totals", "--batch", str(batch))
    assert code == 0
    rows = list(csv.DictReader(io.StringIO(text)))
    assert {(int(r["partition"]), r["key"]): int(r["value"]) for r in rows} == totals
    code, text = _run("read", checkpoint, "--store", "counts", "--batch", str(batch), "--format", "json")
    rows = [json.loads(line) for line in text.splitlines()]
    assert {(r["partition"], r["key"], r["window_start"]): r["value"] for r in rows} == counts
    assert all(r["window_end"] == r["window_start"] + 100 for r in rows)


def test_read_changes_of_a_batch_range(checkpoint):
    code, text = _run("read", checkpoint, "--store", "totals", "--changes", "--start", "2", "--end", "2",
                      "--partition", "1", "--format", "json")
    assert code == 0
    rows = [json.loads(line) for line in text.splitlines()]
    assert {r["batch_id"] for r in rows} == {2} and {r["partition"] for r in rows} == {1}
    assert {"change": "delete", "key": "p1-k2", "value": None} in [
        {k: r[k] for k in ("change", "key", "value")} for r in rows
    ]
    after, _ = _truth(2)
    puts = {r["key"]: r["value"] for r in rows if r["change"] == "put"}
    assert puts == {key: value for (p, key), value in after.items() if p == 1 and key in puts}
    assert len(puts) == 3  # keys k3, k0, k1 of partition 1 written in batch 2 (k2 deleted)


def test_read_changes_comes_in_batch_order_across_partitions(checkpoint):
    """A range over several partitions is in batch order (then partition), not every batch of
    partition 0 before partition 1's: what a user replaying the changes needs."""
    code, text = _run("read", checkpoint, "--store", "totals", "--changes", "--start", "0", "--format", "json")
    assert code == 0
    order = [(r["batch_id"], r["partition"]) for r in map(json.loads, text.splitlines())]
    assert order == sorted(order)
    assert {b for b, _ in order} == set(range(BATCHES)) and {p for _, p in order} == set(range(PARTITIONS))


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["read", "{cp}"], r"--store is needed: .* has stores \['counts', 'totals'\]"),
        (["read", "{cp}", "--store", "nope"], r"--store 'nope': .* has stores"),
        (["read", "{cp}", "--store", "totals", "--batch", "9"], r"--batch 9: the committed batches are 0..3"),
        (["read", "{cp}", "--store", "totals", "--partition", "5"], r"--partition 5: .* has partitions \[0, 1\]"),
        (["read", "{cp}", "--store", "totals", "--changes"], r"--changes needs --start"),
        (["read", "{cp}", "--store", "totals", "--changes", "--start", "3", "--end", "7"], r"--start 3 --end 7"),
        (["read", "{cp}", "--store", "totals", "--changes", "--start", "0", "--batch", "1"], r"cannot go with --batch"),
        (["read", "{cp}", "--store", "totals", "--changes", "--start", "0", "--uncommitted"], r"or --uncommitted"),
        (["inspect", "{cp}/nothing-here"], r"there is no spark_statestore state under .*nothing-here"),
    ],
)
def test_usage_errors_name_the_option_and_exit_2(checkpoint, capsys, argv, message):
    code, _ = _run(*[a.format(cp=checkpoint) for a in argv])
    assert code == 2
    assert re.search(message, capsys.readouterr().err)


def test_verify_passes_a_sound_state_and_names_each_damaged_file(checkpoint, tmp_path):
    code, text = _run("verify", checkpoint)
    assert code == 0 and text.rstrip().endswith("OK"), text
    assert "2 partitions" in text and "2 committed versions rebuilt" in text
    damaged = str(tmp_path / "damaged")
    subprocess.run(["cp", "-r", checkpoint, damaged], check=True)
    p0, p1 = (os.path.join(damaged, "statestore", str(p)) for p in (0, 1))
    with open(os.path.join(p0, "3.changelog"), "r+b") as f:  # a flipped byte in the newest changelog
        f.seek(40)
        byte = f.read(1)
        f.seek(40)
        f.write(bytes([byte[0] ^ 1]))
    sst = sorted(os.listdir(os.path.join(p1, SHARED)))[0]  # a shared SST file of a snapshot, truncated
    with open(os.path.join(p1, SHARED, sst), "r+b") as f:
        f.truncate(10)
    code, raw = _run("verify", damaged, "--json")
    report = json.loads(raw)
    assert code == 1 and not report["ok"]
    where = {(p["partition"], p["what"].split(" ")[0]) for p in report["problems"]}
    assert (0, "changelog") in where and (0, "committed") in where  # the file, and the version it breaks
    assert (1, "snapshot") in where
    assert any("3.changelog" in p["what"] for p in report["problems"])
    with open(os.path.join(damaged, "statestore", "_layout"), "w") as f:
        f.write("{not json")
    code, text = _run("verify", damaged)
    assert code == 1 and "PROBLEM the state's layout" in text


def test_a_partition_whose_files_are_gone_is_a_problem_not_a_partition_fewer(checkpoint, tmp_path, capsys):
    damaged = str(tmp_path / "gone")
    subprocess.run(["cp", "-r", checkpoint, damaged], check=True)
    subprocess.run(["rm", "-r", os.path.join(damaged, "statestore", "1")], check=True)
    code, raw = _run("verify", damaged, "--json")
    report = json.loads(raw)
    assert code == 1 and report["partitions"] == 2
    assert [(p["partition"], p["what"].split(" ")[0]) for p in report["problems"]] == [(1, "committed")]
    code, _ = _run("read", damaged, "--store", "totals")
    assert code == 2 and "version 3 of partition 1" in capsys.readouterr().err
    code, text = _run("read", damaged, "--store", "totals", "--partition", "0")
    assert code == 0 and "p0-k" in text and "p1-k" not in text


def test_the_module_runs_from_the_command_line(checkpoint):
    done = subprocess.run([sys.executable, "-m", "spark_statestore", "verify", checkpoint], capture_output=True, text=True)
    assert done.returncode == 0 and "OK" in done.stdout, done.stderr
    helped = subprocess.run([sys.executable, "-m", "spark_statestore", "read", "--help"], capture_output=True, text=True)
    assert helped.returncode == 0 and "--changes" in helped.stdout
