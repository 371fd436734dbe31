"""The RocksDB options every database is opened with: bloom filters on every column
family and the memtable size, standalone and under a `RocksMemory` budget (RocksDB writes
the options in force to the directory's newest OPTIONS file)."""

from __future__ import annotations

import glob
import os
import re

import pytest

from spark_statestore.stores.rocksdb import RocksMemory
from spark_statestore.stores.rocksdb_options import DEFAULT_WRITE_BUFFER_BYTES
from spark_statestore.txn.database import TransactionalDatabase

pytestmark = pytest.mark.fast


def _options_in_force(path: str) -> dict[str, dict[str, str]]:
    """Column family name -> its table and column-family options, from the newest OPTIONS file."""
    newest = max(glob.glob(os.path.join(path, "OPTIONS-*")), key=lambda f: int(f.rsplit("-", 1)[1]))
    families: dict[str, dict[str, str]] = {}
    current: dict[str, str] | None = None
    for line in open(newest):
        section = re.match(r'\[(CFOptions|TableOptions/BlockBasedTable) "(.*)"\]', line.strip())
        if section:
            current = families.setdefault(section.group(2), {})
        elif line.startswith("["):
            current = None
        elif current is not None and "=" in line:
            name, _, value = line.strip().partition("=")
            current[name] = value
    return families


@pytest.mark.parametrize("memory, write_buffer", [
    (None, DEFAULT_WRITE_BUFFER_BYTES),
    (RocksMemory(256 << 20), DEFAULT_WRITE_BUFFER_BYTES),  # its share (32 MiB) is larger
    (RocksMemory(16 << 20), 2 << 20),  # its share (an eighth) is smaller
])
def test_every_column_family_has_bloom_filters_and_the_memtable_size(tmp_path, memory, write_buffer):
    path = str(tmp_path / "db")
    db = TransactionalDatabase(path, rocks_memory=memory)
    db.key_value_store("kv").put(b"k", b"v")
    db.window_store("w", 1000, 100)
    db.commit({"o": 1})
    db.close()
    families = _options_in_force(path)
    assert {"default", "__meta__", "kv", "w"} <= families.keys()
    for name, options in families.items():
        assert options.get("filter_policy") == "bloomfilter", (name, options.get("filter_policy"))
        assert int(options["write_buffer_size"]) == write_buffer, name


def test_point_reads_through_the_filters_find_every_key_and_no_other(tmp_path):
    """Keys served from SST files (flushed, then reopened): every written key is found with
    its value, and keys never written are not (a filter may only rule keys out)."""
    path = str(tmp_path / "db")
    db = TransactionalDatabase(path, write_buffer_bytes=1 << 16)  # many small SST files
    kv = db.key_value_store("kv")
    for i in range(0, 20_000, 2):
        kv.put(b"key-%08d" % i, b"value-%d" % i)
        if i % 2_000 == 0:
            db.commit({"o": i})
    db.commit({"o": 20_000})
    kv.flush()
    db.close()
    assert len(glob.glob(os.path.join(path, "*.sst"))) > 1
    db = TransactionalDatabase(path)
    kv = db.key_value_store("kv")
    keys = [b"key-%08d" % i for i in range(20_000)]
    got = kv.get_all(keys)
    assert got == [b"value-%d" % i if i % 2 == 0 else None for i in range(20_000)]
    assert [kv.get(k) for k in keys[:2_000]] == got[:2_000]
    db.close()
