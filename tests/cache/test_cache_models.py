"""A cached store against its uncached twin under random operations and budgets.

Checked throughout: every read equals the twin's; every forwarded `Change` carries the
value the wrapped store held before that flush as its old value (when old values are
sent), and the wrapped store then holds the new value; the wrapped store only ever
changes through flushes. After a final flush the wrapped store equals the twin, and the
last value forwarded per key is the twin's final value.
"""

from __future__ import annotations

import random

import hypothesis.strategies as st
import pytest
from hypothesis import settings
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from spark_statestore import Stores, ThreadCache
from spark_statestore.cache import entry_size

KEYS = [b"a", b"a\x00", b"b", b"ba", b"c", b"d", b"e", b"\xff"]
BUDGETS = [0, 2 * entry_size(b"kk", b"vv"), 5 * entry_size(b"kk", b"vv"), 10**6]


class Harness:
    """A cached store, its wrapped store, an uncached twin, and the checks above."""

    def __init__(self, kind: str, budget: int, send_old: bool) -> None:
        self.kind = kind
        self.send_old = send_old
        self.window = kind == "window"
        if self.window:
            self.inner = Stores.in_memory_window_store("s", 50, 5)
            self.twin = Stores.in_memory_window_store("s", 50, 5)
        else:
            self.inner = Stores.in_memory_key_value_store("s")
            self.twin = Stores.in_memory_key_value_store("s")
        self.store_model: dict = {}  # what the wrapped store must hold, by flushes alone
        self.last_forwarded: dict = {}
        self.cached = Stores.caching(self.inner, ThreadCache(budget), self._on_flush, send_old)

    def _on_flush(self, changes) -> None:
        for change in changes:
            ident = (change.window_start, change.key)
            before = self.store_model.get(ident)
            # a window that expired while its update waited in the cache is still forwarded
            # (the update happened while it was live), but the store no longer keeps it
            expired = self.window and change.window_start <= self.inner.observed_stream_time - 50
            if not self.send_old:
                assert change.old_value is None
            elif expired:
                assert change.old_value in (before, None)
            else:
                assert change.old_value == before
            assert change.new_value is not None or before is not None  # never a no-op deletion
            now = self.inner.get(change.key, change.window_start) if self.window else self.inner.get(change.key)
            assert now == (None if expired else change.new_value)
            self.store_model[ident] = change.new_value
            self.last_forwarded[ident] = change.new_value

    def put(self, key: bytes, value: bytes | None, t: int) -> None:
        if self.window:
            self.cached.put(key, value, t)
            self.twin.put(key, value, t)
        else:
            self.cached.put(key, value)
            self.twin.put(key, value)

    def check_get(self, key: bytes, t: int) -> None:
        if self.window:
            assert self.cached.get(key, t) == self.twin.get(key, t)
            assert self.cached.observed_stream_time == self.twin.observed_stream_time
        else:
            assert self.cached.get(key) == self.twin.get(key)

    def check_range(self, lo, hi, reverse: bool, t: int) -> None:
        if self.window:
            method = "backward_fetch_range" if reverse else "fetch_range"
            got = [(w.key, w.window, v) for w, v in getattr(self.cached, method)(lo, hi, t, t + 30)]
            want = [(w.key, w.window, v) for w, v in getattr(self.twin, method)(lo, hi, t, t + 30)]
            assert got == want
            if lo is not None:
                fetch = "backward_fetch" if reverse else "fetch"
                assert list(getattr(self.cached, fetch)(lo, t, t + 30)) == list(getattr(self.twin, fetch)(lo, t, t + 30))
        else:
            method = "reverse_range" if reverse else "range"
            assert list(getattr(self.cached, method)(lo, hi)) == list(getattr(self.twin, method)(lo, hi))

    def check_wrapped_store_changes_only_by_flushes(self) -> None:
        if self.window:
            stored = {(w.window.start, w.key): v for w, v in self.inner.all()}
            model = {k: v for k, v in self.store_model.items() if v is not None and k[0] > self.inner.observed_stream_time - 50}
        else:
            stored = {(None, k): v for k, v in self.inner.all()}
            model = {k: v for k, v in self.store_model.items() if v is not None}
        assert stored == model

    def finish(self) -> None:
        self.cached.flush()
        self.check_wrapped_store_changes_only_by_flushes()
        if self.window:
            # a flush hands the stream time to the wrapped store, even when the records
            # that advanced it were not written (deleted again, or expired)
            assert self.inner.observed_stream_time == self.twin.observed_stream_time
        if self.window:
            twin = {(w.window.start, w.key): v for w, v in self.twin.all()}
            live = self.twin.observed_stream_time - 50
            forwarded = {k: v for k, v in self.last_forwarded.items() if v is not None and k[0] > live}
        else:
            twin = {(None, k): v for k, v in self.twin.all()}
            forwarded = {k: v for k, v in self.last_forwarded.items() if v is not None}
        assert forwarded == twin


class CacheMachine(RuleBasedStateMachine):
    @initialize(kind=st.sampled_from(["kv", "window"]), budget=st.sampled_from(BUDGETS), send_old=st.booleans())
    def build(self, kind, budget, send_old):
        self.h = Harness(kind, budget, send_old)
        self.t = 0

    @rule(key=st.sampled_from(KEYS), value=st.one_of(st.none(), st.binary(min_size=1, max_size=2)),
          dt=st.integers(-60, 8))
    def put(self, key, value, dt):
        # around the largest time so far: mostly live windows, sometimes late records
        t = max(0, self.t + dt)
        self.t = max(self.t, t)
        self.h.put(key, value, t)

    @rule(key=st.sampled_from(KEYS), dt=st.integers(-70, 0))
    def get(self, key, dt):
        self.h.check_get(key, max(0, self.t + dt))

    @rule(lo=st.one_of(st.none(), st.sampled_from(KEYS)), hi=st.one_of(st.none(), st.sampled_from(KEYS)),
          reverse=st.booleans(), dt=st.integers(-70, 0))
    def range(self, lo, hi, reverse, dt):
        self.h.check_range(lo, hi, reverse, max(0, self.t + dt))

    @rule()
    def flush(self):
        self.h.cached.flush()

    @invariant()
    def wrapped_store_matches_flushes(self):
        if hasattr(self, "h"):
            self.h.check_wrapped_store_changes_only_by_flushes()

    def teardown(self):
        if hasattr(self, "h"):
            self.h.finish()


TestCacheModel = CacheMachine.TestCase
TestCacheModel.settings = settings(max_examples=80, stateful_step_count=60, deadline=None)


@pytest.mark.parametrize("kind", ["kv", "window"])
@pytest.mark.parametrize("budget", BUDGETS)
@pytest.mark.parametrize("send_old", [False, True])
def test_cache_random_walk(kind, budget, send_old):
    rng = random.Random(budget * 7 + send_old + (kind == "window"))
    h = Harness(kind, budget, send_old)
    t = 0
    for _ in range(1500):
        op = rng.random()
        key = rng.choice(KEYS)
        if op < 0.5:
            at = max(0, t + rng.randint(-60, 8))  # around the largest time so far
            t = max(t, at)
            h.put(key, None if rng.random() < 0.2 else bytes([rng.randrange(256)]), at)
        elif op < 0.7:
            h.check_get(key, max(0, t - rng.randint(0, 70)))
        elif op < 0.9:
            h.check_range(rng.choice([None] + KEYS), rng.choice([None] + KEYS), rng.random() < 0.5,
                          max(0, t - rng.randint(0, 70)))
        else:
            h.cached.flush()
        h.check_wrapped_store_changes_only_by_flushes()
    h.finish()
