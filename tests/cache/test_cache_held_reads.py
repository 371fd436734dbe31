"""Range reads of a cached store held while the writer goes on, against a dict model.

A read opened over the record cache, with a step between every two records it yields (a
put or delete, a read that fills the cache, a bulk write that passes the cache by,
evictions through a tiny budget, a flush, a commit, a rollback, a dropped cache): it
yields keys in order, each once, each with a value the key held since the read opened,
and every key present at the open and never absent since (what
`test_txn_keyspace.test_a_writers_scan_goes_on_past_spills_commits_rollbacks_and_range_deletions`
asks of the transactional store's own scans). Before the cached read re-opened on the
cache's moves, it lost the dirty entries a flush or eviction moved to the store behind
its back (the store's side of the merge had passed them, or read a snapshot), and showed
values replaced or deleted before it opened once a commit, rollback or eviction took the
cache's entry away.
"""

from __future__ import annotations

import random

import pytest

from spark_statestore import Stores, ThreadCache
from spark_statestore.cache import entry_size
from spark_statestore.partition import PartitionState, StoreSpec, WorkerResources

KEYS = [b"k%02d" % i for i in range(40)]
STARTS = [0, 5, 10, 15]
WINDOW_KEYS = [b"a", b"b", b"ba", b"c", b"d", b"e"]
ENTRY = entry_size(b"k00", b"v00")


class Harness:
    """A cached store (key-value or window, over an in-memory or transactional store),
    the model of what it shows (`model`), and of what was committed last."""

    def __init__(self, kind: str, inner: str, budget: int, tmp_path, rng: random.Random) -> None:
        self.rng = rng
        self.window = kind == "window"
        self.transactional = inner == "rocksdb"
        if self.window:
            self.universe = [(s, k) for s in STARTS for k in WINDOW_KEYS]
            if self.transactional:
                self.inner = Stores.persistent_window_store("w", tmp_path / "w", 10**6, 5, segment_interval=5)
            else:
                self.inner = Stores.in_memory_window_store("w", 10**6, 5)
        else:
            self.universe = list(KEYS)
            if self.transactional:
                self.inner = Stores.persistent_key_value_store("s", tmp_path / "s")
            else:
                self.inner = Stores.in_memory_key_value_store("s")
        self.cache = ThreadCache(budget)
        self.budget = budget
        self.store = Stores.caching(self.inner, self.cache)
        self.model: dict = {}
        self.committed: dict = {}

    def write(self, ident, value: bytes | None) -> None:
        if self.window:
            self.store.put(ident[1], value, ident[0])
        else:
            self.store.put(ident, value)
        if value is None:
            self.model.pop(ident, None)
        else:
            self.model[ident] = value

    def read(self, reverse: bool):
        """A random held read: `(its items as (ident, value), the idents it covers)`."""
        rng, store = self.rng, self.store
        if self.window:
            kind = rng.choice(["key", "range", "all"])
            if kind == "key":
                key = rng.choice(WINDOW_KEYS)
                read = (store.backward_fetch if reverse else store.fetch)(key, 0, 15)
                return (((t, key), v) for t, v in read), lambda i: i[1] == key
            lo, hi = sorted(rng.sample(WINDOW_KEYS, 2)) if kind == "range" else (None, None)
            read = (store.backward_fetch_range if reverse else store.fetch_range)(lo, hi, 0, 15)
            covers = lambda i: (lo is None or lo <= i[1]) and (hi is None or i[1] <= hi)
            return (((w.window.start, w.key), v) for w, v in read), covers
        kind = rng.choice(["all", "range", "prefix"] if not reverse else ["all", "range"])
        if kind == "prefix":
            prefix = rng.choice([b"k0", b"k1", b"k2", b"k", b"k3"])
            return store.prefix_scan(prefix), lambda k: k.startswith(prefix)
        lo, hi = sorted(rng.sample(KEYS, 2)) if kind == "range" else (None, None)
        read = (store.reverse_range if reverse else store.range)(lo, hi)
        return read, lambda k: (lo is None or lo <= k) and (hi is None or k <= hi)

    def step(self) -> None:
        """One random move of the writer."""
        rng, store = self.rng, self.store
        op = rng.random()
        if op < 0.3:
            self.write(rng.choice(self.universe), b"v%d" % rng.randrange(100))
        elif op < 0.42:
            self.write(rng.choice(self.universe), None)
        elif op < 0.52:  # fills the cache with clean entries
            ident = rng.choice(self.universe)
            got = store.get(ident[1], ident[0]) if self.window else store.get(ident)
            assert got == self.model.get(ident)
        elif op < 0.58:  # a bulk write: passes the cache by while it holds no write
            idents = rng.sample(self.universe, 3)
            values = [rng.choice([None, b"p%d" % rng.randrange(100)]) for _ in idents]
            if self.window:
                store.put_all([(i[1], v, i[0]) for i, v in zip(idents, values)])
            else:
                store.put_all(list(zip(idents, values)))
            for ident, value in zip(idents, values):
                if value is None:
                    self.model.pop(ident, None)
                else:
                    self.model[ident] = value
        elif op < 0.66:
            store.flush_cache()
        elif op < 0.68:  # shrink and grow: evicts round robin
            self.cache.resize(ENTRY)
            self.cache.resize(self.budget)
        elif op < 0.8:
            if self.transactional:
                store.commit({})
                self.committed = dict(self.model)
            else:
                store.flush()
        elif op < 0.86:
            if self.transactional:
                store.rollback()
                self.model = dict(self.committed)
            else:  # drops the writes of a failed attempt: the store's data is what is left
                store.clear_cache()
                self.model = self.inner_contents()

    def inner_contents(self) -> dict:
        if self.window:
            return {(w.window.start, w.key): v for w, v in self.inner.all()}
        return dict(self.inner.all())

    def close(self) -> None:
        self.store.close()


@pytest.mark.parametrize("kind", ["kv", "window"])
@pytest.mark.parametrize("inner", ["memory", "rocksdb"])
@pytest.mark.parametrize("budget", [0, 4 * ENTRY, 12 * ENTRY, 10**6])
@pytest.mark.parametrize("seed", range(2))
def test_a_held_read_of_a_cached_store_goes_on_past_every_move_of_the_cache(
    tmp_path, kind, inner, budget, seed
):
    rng = random.Random(seed)
    h = Harness(kind, inner, budget, tmp_path, rng)
    for ident in rng.sample(h.universe, len(h.universe) // 2):
        h.write(ident, b"c")
    if h.transactional:
        h.store.commit({})
        h.committed = dict(h.model)
    else:
        h.store.flush()
    yielded_total = 0
    for _ in range(40):
        for ident in rng.sample(h.universe, 6):  # dirty entries (some evicted) at the open
            h.write(ident, rng.choice([None, b"open"]))
        reverse = rng.random() < 0.5
        read, covers = h.read(reverse)
        held = {i: {v} for i, v in h.model.items() if covers(i)}  # values each key held since
        kept = set(held)  # present at the open and never absent since
        yielded = []
        for ident, value in read:
            assert value in held.get(ident, ()), (ident, value, sorted(held.get(ident, ())))
            yielded.append(ident)
            h.step()
            for i, v in h.model.items():
                if covers(i):
                    held.setdefault(i, set()).add(v)
            kept &= set(h.model)
        assert yielded == sorted(set(yielded), reverse=reverse)  # in order, each once
        assert kept <= set(yielded), sorted(kept - set(yielded))
        yielded_total += len(yielded)
    assert yielded_total > 200
    h.close()


def test_a_partition_stores_held_read_keeps_the_writes_evictions_move_on(dirs):
    """A partition's cached store: `all()` held while the task writes keys that sort
    before it, whose puts evict the batch's writes the read has not reached yet. Before,
    the evictions moved them to the transaction under a read of committed data opened
    before, and 149 of the 200 were lost."""
    checkpoint, local = dirs
    cache = ThreadCache(250 * entry_size(b"k000", b"v0"))
    state = PartitionState(checkpoint, 0, [StoreSpec.key_value("kv")], WorkerResources(local, cache=cache))
    state.open(0)
    for i in range(200):
        state.store("kv").put(b"k%03d" % i, b"v0")
    state.prepare()
    state.close()
    state.open(1)
    store = state.store("kv")
    for i in range(200):
        store.put(b"n%03d" % i, b"v1")  # dirty in the cache: it holds 250 entries
    seen = []
    for i, (key, _) in enumerate(store.all()):
        seen.append(key)
        store.put(b"a%03d" % i, b"x")  # evicts (the first eviction flushes every dirty entry)
    assert cache.evicts > 100
    assert seen == [b"k%03d" % i for i in range(200)] + [b"n%03d" % i for i in range(200)]
    state.close()


@pytest.mark.parametrize("kind", ["kv", "window"])
def test_a_read_the_cache_moved_under_before_its_first_record(tmp_path, kind):
    """A read opened, then a flush before its first record is asked for: the deletion
    the cache held reaches the transaction, which the read chose to pass by when it
    opened (it had no write in the range then), and the read must not show the deleted
    record."""
    window = kind == "window"
    if window:
        inner = Stores.persistent_window_store("w", tmp_path / "w", 10**6, 5)
        store = Stores.caching(inner, ThreadCache(10**6))
        put = lambda key, value: store.put(key, value, 0)
    else:
        inner = Stores.persistent_key_value_store("s", tmp_path / "s")
        store = Stores.caching(inner, ThreadCache(10**6))
        put = store.put
    put(b"a", b"1")
    store.commit({})
    put(b"a", None)
    put(b"b", b"2")
    read = store.all()
    store.flush_cache()
    got = [(w.key, v) for w, v in read] if window else list(read)
    assert got == [(b"b", b"2")]
    store.close()


def test_a_held_read_whose_store_closed_ends_at_its_re_open(tmp_path):
    """The wrapped store closed while a read of the cached store is held past a flush:
    the read ends, as reads end at a close (the re-open must not reach the closed store)."""
    inner = Stores.persistent_key_value_store("s", tmp_path / "s")
    store = Stores.caching(inner, ThreadCache(10**6))
    for key in (b"a", b"b", b"c"):
        store.put(key, b"1")
    read = store.all()
    assert next(read) == (b"a", b"1")
    store.flush_cache()
    inner.close()
    assert list(read) == []
