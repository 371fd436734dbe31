"""Bad input at the public entry points: a TypeError/ValueError (or the package's own error)
that names the parameter and the value, raised before anything is written, so committed
data reads back unchanged afterwards. Also damaged layout files and a local copy whose
database path is not a directory."""

from __future__ import annotations

import json
import math
import os
import shutil

import pyarrow.fs as pafs
import pytest

import partition_workload as wl
from spark_statestore import CorruptStateError, Stores, ThreadCache, TransactionalDatabase
from spark_statestore.partition import Layout, PartitionState, StoreSpec, read_query_layout, record_query_layout
from spark_statestore.partition.local import LocalPartitionDir
from spark_statestore.partition.reading import StateLocation
from spark_statestore.serde import serde_for
from spark_statestore.stores.rocksdb import RocksMemory

# -- window stores: put_all checks every record first ---------------------------------------


def _window_stores(tmp_path):
    db = TransactionalDatabase(str(tmp_path / "txn"))
    return {
        "in-memory": Stores.in_memory_window_store("w", 100, 10),
        "rocksdb": Stores.persistent_window_store("w", str(tmp_path / "w"), 100, 10),
        "caching": Stores.caching(Stores.in_memory_window_store("w", 100, 10), ThreadCache(1 << 20)),
        "transactional": db.window_store("w", 100, 10),
    }


@pytest.mark.parametrize("bad, match", [
    ((b"b", b"x", -1), r"records\[1\]: window_start .* got -1"),
    ((None, b"x", 60), r"records\[1\]: key cannot be None"),
    ((b"b", "text", 60), r"records\[1\]: value must be bytes or None, got str"),
    ((b"b", b"x"), r"records\[1\] must be a \(key, value, window_start\) tuple"),
])
def test_a_bad_record_in_a_window_put_all_writes_nothing(tmp_path, bad, match):
    for name, store in _window_stores(tmp_path).items():
        store.put(b"a", b"old", 50)
        with pytest.raises((TypeError, ValueError), match=match):
            store.put_all([(b"a", b"NEW", 50), bad, (b"c", b"y", 55)])
        assert store.get(b"a", 50) == b"old", name
        assert store.get(b"c", 55) is None, name
        store.put_all([(b"a", b"NEW", 50)])  # and a good one goes through
        assert store.get(b"a", 50) == b"NEW", name
        store.close()


# -- key-value put_all ----------------------------------------------------------------------


@pytest.mark.parametrize("pairs, error, match", [
    (None, TypeError, r"pairs must be an iterable of \(key, value\) tuples, got NoneType: None"),
    ([(b"b", b"1"), (b"a",)], ValueError, r"pairs\[1\] must be a \(key, value\) tuple"),
    ([(b"b", b"1"), (None, b"x")], TypeError, r"pairs\[1\] .*key cannot be None"),
    ([(b"b", b"1"), (b"c", 5)], TypeError, r"pairs\[1\] .*value must be bytes or None, got int"),
])
def test_a_bad_pair_in_a_key_value_put_all_writes_nothing(tmp_path, pairs, error, match):
    db = TransactionalDatabase(str(tmp_path / "db"))
    stores = [
        Stores.in_memory_key_value_store("m"),
        Stores.caching(Stores.in_memory_key_value_store("c"), ThreadCache(1 << 20)),
        db.key_value_store("t"),
    ]
    for store in stores:
        store.put(b"a", b"old")
        with pytest.raises(error, match=match):
            store.put_all(pairs)
        assert dict(store.all()) == {b"a": b"old"}


# -- the transactional database -------------------------------------------------------------


@pytest.fixture
def committed(tmp_path):
    """A database with one committed record; yields (db, its store)."""
    db = TransactionalDatabase(str(tmp_path / "db"))
    kv = db.key_value_store("kv")
    kv.put(b"k", b"v")
    db.commit({"o": 1})
    yield db, kv
    db.close()


@pytest.mark.parametrize("kwargs, error, match", [
    ({"rocks_memory": 1}, TypeError, r"rocks_memory must be a RocksMemory or None, got int: 1"),
    ({"rocks_memory": "x"}, TypeError, r"rocks_memory must be a RocksMemory or None, got str: 'x'"),
    ({"write_buffer_bytes": -1}, ValueError, r"write_buffer_bytes must be at least \d+, got -1"),
    ({"write_buffer_bytes": 1.5}, TypeError, r"write_buffer_bytes must be an int, got float: 1.5"),
    ({"wal": "no"}, TypeError, r"wal must be True or False, got str: 'no'"),
])
def test_database_arguments(tmp_path, kwargs, error, match):
    with pytest.raises(error, match=match):
        TransactionalDatabase(str(tmp_path / "x"), **kwargs)


def test_a_database_path_that_cannot_exist_is_a_value_error_naming_it():
    with pytest.raises(ValueError, match=r"path '/proc/nope/x' cannot hold a RocksDB database"):
        Stores.persistent_key_value_store("kv", "/proc/nope/x")


@pytest.mark.parametrize("properties, match", [
    ({"a": 1}, r"properties must map str to str, got 'a': int: 1"),
    ({"ok": "fine", 2: "x"}, r"properties must map str to str, got 2"),
    (None, r"properties must be a mapping of str to str, got NoneType: None"),
])
def test_set_properties_checks_everything_before_writing(committed, tmp_path, properties, match):
    db, _ = committed
    with pytest.raises(TypeError, match=match):
        db.set_properties(properties)
    assert db.get_property("ok") is None


def test_a_view_is_only_of_this_databases_own_stores(committed, tmp_path):
    db, kv = committed
    other = TransactionalDatabase(str(tmp_path / "other"))
    secret = other.key_value_store("kv")
    secret.put(b"secret", b"1")
    other.commit({})
    for store in (secret, None, "kv"):
        with pytest.raises(ValueError, match=r"store must be a store of this database .*\['kv'\]"):
            db.view(store)
    assert dict(db.view(kv).all()) == {b"k": b"v"}
    other.close()


# -- partition state and its declarations ---------------------------------------------------


SPECS = [StoreSpec.key_value("kv")]


@pytest.mark.parametrize("change, error, match", [
    ({"stores": ["kv"]}, TypeError, r"stores\[0\] must be a StoreSpec .*got str: 'kv'"),
    ({"stores": [None]}, TypeError, r"stores\[0\] must be a StoreSpec .*got NoneType"),
    ({"stores": 5}, TypeError, r"stores must be a list of StoreSpec, got int: 5"),
    ({"local_dir": ""}, TypeError, r"local_dir must be a non-empty path .*got str: ''"),
    ({"local_dir": None}, TypeError, r"local_dir must be a non-empty path .*got NoneType"),
    ({"filesystem": 5}, TypeError, r"filesystem must be a FileSystem or None, got int: 5"),
    ({"uploader": 5}, TypeError, r"uploader must be a Uploader or None, got int: 5"),
    ({"rocks_memory": 5}, TypeError, r"rocks_memory must be a RocksMemory or None, got int: 5"),
])
def test_partition_state_arguments(tmp_path, change, error, match):
    kwargs = {"stores": SPECS, "local_dir": str(tmp_path / "local"), **change}
    stores = kwargs.pop("stores")
    with pytest.raises(error, match=match):
        PartitionState(str(tmp_path / "ck"), 0, stores, **kwargs)
    assert not os.path.exists(tmp_path / "ck" / "statestore")


@pytest.mark.parametrize("build, error, match", [
    (lambda: StoreSpec.key_value("s", key_serde="nonsense"), ValueError, r"key_serde 'nonsense' is not a serde identity"),
    (lambda: StoreSpec.key_value("s", value_serde=""), TypeError, r"value_serde must be a serde identity"),
    (lambda: StoreSpec.key_value("s", cached="no"), TypeError, r"cached must be True or False, got str: 'no'"),
    (lambda: StoreSpec.window("w", 100, 10, cached=1), TypeError, r"cached must be True or False, got int: 1"),
    (lambda: StoreSpec.window("w", 10**30, 10), ValueError, r"retention_period must be at most \d+ ms, got 10{30}"),
    (lambda: StoreSpec.window("w", 100, 10, segment_interval=2**70), ValueError,
     rf"segment_interval must be at most \d+ ms, got {2**70}"),
    (lambda: Stores.caching(Stores.in_memory_key_value_store("m"), ThreadCache(100), namespace=1), TypeError,
     r"namespace must be a non-empty str or None, got int: 1"),
])
def test_declarations(build, error, match):
    with pytest.raises(error, match=match):
        build()


def test_valid_serde_identities_are_accepted_without_being_resolved():
    for identity in ("bytes", "tuple(str,int)", "my.module:MySerde", "app:make.<locals>.Serde"):
        assert StoreSpec.key_value("s", key_serde=identity).key_serde == identity


# -- serdes on malformed stored bytes -------------------------------------------------------


@pytest.mark.parametrize("identity, data, match", [
    ("int64", b"\x01", r"int64 data must be 8 bytes, got 1"),
    ("int64_key", b"\x01\x02", r"int64_key data must be 8 bytes, got 2"),
    ("float64", b"\x00", r"float64 data must be 8 bytes, got 1"),
    ("tuple(str,int)", b"a\x00\x01\x80", r"malformed tuple key: an int component at offset 3"),
    ("tuple(str)", b"a\x00\x01zz", r"malformed tuple key: 2 bytes after its components"),
])
def test_malformed_stored_bytes_are_a_value_error_naming_the_serde(identity, data, match):
    with pytest.raises(ValueError, match=match):
        serde_for(identity).decode(data)


def test_json_refuses_what_is_not_json(tmp_path):
    serde = serde_for("json")
    for value in (math.nan, math.inf, {"x": -math.inf}):
        with pytest.raises(TypeError, match="is not JSON serializable"):
            serde.encode(value)
    assert serde.decode(serde.encode({"x": 1.5})) == {"x": 1.5}


# -- damaged layout files -------------------------------------------------------------------


@pytest.mark.parametrize("content, match", [
    ("", "unreadable layout"),
    ("\x00\xffgarbage", "unreadable layout"),
    ("[1]", "must be an object with a 'stores' object"),
    ("null", "must be an object with a 'stores' object"),
    (json.dumps({"partitions": 1, "stores": [1]}), "must be an object with a 'stores' object"),
    (json.dumps({"partitions": "x", "stores": {}}), "partitions must be recorded as an int, got 'x'"),
    (json.dumps({"partitions": -3, "stores": {}}), "partitions must be at least 1, got -3"),
    (json.dumps({"partitions": 1, "stores": {"kv": {"kind": "graph"}}}), "kind 'graph'"),
    (json.dumps({"partitions": 1, "stores": {"kv": 7}}), "store 'kv' must be recorded as an object"),
    (json.dumps({"partitions": 1, "stores": {"w": {"kind": "window", "window": {
        "retention_period": -5, "window_size": 10, "retain_duplicates": False}}}}), "retention_period cannot be negative"),
    (json.dumps({"partitions": 1, "stores": {"w": {"kind": "window", "window": {
        "retention_period": 100, "window_size": 10, "retain_duplicates": "no"}}}}), "retain_duplicates must be a bool"),
    (json.dumps({"partitions": 1, "stores": {"w": {"kind": "window", "window": {
        "retention_period": "100", "window_size": 10, "retain_duplicates": False}}}}), "retention_period must be recorded as int"),
    (json.dumps({"partitions": 1, "stores": {"kv": {"kind": "key_value", "key_serde": "nonsense"}}}), "not a serde identity"),
    (None, "cannot be read as a layout"),  # a directory where the file should be
])
def test_a_damaged_layout_file_is_corrupt_state_naming_it(tmp_path, content, match):
    checkpoint = str(tmp_path / "ck")
    layout = Layout.of(SPECS, 1)
    record_query_layout(checkpoint, layout)
    path = os.path.join(checkpoint, "statestore", "_layout")
    good = open(path).read()
    if content is None:
        os.remove(path)
        os.makedirs(path)
    else:
        with open(path, "w") as f:
            f.write(content)
    for read in (lambda: read_query_layout(checkpoint), lambda: record_query_layout(checkpoint, layout),
                 lambda: StateLocation.open(checkpoint)):
        with pytest.raises(CorruptStateError, match=rf"_layout .*{match}"):
            read()
    if content is None:
        os.rmdir(path)
    with open(path, "w") as f:
        f.write(good)
    assert read_query_layout(checkpoint) == layout


def test_a_layout_is_read_through_any_filesystem(tmp_path):
    checkpoint = str(tmp_path / "ck")
    record_query_layout(checkpoint, Layout.of(SPECS, 2), pafs.LocalFileSystem())
    assert read_query_layout(checkpoint, pafs.LocalFileSystem()).partitions == 2


# -- a local copy that is not a database directory ------------------------------------------


@pytest.mark.parametrize("damage", ["file", "dangling-link"])
def test_a_local_db_path_that_is_not_a_directory_is_rebuilt(tmp_path, damage):
    checkpoint, local = str(tmp_path / "ck"), str(tmp_path / "local")
    os.makedirs(checkpoint)
    wl.run(checkpoint, local, 3)
    db_path = LocalPartitionDir(local, checkpoint, 0).db_path
    shutil.rmtree(db_path)
    if damage == "file":
        with open(db_path, "w") as f:
            f.write("x")
    else:
        os.symlink(str(tmp_path / "nowhere"), db_path)
    assert wl.read_state(checkpoint, local) == wl.expected(1, 2)
    assert os.path.isdir(db_path) and not os.path.islink(db_path)


def test_rocks_memory_is_accepted_when_it_is_one(tmp_path):
    memory = RocksMemory(64 << 20)
    db = TransactionalDatabase(str(tmp_path / "db"), rocks_memory=memory)
    db.key_value_store("kv").put(b"a", b"1")
    db.commit({})
    db.close()
