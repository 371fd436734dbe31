"""Session stores (API.md's session-store part) against a plain-dict reference model.

Every read method of every form (in-memory, RocksDB transactional, cached over each,
typed) is compared with the model under random puts, removes, stream time advances,
flushes, commits, rollbacks and reopens: retention (a session is live while
`end > observed_stream_time - retention_period`), order (one key: end, then start; a key
range: key, end, start; backward reversed), single-record sessions (`start == end`).
"""

from __future__ import annotations

import random

import pytest
from session_support import open_session_store

from spark_statestore.cache.caching_session import CachingSessionStore
from spark_statestore.cache.thread_cache import ThreadCache
from spark_statestore.serde import Serdes
from spark_statestore.stores.session_api import SessionWindow

FEW_KEYS = [b"", b"a", b"a\x00", b"a\x00\x01", b"ab", b"b", b"\xff", b"\xff\xff"]
BOUNDS = [None, *FEW_KEYS]
TIME_SPAN = 40
STEPS = 150
MAX_TIME = 2**63 - 1
KINDS = ["memory", "rocksdb", "cached-memory", "cached-rocksdb", "typed-memory", "typed-rocksdb"]


class Model:
    """The reference: a dict of sessions and the stream time."""

    def __init__(self, retention: int) -> None:
        self.retention = retention
        self.sessions: dict[tuple[bytes, int, int], bytes] = {}
        self.stream_time = -1

    def live(self, end: int) -> bool:
        return end > self.stream_time - self.retention

    def put(self, key: bytes, start: int, end: int, value: bytes | None) -> None:
        self.stream_time = max(self.stream_time, end)
        if not self.live(end):
            return
        if value is None:
            self.sessions.pop((key, start, end), None)
        else:
            self.sessions[(key, start, end)] = value
        self.expire()

    def advance(self, time: int) -> None:
        self.stream_time = max(self.stream_time, time)
        self.expire()

    def expire(self) -> None:
        for k in [k for k in self.sessions if not self.live(k[2])]:
            del self.sessions[k]

    def find(self, key_from, key_to, earliest_end, latest_start, reverse=False, single=False):
        found = [
            (SessionWindow(k, s, e), v)
            for (k, s, e), v in self.sessions.items()
            if (key_from is None or k >= key_from)
            and (key_to is None or k <= key_to)
            and e >= earliest_end
            and s <= latest_start
            and self.live(e)
        ]
        found.sort(
            key=lambda item: (
                (item[0].end, item[0].start) if single else (item[0].key, item[0].end, item[0].start)
            )
        )
        return found[::-1] if reverse else found

    def ended(self, latest_end):
        found = [
            (SessionWindow(k, s, e), v)
            for (k, s, e), v in self.sessions.items()
            if e <= latest_end and self.live(e)
        ]
        return sorted(found, key=lambda item: (item[0].end, item[0].key, item[0].start))


def _open(kind: str, path: str, retention: int, cache: ThreadCache):
    store = open_session_store(kind.split("-")[-1], path, retention)
    if kind.startswith("cached"):
        store = CachingSessionStore(store, cache)
    if kind.startswith("typed"):
        store = store.typed(Serdes.bytes(), Serdes.bytes())
    return store


def _copy(model: Model) -> Model:
    out = Model(model.retention)
    out.sessions = dict(model.sessions)
    out.stream_time = model.stream_time
    return out


def _check_reads(rng: random.Random, store, model: Model) -> None:
    """Every read method against the model, with random arguments."""
    key = rng.choice(FEW_KEYS)
    earliest_end, latest_start = rng.randrange(TIME_SPAN), rng.randrange(TIME_SPAN)
    want = model.find(key, key, earliest_end, latest_start, single=True)
    assert list(store.find_sessions(key, earliest_end, latest_start)) == want
    assert list(store.backward_find_sessions(key, earliest_end, latest_start)) == want[::-1]
    key_from, key_to = rng.choice(BOUNDS), rng.choice(BOUNDS)
    want = model.find(key_from, key_to, earliest_end, latest_start)
    assert list(store.find_sessions_range(key_from, key_to, earliest_end, latest_start)) == want
    assert (
        list(store.backward_find_sessions_range(key_from, key_to, earliest_end, latest_start)) == want[::-1]
    )
    want = model.find(key, key, 0, MAX_TIME, single=True)
    assert list(store.fetch(key)) == want
    assert list(store.backward_fetch(key)) == want[::-1]
    want = model.find(None, None, 0, MAX_TIME)
    assert list(store.all()) == want
    assert list(store.backward_all()) == want[::-1]
    latest_end = rng.randrange(TIME_SPAN + 10)
    assert list(store.find_ended_sessions(latest_end)) == model.ended(latest_end)
    if model.sessions and rng.random() < 0.7:
        probe = rng.choice(sorted(model.sessions))
    else:
        probe = (key, earliest_end, earliest_end + rng.randrange(4))
    assert store.fetch_session(*probe) == model.sessions.get(probe)
    assert store.observed_stream_time == model.stream_time


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("kind", KINDS)
def test_every_method_against_the_model(tmp_path, kind, seed):
    """Random puts, removes, advances, flushes (and commits, rollbacks and reopens of the
    persistent forms) against the model, every read method checked after each step."""
    rng = random.Random(f"{kind}-{seed}")
    retention = rng.choice([6, 15, 40])
    model, committed = Model(retention), Model(retention)
    cache = ThreadCache(rng.choice([200, 1 << 20]))  # a small cache evicts often
    path = str(tmp_path / "db")
    store = _open(kind, path, retention, cache)
    persistent = kind.endswith("rocksdb")
    for _ in range(STEPS):
        op = rng.random()
        key = rng.choice(FEW_KEYS) if rng.random() < 0.8 else rng.randbytes(rng.randrange(3))
        start = rng.randrange(TIME_SPAN)
        end = start + rng.randrange(8)
        if op < 0.55:
            value = None if rng.random() < 0.1 else rng.randbytes(1 + rng.randrange(3))
            store.put(key, start, end, value)
            model.put(key, start, end, value)
        elif op < 0.7 and model.sessions:
            session = rng.choice(sorted(model.sessions))
            store.remove(*session)
            model.put(*session, None)
        elif op < 0.75:
            time = rng.randrange(TIME_SPAN + 10)
            store.advance_stream_time(time)
            model.advance(time)
        elif op < 0.8:
            store.flush()
        elif persistent and op < 0.88:
            store.commit({"t": 1})
            committed = _copy(model)
        elif persistent and op < 0.94:
            store.rollback()
            model = _copy(committed)
        elif persistent:
            store.close()
            store = _open(kind, path, retention, cache)
            model = _copy(committed)
        _check_reads(rng, store, model)
    store.close()


@pytest.mark.parametrize("kind", ["memory", "rocksdb"])
def test_single_record_sessions_and_order(tmp_path, kind):
    """A single-record session has start == end; one key's sessions come by end, then start."""
    store = open_session_store(kind, str(tmp_path / "db"), 100)
    store.put(b"k", 7, 7, b"one")
    store.put(b"k", 2, 9, b"wide")
    store.put(b"k", 5, 9, b"narrow")
    store.put(b"j", 0, 1, b"other")
    assert [(w.start, w.end) for w, _ in store.fetch(b"k")] == [(7, 7), (2, 9), (5, 9)]
    assert store.fetch_session(b"k", 7, 7) == b"one"
    assert [w.key for w, _ in store.all()] == [b"j", b"k", b"k", b"k"]
    store.close()


@pytest.mark.parametrize("kind", ["memory", "rocksdb"])
def test_expired_sessions_are_dropped_and_never_returned(tmp_path, kind):
    store = open_session_store(kind, str(tmp_path / "db"), 10)
    store.put(b"k", 0, 5, b"old")
    store.put(b"k", 20, 20, b"new")  # stream time 20: live while end > 10
    assert store.fetch_session(b"k", 0, 5) is None
    store.put(b"k", 1, 10, b"late")  # end 10 is not live: dropped and counted
    assert store.metrics.dropped_records_total == 1
    assert [w for w, _ in store.all()] == [SessionWindow(b"k", 20, 20)]
    store.close()


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda s: s.put(b"k", 5, 4, b"v"), "start must be at most end, got start=5, end=4"),
        (lambda s: s.put(None, 0, 0, b"v"), "key cannot be None"),
        (lambda s: s.put(b"k", -1, 0, b"v"), "start must be between"),
        (lambda s: s.find_sessions(b"k", "0", 1), "earliest_session_end must be an int"),
        (lambda s: s.find_sessions_range(b"a", 3, 0, 1), "key_to must be bytes or None"),
    ],
)
def test_bad_arguments_name_the_parameter(call, message):
    from spark_statestore.stores.memory_session import InMemorySessionStore
    from spark_statestore.stores.session_api import SessionSpec

    store = InMemorySessionStore("s", SessionSpec.of("s", 10))
    with pytest.raises((TypeError, ValueError), match=message):
        call(store)


def test_spec_validation():
    from spark_statestore.stores.session_api import SessionSpec

    with pytest.raises(TypeError, match="name cannot be None"):
        SessionSpec.of(None, 10)
    with pytest.raises(ValueError, match="retention_period cannot be negative"):
        SessionSpec.of("s", -1)


def test_expiry_frees_exactly_the_expired_sessions(tmp_path):
    """An advance that expires many sessions deletes them and their index entries, and
    touches no live session: the work is what is freed."""
    from spark_statestore.stores import persistent_session

    store = open_session_store("rocksdb", str(tmp_path / "db"), 10)
    expired = persistent_session.EXPIRE_CHUNK * 2 + 5  # more than one chunk of the index
    for i in range(expired):
        store.put(b"k%05d" % i, 0, i % 7, b"v")
    store.put(b"live", 9, 9, b"v")
    deleted: list[bytes] = []
    ks = store.keyspace
    original = ks.delete
    ks.delete = lambda key: (deleted.append(key), original(key))[1]  # type: ignore[method-assign]
    store.advance_stream_time(18)  # live: ends above 8
    ks.delete = original  # type: ignore[method-assign]
    assert len(deleted) == len(set(deleted)) == 2 * expired
    assert not any(b"live" in key for key in deleted)
    assert [k[:5] for k, _ in ks.scan(b"\x01", b"\x03")] == [
        b"\x01live",
        b"\x02" + (9).to_bytes(8, "big")[:4],
    ]
    assert [w for w, _ in store.all()] == [SessionWindow(b"live", 9, 9)]
    store.close()


@pytest.mark.parametrize("kind", KINDS)
def test_reads_go_on_while_the_sessions_they_found_are_replaced(tmp_path, kind):
    """What a merge does: walk sessions and replace them while the walk is open (a tiny
    cache flushes and evicts under the walk). Every session is visited once, in order."""
    rng = random.Random(kind)
    store = _open(kind, str(tmp_path / "db"), 1000, ThreadCache(300))
    model = Model(1000)
    for _ in range(120):
        key, start = rng.choice(FEW_KEYS), 1 + rng.randrange(200)
        end = start + rng.randrange(5)
        value = rng.randbytes(2)
        store.put(key, start, end, value)
        model.put(key, start, end, value)
    want = model.find(None, None, 0, MAX_TIME)
    seen = []
    for window, value in store.all():
        seen.append((window, value))
        store.remove(window.key, window.start, window.end)
        store.put(window.key, window.start - 1, window.end, value)  # where the walk has been
    assert seen == want
    replaced = {(w.key, w.start - 1, w.end): v for w, v in want}
    assert {tuple(w): v for w, v in store.all()} == replaced
    store.close()


def test_read_only_views_see_committed_or_pending_sessions(tmp_path):
    """A READ_COMMITTED view sees only committed sessions and stream time, also while
    writes are pending; a READ_UNCOMMITTED view sees the pending ones; a spill changes neither."""
    store = open_session_store("rocksdb", str(tmp_path / "db"), 100)
    store.put(b"k", 1, 2, b"committed")
    store.commit({"o": 1})
    store.put(b"k", 50, 60, b"pending")
    committed, uncommitted = store.read_only("READ_COMMITTED"), store.read_only("READ_UNCOMMITTED")
    assert [v for _, v in committed.fetch(b"k")] == [b"committed"] and committed.observed_stream_time == 2
    assert [v for _, v in uncommitted.fetch(b"k")] == [b"committed", b"pending"]
    assert uncommitted.observed_stream_time == 60
    requests = [(b"k", 0, 100), (b"none", 0, 100)]
    assert committed.sessions_of_keys(requests) == [{(1, 2): b"committed"}, {}]
    assert uncommitted.sessions_of_keys(requests) == [{(1, 2): b"committed", (50, 60): b"pending"}, {}]
    with pytest.raises(AttributeError):
        committed.put(b"k", 3, 3, b"no")  # a view has the read methods only
    store.rollback()
    assert [v for _, v in uncommitted.fetch(b"k")] == [b"committed"] and store.observed_stream_time == 2
    store.close()
