"""Durable files crafted to pass the checksums: a changelog copied from another partition,
one that writes to stores nobody declared (the reserved metadata store among them), one with
an inverted range deletion, trailers whose id or record count lie, and garbage commit
markers. Each is refused with the package's errors naming the file, and the committed
state stays readable once the file is put back."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import partition_workload as wl
import pytest
from crafting import retrail, rewrite

from spark_statestore import CorruptStateError, MissingStateError
from spark_statestore.checkpoint.changelog import Changelog
from spark_statestore.partition import PartitionState, StoreSpec, WorkerResources
from spark_statestore.serde import Serde, serde_for
from spark_statestore.spark.reader import column_for
from spark_statestore.txn import TransactionalDatabase

REFUSED = (CorruptStateError, MissingStateError)


@pytest.fixture
def written(tmp_path):
    """A partition with 4 committed batches; returns (checkpoint, path of changelog 3, its bytes)."""
    checkpoint = str(tmp_path / "checkpoint")
    os.makedirs(checkpoint)
    wl.run(checkpoint, str(tmp_path / "local"), 4, snapshot_interval=100)
    path = os.path.join(checkpoint, "statestore", "0", "3.changelog")
    return checkpoint, path, Path(path).read_bytes()


def expect_refused_then_restored(checkpoint: str, path: str, good: bytes, tmp_path, match: str) -> None:
    """Opening on a new executor is refused naming `match`; with the file put back the
    committed state is all there."""
    with pytest.raises(REFUSED, match=match):
        wl.read_state(checkpoint, str(tmp_path / "crafted"))
    Path(path).write_bytes(good)
    assert wl.read_state(checkpoint, str(tmp_path / "restored")) == wl.expected(1, 3)


def test_a_changelog_of_another_partition_is_refused(tmp_path):
    checkpoint = str(tmp_path / "checkpoint")
    os.makedirs(checkpoint)
    specs = [StoreSpec.key_value("kv")]
    for partition in (0, 1):
        state = PartitionState(checkpoint, partition, specs, WorkerResources(str(tmp_path / "writer")))
        state.open(0)
        state.store("kv").put(b"owner", b"partition-%d" % partition)
        state.prepare()
        state.close()
    root = os.path.join(checkpoint, "statestore")
    shutil.copy(os.path.join(root, "1", "0.changelog"), os.path.join(root, "0", "0.changelog"))
    state = PartitionState(checkpoint, 0, specs, WorkerResources(str(tmp_path / "new-executor")))
    with pytest.raises(REFUSED, match=r"0\.changelog.*belongs to partition 1, not to partition 0"):
        state.open(1)


@pytest.mark.parametrize("store", ["ghost", "__meta__"])
def test_records_of_an_undeclared_or_reserved_store_are_refused(written, tmp_path, store):
    checkpoint, path, good = written
    header = Changelog(path, 3).header
    rewrite(path, replace(header, stores=header.stores + (store,)), [(store, b"txn:commit-marker", b"{not json")])
    expect_refused_then_restored(checkpoint, path, good, tmp_path, rf"3\.changelog.*stores \['{store}'\]")


def test_a_reserved_store_in_the_changelogs_own_layout_is_still_refused(written, tmp_path):
    checkpoint, path, good = written
    header = Changelog(path, 3).header
    layout = json.loads(json.dumps(header.layout))
    stores = layout["stores"]
    if isinstance(stores, dict):
        stores["__meta__"] = stores["kv"]
    else:
        stores.append(dict(next(s for s in stores if s["name"] == "kv"), name="__meta__"))
    crafted = replace(header, stores=header.stores + ("__meta__",), layout=layout)
    rewrite(path, crafted, [("__meta__", b"txn:commit-marker", b"{not json")])
    with pytest.raises((*REFUSED, ValueError), match="__meta__"):
        wl.read_state(checkpoint, str(tmp_path / "crafted"))
    Path(path).write_bytes(good)
    assert wl.read_state(checkpoint, str(tmp_path / "restored")) == wl.expected(1, 3)


def test_an_inverted_range_deletion_is_refused(written, tmp_path):
    checkpoint, path, good = written
    rewrite(path, Changelog(path, 3).header, [], first=[("kv", b"z", b"a")])
    expect_refused_then_restored(checkpoint, path, good, tmp_path, r"range deletion whose end b'a' comes before its start b'z'")


def test_a_trailer_id_that_is_not_the_hash_of_the_content_is_refused(written, tmp_path):
    checkpoint, path, good = written
    retrail(path, ident=12345)
    with pytest.raises(CorruptStateError, match=r"3\.changelog.*not the hash of its content"):
        Changelog(path, 3)
    expect_refused_then_restored(checkpoint, path, good, tmp_path, r"3\.changelog")


def test_a_trailer_record_count_that_lies_is_refused(written, tmp_path):
    checkpoint, path, good = written
    retrail(path, count_delta=1000)
    with pytest.raises(CorruptStateError, match=r"3\.changelog"):
        list(Changelog(path, 3).entries())
    expect_refused_then_restored(checkpoint, path, good, tmp_path, r"3\.changelog")


@pytest.mark.parametrize("marker", [b"{not json", b"[1, 2]", b'{"version": "x"}', b"\xff\xfe"])
def test_replay_refuses_reserved_stores_and_garbage_commit_markers(tmp_path, marker):
    db = TransactionalDatabase(str(tmp_path / "db"))
    db.key_value_store("kv").put(b"a", b"1")
    db.commit({"o": 1})
    with pytest.raises((CorruptStateError, ValueError), match="__meta__"):
        db.replay({}, iter([("__meta__", b"txn:commit-marker", marker)]), {"o": 2})
    db.close()
    reopened = TransactionalDatabase(str(tmp_path / "db"))
    assert dict(reopened.key_value_store("kv").all()) == {b"a": b"1"}
    assert reopened.committed_offsets() == {"o": 1}
    reopened.close()


# -- serde identities in durable files are data --------------------------------------------


def _serde_for_in_a_new_process(identity: str) -> subprocess.CompletedProcess:
    code = (
        "import sys\nfrom spark_statestore.serde import serde_for\n"
        "try:\n    serde_for(sys.argv[1])\nexcept Exception as e:\n    print('refused', type(e).__name__, e)\n"
        "else:\n    print('resolved')\n"
    )
    return subprocess.run([sys.executable, "-c", code, identity], check=False, capture_output=True, text=True,
                          timeout=120, stdin=subprocess.DEVNULL)


@pytest.mark.parametrize("identity", ["os:abort", "os:getpid", "sys:exit", "json:loads"])
def test_a_serde_identity_never_calls_what_is_not_a_serde(identity):
    result = _serde_for_in_a_new_process(identity)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("refused"), result.stdout
    assert identity in result.stdout


def test_a_serde_identity_never_imports_a_module():
    result = _serde_for_in_a_new_process("this:Serde")  # importing `this` prints the Zen of Python
    assert result.stdout.startswith("refused"), result.stdout
    assert "import it first" in result.stdout
    assert "Zen" not in result.stdout + result.stderr


class Reversed(Serde):
    """A custom serde of this (imported) module: bytes reversed."""

    def encode(self, value: bytes) -> bytes:
        return bytes(reversed(value))

    def decode(self, data: bytes) -> bytes:
        return bytes(reversed(data))


def test_a_custom_serde_of_an_imported_module_resolves():
    serde = serde_for(f"{__name__}:Reversed")
    assert isinstance(serde, Reversed)
    assert serde.decode(b"abc") == b"cba"


def test_the_reader_shows_pickled_values_as_their_bytes():
    from pyspark.sql.types import BinaryType

    pickled = b"\x80\x04\x95\x05\x00\x00\x00\x00\x00\x00\x00\x8c\x02os\x94."
    column = column_for("pickle")
    assert column.type == BinaryType()
    assert column.convert([pickled, None]) == [pickled, None]
