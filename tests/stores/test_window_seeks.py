"""Key-range reads of the RocksDB window store: one reseeked iterator finds each window
and reads its records, which come in chunks of columns (`fetch_range_chunks`, which the
typed stores decode). Runs of every length around a chunk read as the in-memory store
reads them, on every kind of persistent store; a read sees one point in time, also beside
a commit applied in batches; a store closed in the middle of a run ends its iterators
(also a `for` loop's) and releases the database; a value that does not decode fails the
read where a record-by-record read fails it."""

from __future__ import annotations

import random

import pytest
import rocksdict

from spark_statestore import Serdes, Stores
from spark_statestore.faults import injected
from spark_statestore.stores.window_api import CHUNK_RECORDS
from spark_statestore.txn import TransactionalDatabase

SIZES = [0, 1, 2, 33, CHUNK_RECORDS - 1, CHUNK_RECORDS, CHUNK_RECORDS + 1, 2 * CHUNK_RECORDS + 40]
KINDS = ["rocksdb", "txn-committed", "txn-pending", "txn-spilled", "view"]
KEY_COUNT = max(SIZES) + 20


def _key(i: int) -> bytes:
    return b"k%05d" % i


def _writes(dups: bool) -> list[tuple[bytes, bytes, int]]:
    """Window start 10 * j holds the keys 0 .. SIZES[j] - 1 (twice each with duplicates)."""
    writes = []
    for j, size in enumerate(SIZES):
        for i in range(size):
            writes.append((_key(i), b"v%d-%d" % (j, i), 10 * j))
            if dups and i % 3 == 0:
                writes.append((_key(i), b"w%d-%d" % (j, i), 10 * j))
    return writes


def _store(kind: str, path, dups: bool):
    """A persistent window store of `kind` holding `_writes`, and what to close."""
    if kind == "rocksdb":
        store = Stores.persistent_window_store("w", path, 10_000, 5, dups)
        for key, value, start in _writes(dups):
            store.put(key, value, start)
        return store, [store]
    db = TransactionalDatabase(path, uncommitted_max_bytes=2000 if kind == "txn-spilled" else -1)
    store = db.window_store("w", 10_000, 5, dups)
    writes = _writes(dups)
    if kind in ("txn-committed", "view"):
        for key, value, start in writes:
            store.put(key, value, start)
        store.commit({})
    else:  # half committed, the rest pending (in memory, or spilled to the staging family)
        for key, value, start in writes[: len(writes) // 2]:
            store.put(key, value, start)
        store.commit({})
        for key, value, start in writes[len(writes) // 2 :]:
            store.put(key, value, start)
        store.put(_key(0), None, 10)  # a pending delete inside a run
    if kind == "view":
        return store.read_only("READ_COMMITTED"), [db]
    return store, [db]


def _reference(kind: str, dups: bool):
    memory = Stores.in_memory_window_store("w", 10_000, 5, dups)
    for key, value, start in _writes(dups):
        memory.put(key, value, start)
    if kind in ("txn-pending", "txn-spilled"):
        memory.put(_key(0), None, 10)
    return memory


@pytest.mark.parametrize("dups", [False, True], ids=["unique", "duplicates"])
@pytest.mark.parametrize("kind", KINDS)
def test_key_ranges_over_runs_of_every_length_read_as_the_in_memory_store(tmp_path, kind, dups):
    store, handles = _store(kind, tmp_path / "db", dups)
    if kind == "txn-spilled":
        assert store.keyspace.staging is not None  # the pending writes did spill
    reference = _reference(kind, dups)
    rng = random.Random(5)
    bounds = [None, _key(0), _key(1), _key(32), _key(CHUNK_RECORDS + 3), _key(KEY_COUNT)]
    queries = [(a, b, 0, 10 * len(SIZES)) for a in bounds for b in bounds]
    for _ in range(40):
        t0 = rng.randrange(0, 60)
        key_from, key_to = _key(rng.randrange(KEY_COUNT)), _key(rng.randrange(KEY_COUNT))
        queries.append((key_from, key_to, t0, t0 + rng.randrange(60)))
    typed = store.typed(Serdes.bytes(), Serdes.bytes())
    checked = 0
    for key_from, key_to, t0, t1 in queries:
        if key_from is not None and key_to is not None and key_from > key_to:
            continue
        expected = list(reference.fetch_range(key_from, key_to, t0, t1))
        assert list(store.fetch_range(key_from, key_to, t0, t1)) == expected, (key_from, key_to, t0, t1)
        chunks = list(store.fetch_range_chunks(key_from, key_to, t0, t1))
        assert all(0 < len(c.keys) <= CHUNK_RECORDS for c in chunks)
        assert all(len(c.keys) == CHUNK_RECORDS for c in chunks[:-1])
        flat = [(k, v, s) for c in chunks for k, v, s in zip(*c)]
        assert flat == [(w.key, v, w.window.start) for w, v in expected]
        assert list(typed.fetch_range(key_from, key_to, t0, t1)) == expected
        checked += len(expected)
    assert checked > 10_000  # long runs were read, not only empty ranges
    assert list(typed.all()) == list(reference.all())
    for handle in handles:
        handle.close()


@pytest.mark.parametrize("close", ["store", "database"])
def test_closing_in_the_middle_of_a_run_ends_the_read_and_releases_the_database(tmp_path, close):
    path = tmp_path / "db"
    db = TransactionalDatabase(path)
    store = db.window_store("w", 10_000, 5)
    for i in range(3 * CHUNK_RECORDS):
        store.put(_key(i), b"v", 10)
    store.commit({})
    records = store.fetch_range(_key(0), _key(10**4), 0, 100)
    typed = store.typed(Serdes.bytes(), Serdes.bytes()).fetch_range(_key(0), _key(10**4), 0, 100)
    loop = iter(store.fetch_range(_key(0), _key(10**4), 0, 100))  # a for loop's: the wrapper goes
    typed_loop = iter(store.typed(Serdes.bytes(), Serdes.bytes()).fetch_range(_key(0), _key(10**4), 0, 100))
    assert next(loop)[0].key == next(typed_loop)[0].key == _key(0)
    head = [next(records) for _ in range(CHUNK_RECORDS + 7)]  # past a chunk
    assert [w.key for w, _ in head] == [_key(i) for i in range(CHUNK_RECORDS + 7)]
    assert next(typed)[0].key == _key(0)
    if close == "store":
        store.close()
    db.close()
    assert list(records) == [] and list(typed) == []
    assert list(loop) == [] and list(typed_loop) == []
    raw = rocksdict.Rdict(str(path), rocksdict.Options(raw_mode=True))  # the lock was released
    raw.close()


def test_a_seek_sees_what_was_written_before_the_read_began(tmp_path):
    """The store's API: a persistent store's iterator sees at least everything written
    before it was opened (here: pending writes made between two reads, and a commit)."""
    db = TransactionalDatabase(tmp_path / "db")
    store = db.window_store("w", 10_000, 5)
    store.put(b"a", b"1", 0)
    store.commit({})
    assert [v for _, v in store.fetch_range(b"a", b"b", 0, 10)] == [b"1"]
    store.put(b"b", b"2", 0)
    store.put(b"a", b"3", 10)
    assert [(w.key, w.window.start, v) for w, v in store.fetch_range(b"a", b"b", 0, 10)] == [
        (b"a", 0, b"1"), (b"b", 0, b"2"), (b"a", 10, b"3")]
    assert [(s, v) for s, v in store.fetch(b"a", 0, 10)] == [(0, b"1"), (10, b"3")]
    store.commit({})
    assert [v for _, v in store.fetch(b"a", 0, 10)] == [b"1", b"3"]
    db.close()


def test_a_committed_read_beside_a_commit_applied_in_batches_sees_it_all_or_none(tmp_path):
    """A READ_COMMITTED view's key-range read opened before a spilled commit, read on while
    the commit has applied only its first batch (from the commit's own fault point), sees
    the state from before the commit in every window, runs longer than a chunk included;
    a read opened after it sees all of it."""
    db = TransactionalDatabase(tmp_path / "db", uncommitted_max_bytes=500, commit_chunk_bytes=600)
    store = db.window_store("w", 10_000, 5)
    for start in (0, 10):
        for i in range(2 * CHUNK_RECORDS):
            store.put(_key(i), b"old", start)
    db.commit({})
    view = store.read_only("READ_COMMITTED")
    records = view.fetch_range(_key(0), _key(10**4), 0, 100)
    typed = view.typed(Serdes.bytes(), Serdes.bytes()).fetch_range(_key(0), _key(10**4), 0, 100)
    head = [next(records), next(typed)]  # both reads are open now, in window 0
    for i in range(2 * CHUNK_RECORDS):  # the commit's first batch lands in window 10
        store.put(_key(i), b"new", 10)
    assert store.keyspace.staging is not None  # it spilled: the commit applies in batches
    during: dict = {}

    def read_on(point: str) -> None:
        if point == "apply:after-chunk" and not during:
            during["records"] = head[:1] + list(records)
            during["typed"] = head[1:] + list(typed)

    with injected(read_on):
        db.commit({})
    assert during, "the commit applied in one batch: nothing was read beside it"
    for name in ("records", "typed"):
        assert len(during[name]) == 4 * CHUNK_RECORDS, name
        assert {v for _, v in during[name]} == {b"old"}, name
    after = list(view.fetch_range(_key(0), _key(10**4), 0, 100))
    assert {v for w, v in after if w.window.start == 10} == {b"new"}
    assert {v for w, v in after if w.window.start == 0} == {b"old"}
    db.close()


def test_a_value_that_does_not_decode_fails_the_read_after_the_records_before_it(tmp_path):
    """Typed key-range reads decode by chunks of columns; where a chunk does not decode,
    the records before the first bad one still come, then that record's error, naming the
    serde and the bytes (as a record-by-record read)."""
    store = Stores.persistent_window_store("w", tmp_path / "db", 10_000, 5)
    for i in range(10):
        store.put(_key(i), (i).to_bytes(8, "big", signed=True), 10)
    store.put(_key(7), b"short", 10)  # not an int64
    store.put(_key(2), b"\xff", 20)  # not an int64 either, in a later window
    typed = store.typed(Serdes.bytes(), Serdes.int64())
    for read in (lambda: typed.fetch_range(_key(0), _key(9), 0, 100), lambda: typed.all()):
        seen = []
        with pytest.raises(ValueError, match="short") as raised:
            for record in read():
                seen.append(record)  # noqa: PERF402 - the records before the error
        assert [(w.key, v) for w, v in seen] == [(_key(i), i) for i in range(7)]
        assert raised.value.__context__ is None  # one error, not the chunk's chained to it
    store.close()


def test_a_store_closed_by_a_serde_in_the_middle_of_a_typed_read_ends_it_and_lets_go(tmp_path):
    """A value serde that closes the store while a chunk is being decoded: the read ends
    without an error, and the store's database is closed (its lock released)."""
    path = tmp_path / "db"
    store = Stores.persistent_window_store("w", path, 10_000, 5)
    for i in range(3 * CHUNK_RECORDS):
        store.put(_key(i), b"v", 10)

    class Closing:
        def encode(self, value):
            return value

        def decode(self, data):
            store.close()
            return data

    read = list(store.typed(Serdes.bytes(), Closing()).fetch_range(_key(0), _key(10**4), 0, 100))
    assert len(read) <= CHUNK_RECORDS  # at most the chunk that was being decoded
    assert not store.is_open
    rocksdict.Rdict(str(path), rocksdict.Options(raw_mode=True)).close()  # the lock was released


def test_a_committed_fetch_of_duplicates_beside_a_commit_applied_in_batches_sees_none_of_it(tmp_path):
    """`fetch` of a key with duplicates reads each window's entries on with the seeker
    that found the window: opened before a spilled commit and read on while it has
    applied only its first batch, it sees the entries from before the commit only."""
    db = TransactionalDatabase(tmp_path / "db", uncommitted_max_bytes=500, commit_chunk_bytes=600)
    store = db.window_store("w", 10_000, 5, retain_duplicates=True)
    for start in (0, 10, 20):
        for _ in range(40):
            store.put(b"k", b"old", start)
    db.commit({})
    view = store.read_only("READ_COMMITTED")
    records = view.fetch(b"k", 0, 100)
    head = [next(records)]
    for start in (10, 20):
        for n in range(60):
            store.put(b"k", b"new%d" % n, start)
    assert store.keyspace.staging is not None
    during: list = []

    def read_on(point: str) -> None:
        if point == "apply:after-chunk" and not during:
            during.extend(head + list(records))

    with injected(read_on):
        db.commit({})
    assert [(w, v) for w, v in during] == [(start, b"old") for start in (0, 10, 20) for _ in range(40)]
    assert len(list(view.fetch(b"k", 0, 100))) == 120 + 120
    db.close()
