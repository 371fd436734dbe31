"""Bad input at the public entry points: a TypeError/ValueError (or the package's own error)
that names the parameter and the value, raised before anything is written, so committed
data reads back unchanged afterwards. Also damaged layout files and damaged local copies
(a file where the database directory should be, and the like), which are rebuilt from
the durable state. Organized by entry point."""

from __future__ import annotations

import json
import math
import os
import re
import shutil
from collections.abc import Callable
from dataclasses import fields
from typing import Any

import pyarrow.fs as pafs
import pytest

import partition_workload as wl
from spark_statestore import CorruptStateError, Serdes, Stores, ThreadCache, TransactionalDatabase
from spark_statestore.partition import (
    Layout,
    PartitionOptions,
    PartitionState,
    StoreSpec,
    WorkerResources,
    read_query_layout,
    record_query_layout,
)
from spark_statestore.partition.local import LocalPartitionDir
from spark_statestore.partition.reading import StateLocation
from spark_statestore.serde import serde_for
from spark_statestore.stores.rocksdb import META_COLUMN_FAMILY, RocksMemory

SPECS = [StoreSpec.key_value("kv")]


def _committed(store: Any) -> Any:
    """What a store holds as committed data (a persistent store's committed view)."""
    return list((store.read_only() if store.persistent else store).all())


@pytest.fixture
def committed(tmp_path):
    """A database with one committed record; yields (db, its store)."""
    db = TransactionalDatabase(str(tmp_path / "db"))
    kv = db.key_value_store("kv")
    kv.put(b"k", b"v")
    db.commit({"o": 1})
    yield db, kv
    db.close()


@pytest.fixture
def partition_checkpoint(tmp_path):
    """A partition's state with three committed batches; yields (checkpoint, local dir)."""
    checkpoint, local = str(tmp_path / "ck"), str(tmp_path / "local")
    os.makedirs(checkpoint)
    wl.run(checkpoint, local, 3)
    return checkpoint, local


# -- WindowStore.put_all / get_all ----------------------------------------------------------


def _window_stores(tmp_path) -> dict[str, Any]:
    db = TransactionalDatabase(str(tmp_path / "txn"))
    return {
        "in-memory": Stores.in_memory_window_store("w", 100, 10),
        "rocksdb": Stores.persistent_window_store("w", str(tmp_path / "w"), 100, 10),
        "caching": Stores.caching(Stores.in_memory_window_store("w", 100, 10), ThreadCache(1 << 20)),
        "transactional": db.window_store("w", 100, 10),
    }


@pytest.mark.parametrize("bad, error, match", [
    ((b"b", b"x", -1), ValueError, r"records\[1\]: window_start must be between .* got -1"),
    ((None, b"x", 60), TypeError, r"records\[1\]: key cannot be None"),
    ((b"b", "text", 60), TypeError, r"records\[1\]: value must be bytes or None, got str: 'text'"),
    ((b"b", b"x"), TypeError,
     r"records\[1\] must be a \(key, value, window_start\) tuple, got tuple: \(b'b', b'x'\)"),
])
def test_a_bad_record_in_a_window_put_all_writes_nothing(tmp_path, bad, error, match):
    for name, store in _window_stores(tmp_path).items():
        store.put(b"a", b"old", 50)
        if store.persistent:
            store.commit({})
        with pytest.raises(error, match=match):
            store.put_all([(b"a", b"NEW", 50), bad, (b"c", b"y", 55)])
        assert store.get(b"a", 50) == b"old", name
        assert store.get(b"c", 55) is None, name
        assert [(w.key, v) for w, v in _committed(store)] == [(b"a", b"old")], name
        store.put_all([(b"a", b"NEW", 50)])  # and a good one goes through
        assert store.get(b"a", 50) == b"NEW", name
        store.close()


def test_window_put_all_and_get_all_refuse_what_is_not_a_collection(tmp_path):
    for name, store in _window_stores(tmp_path).items():
        store.put(b"a", b"old", 50)
        shape = r"\(key, value, window_start\) tuples"
        with pytest.raises(TypeError, match=rf"records must be an iterable of {shape}, got NoneType: None"):
            store.put_all(None)
        if name != "caching":  # the caching wrapper's get_all is another module's
            with pytest.raises(TypeError, match="keys must be a list of bytes, got NoneType: None"):
                store.get_all(None, [50])
            with pytest.raises(TypeError, match="window_starts must be a list of int, got int: 50"):
                store.get_all([b"a"], 50)
        assert store.get_all([b"a"], [50]) == [b"old"], name
        store.close()


def test_a_typed_window_put_all_encodes_every_record_before_writing(tmp_path):
    db = TransactionalDatabase(str(tmp_path / "db"))
    for store in (Stores.in_memory_window_store("w", 100, 10), db.window_store("w", 100, 10)):
        typed = store.typed(Serdes.int64_key(), Serdes.float64())
        typed.put_all([(1, 1.0, 10), (2, 2.0, 20)])
        if store.persistent:
            store.commit({})
        with pytest.raises(TypeError, match=r"records\[1\]: value must be a float, got str: 'x'"):
            typed.put_all([(1, 9.0, 10), (3, "x", 30)])
        with pytest.raises(ValueError, match=r"records\[1\]: window_start must be between .* got -1"):
            typed.put_all([(1, 9.0, 10), (3, 3.0, -1)])
        assert [(w.key, v) for w, v in typed.all()] == [(1, 1.0), (2, 2.0)]
        assert len(_committed(store)) == 2
    db.close()


# -- KeyValueStore.put_all / get_all --------------------------------------------------------


@pytest.mark.parametrize("pairs, error, match", [
    (None, TypeError, r"pairs must be an iterable of \(key, value\) tuples, got NoneType: None"),
    ([(b"b", b"1"), (b"a",)], TypeError, r"pairs\[1\] must be a \(key, value\) tuple, got tuple: \(b'a',\)"),
    ([(b"b", b"1"), (None, b"x")], TypeError, r"pairs\[1\]: key cannot be None"),
    ([(b"b", b"1"), (b"c", 5)], TypeError, r"pairs\[1\]: value must be bytes or None, got int: 5"),
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
        if store.persistent:
            store.commit({})
        with pytest.raises(error, match=match):
            store.put_all(pairs)
        assert dict(store.all()) == {b"a": b"old"}
        assert _committed(store) == [(b"a", b"old")]
    db.close()


def test_key_value_get_all_names_keys(committed):
    _, kv = committed
    for store in (kv, Stores.in_memory_key_value_store("m")):
        with pytest.raises(TypeError, match="keys must be an iterable of bytes keys, got NoneType: None"):
            store.get_all(None)
    assert kv.get_all([b"k"]) == [b"v"]


def test_a_typed_key_value_put_all_names_the_bad_pair(committed):
    db, _ = committed
    typed = db.key_value_store("typed").typed(Serdes.string(), Serdes.int64())
    typed.put("a", 1)
    db.commit({"o": 2})
    with pytest.raises(TypeError, match=r"pairs\[1\]: value must be an int, got str: 'x'"):
        typed.put_all([("a", 5), ("b", "x")])
    with pytest.raises(TypeError, match=r"pairs\[0\] must be a \(key, value\) tuple, got tuple: \('a',\)"):
        typed.put_all([("a",)])
    # pairs are encoded by columns first: a bad key after a bad value still names the value
    with pytest.raises(TypeError, match=r"pairs\[1\]: value must be an int, got str: 'x'"):
        typed.put_all([("a", 5), ("b", "x"), (3, 4)])
    with pytest.raises(ValueError, match=r"pairs\[2\]: value must fit in a signed 64-bit integer"):
        typed.put_all([("a", 5), ("b", None), ("c", 2**63)])
    assert list(typed.all()) == [("a", 1)]
    assert _committed(typed.store) == [(b"a", (1).to_bytes(8, "big"))]


# -- Stores factories -----------------------------------------------------------------------


@pytest.mark.parametrize("path, error, match", [
    (None, TypeError, "path cannot be None"),
    (5, TypeError, "path must be a str or os.PathLike, got int: 5"),
    (b"/tmp/x", TypeError, r"path must be a str or os.PathLike, got bytes: b'/tmp/x'"),
    ("", ValueError, "path must be a non-empty path without NUL characters, got ''"),
    ("a\x00b", ValueError, r"path must be a non-empty path without NUL characters, got 'a\\x00b'"),
    ("/proc/nope/x", ValueError, r"path '/proc/nope/x' cannot hold a RocksDB database"),
])
def test_persistent_store_paths(path, error, match):
    with pytest.raises(error, match=match):
        Stores.persistent_key_value_store("kv", path)
    with pytest.raises(error, match=match):
        TransactionalDatabase(path)


def test_persistent_store_flags(tmp_path):
    with pytest.raises(TypeError, match="wal must be True or False, got str: 'no'"):
        Stores.persistent_key_value_store("kv", str(tmp_path / "kv"), wal="no")
    with pytest.raises(TypeError, match="namespace must be a non-empty str or None, got int: 1"):
        Stores.caching(Stores.in_memory_key_value_store("m"), ThreadCache(100), namespace=1)


# -- TransactionalDatabase ------------------------------------------------------------------


@pytest.mark.parametrize("kwargs, error, match", [
    ({"rocks_memory": 1}, TypeError, r"rocks_memory must be a RocksMemory or None, got int: 1"),
    ({"rocks_memory": "x"}, TypeError, r"rocks_memory must be a RocksMemory or None, got str: 'x'"),
    ({"write_buffer_bytes": -1}, ValueError, r"write_buffer_bytes must be at least \d+, got -1"),
    ({"write_buffer_bytes": 1.5}, TypeError, r"write_buffer_bytes must be an int, got float: 1.5"),
    ({"write_buffer_bytes": "x"}, TypeError, r"write_buffer_bytes must be an int, got str: 'x'"),
    ({"wal": "no"}, TypeError, r"wal must be True or False, got str: 'no'"),
    ({"replayable": "no"}, TypeError, r"replayable must be True or False, got str: 'no'"),
])
def test_database_arguments(committed, kwargs, error, match):
    db, _ = committed
    db.close()
    with pytest.raises(error, match=match):
        TransactionalDatabase(db.path, **kwargs)
    reopened = TransactionalDatabase(db.path)
    assert list(reopened.key_value_store("kv").all()) == [(b"k", b"v")]
    assert reopened.committed_offsets() == {"o": 1}
    reopened.close()


def test_rocks_memory_is_accepted_when_it_is_one(tmp_path):
    db = TransactionalDatabase(str(tmp_path / "db"), rocks_memory=RocksMemory(64 << 20))
    db.key_value_store("kv").put(b"a", b"1")
    db.commit({})
    db.close()


@pytest.mark.parametrize("properties, error, match", [
    ({"a": 1}, TypeError, r"properties must map str to str, got 'a': int: 1"),
    ({"ok": "fine", 2: "x"}, TypeError, r"properties must map str to str, got 2"),
    ({"ok": "fine", "\ud800": "x"}, ValueError, r"properties key must be valid Unicode text, got '\\ud800'"),
    ({"ok": "\ud800"}, ValueError, r"properties\['ok'\] must be valid Unicode text, got '\\ud800'"),
    (None, TypeError, r"properties must be a mapping of str to str, got NoneType: None"),
])
def test_set_properties_checks_everything_before_writing(committed, properties, error, match):
    db, kv = committed
    with pytest.raises(error, match=match):
        db.set_properties(properties)
    assert db.get_property("ok") is None
    assert _committed(kv) == [(b"k", b"v")]


def test_a_property_that_is_not_text_is_corrupt_state(committed):
    db, _ = committed
    db.db.column_family(META_COLUMN_FAMILY).put(b"property:p", b"\xff\xfe")
    with pytest.raises(CorruptStateError, match=rf"property 'p' of {db.path} is not text"):
        db.get_property("p")


def test_a_view_is_only_of_this_databases_own_stores(committed, tmp_path):
    db, kv = committed
    other = TransactionalDatabase(str(tmp_path / "other"))
    secret = other.key_value_store("kv")
    secret.put(b"secret", b"1")
    other.commit({})
    for store, shown in ((secret, "TransactionalKeyValueStore"), (None, "NoneType: None"), ("kv", "str: 'kv'")):
        with pytest.raises(ValueError, match=rf"store must be a store of this database .*\['kv'\]\), got {shown}"):
            db.view(store)
    assert dict(db.view(kv).all()) == {b"k": b"v"}
    other.close()


@pytest.mark.parametrize("ranges, entries, properties, error, match", [
    ({}, [("kv", b"a", b"1"), ("kv", "str", b"x")], None, TypeError,
     r"entries\[1\]: key must be bytes, got str: 'str'"),
    ({}, [("kv", b"a", 5)], None, TypeError, r"entries\[0\]: value must be bytes or None, got int: 5"),
    ({}, [("kv", b"a")], None, TypeError, r"entries\[0\] must be a \(store, key, value\) tuple"),
    ({}, [("__meta__", b"offset:o", b"x")], None, ValueError, r"entries\[0\]: name '__meta__' is reserved"),
    ({}, None, None, TypeError, r"entries must be an iterable of \(store, key, value\) tuples, got NoneType"),
    (None, [], None, TypeError, r"ranges must be a mapping of store name to \(lo, hi\) pairs, got NoneType"),
    ({"kv": [(b"a", None)]}, [], None, TypeError, r"ranges\['kv'\]\[0\]: hi cannot be None"),
    ({"kv": [(b"a", b"z")]}, [], {"p": 1}, TypeError, r"properties must map str to str, got 'p': int: 1"),
])
def test_replay_checks_its_change_set(committed, ranges, entries, properties, error, match):
    db, kv = committed
    with pytest.raises(error, match=match):
        db.replay(ranges, entries, {"o": 2}, properties)
    assert _committed(kv) == [(b"k", b"v")]
    assert db.committed_offsets() == {"o": 1}


@pytest.mark.parametrize("blocks, error, match", [
    ([("kv", [b"a", "str"], [b"1", b"2"])], TypeError, r"blocks\[0\]: keys must be bytes and values bytes or None"),
    ([("kv", [b"a"], [b"1"]), ("kv", [b"b"], [5])], TypeError, r"blocks\[1\]: keys must be bytes"),
    ([("kv", [b"a", b"b"], [b"1"])], ValueError, r"blocks\[0\]: 2 keys and 1 values"),
    ([("__meta__", [b"offset:o"], [b"x"])], ValueError, r"blocks\[0\]: name '__meta__' is reserved"),
    ([("kv", [b"a"])], ValueError, r"blocks\[0\]: not enough values to unpack"),
    (None, TypeError, r"blocks must be an iterable of \(store, keys, values\) tuples, got NoneType"),
])
def test_replay_blocks_checks_its_columns(committed, blocks, error, match):
    db, kv = committed
    with pytest.raises(error, match=match):
        db.replay_blocks({}, blocks, {"o": 2})
    assert _committed(kv) == [(b"k", b"v")]
    assert db.committed_offsets() == {"o": 1}


@pytest.mark.parametrize("chunk_bytes", [math.inf, 1])
def test_a_replay_that_fails_midway_leaves_the_database_closable_and_reopenable(tmp_path, chunk_bytes):
    """The failed replay's traceback must not keep column-family handles alive: recovery
    closes and rebuilds the database inside its `except` block."""
    path = str(tmp_path / "db")
    db = TransactionalDatabase(path)
    db.key_value_store("kv").put(b"k", b"v")
    db.commit({"o": 1})

    def blocks():
        yield "kv", [b"a"], [b"1"]
        raise CorruptStateError("changelog X holds an invalid block")

    try:
        db.replay_blocks({}, blocks(), {"o": 2}, chunk_bytes=chunk_bytes)
    except CorruptStateError:
        db.close()
        reopened = TransactionalDatabase(path, lock_timeout=0)
        assert reopened.committed_offsets() == {"o": 1}
        reopened.close()
    else:
        pytest.fail("the replay did not raise")


def test_replay_blocks_writes_what_replay_writes(tmp_path):
    entries = [("kv", b"a", b"1"), ("kv", b"k", None), ("other", b"z", b"")]
    results = []
    for name, replay in (("entries", lambda db: db.replay({"kv": [(b"b", b"c")]}, entries, {"o": 2})),
                         ("blocks", lambda db: db.replay_blocks(
                             {"kv": [(b"b", b"c")]}, [("kv", [b"a", b"k"], [b"1", None]), ("other", [b"z"], [b""])],
                             {"o": 2}))):
        db = TransactionalDatabase(str(tmp_path / name))
        kv, other = db.key_value_store("kv"), db.key_value_store("other")
        kv.put_all([(b"k", b"v"), (b"b", b"gone"), (b"c", b"kept")])
        db.commit({"o": 1})
        replay(db)
        results.append((_committed(kv), _committed(other), db.committed_offsets()))
        db.close()
    assert results[0] == results[1] == ([(b"a", b"1"), (b"c", b"kept")], [(b"z", b"")], {"o": 2})


def test_a_window_store_reopened_with_another_retention_is_refused(tmp_path):
    path = str(tmp_path / "db")
    db = TransactionalDatabase(path)
    db.window_store("w", 100, 10).put(b"a", b"1", 50)
    db.commit({})
    db.close()
    db = TransactionalDatabase(path)
    refused = r"store 'w' .* was created as .*'retention_period': 100.*cannot open it as .*'retention_period': 5000"
    with pytest.raises(ValueError, match=refused):
        db.window_store("w", 5000, 10)
    assert list(db.window_store("w", 100, 10).fetch(b"a", 0, 100)) == [(50, b"1")]
    db.close()


def test_a_store_record_without_retention_is_completed_once(tmp_path):
    """Databases written before the retention was recorded open with any retention once."""
    path = str(tmp_path / "db")
    db = TransactionalDatabase(path)
    db.window_store("w", 100, 10)
    old_record = {"kind": "window", "retain_duplicates": False, "window_size": 10}
    db.db.column_family(META_COLUMN_FAMILY).put(b"store:w", json.dumps(old_record).encode())
    db.close()
    db = TransactionalDatabase(path)
    db.window_store("w", 300, 10)
    db.close()
    db = TransactionalDatabase(path)
    with pytest.raises(ValueError, match=r"'retention_period': 300"):
        db.window_store("w", 100, 10)
    db.close()


def test_an_unreadable_store_record_is_corrupt_state(tmp_path):
    db = TransactionalDatabase(str(tmp_path / "db"))
    db.db.column_family(META_COLUMN_FAMILY).put(b"store:w", b"\x00garbage")
    with pytest.raises(CorruptStateError, match=r"the record of store 'w' in .* is unreadable"):
        db.window_store("w", 100, 10)
    db.close()


# -- PartitionState and StoreSpec -----------------------------------------------------------


@pytest.mark.parametrize("change, error, match", [
    ({"stores": ["kv"]}, TypeError, r"stores\[0\] must be a StoreSpec .*got str: 'kv'"),
    ({"stores": [None]}, TypeError, r"stores\[0\] must be a StoreSpec .*got NoneType: None"),
    ({"stores": 5}, TypeError, r"stores must be an iterable of StoreSpec, got int: 5"),
    ({"stores": None}, TypeError, r"stores must be an iterable of StoreSpec, got NoneType: None"),
    ({"local_dir": ""}, ValueError, r"local_dir must be a non-empty path without NUL characters, got ''"),
    ({"local_dir": None}, TypeError, r"local_dir cannot be None"),
    ({"local_dir": 5}, TypeError, r"local_dir must be a str or os.PathLike, got int: 5"),
    ({"filesystem": 5}, TypeError, r"filesystem must be a FileSystem or None, got int: 5"),
    ({"uploader": 5}, TypeError, r"uploader must be a Uploader or None, got int: 5"),
    ({"rocks_memory": 5}, TypeError, r"rocks_memory must be a RocksMemory or None, got int: 5"),
    ({"rocks_memory": "x"}, TypeError, r"rocks_memory must be a RocksMemory or None, got str: 'x'"),
    ({"cache": 1}, TypeError, r"cache must be a ThreadCache or None, got int: 1"),
    ({"every_batch": "no"}, TypeError, r"every_batch must be True or False, got str: 'no'"),
    ({"snapshot_columns": 1}, TypeError, r"snapshot_columns must be True or False, got int: 1"),
    ({"open_copies": "yes"}, TypeError, r"open_copies must be a OpenCopies or None, got str: 'yes'"),
    ({"snapshot_interval": 0}, ValueError, r"snapshot_interval must be at least 1, got 0"),
    ({"min_batches_to_retain": 0}, ValueError, r"min_batches_to_retain must be at least 1, got 0"),
    ({"uncommitted_max_bytes": -2}, ValueError, r"uncommitted_max_bytes must be at least -1, got -2"),
    ({"lock_timeout": -1}, ValueError, r"lock_timeout must be at least 0 seconds, got -1"),
    ({"retention_grace_seconds": "x"}, TypeError, r"retention_grace_seconds must be a number of seconds, got str"),
    ({"apply_chunk_bytes": 0}, ValueError, r"apply_chunk_bytes must be at least 1, got 0"),
    ({"partitions": 0}, ValueError, r"partitions must be at least 1, got 0"),
    ({"on_changes": 5}, TypeError, r"on_changes must be callable or None, got int"),
])
def test_partition_state_arguments(partition_checkpoint, change, error, match):
    checkpoint, local = partition_checkpoint
    arguments = {"stores": wl.SPECS, "local_dir": local, **change}
    resources = {f.name: arguments.pop(f.name) for f in fields(WorkerResources) if f.name in arguments}
    options = {f.name: arguments.pop(f.name) for f in fields(PartitionOptions) if f.name in arguments}
    stores = arguments.pop("stores")
    with pytest.raises(error, match=match):
        PartitionState(checkpoint, 0, stores, WorkerResources(**resources), PartitionOptions(**options), **arguments)
    assert wl.read_state(checkpoint, local) == wl.expected(1, 2)


@pytest.mark.parametrize("resources, options, match", [
    ("local", None, r"resources must be a WorkerResources, got str: 'local'"),
    (None, None, r"resources must be a WorkerResources, got NoneType: None"),
    ("resources", {"snapshot_interval": 3}, r"options must be a PartitionOptions or None, got dict"),
])
def test_partition_state_takes_its_resources_and_options_as_objects(partition_checkpoint, resources, options, match):
    checkpoint, local = partition_checkpoint
    if resources == "resources":
        resources = WorkerResources(local)
    with pytest.raises(TypeError, match=match):
        PartitionState(checkpoint, 0, wl.SPECS, resources, options)
    assert wl.read_state(checkpoint, local) == wl.expected(1, 2)


@pytest.mark.parametrize("build, error, match", [
    (lambda: StoreSpec.key_value("s", key_serde="nonsense"), ValueError, r"key_serde 'nonsense' is not a serde identity"),
    (lambda: StoreSpec.key_value("s", value_serde=""), TypeError, r"value_serde must be a serde identity .*got str: ''"),
    (lambda: StoreSpec.key_value("s", cached="no"), TypeError, r"cached must be True or False, got str: 'no'"),
    (lambda: StoreSpec.window("w", 100, 10, cached=1), TypeError, r"cached must be True or False, got int: 1"),
    (lambda: StoreSpec.window("w", 100, 10, retain_duplicates="yes"), TypeError,
     r"retain_duplicates must be a bool, got str: 'yes'"),
    (lambda: StoreSpec.window("w", 10**30, 10), ValueError, r"retention_period must be at most \d+ ms, got 10{30}"),
    (lambda: StoreSpec.window("w", 100, 10, segment_interval=2**70), ValueError,
     rf"segment_interval must be at most \d+ ms, got {2**70}"),
])
def test_declarations(build, error, match):
    with pytest.raises(error, match=match):
        build()


def test_valid_serde_identities_are_accepted_without_being_resolved():
    for identity in ("bytes", "tuple(str,int)", "my.module:MySerde", "app:make.<locals>.Serde"):
        assert StoreSpec.key_value("s", key_serde=identity).key_serde == identity


# -- serdes ---------------------------------------------------------------------------------


@pytest.mark.parametrize("identity, data, match", [
    ("int64", b"\x01", r"it must be 8 bytes, got 1"),
    ("int64_key", b"\x01\x02", r"it must be 8 bytes, got 2"),
    ("float64", b"\x00", r"it must be 8 bytes, got 1"),
    ("string", b"\xff", r"'utf-8' codec can't decode byte 0xff"),
    ("json", b"{", r"Expecting property name"),
    ("pickle", b"\x00", r"invalid load key"),
    ("arrow", b"xx", r"only 2 bytes available"),
    ("tuple(str,int)", b"a\x00\x01\x80", r"an int component at offset 3 is cut short"),
    ("tuple(str)", b"a\x00\x01zz", r"2 bytes after its components"),
    ("tuple(str)", b"\xff\x00\x01", r"'utf-8' codec can't decode byte 0xff"),
])
def test_malformed_stored_bytes_are_a_value_error_naming_the_serde(identity, data, match):
    serde = serde_for(identity)
    named = rf"^serde {re.escape(identity)} cannot decode data {re.escape(repr(data))}: .*{match}"
    with pytest.raises(ValueError, match=named) as caught:
        serde.decode(data)
    assert type(caught.value) is ValueError


def test_json_refuses_what_is_not_json(committed):
    db, _ = committed
    typed = db.key_value_store("j").typed(Serdes.string(), Serdes.json())
    typed.put("a", {"x": 1.5})
    db.commit({"o": 2})
    for value, shown in ((math.nan, "nan"), (math.inf, "inf"), ({"x": -math.inf}, r"\{'x': -inf\}")):
        with pytest.raises(ValueError, match=rf"value cannot be written as JSON: {shown} \(Out of range float"):
            typed.put("a", value)
    with pytest.raises(TypeError, match=r"value is not JSON serializable: \{1\}"):
        typed.put("a", {1})
    assert list(typed.all()) == [("a", {"x": 1.5})]


# -- layout files ---------------------------------------------------------------------------


@pytest.mark.parametrize("content, match", [
    ("", "unreadable layout"),
    ("\x00\xffgarbage", "unreadable layout"),
    ("[" * 100_000, "unreadable layout: maximum recursion depth"),
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
        "retention_period": 2**70, "window_size": 10, "retain_duplicates": False}}}}), "retention_period must be at most"),
    (json.dumps({"partitions": 1, "stores": {"w": {"kind": "window", "window": {
        "retention_period": 100, "window_size": 10, "retain_duplicates": "no"}}}}), "retain_duplicates must be a bool"),
    (json.dumps({"partitions": 1, "stores": {"w": {"kind": "window", "window": {
        "retention_period": "100", "window_size": 10, "retain_duplicates": False}}}}), "retention_period must be recorded as int"),
    (json.dumps({"partitions": 1, "stores": {"kv": {"kind": "key_value", "key_serde": "nonsense"}}}), "not a serde identity"),
    (None, "is a directory, not a regular file"),  # a directory where the file should be
])
def test_a_damaged_layout_file_is_corrupt_state_naming_it(partition_checkpoint, content, match):
    checkpoint, local = partition_checkpoint
    layout = Layout.of(wl.SPECS, 1)
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
        with pytest.raises(CorruptStateError, match=rf"{path} .*{match}"):
            read()
    if content is None:
        os.rmdir(path)
    with open(path, "w") as f:
        f.write(good)
    assert read_query_layout(checkpoint) == layout
    assert wl.read_state(checkpoint, local) == wl.expected(1, 2)


@pytest.mark.parametrize("recorded, match", [
    ([1], "must be an object with a 'stores' object"),
    ({"stores": {"kv": {"kind": "window", "window": 3}}}, "window parameters of store 'kv' must be an object"),
    ({"stores": {"": {"kind": "key_value"}}}, "name must not be empty"),
])
def test_a_layout_recorded_in_a_changelog_header_is_checked(recorded, match):
    with pytest.raises(CorruptStateError, match=rf"changelog c/7.changelog holds an unreadable layout .*{match}"):
        Layout.from_dict(recorded, "changelog c/7.changelog")


def test_a_layout_is_read_through_any_filesystem(tmp_path):
    checkpoint = str(tmp_path / "ck")
    record_query_layout(checkpoint, Layout.of(SPECS, 2), pafs.LocalFileSystem())
    assert read_query_layout(checkpoint, pafs.LocalFileSystem()).partitions == 2


# -- a damaged local copy is rebuilt from the durable state ---------------------------------


def _file(path: str) -> None:
    with open(path, "w") as f:
        f.write("x")


def _replace(path: str, make: Callable[[str], None]) -> None:
    """Put `make(path)` where the directory or file `path` is."""
    if os.path.isdir(path):
        shutil.rmtree(path)
    elif os.path.exists(path):
        os.remove(path)
    make(path)


DAMAGES: dict[str, Callable[[LocalPartitionDir], None]] = {
    "db is a file": lambda local: _replace(local.db_path, _file),
    "db is a dangling link": lambda local: _replace(local.db_path, lambda p: os.symlink(p + "-nowhere", p)),
    "db is a fifo": lambda local: _replace(local.db_path, os.mkfifo),
    "db LOCK is a directory": lambda local: _replace(os.path.join(local.db_path, "LOCK"), os.makedirs),
    "partition dir is a file": lambda local: _replace(local.root, _file),
    "query dir is a file": lambda local: _replace(os.path.dirname(local.root), _file),
    "partition LOCK is a directory": lambda local: (os.remove(os.path.join(local.root, "LOCK")),
                                                   os.makedirs(os.path.join(local.root, "LOCK"))),
    "changelogs is a file": lambda local: _replace(local.changelog_dir, _file),
    "snapshots is a file": lambda local: _replace(local.snapshot_dir, _file),
}


@pytest.mark.parametrize("damage", sorted(DAMAGES))
def test_a_damaged_local_copy_is_rebuilt(partition_checkpoint, damage):
    checkpoint, local = partition_checkpoint
    DAMAGES[damage](LocalPartitionDir(local, checkpoint, 0))
    assert wl.read_state(checkpoint, local) == wl.expected(1, 2)
    wl.run(checkpoint, local, 5, snapshot_interval=2)  # and the rebuilt copy goes on, with snapshots
    assert wl.read_state(checkpoint, local) == wl.expected(1, 4)
    assert os.path.isdir(LocalPartitionDir(local, checkpoint, 0).snapshot_dir)
    db_path = LocalPartitionDir(local, checkpoint, 0).db_path
    assert os.path.isdir(db_path) and not os.path.islink(db_path)
