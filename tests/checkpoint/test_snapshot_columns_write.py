"""Writing a snapshot's columns file (`verify_and_write_columns`): every entry of every
column family, and no garbage collections set off by its per-entry tuples."""

from __future__ import annotations

import gc
import os

import pyarrow as pa
import pytest
import rocksdict
from pyarrow import ipc

from spark_statestore.checkpoint import snapshot_columns
from spark_statestore.checkpoint.snapshot_columns import COLUMNS_FILE, verify_and_write_columns

ENTRIES = 20_000  # ~28 collections of the youngest generation (threshold 700) if the tuples counted


def _database(path: str) -> dict[str, list[tuple[bytes, bytes]]]:
    opts = rocksdict.Options(raw_mode=True)
    opts.create_if_missing(True)
    db = rocksdict.Rdict(path, opts)
    cf = db.create_column_family("kv", rocksdict.Options(raw_mode=True))
    rows = [(b"k%06d" % i, b"v%d" % i) for i in range(ENTRIES)]
    for key, value in rows:
        cf.put(key, value)
    db.put(b"d", b"x")
    cf.close()
    db.close()
    return {"default": [(b"d", b"x")], "kv": rows}


def _columns(path: str) -> dict[str, list[tuple[bytes, bytes]]]:
    reader = ipc.open_file(pa.memory_map(os.path.join(path, COLUMNS_FILE)))
    families: dict[str, list[tuple[bytes, bytes]]] = {}
    for i in range(reader.num_record_batches):
        batch, meta = reader.get_batch_with_custom_metadata(i)
        rows = zip(batch.column(0).to_pylist(), batch.column(1).to_pylist())
        families.setdefault(meta[b"column_family"].decode(), []).extend(rows)
    return families


@pytest.mark.parametrize("enabled", [True, False])
def test_the_columns_file_is_every_entry_written_without_collections(tmp_path, monkeypatch, enabled):
    """Every entry lands in the file; building it sets off no collection (its tuples are
    made with the collector paused, a chunk at a time) and leaves the collector as found."""
    path = str(tmp_path / "db")
    expected = _database(path)
    monkeypatch.setattr(snapshot_columns, "_CHUNK", 4096)  # several chunks
    collections: list[int] = []

    def count(phase: str, info: dict) -> None:
        if phase == "start":
            collections.append(info["generation"])

    was = gc.isenabled()
    (gc.enable if enabled else gc.disable)()
    gc.callbacks.append(count)
    try:
        verify_and_write_columns(path)
        assert gc.isenabled() is enabled
    finally:
        gc.callbacks.remove(count)
        (gc.enable if was else gc.disable)()
    assert len(collections) <= 2, collections  # the code around the chunks may still set off one
    assert _columns(path) == expected


def test_a_scan_that_fails_midway_leaves_the_collector_enabled():
    def failing():
        yield b"k", b"v"
        raise RuntimeError("damaged block")

    assert gc.isenabled()
    with pytest.raises(RuntimeError, match="damaged block"):
        snapshot_columns._next_chunk(failing())
    assert gc.isenabled()
