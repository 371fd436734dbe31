"""KIP-892 transactional stores: commit with offsets, rollback, isolation, spilling,
metrics, bad input and corrupt files."""

from __future__ import annotations

import os
import random
import threading
import time

import pytest

from spark_statestore import (
    CorruptStateError,
    IsolationLevel,
    StateStoreError,
    StoreClosedError,
    StoreLockedError,
    Stores,
)
from spark_statestore.txn import TransactionalDatabase
from spark_statestore.txn.budget import ENTRY_COST


@pytest.fixture
def kv(tmp_path):
    store = Stores.persistent_key_value_store("kv", tmp_path / "kv")
    yield store
    store.close()


def test_commit_persists_writes_and_offsets_together(tmp_path):
    path = tmp_path / "kv"
    store = Stores.persistent_key_value_store("kv", path)
    assert store.committed_offset("input") is None
    store.put(b"a", b"1")
    store.commit({"input": 10, "other": -3})
    store.put(b"b", b"2")
    store.commit({"input": 11})
    store.put(b"c", b"3")  # never committed
    assert store.committed_offset("input") == 11
    assert store.committed_offset("other") == -3  # offsets not named in a commit keep their value
    store.close()
    store = Stores.persistent_key_value_store("kv", path)
    assert list(store.all()) == [(b"a", b"1"), (b"b", b"2")]
    assert store.committed_offset("input") == 11
    assert store.database.committed_offsets() == {"input": 11, "other": -3}
    store.close()


def test_rollback_discards_every_write_since_commit(kv):
    kv.put(b"keep", b"1")
    kv.commit()
    kv.put(b"keep", b"changed")
    kv.put(b"new", b"x")
    kv.delete(b"keep")
    kv.rollback()
    assert list(kv.all()) == [(b"keep", b"1")]
    assert kv.approximate_num_uncommitted_bytes() == 0


def test_reads_see_own_uncommitted_writes_everywhere(kv):
    for key in (b"a", b"b", b"c"):
        kv.put(key, b"old")
    kv.commit()
    kv.put(b"b", None)
    kv.put(b"bb", b"new")
    kv.put(b"a", b"newer")
    assert kv.get(b"b") is None
    assert list(kv.all()) == [(b"a", b"newer"), (b"bb", b"new"), (b"c", b"old")]
    assert list(kv.reverse_range(b"a", b"bz")) == [(b"bb", b"new"), (b"a", b"newer")]
    assert list(kv.prefix_scan(b"b")) == [(b"bb", b"new")]


def test_uncommitted_bytes_accounting(kv):
    # key and value bytes plus CPython's cost per buffered record (one quantity, see txn.budget)
    assert kv.approximate_num_uncommitted_bytes() == 0
    kv.put(b"key", b"value")  # 3 + 5
    assert kv.approximate_num_uncommitted_bytes() == 8 + ENTRY_COST
    kv.put(b"key", b"v")  # an overwrite replaces the cost
    assert kv.approximate_num_uncommitted_bytes() == 4 + ENTRY_COST
    for _ in range(100):
        kv.put(b"key", b"v")
    assert kv.approximate_num_uncommitted_bytes() == 4 + ENTRY_COST
    kv.delete(b"key")  # a tombstone costs its key
    assert kv.approximate_num_uncommitted_bytes() == 3 + ENTRY_COST
    kv.put(b"other", b"xy")
    assert kv.approximate_num_uncommitted_bytes() == 3 + 7 + 2 * ENTRY_COST
    kv.commit()
    assert kv.approximate_num_uncommitted_bytes() == 0
    kv.put(b"again", b"z")
    kv.rollback()
    assert kv.approximate_num_uncommitted_bytes() == 0


@pytest.mark.parametrize("limit", [0, 300, 2000])
def test_a_spill_happens_only_past_the_reported_limit(tmp_path, limit):
    # spilling, the in-flight signal and the figures reported use one quantity: every spill
    # comes after the reported uncommitted bytes passed the limit, and after the watcher fired
    db = TransactionalDatabase(tmp_path / "db", uncommitted_max_bytes=limit)
    kv = db.key_value_store("kv")
    win = db.window_store("win", 1000, 10)
    crossings: list[int] = []
    spills: list[tuple[int, int, int]] = []
    db.budget.watch(limit, crossings.append)
    spill = db.budget._spill

    def checked_spill() -> None:
        spills.append((db.approximate_num_uncommitted_bytes(), db.uncommitted_bytes_peak, len(crossings) - seen))
        spill()

    db.budget._spill = checked_spill
    rng = random.Random(limit)
    for batch in range(3):
        seen = len(crossings)  # the watcher fires once per transaction
        for i in range(400):
            key = b"k%03d" % rng.randrange(150)
            op = rng.random()
            if op < 0.6:
                kv.put(key, b"v" * rng.randrange(60))
            elif op < 0.8:
                kv.delete(key)
            else:
                win.put(key, b"w" * rng.randrange(30), i * 7)
            reported = db.approximate_num_uncommitted_bytes()
            assert reported == kv.approximate_num_uncommitted_bytes() + win.approximate_num_uncommitted_bytes()
            assert db.uncommitted_bytes_peak >= reported
        db.commit({"batch": batch}) if batch % 2 == 0 else db.rollback()
        assert db.approximate_num_uncommitted_bytes() == 0
    assert spills, "the limit is small enough to spill"
    for reported, peak, fired in spills:
        assert reported > limit and peak > limit and fired == 1
    assert all(total > limit for total in crossings)
    db.close()


def test_isolation_levels(kv):
    kv.put(b"a", b"committed")
    kv.commit()
    kv.put(b"a", b"pending")
    kv.put(b"b", b"pending")
    committed = kv.read_only(IsolationLevel.READ_COMMITTED)
    uncommitted = kv.read_only("read_uncommitted")
    assert committed.get(b"a") == b"committed"
    assert list(committed.all()) == [(b"a", b"committed")]
    assert uncommitted.get(b"a") == b"pending"
    assert list(uncommitted.all()) == [(b"a", b"pending"), (b"b", b"pending")]
    assert committed.get_all([b"a", b"b"]) == [b"committed", None]  # bulk reads, one multi-get
    assert uncommitted.get_all([b"a", b"b"]) == [b"pending", b"pending"]
    kv.commit()
    assert list(committed.all()) == [(b"a", b"pending"), (b"b", b"pending")]
    with pytest.raises(AttributeError, match="views cannot write"):
        committed.put(b"x", b"y")
    with pytest.raises(ValueError, match="isolation must be READ_COMMITTED or READ_UNCOMMITTED, got 'dirty'"):
        kv.read_only("dirty")


def test_window_store_views_follow_stream_time(tmp_path):
    store = Stores.persistent_window_store("w", tmp_path / "w", 100, 10)
    store.put(b"k", b"v0", 0)
    store.commit()
    committed = store.read_only(IsolationLevel.READ_COMMITTED)
    uncommitted = store.read_only(IsolationLevel.READ_UNCOMMITTED)
    store.put(b"k", b"v500", 500)  # expires window 0 in the transaction
    assert uncommitted.observed_stream_time == 500
    assert committed.observed_stream_time == 0
    assert list(committed.fetch(b"k", 0, 1000)) == [(0, b"v0")]
    assert list(uncommitted.fetch(b"k", 0, 1000)) == [(500, b"v500")]
    assert committed.get_all([b"k", b"k"], [0, 500]) == [b"v0", None]
    assert uncommitted.get_all([b"k", b"k"], [0, 500]) == [None, b"v500"]
    assert committed.typed(_Identity(), _Identity()).get(b"k", 0) == b"v0"
    store.commit()
    assert list(committed.fetch(b"k", 0, 1000)) == [(500, b"v500")]
    store.close()
    assert not committed.is_open


class _Identity:
    def encode(self, value):
        return value

    def decode(self, data):
        return data


def test_window_store_rollback_restores_stream_time_and_expired_data(tmp_path):
    store = Stores.persistent_window_store("w", tmp_path / "w", 100, 10, segment_interval=10)
    store.put(b"k", b"old", 0)
    store.commit()
    store.put(b"k", b"far", 1000)  # expires (and range-deletes) window 0 in the transaction
    assert store.get(b"k", 0) is None
    store.rollback()
    assert store.observed_stream_time == 0
    assert list(store.fetch(b"k", 0, 2000)) == [(0, b"old")]
    store.put(b"k", b"next", 5)
    store.commit()
    assert list(store.fetch(b"k", 0, 2000)) == [(0, b"old"), (5, b"next")]
    store.close()


def test_stores_in_one_database_commit_together(tmp_path):
    path = tmp_path / "db"
    db = Stores.persistent_database(path)
    orders = db.key_value_store("orders")
    counts = db.window_store("counts", 1000, 10)
    orders.put(b"o1", b"paid")
    counts.put(b"c", b"1", 0)
    counts.commit({"batch": 1})  # a store's commit is its database's
    orders.put(b"o2", b"open")
    db.close()
    db = Stores.persistent_database(path)
    orders = db.key_value_store("orders")
    counts = db.window_store("counts", 1000, 10)
    assert list(orders.all()) == [(b"o1", b"paid")]
    assert list(counts.fetch(b"c", 0, 10)) == [(0, b"1")]
    assert db.committed_offset("batch") == 1
    with pytest.raises(ValueError, match="store 'orders' is already open"):
        db.key_value_store("orders")
    db.close()
    assert not orders.is_open


@pytest.mark.parametrize("limit", [0, 100])
def test_spilled_transactions_keep_memory_bounded_and_stay_correct(tmp_path, limit):
    db = TransactionalDatabase(tmp_path / "db", uncommitted_max_bytes=limit, commit_chunk_bytes=256)
    store = db.key_value_store("s")
    model = {}
    for i in range(2000):
        key, value = b"k%04d" % (i % 700), b"v%d" % i
        store.put(key, value)
        model[key] = value
        assert store.keyspace.memory_bytes <= limit + 20
        if i % 250 == 0:
            assert store.get(key) == value
    assert db.metrics.spills > 0
    assert store.approximate_num_uncommitted_bytes() > limit
    assert list(store.all()) == sorted(model.items())
    store.commit({"n": 1})
    assert store.approximate_num_uncommitted_bytes() == 0
    assert not any(n.startswith("__staging__") for n in db.db.column_family_names())
    store.put(b"k0000", b"rolled back")
    for i in range(500):
        store.put(b"x%04d" % i, b"rolled back")
    store.rollback()
    assert list(store.all()) == sorted(model.items())
    db.close()
    db = TransactionalDatabase(tmp_path / "db")
    assert list(db.key_value_store("s").all()) == sorted(model.items())
    db.close()


def test_committed_reader_in_another_thread_never_sees_half_a_commit(tmp_path):
    """Commits applied in many small batches (a spilled transaction) are invisible to a
    READ_COMMITTED reader until the last batch has landed."""
    db = TransactionalDatabase(tmp_path / "db", uncommitted_max_bytes=200, commit_chunk_bytes=64)
    store = db.key_value_store("s")
    keys = [b"key%03d" % i for i in range(300)]
    for key in keys:
        store.put(key, b"0")
    store.commit()
    view = store.read_only(IsolationLevel.READ_COMMITTED)
    stop = threading.Event()
    seen: list = []
    errors: list = []

    def reader():
        try:
            while not stop.is_set():
                values = {v for _, v in view.all()}
                seen.append(values)
                if len(values) != 1:
                    errors.append(values)
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    thread = threading.Thread(target=reader)
    thread.start()
    try:
        for version in range(1, 8):
            for key in keys:
                store.put(key, b"%d" % version)
            store.commit()
    finally:
        stop.set()
        thread.join()
    assert not errors
    assert len(seen) > 5
    assert {v for _, v in view.all()} == {b"7"}
    db.close()


def test_a_for_loop_over_a_committed_view_ends_when_the_view_closes(tmp_path):
    """A `for` loop holds the generator under a store iterator, not the iterator: the
    view's `close()` still ends it."""
    db = TransactionalDatabase(tmp_path / "db")
    store = db.key_value_store("s")
    for i in range(10):
        store.put(b"k%d" % i, b"v")
    store.commit()
    view = store.read_only(IsolationLevel.READ_COMMITTED)
    loops = [iter(view.all()), iter(view.range(b"k2", b"k8")), iter(view.reverse_all())]
    assert [next(loop)[0] for loop in loops] == [b"k0", b"k2", b"k9"]
    view.close()
    assert [list(loop) for loop in loops] == [[], [], []]
    db.close()


def test_metrics(kv):
    metrics = kv.transaction_metrics
    for i in range(3):
        kv.put(b"k", b"%d" % i)
        kv.commit()
    kv.rollback()
    assert metrics.commits == 3
    assert metrics.rollbacks == 1
    assert 0 < metrics.commit_latency_avg <= metrics.commit_latency_max
    assert metrics.as_dict()["commits"] == 3


def test_bad_offsets_and_use_after_close(kv):
    kv.put(b"k", b"v")
    with pytest.raises(TypeError, match=r"offsets\['x'\] must be a 64-bit int, got str: 'a'"):
        kv.commit({"x": "a"})
    with pytest.raises(TypeError, match="offsets must be a mapping"):
        kv.commit([1, 2])
    with pytest.raises(TypeError, match="offsets keys must be str, got int: 1"):
        kv.commit({1: 2})
    assert kv.get(b"k") == b"v"  # the pending write survived the bad calls
    kv.commit({"x": 1})
    kv.close()
    for call in (kv.commit, kv.rollback, kv.approximate_num_uncommitted_bytes, lambda: kv.committed_offset("x")):
        with pytest.raises(StoreClosedError):
            call()


def test_bad_uncommitted_limit():
    with pytest.raises(ValueError, match="uncommitted_max_bytes must be at least -1, got -2"):
        TransactionalDatabase("/nonexistent/never-created", uncommitted_max_bytes=-2)


# -- the database directory ----------------------------------------------------------------


def _committed_store(path):
    store = Stores.persistent_key_value_store("kv", path)
    for i in range(100):
        store.put(b"k%d" % i, b"v" * 100)
    store.commit({"n": 1})
    store.database.flush()
    store.close()


def test_missing_current_file_is_a_clear_error(tmp_path):
    path = tmp_path / "db"
    _committed_store(path)
    os.remove(path / "CURRENT")
    with pytest.raises(CorruptStateError, match=f"{path}.*missing its CURRENT file"):
        Stores.persistent_key_value_store("kv", path)


def test_corrupt_manifest_is_a_clear_error(tmp_path):
    path = tmp_path / "db"
    _committed_store(path)
    manifest = next(p for p in path.iterdir() if p.name.startswith("MANIFEST"))
    manifest.write_bytes(b"garbage" * 10)
    with pytest.raises(CorruptStateError, match=f"cannot open the RocksDB database at {path}"):
        Stores.persistent_key_value_store("kv", path)


def test_missing_table_file_is_a_clear_error(tmp_path):
    path = tmp_path / "db"
    _committed_store(path)
    for sst in path.glob("*.sst"):
        sst.unlink()
    with pytest.raises(CorruptStateError, match=f"cannot open the RocksDB database at {path}"):
        Stores.persistent_key_value_store("kv", path)


def test_path_that_is_a_file_is_a_clear_error(tmp_path):
    path = tmp_path / "file"
    path.write_text("x")
    with pytest.raises(CorruptStateError, match=f"state path {path} exists but is not a directory"):
        Stores.persistent_key_value_store("kv", path)


def test_second_opener_waits_then_fails_with_the_path(tmp_path):
    path = tmp_path / "db"
    first = TransactionalDatabase(path)
    started = time.monotonic()
    with pytest.raises(StoreLockedError, match=f"{path} is locked by another opener"):
        TransactionalDatabase(path, lock_timeout=0.3)
    assert time.monotonic() - started >= 0.3
    threading.Timer(0.3, first.close).start()
    second = TransactionalDatabase(path, lock_timeout=120)  # gets it once the first closes
    second.close()


# -- faults inside commit (exceptions) -----------------------------------------------------

from spark_statestore.faults import injected  # noqa: E402

# (fault point, memory limit that makes the commit reach it: -1 = in memory, 600 = spilled:
# a few records fit in memory, so writes spill and the commit spills what remains)
BEFORE_COMMIT_POINT = [
    ("commit:before-write", -1),
    ("commit:after-spill", 600),
    ("spill:before-last-write", 600),
    ("spill:after-write", 600),
]
AFTER_COMMIT_POINT = [
    ("commit:after-write", -1),
    ("commit:after-marker", 600),
    ("apply:after-chunk", 600),
    ("commit:after-apply", 600),
]


class Boom(Exception):
    pass


def _raise_at(target):
    def handler(name):
        if name == target:
            raise Boom(name)

    return handler


def _spilling_db(path, limit=600):
    db = TransactionalDatabase(path, uncommitted_max_bytes=limit, commit_chunk_bytes=64)
    return db, db.key_value_store("kv"), db.window_store("w", 100, 10, False, 10)


def _write_transaction(kv, win, tag):
    for i in range(40):
        kv.put(b"k%02d" % i, tag)
    win.put(b"w", tag, 1000)  # also expires (range-deletes) older windows


def _commit_failing_at(path, point, limit, expected_errors):
    """Commit version 1, then try to commit version 2 with a fault at `point`."""
    db, kv, win = _spilling_db(path, limit)
    win.put(b"w", b"old", 0)
    db.commit({"n": 1})
    _write_transaction(kv, win, b"new")
    with injected(_raise_at(point)):
        with pytest.raises(expected_errors):
            db.commit({"n": 2})
    return db, kv


def _assert_version_2(path):
    db, kv, win = _spilling_db(path)
    assert db.committed_offset("n") == 2
    assert {v for _, v in kv.all()} == {b"new"}
    assert [(w.window.start, v) for w, v in win.all()] == [(1000, b"new")]
    db.close()


@pytest.mark.parametrize("point,limit", BEFORE_COMMIT_POINT)
def test_exception_before_the_commit_point_keeps_the_transaction(tmp_path, point, limit):
    db, kv = _commit_failing_at(tmp_path / "db", point, limit, Boom)
    assert db.committed_offset("n") == 1
    assert kv.get(b"k05") == b"new"  # still pending, still readable
    db.commit({"n": 2})  # the retry succeeds
    db.close()
    _assert_version_2(tmp_path / "db")


@pytest.mark.parametrize("point,limit", AFTER_COMMIT_POINT)
def test_exception_after_the_commit_point_completes_on_reopen(tmp_path, point, limit):
    db, _ = _commit_failing_at(tmp_path / "db", point, limit, (Boom, StateStoreError))
    db.close()
    _assert_version_2(tmp_path / "db")


def test_exception_after_the_marker_closes_the_database_and_says_to_reopen(tmp_path):
    db, kv, win = _spilling_db(tmp_path / "db")
    _write_transaction(kv, win, b"new")
    with injected(_raise_at("apply:after-chunk")):
        with pytest.raises(StateStoreError, match="interrupted after its commit point.*reopen"):
            db.commit({"n": 1})
    assert not db.is_open
    assert not kv.is_open
