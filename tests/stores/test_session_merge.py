"""The session merge helper (`stores.session_merge`) against a reference: sessions
recomputed from scratch out of every record seen, with Spark SQL's gap semantics."""

from __future__ import annotations

import random

import pytest
from session_support import open_session_store

from spark_statestore.serde import Serdes
from spark_statestore.stores.session_layout import SessionWindow
from spark_statestore.stores.session_merge import GapSessions, check_gap, close_sessions, is_late, merge_record


def _sessions_of(times: list[int], gap: int) -> list[tuple[int, int, int]]:
    """(start, end, count) of the sessions of one key's record times: records join while
    the next is at most `gap` after the session's last one (Spark's `session_window`)."""
    out: list[list[int]] = []
    for t in sorted(times):
        if out and t <= out[-1][1] + gap:
            out[-1][1] = t
            out[-1][2] += 1
        else:
            out.append([t, t, 1])
    return [tuple(s) for s in out]  # type: ignore[misc]


def _add(a: int, b: int) -> int:
    return a + b


@pytest.mark.parametrize("kind", ["memory", "rocksdb"])
@pytest.mark.parametrize("seed", range(3))
def test_merged_sessions_equal_sessions_recomputed_from_all_records(tmp_path, kind, seed):
    rng = random.Random(seed)
    gap = rng.choice([1, 5, 20])
    store = open_session_store(kind, str(tmp_path / "db"), 10**6).typed(Serdes.string(), Serdes.int64())
    seen: dict[str, list[int]] = {}
    for _ in range(300):
        key, time = rng.choice("abcd"), rng.randrange(400)  # out of order, as records arrive
        window, count = merge_record(store, key, time, 1, gap, _add)
        seen.setdefault(key, []).append(time)
        assert (
            window.start <= time <= window.end and store.fetch_session(key, window.start, window.end) == count
        )
    for key, times in seen.items():
        assert [(w.start, w.end, v) for w, v in store.fetch(key)] == _sessions_of(times, gap)
    store.close()


def test_a_record_between_two_sessions_joins_them_into_one():
    store = open_session_store("memory", "", 1000)
    merge_record(store, b"k", 10, b"a", 5, _concat)
    merge_record(store, b"k", 20, b"b", 5, _concat)
    assert [w for w, _ in store.fetch(b"k")] == [SessionWindow(b"k", 10, 10), SessionWindow(b"k", 20, 20)]
    window, value = merge_record(store, b"k", 15, b"c", 5, _concat)  # 5 from each: inclusive gap
    assert (window, value) == (SessionWindow(b"k", 10, 20), b"abc")
    assert list(store.fetch(b"k")) == [(window, b"abc")]


def _concat(a: bytes, b: bytes) -> bytes:
    return a + b


@pytest.mark.parametrize("kind", ["memory", "rocksdb"])
def test_the_watermark_closes_sessions_once_their_gap_passed(tmp_path, kind):
    store = open_session_store(kind, str(tmp_path / "db"), 1000, clock="external")
    for key, time in [(b"a", 0), (b"a", 3), (b"b", 2), (b"c", 30)]:
        merge_record(store, key, time, b"x", 10, _concat)
    assert close_sessions(store, 12, 10) == [(SessionWindow(b"b", 2, 2), b"x")]  # a ends 3: 13 > 12
    assert close_sessions(store, 13, 10) == [(SessionWindow(b"a", 0, 3), b"xx")]
    assert close_sessions(store, 13, 10) == []  # reported once: taken out of the store
    assert [w.key for w, _ in store.all()] == [b"c"]
    assert is_late(3, 10, 13) and not is_late(4, 10, 13)
    store.close()


@pytest.mark.parametrize("kind", ["memory", "rocksdb"])
def test_gap_sessions_close_sessions_with_their_gap_and_close_the_store(tmp_path, kind):
    """What a Spark `Session` declaration hands a processor: the store's methods, and the
    merge helpers with the declared gap; `close()` is the store's own."""
    store = open_session_store(kind, str(tmp_path / "db"), 1000, clock="external")
    sessions = GapSessions(store, 10)
    sessions.merge(b"a", 0, b"x", _concat)
    sessions.merge(b"a", 3, b"y", _concat)
    sessions.merge(b"b", 8, b"z", _concat)
    assert sessions.close_sessions(12) == []  # a's session [0, 3] closes at 13
    assert sessions.close_sessions(13) == [(SessionWindow(b"a", 0, 3), b"xy")]
    assert [w.key for w, _ in sessions.all()] == [b"b"]
    assert sessions.is_late(3, 13) and not sessions.is_late(4, 13)
    sessions.close()
    assert not store.is_open


def test_gap_is_checked():
    assert check_gap(5) == 5
    with pytest.raises(ValueError, match="gap"):
        check_gap(0)
    with pytest.raises(TypeError, match="gap"):
        check_gap("5s")
