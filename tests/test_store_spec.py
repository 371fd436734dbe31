"""`StoreSpec`, the one description of a store: the records derived from it keep the bytes
that checkpoints and databases already hold, and read back to the same spec."""

from __future__ import annotations

import json

import pytest

from spark_statestore.partition import Layout, StoreSpec
from spark_statestore.stores.spec import Clock, WindowSpec
from spark_statestore.txn import TransactionalDatabase
from spark_statestore.stores.names import META_COLUMN_FAMILY


def test_the_layout_record_keeps_its_bytes():
    layout = Layout.of(
        [
            StoreSpec.key_value("kv", key_serde="string", value_serde="int64"),
            StoreSpec.window("w", 100, 10, segment_interval=40, clock="external"),
        ],
        4,
    )
    assert layout.to_json() == (
        '{"partitions": 4, "stores": {"kv": {"key_serde": "string", "kind": "key_value", "value_serde": "int64"}, '
        '"w": {"key_serde": "bytes", "kind": "window", "value_serde": "bytes", "window": {"clock": "external", '
        '"retain_duplicates": false, "retention_period": 100, "segment_interval": 40, "window_size": 10}}}}'
    )
    assert Layout.from_json(layout.to_json(), "test") == layout


def test_the_rocksdb_store_records_keep_their_bytes(tmp_path):
    db = TransactionalDatabase(tmp_path / "db")
    db.key_value_store("kv")
    db.window_store("w", 100, 10, retain_duplicates=True, clock=Clock.EXTERNAL)
    meta = db.db.column_family(META_COLUMN_FAMILY)
    assert meta.get(b"store:kv") == b'{"kind": "key_value"}'
    assert meta.get(b"store:w") == (
        b'{"kind": "window", "retain_duplicates": true, "retention_period": 100, "window_size": 10}'
    )
    db.close()


def test_a_spec_reads_back_from_its_record_and_caching_is_not_recorded():
    spec = StoreSpec.window("w", 100, 10, segment_interval=40, cached=False, key_serde="string")
    back = StoreSpec.from_dict("w", json.loads(json.dumps(spec.as_dict())))
    assert back.as_dict() == spec.as_dict() and back.window_spec == spec.window_spec
    assert (spec.cached, back.cached) == (False, True)
    assert spec.window_spec == WindowSpec(100, 10, False, 40, Clock.RECORDS)
    assert StoreSpec.window("d", 100, 10, retain_duplicates=True).cached is False  # duplicates are never cached


def test_the_database_opens_the_store_a_spec_describes(tmp_path):
    db = TransactionalDatabase(tmp_path / "db")
    kv = db.open_store(StoreSpec.key_value("kv"))
    win = db.open_store(StoreSpec.window("w", 100, 10))
    win.put(b"a", b"1", 50)
    kv.put(b"k", b"v")
    db.commit({"n": 1})
    assert (win.retention_period, win.window_size) == (100, 10) and kv.get(b"k") == b"v"
    db.close()
    db = TransactionalDatabase(tmp_path / "db")
    with pytest.raises(ValueError, match=r"store 'w' .* was created as .*'window_size': 10.*cannot open it as"):
        db.open_store(StoreSpec.window("w", 100, 20))
    with pytest.raises(ValueError, match=r"store 'kv' .* was created as \{'kind': 'key_value'\}"):
        db.open_store(StoreSpec.window("kv", 100, 10))
    db.close()
