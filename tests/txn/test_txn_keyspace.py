"""The transactional keyspace against a dict model: puts, deletes, range deletions, reads
of every kind, spills, commits and rollbacks."""

from __future__ import annotations

import random

import pytest

from spark_statestore.txn import TransactionalDatabase

KEYS = [b"", b"a", b"a\x00", b"ab", b"b", b"ba", b"c", b"\xff"]


def _between(model: dict, lo, hi, reverse=False):
    items = sorted((k, v) for k, v in model.items() if (lo is None or k >= lo) and (hi is None or k < hi))
    return items[::-1] if reverse else items


@pytest.mark.parametrize("limit", [-1, 0, 30])
@pytest.mark.parametrize("seed", range(3))
def test_keyspace_random_walk(tmp_path, limit, seed):
    rng = random.Random(seed)
    db = TransactionalDatabase(tmp_path / "db", uncommitted_max_bytes=limit)
    ks = db.key_value_store("s").keyspace
    model: dict[bytes, bytes] = {}
    committed: dict[bytes, bytes] = {}
    bound = lambda: rng.choice([None] + KEYS)  # noqa: E731
    for _ in range(1500):
        op = rng.random()
        if op < 0.35:
            key, value = rng.choice(KEYS), bytes([rng.randrange(256)]) * rng.randint(1, 3)
            ks.put(key, value)
            model[key] = value
        elif op < 0.45:
            key = rng.choice(KEYS)
            ks.delete(key)
            model.pop(key, None)
        elif op < 0.5:
            lo, hi = sorted(rng.sample(KEYS, 2))
            ks.delete_range(lo, hi)
            for key in [k for k in model if lo <= k < hi]:
                del model[key]
        elif op < 0.65:
            key = rng.choice(KEYS)
            assert ks.get(key) == model.get(key)
            keys = [rng.choice(KEYS) for _ in range(rng.randint(0, 6))]  # buffered, spilled, range-deleted
            assert ks.get_many(keys) == [model.get(k) for k in keys]
        elif op < 0.8:
            lo, hi, reverse = bound(), bound(), rng.random() < 0.5
            assert list(ks.scan(lo, hi, reverse)) == _between(model, lo, hi, reverse)
            pairs = _between(model, lo, hi)
            assert ks.scan_columns(lo, hi) == ([k for k, _ in pairs], [v for _, v in pairs])
        elif op < 0.9:
            lo = rng.choice(KEYS)
            hi = bound()
            expected = _between(model, lo, hi)
            assert ks.first(lo, hi) == (expected[0] if expected else None)
            hi = rng.choice(KEYS)
            lo = bound()
            expected = _between(model, lo, hi)
            assert ks.last(lo, hi) == (expected[-1] if expected else None)
        elif op < 0.95:
            db.commit()
            committed = dict(model)
            assert db.approximate_num_uncommitted_bytes() == 0
            assert list(ks.committed.scan(None, None)) == sorted(model.items())
        else:
            db.rollback()
            model = dict(committed)
    db.commit()
    assert list(ks.committed.scan(None, None)) == sorted(model.items())
    db.close()
    reopened = TransactionalDatabase(tmp_path / "db")
    assert list(reopened.key_value_store("s").keyspace.scan(None, None)) == sorted(model.items())
    reopened.close()


@pytest.mark.parametrize("limit", [-1, 3_000])
@pytest.mark.parametrize("seed", range(3))
def test_reads_of_many_keys_answer_as_reads_of_one(tmp_path, limit, seed):
    """`get_many` of 64 to 300 keys (where committed data's own multi-get bounds the keys
    by its first and last stored key among them) against the model: committed keys in a
    few clusters, so a read's keys often lie below, above or between them; pending puts
    and tombstones, spilled ones (with a limit), range deletions, repeated keys, and keys
    far outside everything written."""
    rng = random.Random(seed)
    db = TransactionalDatabase(tmp_path / "db", uncommitted_max_bytes=limit)
    ks = db.key_value_store("s").keyspace
    universe = [b"%c%03d" % (c, i) for c in b"bdfh" for i in range(250)]
    model: dict[bytes, bytes] = {}
    committed: dict[bytes, bytes] = {}
    reads = 0
    for step in range(400):
        op = rng.random()
        if op < 0.3:  # a cluster of puts, some of them deletions
            lo = rng.randrange(len(universe))
            for key in universe[lo : lo + rng.randint(1, 80)]:
                if rng.random() < 0.15:
                    ks.delete(key)
                    model.pop(key, None)
                else:
                    value = bytes([rng.randrange(256)]) * rng.randint(1, 4)
                    ks.put(key, value)
                    model[key] = value
        elif op < 0.4:  # a range deletion, often ending at a committed key
            lo, hi = sorted(rng.sample(sorted(committed) if len(committed) > 1 and rng.random() < 0.7 else universe, 2))
            ks.delete_range(lo, hi)
            for key in [k for k in model if lo <= k < hi]:
                del model[key]
        elif op < 0.85:
            lo = rng.randrange(len(universe))
            span = universe[lo : lo + rng.randint(64, 400)]
            keys = [rng.choice(span) for _ in range(rng.randint(64, 300))]
            keys += [b"a", b"z" * 3] * rng.randint(0, 2)  # beyond everything written
            assert ks.get_many(keys) == [model.get(k) for k in keys], step
            assert ks.committed.get_many(keys) == [committed.get(k) for k in keys], step
            reads += 1
        elif op < 0.95:
            db.commit()
            committed = dict(model)
        else:
            db.rollback()
            model = dict(committed)
    assert reads > 150
    assert limit < 0 or db.metrics.spills > 0, "the limit is small enough to spill"
    db.close()


@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("seed", range(6))
def test_a_writers_scan_goes_on_past_spills_commits_rollbacks_and_range_deletions(tmp_path, seed, reverse):
    """A scan the writer opens while it has writes in the range, with a step between
    every two records it reads (a put or delete anywhere, a range deletion, a spill, a
    commit, a rollback): it yields keys in order, each once, each with a value the key
    held since the scan opened, and every key present at the open and never absent since.
    Before the scan re-opened on spills, commits and rollbacks, it lost the pending
    records it had not reached when a spill or commit moved them on (to the staging
    area, or to committed data, which it had opened before)."""
    rng = random.Random(seed)
    db = TransactionalDatabase(tmp_path / "db")
    ks = db.key_value_store("s").keyspace
    universe = [b"k%02d" % i for i in range(40)]
    for key in rng.sample(universe, 15):
        ks.put(key, b"c")
    db.commit()
    committed = dict(ks.scan(None, None))
    yielded_total = 0
    for _ in range(30):
        for key in rng.sample(universe, 6):
            ks.put(key, b"open")  # pending writes: the merged scan
        model = dict(ks.scan(None, None))  # what the transaction sees at the open
        held = {key: {value} for key, value in model.items()}  # values each key held since
        kept = set(model)  # present at the open and never absent since
        scan = ks.scan(None, None, reverse)
        yielded = []
        for key, value in scan:
            assert value in held.get(key, ()), (key, value)
            yielded.append(key)
            op = rng.random()
            if op < 0.3:
                key = rng.choice(universe)
                model[key] = b"v%d" % rng.randrange(100)
                ks.put(key, model[key])
            elif op < 0.4:
                key = rng.choice(universe)
                model.pop(key, None)
                ks.delete(key)
            elif op < 0.5:
                lo, hi = sorted(rng.sample(universe, 2))
                ks.delete_range(lo, hi)
                model = {k: v for k, v in model.items() if not lo <= k < hi}
            elif op < 0.65:
                ks.spill()
            elif op < 0.8:
                db.commit()
                committed = dict(model)
            elif op < 0.85:
                db.rollback()
                model = dict(committed)
            for k, v in model.items():
                held.setdefault(k, set()).add(v)
            kept &= set(model)
        assert yielded == sorted(set(yielded), reverse=reverse)  # in order, each once
        assert kept <= set(yielded), sorted(kept - set(yielded))
        yielded_total += len(yielded)
        db.commit()
        committed = dict(ks.scan(None, None))
    assert yielded_total > 200
    db.close()


@pytest.mark.parametrize("move", ["spill+commit", "commit", "spill"])
def test_a_window_read_keeps_the_pending_records_a_commit_moves_on(tmp_path, move):
    """The writer's window reads opened while it has pending records (`fetch_all`, a
    key's `fetch`, backward too) still yield them after a spill or commit mid-read."""
    db = TransactionalDatabase(tmp_path / "db")
    store = db.window_store("w", 10**6, 5)
    store.put(b"a", b"1", 0)
    store.put(b"k", b"1", 0)
    db.commit({})
    store.put(b"b", b"2", 0)
    store.put(b"c", b"3", 0)
    store.put(b"k", b"2", 5)
    store.put(b"k", b"3", 10)
    reads = {
        "fetch_all": (store.fetch_all(0, 10), [b"a", b"b", b"c", b"k", b"k", b"k"]),
        "backward_fetch_all": (store.backward_fetch_all(0, 10), [b"k", b"k", b"k", b"c", b"b", b"a"]),
        "fetch": (store.fetch(b"k", 0, 10), [0, 5, 10]),
    }
    firsts = {name: next(it) for name, (it, _) in reads.items()}
    if "spill" in move:
        db.spill()
    if "commit" in move:
        db.commit({})
    for name, (it, expected) in reads.items():
        rest = list(it)
        if name == "fetch":
            assert [firsts[name][0]] + [t for t, _ in rest] == expected, name
        else:
            assert [firsts[name][0].key] + [w.key for w, _ in rest] == expected, name
    db.close()


@pytest.mark.parametrize("move", ["commit", "spill", "rollback"])
def test_a_read_that_would_re_open_after_the_database_closed_ends(tmp_path, move):
    """A READ_UNCOMMITTED view's read held past a commit (spill, rollback) and the
    database's close, the view itself dropped: the read ends, as reads end at a close;
    its re-open must not reach the closed database (rocksdict's own error)."""
    db = TransactionalDatabase(tmp_path / "db")
    store = db.key_value_store("s")
    store.put(b"a", b"1")
    store.put(b"b", b"1")
    db.commit()
    store.put(b"a", b"2")  # a pending write: the view's read is a merged scan
    read = store.read_only("READ_UNCOMMITTED").all()  # the view is not kept
    assert next(read) == (b"a", b"2")
    getattr(db, move)()
    db.close()
    assert list(read) == []


def test_range_deletion_hides_committed_and_staged_keys_until_rollback(tmp_path):
    db = TransactionalDatabase(tmp_path / "db", uncommitted_max_bytes=10)
    ks = db.key_value_store("s").keyspace
    for key in (b"a", b"b", b"c", b"d"):
        ks.put(key, b"committed")
    db.commit()
    ks.put(b"bb", b"staged-before")  # spills: the limit is tiny
    assert ks.staging is not None
    ks.delete_range(b"b", b"c\x00")
    assert ks.get(b"b") is None and ks.get(b"bb") is None and ks.get(b"c") is None
    ks.put(b"bc", b"after")  # a put after the deletion is visible
    assert list(ks.scan(None, None)) == [(b"a", b"committed"), (b"bc", b"after"), (b"d", b"committed")]
    assert list(ks.scan(None, None, True)) == [(b"d", b"committed"), (b"bc", b"after"), (b"a", b"committed")]
    db.rollback()
    assert list(ks.scan(None, None)) == [(k, b"committed") for k in (b"a", b"b", b"c", b"d")]
    db.close()


@pytest.mark.parametrize("limit", [-1, 2_000])
def test_bulk_puts_buffer_and_count_what_puts_one_by_one_do(tmp_path, limit):
    """`put_many` (chunks of distinct keys at once, puts and deletions, a chunk with a
    repeated key pair by pair) against a twin fed the same pairs one at a time: same reads,
    the same byte and record counts (without a limit), memory back under the limit after
    every call (with one), and ordered walks right whether a bulk write kept the sorted
    index an earlier walk built or gave it up."""
    from spark_statestore.txn import keyspace as txn_keyspace

    rng = random.Random(7)
    keys = [b"k%03d" % i for i in range(300)]
    dbs = [TransactionalDatabase(tmp_path / name, uncommitted_max_bytes=limit) for name in ("bulk", "single")]
    bulk, single = (db.key_value_store("s").keyspace for db in dbs)
    chunk = txn_keyspace._BULK_CHUNK
    try:
        txn_keyspace._BULK_CHUNK = 16  # several chunks per call, a spill between them
        for step in range(300):
            size = rng.randint(0, 40)
            pairs = [(rng.choice(keys), bytes([rng.randrange(256)]) * rng.randint(1, 9)) for _ in range(size)]
            if rng.random() < 0.2 and pairs:  # a deletion
                pairs[rng.randrange(len(pairs))] = (rng.choice(keys), None)
            if rng.random() < 0.3:  # many: of pending puts, of tombstones, of keys never written
                pairs = [(key, None if rng.random() < 0.4 else value) for key, value in pairs]
            if rng.random() < 0.5:
                pairs = list(dict(pairs).items())  # distinct keys: the bulk path
            bulk.put_many(pairs)
            for key, value in pairs:
                single.delete(key) if value is None else single.put(key, value)
            if rng.random() < 0.1:
                lo = rng.choice(keys)
                assert list(bulk.scan(lo, None)) == list(single.scan(lo, None))  # builds the sorted index
            assert list(bulk.scan(None, None)) == list(single.scan(None, None)), step
            if limit < 0:
                assert (bulk.memory_bytes, bulk.entries) == (single.memory_bytes, single.entries), step
                assert dbs[0].approximate_num_uncommitted_bytes() == dbs[1].approximate_num_uncommitted_bytes(), step
            else:  # a spill comes after a chunk instead of after a pair: other, equally right, counts
                assert dbs[0].budget.memory <= limit, step
            if rng.random() < 0.15:
                for db in dbs:
                    db.commit()
        assert limit < 0 or dbs[0].metrics.spills > 0, "the limit is small enough to spill"
    finally:
        txn_keyspace._BULK_CHUNK = chunk
        for db in dbs:
            db.close()
