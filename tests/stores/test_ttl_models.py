"""TTL key-value stores (in-memory, RocksDB transactional, behind the record cache)
against the reference model `ttl_reference.TtlReference` under random operations,
clock moves, commits, rollbacks and reopening; plus the store-level checks the model
cannot make (typed access, bad arguments, records that keep their bytes)."""

from __future__ import annotations

import datetime
import shutil
import tempfile

import hypothesis.strategies as st
import pytest
from hypothesis import settings
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from spark_statestore import Serdes, Stores, ThreadCache
from spark_statestore.stores.spec import StoreSpec
from spark_statestore.stores.ttl import CLOCK_KEY, ENTRY, INDEX, PENDING_KEY, TtlKeyValueStore, time_bytes
from ttl_reference import TtlReference
from paths import EXAMPLES

FEW_KEYS = [b"", b"a", b"a\x00", b"ab", b"b", b"\xff", b"\xff\xff"]
KEYS = st.one_of(st.sampled_from(FEW_KEYS), st.binary(min_size=0, max_size=3))
VALUES = st.binary(min_size=1, max_size=4)
BOUNDS = st.one_of(st.none(), KEYS)
TTL = 20


class TtlMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dir = tempfile.mkdtemp()
        self.store = None

    @initialize(kind=st.sampled_from(["memory", "rocksdb", "cached"]), limit=st.sampled_from([1, 3, 1000]))
    def build(self, kind, limit):
        self.kind, self.limit = kind, limit
        self.model = TtlReference(TTL, limit)
        self.committed = self.model.copy()
        self.store = self._open()

    def _open(self):
        if self.kind == "memory":
            return Stores.in_memory_key_value_store("t", ttl=TTL)
        store = Stores.persistent_key_value_store("t", self.dir + "/db", ttl=TTL, uncommitted_max_bytes=64)
        if self.kind == "cached":
            store = Stores.caching(store, ThreadCache(300), namespace="t")
        return store

    def teardown(self):
        if self.store is not None:
            self.store.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    @rule(key=KEYS, value=st.one_of(st.none(), VALUES))
    def put(self, key, value):
        self.store.put(key, value)
        self.model.put(key, value)

    @rule(key=KEYS)
    def delete(self, key):
        assert self.store.delete(key) == self.model.delete(key)

    @rule(key=KEYS, value=VALUES)
    def put_if_absent(self, key, value):
        assert self.store.put_if_absent(key, value) == self.model.put_if_absent(key, value)

    @rule(pairs=st.lists(st.tuples(KEYS, st.one_of(st.none(), VALUES)), max_size=5))
    def put_all(self, pairs):
        self.store.put_all(pairs)
        for key, value in pairs:
            self.model.put(key, value)

    @rule(keys=st.lists(KEYS, max_size=5))
    def get_all(self, keys):
        assert self.store.get_all(keys) == [self.model.get(k) for k in keys]

    @rule(lo=BOUNDS, hi=BOUNDS, reverse=st.booleans())
    def scan(self, lo, hi, reverse):
        got = list(self.store.reverse_range(lo, hi) if reverse else self.store.range(lo, hi))
        want = [(k, v) for k, v in self.model.items() if (lo is None or k >= lo) and (hi is None or k <= hi)]
        assert got == (want[::-1] if reverse else want)

    @rule(prefix=KEYS)
    def prefix_scan(self, prefix):
        assert list(self.store.prefix_scan(prefix)) == [(k, v) for k, v in self.model.items() if k.startswith(prefix)]

    @rule(step=st.integers(0, 12))
    def advance(self, step):
        now = self.model.now + step
        assert self.store.advance_time(now, self.limit) == len(self.model.advance(now))
        assert self.store.time == self.model.now

    @precondition(lambda self: self.kind != "memory")
    @rule()
    def commit(self):
        self.store.commit({"n": 1})
        self.committed = self.model.copy()

    @precondition(lambda self: self.kind != "memory")
    @rule()
    def rollback(self):
        self.store.rollback()
        self.model = self.committed.copy()

    @precondition(lambda self: self.kind != "memory")
    @rule()
    def reopen(self):
        self.store.close()  # discards what was not committed
        self.store = self._open()
        self.model = self.committed.copy()

    @invariant()
    def same_live_entries_and_one_index_entry_per_stored_entry(self):
        if self.store is None:
            return
        assert list(self.store.all()) == self.model.items()
        assert self.store.time == self.model.now
        raw = list(self.store.inner.all())
        entries = {k[1:]: v for k, v in raw if k[:1] == ENTRY}
        index = {k[9:]: k[1:9] for k, _ in raw if k[:1] == INDEX}
        assert entries.keys() == index.keys() == self.model.stored.keys()
        assert all(entries[k][:8] == index[k] for k in entries)


TestTtlModel = TtlMachine.TestCase
TestTtlModel.settings = settings(max_examples=60, stateful_step_count=40, deadline=None)


def test_typed_ttl_store_and_timedelta(tmp_path):
    store = Stores.persistent_key_value_store("t", tmp_path / "db", ttl=datetime.timedelta(seconds=1))
    typed = store.typed(Serdes.string(), Serdes.int64())
    store.advance_time(10_000)
    typed.put("a", 1)
    typed.put_columns(["b", "c"], [2, 3])
    store.advance_time(10_999)
    assert typed.get_all(["a", "b", "c", "d"]) == [1, 2, 3, None]
    typed.put("a", 4)  # a write renews the expiry
    assert store.advance_time(11_000) == 2
    assert list(typed.all()) == [("a", 4)]
    store.commit()
    store.close()
    store = Stores.persistent_key_value_store("t", tmp_path / "db", ttl=1000)
    assert store.time == 11_000 and list(store.typed(Serdes.string(), Serdes.int64()).all()) == [("a", 4)]
    store.close()


def test_bad_ttl_arguments_name_the_parameter(tmp_path):
    with pytest.raises(ValueError, match=r"ttl must be more than 0 .* got int: 0"):
        Stores.in_memory_key_value_store("t", ttl=0)
    with pytest.raises(TypeError, match=r"ttl must be int milliseconds or a timedelta, got str"):
        StoreSpec.key_value("t", ttl="1h")
    with pytest.raises(ValueError, match=r"ttl_clock must be one of 'processing_time', 'event_time', got str: 'wall'"):
        StoreSpec.key_value("t", ttl=5, ttl_clock="wall")
    store = Stores.in_memory_key_value_store("t", ttl=5)
    with pytest.raises(ValueError, match=r"limit"):
        store.advance_time(3, -1)
    with pytest.raises(TypeError, match=r"now"):
        store.advance_time("3")


def test_a_store_cannot_be_reopened_with_or_without_ttl(tmp_path):
    Stores.persistent_key_value_store("t", tmp_path / "a").close()
    with pytest.raises(ValueError, match=r"store 't' .* was created as \{'kind': 'key_value'\}.*key_value_ttl"):
        Stores.persistent_key_value_store("t", tmp_path / "a", ttl=5)
    Stores.persistent_key_value_store("t", tmp_path / "b", ttl=5).close()
    with pytest.raises(ValueError, match=r"was created as \{'kind': 'key_value_ttl', 'ttl'"):
        Stores.persistent_key_value_store("t", tmp_path / "b")


@pytest.mark.parametrize("ttl,clock", [(2000, "processing_time"), (1000, "event_time"), (2000, "event_time")])
def test_a_store_cannot_be_reopened_with_another_ttl_or_clock(tmp_path, ttl, clock):
    store = Stores.persistent_key_value_store("t", tmp_path / "db", ttl=1000)
    store.advance_time(10)
    store.put(b"k", b"v")  # expires at 1010 on the processing-time clock
    store.commit()
    store.close()
    refused = r"store 't' in .* was created as \{'kind': 'key_value_ttl', 'ttl': \{.*\}\}; cannot open it as"
    with pytest.raises(ValueError, match=refused) as error:
        Stores.persistent_key_value_store("t", tmp_path / "db", ttl=ttl, ttl_clock=clock)
    recorded, declared = str(error.value).split("; cannot open it as ")
    assert "'duration': 1000" in recorded and "'clock': 'processing_time'" in recorded
    assert f"'duration': {ttl}" in declared and f"'clock': '{clock}'" in declared
    assert declared.endswith(": keep the declaration, or open another path")
    store = Stores.persistent_key_value_store("t", tmp_path / "db", ttl=1000)  # as it was made
    assert store.get(b"k") == b"v" and store.advance_time(1010) == 1 and store.get(b"k") is None
    store.close()


def test_an_entry_written_before_the_clock_moves_lives_ttl_from_its_first_time(tmp_path):
    """An event-time store in Spark's first batch (no watermark yet: the clock stays unset)."""
    hour, first = 3_600_000, 1_700_000_000_000
    store = Stores.persistent_key_value_store("t", tmp_path / "db", ttl=hour, ttl_clock="event_time")
    store.put(b"early", b"1")  # the clock has no time yet
    store.commit()
    store.close()
    store = Stores.persistent_key_value_store("t", tmp_path / "db", ttl=hour, ttl_clock="event_time")
    assert store.advance_time(first) == 0  # the clock's first time: the early entry is written at it
    store.put(b"later", b"2")
    assert store.get_all([b"early", b"later"]) == [b"1", b"2"]
    store.commit()
    committed = store.read_only("READ_COMMITTED")
    assert store.advance_time(first + hour - 1) == 0
    assert list(store.all()) == [(b"early", b"1"), (b"later", b"2")] and committed.get(b"early") == b"1"
    assert store.advance_time(first + hour, limit=1) == 1  # oldest first: the early entry
    assert list(store.all()) == [] and store.get(b"early") is None
    stored = [k for k, _ in store.inner.all()]
    assert stored == [ENTRY + b"later", INDEX + time_bytes(first + hour) + b"later", CLOCK_KEY, PENDING_KEY]
    store.close()


def test_a_kept_view_reads_on_its_own_clock(tmp_path):
    store = Stores.persistent_key_value_store("t", tmp_path / "db", ttl=10)
    store.advance_time(0)
    store.put(b"k", b"v")  # expires at 10
    store.commit()
    committed = store.read_only("READ_COMMITTED")
    store.advance_time(10, limit=0)  # the clock moves in the transaction; nothing deleted yet
    assert store.get(b"k") is None and committed.get(b"k") == b"v"
    assert isinstance(committed, TtlKeyValueStore)
    store.close()


def test_the_store_demo_keeps_the_sensors_seen_lately(tmp_path):
    import subprocess
    import sys

    demo = str(EXAMPLES / "store_demo.py")
    out = subprocess.run(
        [sys.executable, demo, "--events", "300", "--state-dir", str(tmp_path)], capture_output=True, text=True, check=True
    ).stdout
    line = next(line for line in out.splitlines() if line.startswith("sensors seen in the last second"))
    seen = eval(line.split(": ", 1)[1])  # noqa: S307 - the demo's own dict of sensor -> event time
    assert seen and set(seen) <= {f"sensor-{i}" for i in range(1, 6)}


@pytest.mark.parametrize("kind", ["memory", "rocksdb"])
def test_a_clock_past_the_largest_time_is_refused_and_the_store_still_works(tmp_path, kind):
    store = (
        Stores.in_memory_key_value_store("t", ttl=10)
        if kind == "memory"
        else Stores.persistent_key_value_store("t", tmp_path / "db", ttl=10)
    )
    store.advance_time(0)
    store.put(b"k", b"v")  # expires at 10
    for bad in (2**63, 2**64 + 5):
        with pytest.raises(ValueError, match=rf"now must be at most {2**63 - 1}, got {bad}"):
            store.advance_time(bad)
        assert store.time == 0 and store.get(b"k") == b"v"
    assert store.advance_time(1000) == 1 and store.get(b"k") is None and store.time == 1000
    store.put(b"k", b"w")
    assert store.advance_time(2**63 - 1) == 1 and store.time == 2**63 - 1 and list(store.all()) == []
    store.close()
