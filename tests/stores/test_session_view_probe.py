"""The persistent session store with its held sessions against the same store without
them (`_view` None: every read through the keyspace), on the edges the model test does
not reach: keys that are prefixes of each other, empty and huge keys, times at 0 and near
2**63-1, one session per key held, loads pausing after a short window, both clocks, spills,
commits and rollbacks. (An iterator opened before a write and consumed after it may differ:
a held key's iterator reads its sessions at its first step, the keyspace's scan as it goes;
the contract asks only for what was written before it was opened.)"""

from __future__ import annotations

import random

import pytest

from spark_statestore import TransactionalDatabase
from spark_statestore.kinds import build_store
from spark_statestore.stores import session_view
from spark_statestore.stores.session_api import SessionSpec
from spark_statestore.stores.spec import StoreSpec

MAX_TIME = 2**63 - 1
KEYS = [b"", b"\x00", b"a", b"a\x00", b"a\x00\x00", b"a\x01", b"\xff", b"b" * 3000]
TIMES = [0, 1, 2, 3, 5, MAX_TIME - 2, MAX_TIME - 1, MAX_TIME]
ITERATORS = ("find_sessions", "backward_find_sessions")


def _store(path: str, retention: int, clock: str, limit: int, held: bool):
    db = TransactionalDatabase(path, uncommitted_max_bytes=limit)
    store = build_store(StoreSpec.of("session", "s", SessionSpec.of("s", retention, clock)), db, on_close=db.close)
    if not held:
        store._view = None
    return store


def _time(rng: random.Random) -> int:
    return rng.choice(TIMES) if rng.random() < 0.6 else rng.randrange(20)


def _call(rng: random.Random, step: int) -> tuple[str, tuple]:
    key, first, second = rng.choice(KEYS), _time(rng), _time(rng)
    start, end = min(first, second), max(first, second)
    calls = [
        (30, ("put", (key, start, end, bytes([rng.randrange(256)]) * rng.randrange(1, 40)))),
        (10, ("remove", (key, start, end))),
        (20, (rng.choice(ITERATORS), (key, _time(rng), _time(rng)))),
        (7, ("fetch_session", (key, start, end))),
        (6, ("sessions_of_keys", ([(key, _time(rng), MAX_TIME), (rng.choice(KEYS), 0, MAX_TIME)],))),
        (4, ("advance_stream_time", (rng.randrange(30),))),
        (4, ("commit", ({"step": step},))),
        (3, ("rollback", ())),
        (3, ("take_ended_sessions", (_time(rng),))),
        (4, ("write_sessions", ([(rng.choice(KEYS), start, end, rng.choice([None, b"v"])) for _ in range(3)],))),
        (3, ("all", ())),
    ]
    return rng.choices([c for _, c in calls], [w for w, _ in calls])[0]


def _outcome(store, name: str, args: tuple):
    try:
        result = getattr(store, name)(*args)
    except Exception as error:  # both stores must refuse alike
        return "error", type(error).__name__, str(error)
    return "done", list(result) if name in ITERATORS or name == "all" else result


@pytest.mark.parametrize("seed", range(12))
def test_held_sessions_answer_as_the_keyspace_does(tmp_path, monkeypatch, seed):
    rng = random.Random(seed)
    monkeypatch.setattr(session_view, "MAX_BYTES", rng.choice([500, 4000, 1 << 30]))
    monkeypatch.setattr(session_view, "MAX_PER_KEY", rng.choice([1, 2, 64]))
    monkeypatch.setattr(session_view, "WINDOW", rng.choice([2, 4096]))
    monkeypatch.setattr(session_view, "PAUSE", rng.choice([3, 100]))
    retention, clock, limit = rng.choice([0, 3, 50, MAX_TIME]), rng.choice(["watermark", "records"]), rng.choice([300, 1 << 30])
    stores = [_store(str(tmp_path / name), retention, clock, limit, name == "held") for name in ("held", "plain")]
    for step in range(150):
        name, args = _call(rng, step)
        held, plain = (_outcome(store, name, args) for store in stores)
        assert held == plain, (step, name, args)
    for store in stores:
        store.close()


def test_a_cached_store_reads_nothing_once_everything_expired(tmp_path):
    """Stream time at 2**63-1 with retention 0: every session is expired, and a read
    through the record cache gives none (it asked the store for sessions ending after
    2**63-1 and was refused: earliest_session_end out of range)."""
    from spark_statestore.cache.caching_session import CachingSessionStore
    from spark_statestore.cache.thread_cache import ThreadCache

    store = CachingSessionStore(_store(str(tmp_path / "db"), 0, "watermark", 1 << 30, True), ThreadCache(3000))
    store.put(b"k", 1, 2, b"v")
    store.advance_stream_time(MAX_TIME)
    assert list(store.find_sessions(b"k", 0, MAX_TIME)) == []
    assert list(store.backward_find_sessions_range(None, None, 0, MAX_TIME)) == []
    store.close()
