"""Durable files that are not regular files, on crafted checkpoints: a changelog that is a
FIFO, a directory, a dangling symbolic link or a link to a copy outside the checkpoint, a
`_layout` that is a FIFO, a snapshot manifest that lists no files and a `_layout` whose
partition count was edited. `verify` names each file and what is wrong (exit code 1);
reads and a writer's restore refuse them naming the file, never follow a link and never
open a FIFO (which would block them)."""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
import threading

import partition_workload as wl
import pyarrow.fs as pafs
import pytest

from spark_statestore.checkpoint.filesystem import DurableDir, NotAFileError
from spark_statestore.partition import Layout, record_query_layout
from spark_statestore.tools.cli import main

PARTITIONS, BATCHES = 2, 5


@pytest.fixture(scope="module")
def pristine(tmp_path_factory):
    """Two partitions, batches 0..4 committed, snapshots every 2 versions."""
    root = tmp_path_factory.mktemp("irregular")
    checkpoint = str(root / "checkpoint")
    record_query_layout(checkpoint, Layout.of(wl.SPECS, PARTITIONS))
    for batch in range(BATCHES):
        for partition in range(PARTITIONS):
            state = wl.partition_state(
                checkpoint, str(root / f"local-{partition}"), partition, snapshot_interval=2, partitions=PARTITIONS
            )
            state.open(batch)
            wl.apply_ops(wl.batch_ops(partition, batch), state.store("kv"), state.store("win"))
            state.prepare()
            state.close()
            state.wait_for_snapshots()
        wl.spark_commit(checkpoint, batch)
    return checkpoint


@pytest.fixture
def checkpoint(pristine, tmp_path):
    copy = str(tmp_path / "checkpoint")
    shutil.copytree(pristine, copy, symlinks=True)
    return copy


def _run(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    return main(list(argv), out), out.getvalue()


def _fifo(path: str, outside: str) -> str:
    os.remove(path)
    os.mkfifo(path)
    return "is a FIFO"


def _directory(path: str, outside: str) -> str:
    os.remove(path)
    os.mkdir(path)
    return "is a directory"


def _dangling(path: str, outside: str) -> str:
    os.remove(path)
    os.symlink(path + "-nowhere", path)
    return "which does not exist"


def _outside(path: str, outside: str) -> str:
    """A link to a good copy of the very file, outside the checkpoint (it would verify)."""
    shutil.move(path, outside)
    os.symlink(outside, path)
    return f"is a symbolic link to {outside}"


DAMAGES = {"fifo": _fifo, "directory": _directory, "dangling link": _dangling, "link outside": _outside}


def _cli(*argv: str) -> subprocess.CompletedProcess:
    """The command in a process of its own: a FIFO opened by mistake blocks it, and the
    timeout fails the test instead of hanging it."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    return subprocess.run(
        [sys.executable, "-m", "spark_statestore", *argv], capture_output=True, text=True, timeout=120, env=env
    )


@pytest.mark.parametrize("damage", list(DAMAGES))
def test_a_changelog_that_is_not_a_regular_file_is_named_by_verify_reads_and_restores(checkpoint, tmp_path, damage):
    path = os.path.join(checkpoint, "statestore", "0", "3.changelog")
    what = DAMAGES[damage](path, str(tmp_path / "outside.changelog"))
    code, raw = _run("verify", checkpoint, "--json")
    problems = json.loads(raw)["problems"]
    assert code == 1, raw
    assert [p["partition"] for p in problems] == [0], problems
    assert path in problems[0]["message"] and what in problems[0]["message"], problems
    for argv in (
        ("read", checkpoint, "--store", "kv", "--changes", "--start", "2", "--end", "4", "--partition", "0"),
        ("read", checkpoint, "--store", "kv", "--partition", "0"),
    ):
        done = _cli(*argv)
        assert done.returncode == 2 and path in done.stderr and what in done.stderr, done.stderr
        assert "not kept" not in done.stderr, done.stderr
    state = wl.partition_state(checkpoint, str(tmp_path / "new-executor"), 0, partitions=PARTITIONS)
    with pytest.raises(NotAFileError, match=what):
        state.open(BATCHES)  # a writer's restore on a new executor
    code, _ = _run("read", checkpoint, "--store", "kv", "--partition", "1")
    assert code == 0  # the other partition reads


@pytest.mark.parametrize(
    ("moved", "partition", "what"),
    [
        ("statestore/1/sst", 1, "reached through {path}, a symbolic link to {elsewhere}"),  # a snapshot's files
        ("statestore/1", 1, "{path} is a symbolic link to {elsewhere}"),  # a partition's directory
        ("statestore/_layout", None, "{path} is a symbolic link to {elsewhere}"),
    ],
)
def test_a_durable_path_linked_out_of_the_checkpoint_is_refused(checkpoint, tmp_path, moved, partition, what):
    path, elsewhere = os.path.join(checkpoint, moved), str(tmp_path / "elsewhere")
    shutil.move(path, elsewhere)
    os.symlink(elsewhere, path)
    code, raw = _run("verify", checkpoint, "--json")
    problems = json.loads(raw)["problems"]
    assert code == 1 and {p["partition"] for p in problems} == {partition}, problems
    assert all(what.format(path=path, elsewhere=elsewhere) in p["message"] for p in problems), problems


def test_a_layout_that_is_a_fifo_is_named_not_opened(checkpoint):
    layout = os.path.join(checkpoint, "statestore", "_layout")
    os.remove(layout)
    os.mkfifo(layout)
    for command in ("verify", "inspect"):
        done = _cli(command, checkpoint)
        assert done.returncode in (1, 2) and layout in done.stdout + done.stderr, done
        assert "is a FIFO" in done.stdout + done.stderr, done


def test_a_snapshot_manifest_that_lists_no_files_is_a_problem(checkpoint):
    manifest = os.path.join(checkpoint, "statestore", "0", "snapshots", "3.manifest")
    with open(manifest) as f:
        data = json.load(f)
    data["files"] = []
    with open(manifest, "w") as f:
        json.dump(data, f)
    code, raw = _run("verify", checkpoint, "--json")
    problems = json.loads(raw)["problems"]
    assert code == 1, raw
    assert [(p["partition"], p["what"]) for p in problems] == [(0, "snapshot of version 3")], problems
    assert manifest in problems[0]["message"] and "lists no files" in problems[0]["message"]
    code, text = _run("read", checkpoint, "--store", "kv")  # a read rebuilds from the changelogs
    assert code == 0 and text


@pytest.mark.parametrize("recorded", [1, 3])
def test_an_edited_partition_count_in_the_layout_is_flagged(checkpoint, recorded):
    layout = os.path.join(checkpoint, "statestore", "_layout")
    with open(layout) as f:
        data = json.load(f)
    data["partitions"] = recorded
    with open(layout, "w") as f:
        json.dump(data, f)
    code, raw = _run("verify", checkpoint, "--json")
    problems = [p for p in json.loads(raw)["problems"] if p["what"] == "the state's partition count"]
    assert code == 1 and problems, raw
    assert all(layout in p["message"] and f"records {recorded} partitions" in p["message"] for p in problems)
    assert any(f"written with {PARTITIONS}" in p["message"] for p in problems), problems


def test_a_snapshot_file_that_is_a_fifo_is_not_opened(checkpoint):
    current = os.path.join(checkpoint, "statestore", "0", "snapshots", "3", "CURRENT")
    _fifo(current, "")
    done = _cli("verify", checkpoint, "--json")
    problems = json.loads(done.stdout)["problems"]
    assert done.returncode == 1 and [(p["partition"], p["what"]) for p in problems] == [(0, "snapshot of version 3")]
    assert f"{current} is a FIFO" in problems[0]["message"], problems


@pytest.mark.parametrize("damage", ["fifo", "link outside"])
def test_a_file_replaced_after_it_was_checked_is_not_opened(checkpoint, tmp_path, monkeypatch, damage):
    """The check and the open are apart: a file swapped for a FIFO or a link in between is
    opened without blocking and without following the link, and refused."""
    durable = DurableDir(pafs.LocalFileSystem(), os.path.join(checkpoint, "statestore", "0"))
    path = durable.path("3.changelog")
    DAMAGES[damage](path, str(tmp_path / "outside.changelog"))
    monkeypatch.setattr(durable, "_regular", durable.path)  # as if it was checked before the swap
    outcome: list = []

    def read() -> None:
        try:
            durable.read_range("3.changelog", 0, 4)
        except NotAFileError as e:
            outcome.append(str(e))

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(60)  # a hang guard only: a refused open returns at once
    assert not reader.is_alive(), "the read blocked on the FIFO"
    assert outcome and path in outcome[0], outcome


def test_a_partition_count_that_spark_s_offset_log_contradicts_is_a_problem(checkpoint):
    offsets = os.path.join(checkpoint, "offsets")
    os.makedirs(offsets)
    with open(os.path.join(offsets, "4"), "w") as f:
        f.write('v1\n{"conf": {"spark.sql.shuffle.partitions": "3"}}\n{}\n')
    code, raw = _run("verify", checkpoint, "--json")
    problems = json.loads(raw)["problems"]
    assert code == 1 and [p["what"] for p in problems] == ["the state's partition count"], problems
    assert "records 2 partitions, but Spark's offset log runs batch 4 on 3" in problems[0]["message"]
    os.mkfifo(os.path.join(offsets, "5"))  # Spark's own file: not a batch of its log, and never opened
    done = _cli("verify", checkpoint, "--json")
    assert done.returncode == 1 and json.loads(done.stdout)["problems"] == problems, done
    os.remove(os.path.join(offsets, "5"))
    shutil.move(offsets, offsets + "-elsewhere")
    os.symlink(offsets + "-elsewhere", offsets)
    code, raw = _run("verify", checkpoint, "--json")
    problems = json.loads(raw)["problems"]
    assert code == 1 and [p["what"] for p in problems] == ["Spark's offset log"], problems
    assert f"{offsets} is a symbolic link" in problems[0]["message"]
