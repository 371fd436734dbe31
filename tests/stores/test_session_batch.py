"""`merge_batch` against its reference: `merge_record` on each record in turn on an
in-memory store. Batches mix keys, late and out-of-order records, retention short enough
for sessions to expire within a batch, and both clocks; state and stream time must match."""

from __future__ import annotations

import random

import pytest
from session_support import open_session_store

from spark_statestore.serde import Serdes
from spark_statestore.stores.session_batch import merge_batch
from spark_statestore.stores.session_layout import SessionWindow
from spark_statestore.stores.session_merge import GapSessions, merge_record


def _concat(a: bytes, b: bytes) -> bytes:
    return (a + b)[-12:]


def _state(store) -> tuple:
    return [(tuple(w), v) for w, v in store.all()], store.observed_stream_time


@pytest.mark.parametrize("kind", ["memory", "rocksdb", "typed-rocksdb", "gap-rocksdb"])
@pytest.mark.parametrize("clock", ["records", "external"])
@pytest.mark.parametrize("seed", range(8))
def test_a_batch_leaves_the_state_merging_each_record_in_turn_leaves(tmp_path, kind, clock, seed):
    """`typed`: through a typed store (keys as str); `gap`: as a Spark processor calls it,
    `GapSessions.merge_batch` on the typed store its `Session` declaration hands it."""
    rng = random.Random(seed)
    gap, retention = rng.choice([1, 4, 15]), rng.choice([3, 10, 25, 10**6])
    reference = open_session_store("memory", "", retention, clock)
    store = raw = open_session_store(kind.split("-")[-1], str(tmp_path / "db"), retention, clock)
    if kind != "memory" and kind != "rocksdb":
        typed = store.typed(Serdes.string(), Serdes.bytes())
        store = _GapBatch(GapSessions(typed, gap)) if kind.startswith("gap") else _TypedBytes(typed)
    for number in range(12):
        size = rng.randint(0, 40)
        keys = [b"k%d" % rng.randrange(5) for _ in range(size)]
        times = [max(0, number * 20 + rng.randint(-40, 20)) for _ in range(size)]
        values = [rng.randbytes(2) for _ in range(size)]
        if clock == "external":
            for s in (reference, store):
                s.advance_stream_time(max(0, number * 20 - 30))
        for key, time, value in zip(keys, times, values):
            merge_record(reference, key, time, value, gap, _concat)
        if isinstance(store, _TypedBytes):
            str_keys = [k.decode() for k in keys]
            if isinstance(store, _GapBatch):
                written = store.merge_batch(str_keys, times, values, _concat)
            else:
                written = merge_batch(store.typed, str_keys, times, values, gap, _concat)
            written = [(SessionWindow(w.key.encode(), w.start, w.end), v) for w, v in written]
        else:
            written = merge_batch(store, keys, times, values, gap, _concat)
        assert _state(store) == _state(reference)
        assert all(store.fetch_session(*w) == v for w, v in written)
        if kind != "memory":
            raw.commit({"t": number})
    raw.close()


class _TypedBytes:
    """A typed store (str keys) seen with bytes keys, so it answers like the reference."""

    def __init__(self, typed) -> None:
        self.typed = typed

    def __getattr__(self, name):
        return getattr(self.typed, name)

    def all(self):
        return [(SessionWindow(w.key.encode(), w.start, w.end), v) for w, v in self.typed.all()]

    def fetch_session(self, key, start, end):
        return self.typed.fetch_session(key.decode(), start, end)


class _GapBatch(_TypedBytes):
    """`merge_batch` called as `GapSessions.merge_batch` (its gap, not the one passed)."""

    def merge_batch(self, keys, times, values, merge):
        return self.typed.merge_batch(keys, times, values, merge)


def test_columns_of_different_lengths_are_refused():
    store = open_session_store("memory", "", 100)
    with pytest.raises(ValueError, match="keys, times and values"):
        merge_batch(store, [b"a"], [1, 2], [b"x"], 5, _concat)
