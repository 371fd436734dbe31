"""The persistent session store's held sessions (`stores.session_view`) and its bulk
methods (`sessions_of_keys`, `write_sessions`, `take_ended_sessions`) against the
in-memory store, which has neither: merges record by record and a micro-batch at a time,
closes, direct puts and removes, watermark advances, commits, rollbacks, reopens and
spills (a tiny uncommitted limit), with bounds small enough that keys are evicted from
the view and some keys are never held. And the things the store does not write itself,
which must drop what it holds: a rollback, a replay of changes into the database, a range
deletion of its keyspace."""

from __future__ import annotations

import random

import pytest

from spark_statestore import Stores, TransactionalDatabase
from spark_statestore.cache.caching_session import CachingSessionStore
from spark_statestore.cache.thread_cache import ThreadCache
from spark_statestore.kinds import build_store
from spark_statestore.serde import Serdes
from spark_statestore.stores import session_view
from spark_statestore.stores.session_api import SessionSpec
from spark_statestore.stores.session_batch import merge_batch
from spark_statestore.stores.session_layout import BY_END, SESSIONS, end_index_key, session_key
from spark_statestore.stores.session_merge import close_sessions, merge_record
from spark_statestore.stores.spec import StoreSpec

MAX_TIME = 2**63 - 1
KEYS = [b"k%d" % i for i in range(12)]
GAP = 3


def _concat(a: bytes, b: bytes) -> bytes:
    return (a + b)[-8:]


def _open(path: str, retention: int, limit: int, clock: str = "watermark", cache: ThreadCache | None = None):
    """The transactional store (behind a record cache, given one) and its database."""
    db = TransactionalDatabase(path, uncommitted_max_bytes=limit)
    spec = StoreSpec.of("session", "s", SessionSpec.of("s", retention, clock))
    store = build_store(spec, db, on_close=db.close)
    return db, store if cache is None else CachingSessionStore(store, cache)


def _state(store) -> tuple:
    return [(tuple(w), v) for w, v in store.all()], store.observed_stream_time


def _rebuilt(state: tuple, retention: int, clock: str):
    """An in-memory store holding `state` (what a rollback or reopen returns to)."""
    sessions, stream_time = state
    store = Stores.in_memory_session_store("s", retention, clock=clock)
    if stream_time >= 0:
        store.advance_stream_time(stream_time)
    for (key, start, end), value in sessions:
        store.put(key, start, end, value)
    return store


def _check(rng: random.Random, store, reference) -> None:
    assert _state(store) == _state(reference)
    for key in rng.sample(KEYS, 3):
        earliest, latest = rng.randrange(120), rng.randrange(120)
        want = list(reference.find_sessions(key, earliest, latest))
        assert list(store.find_sessions(key, earliest, latest)) == want
        assert list(store.backward_find_sessions(key, earliest, latest)) == want[::-1]
        requests = [(key, earliest, latest), (rng.choice(KEYS), 0, MAX_TIME)]
        assert store.sessions_of_keys(requests) == reference.sessions_of_keys(requests)
        for window, value in reference.fetch(key):
            assert store.fetch_session(*window) == value


@pytest.mark.parametrize("clock", ["watermark", "records"])
@pytest.mark.parametrize("cached", [False, True])
@pytest.mark.parametrize("seed", range(4))
def test_merges_closes_and_transactions_against_the_in_memory_store(tmp_path, monkeypatch, seed, cached, clock):
    """`cached`: behind a record cache small enough to evict (and flush) often; `records`:
    each put may move the stream time (the store's bulk writes go one by one)."""
    rng = random.Random(seed)
    monkeypatch.setattr(session_view, "MAX_BYTES", rng.choice([2000, 8000, 1 << 30]))
    monkeypatch.setattr(session_view, "MAX_PER_KEY", rng.choice([1, 3, 64]))
    monkeypatch.setattr(session_view, "WINDOW", rng.choice([4, 4096]))  # 4: pauses when it thrashes
    monkeypatch.setattr(session_view, "PAUSE", rng.choice([3, 30]))
    retention = rng.choice([8, 30, 10**6])
    limit = rng.choice([-1, 400])  # 400 bytes: transactions spill
    path = str(tmp_path / "db")
    cache = ThreadCache(rng.choice([300, 3000])) if cached else None
    db, store = _open(path, retention, limit, clock, cache)
    reference = Stores.in_memory_session_store("s", retention, clock=clock)
    committed = _state(reference)
    watermark = 0
    for step in range(160):
        op = rng.random()
        if op < 0.35:
            key, time = rng.choice(KEYS), max(0, watermark + rng.randint(-4, 12))
            value = rng.randbytes(2)
            assert merge_record(store, key, time, value, GAP, _concat) == merge_record(
                reference, key, time, value, GAP, _concat
            )
        elif op < 0.5:
            size = rng.randint(0, 25)
            keys = [rng.choice(KEYS) for _ in range(size)]
            times = [max(0, watermark + rng.randint(-4, 12)) for _ in range(size)]
            values = [rng.randbytes(2) for _ in range(size)]
            assert merge_batch(store, keys, times, values, GAP, _concat) == merge_batch(
                reference, keys, times, values, GAP, _concat
            )
        elif op < 0.58:
            watermark += rng.randint(0, 6)
            assert close_sessions(store, watermark, GAP) == close_sessions(reference, watermark, GAP)
            for s in (store, reference):
                s.advance_stream_time(watermark)
        elif op < 0.66:
            key, start = rng.choice(KEYS), max(0, watermark + rng.randint(-10, 10))
            end, value = start + rng.randrange(4), rng.choice([None, rng.randbytes(1)])
            for s in (store, reference):
                s.put(key, start, end, value)
        elif op < 0.72:
            sessions = list(reference.all())
            if sessions:
                window = rng.choice(sessions)[0]
                for s in (store, reference):
                    s.remove(*window)
        elif op < 0.84:
            store.commit({"step": step})
            committed = _state(reference)
        elif op < 0.93:
            store.rollback()
            reference = _rebuilt(committed, retention, clock)
        else:
            store.close()
            db, store = _open(path, retention, limit, clock, cache)
            reference = _rebuilt(committed, retention, clock)
        watermark = max(watermark, reference.observed_stream_time)
        _check(rng, store, reference)
        _check_bound(store)
    store.close()


def _check_bound(store) -> None:
    """The view's memory estimate is what it holds (no drift from its bookkeeping), and
    within its bound."""
    view = getattr(store, "_inner", store)._view
    held = view._held
    assert view._bytes == sum(session_view._cost(k, sessions) for k, sessions in held.items())
    assert view._bytes <= session_view.MAX_BYTES


def test_a_rollback_drops_what_the_transaction_merged(tmp_path):
    db, store = _open(str(tmp_path / "db"), 100, -1)
    merge_record(store, b"k", 10, b"a", GAP, _concat)
    store.commit({"t": 1})
    merge_record(store, b"k", 12, b"b", GAP, _concat)  # held: (10, 12) replaces (10, 10)
    assert [tuple(w) for w, _ in store.fetch(b"k")] == [(b"k", 10, 12)]
    store.rollback()
    assert [(tuple(w), v) for w, v in store.fetch(b"k")] == [((b"k", 10, 10), b"a")]
    assert store.fetch_session(b"k", 10, 12) is None
    store.close()


def test_a_replay_into_the_database_is_seen_by_held_sessions(tmp_path):
    """A replay writes committed data under the store (a copy catching up on changelogs):
    what the store held before is not what it answers after."""
    db, store = _open(str(tmp_path / "db"), 100, -1)
    merge_record(store, b"k", 10, b"a", GAP, _concat)
    store.commit({"t": 1})
    assert len(list(store.fetch(b"k"))) == 1  # read, so held
    entries = [
        ("s", session_key(b"k", 20, 20), b"r"),
        ("s", end_index_key(b"k", 20, 20), b""),
        ("s", session_key(b"k", 10, 10), None),
        ("s", end_index_key(b"k", 10, 10), None),
    ]
    db.replay({}, entries, {"t": 2})
    assert [(tuple(w), v) for w, v in store.fetch(b"k")] == [((b"k", 20, 20), b"r")]
    assert store.fetch_session(b"k", 10, 10) is None
    assert store.sessions_of_keys([(b"k", 0, MAX_TIME)]) == [{(20, 20): b"r"}]
    merge_record(store, b"k", 21, b"s", GAP, _concat)
    assert [(tuple(w), v) for w, v in store.fetch(b"k")] == [((b"k", 20, 21), b"rs")]
    store.close()


def test_a_range_deletion_of_the_keyspace_is_seen_by_held_sessions(tmp_path):
    db, store = _open(str(tmp_path / "db"), 100, -1)
    for key in (b"a", b"b"):
        merge_record(store, key, 10, b"x", GAP, _concat)
    store.commit({"t": 1})
    assert len(list(store.fetch(b"a"))) == 1  # held
    store.keyspace.delete_range(SESSIONS, BY_END + b"\xff")
    assert list(store.fetch(b"a")) == [] and list(store.all()) == []
    merge_record(store, b"a", 11, b"y", GAP, _concat)  # while the deletion is pending
    assert [(tuple(w), v) for w, v in store.fetch(b"a")] == [((b"a", 11, 11), b"y")]
    store.commit({"t": 2})
    assert [(tuple(w), v) for w, v in store.all()] == [((b"a", 11, 11), b"y")]
    store.close()


def test_a_key_with_more_sessions_than_the_bound_is_read_through(tmp_path, monkeypatch):
    monkeypatch.setattr(session_view, "MAX_PER_KEY", 2)
    db, store = _open(str(tmp_path / "db"), 1000, -1)
    for time in range(0, 50, 10):  # five sessions of one key, gap 3 apart
        merge_record(store, b"k", time, b"%d" % time, GAP, _concat)
    store.commit({"t": 1})
    merge_record(store, b"k", 41, b"+", GAP, _concat)
    assert [(w.start, w.end, v) for w, v in store.fetch(b"k")] == [
        (0, 0, b"0"), (10, 10, b"10"), (20, 20, b"20"), (30, 30, b"30"), (40, 41, b"40+")
    ]
    store.close()


def test_a_view_that_thrashes_stops_loading_for_a_while(tmp_path, monkeypatch):
    """Keys touched once each, far more than the view holds: after `WINDOW` loads that
    mostly evicted, `PAUSE` lookups load nothing (and read through the keyspace, right)."""
    monkeypatch.setattr(session_view, "MAX_BYTES", 3000)  # a handful of keys
    monkeypatch.setattr(session_view, "WINDOW", 16)
    monkeypatch.setattr(session_view, "PAUSE", 100)
    loads = []
    load = session_view.HeldSessions.load
    monkeypatch.setattr(session_view.HeldSessions, "load", lambda self, *a: (loads.append(a[0]), load(self, *a)))
    db, store = _open(str(tmp_path / "db"), 10**6, -1)
    for i in range(200):
        merge_record(store, b"u%03d" % i, 10, b"x", GAP, _concat)
    assert 16 <= len(loads) < 200 - 100  # a window's loads, then a pause of 100 lookups
    for i in range(200):  # read again: held or not, each key has its session
        assert store.sessions_of_keys([(b"u%03d" % i, 0, MAX_TIME)]) == [{(10, 10): b"x"}]
    store.commit({"t": 1})
    assert [(w.key, v) for w, v in store.all()] == [(b"u%03d" % i, b"x") for i in range(200)]
    store.close()


@pytest.mark.parametrize("kind", ["memory", "rocksdb-watermark", "rocksdb-records", "typed"])
@pytest.mark.parametrize(
    "call,error,message",
    [
        ("write", [(b"k", 5, 1, b"v")], "changes\\[1\\]: start must be at most end, got start=5, end=1"),
        ("write", [(b"k", 1)], "changes\\[1\\] must be a \\(key, start, end, value\\) tuple, got"),
        ("write", [(b"k", -1, 1, b"v")], "changes\\[1\\]: start must be"),
        ("write", [(None, 1, 1, b"v")], "changes\\[1\\]: .*key"),
        ("read", [(b"k", 0)], "requests\\[1\\] must be a \\(key, earliest_session_end, latest_session_start\\) tuple"),
        ("read", [(b"k", -3, 5)], "requests\\[1\\]: earliest_session_end must be"),
    ],
)
def test_bulk_calls_name_the_bad_item_and_write_nothing(tmp_path, kind, call, error, message):
    """A bad change or request is refused naming its index and what is wrong with it, and
    a refused `write_sessions` writes none of its changes (the good one before it either)."""
    if kind == "memory":
        store = Stores.in_memory_session_store("s", 100, clock="watermark")
    elif kind == "typed":
        store = _open(str(tmp_path / "db"), 100, -1)[1].typed(Serdes.bytes(), Serdes.bytes())
    else:
        store = _open(str(tmp_path / "db"), 100, -1, kind.split("-")[1])[1]
    good = (b"g", 3, 4, b"x")
    with pytest.raises((TypeError, ValueError), match=message):
        if call == "write":
            store.write_sessions([good, *error])
        else:
            store.sessions_of_keys([(b"g", 0, 9), *error])
    assert list(store.all()) == []
    store.write_sessions([good])
    assert store.sessions_of_keys([(b"g", 0, 9)]) == [{(3, 4): b"x"}]
