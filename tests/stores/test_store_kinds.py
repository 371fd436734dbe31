"""The contract of every store kind, parametrized from the registry (`stores/kinds.py`).

Each store of a kind, as `build_store` layers it - in memory, transactional RocksDB,
behind the record cache (over RocksDB), and typed through serdes over all of those - is
walked through seeded random operations against the kind's reference model, and after
every commit its kind's key schema (`live_keys`, `data_end`, `key_columns`, `user_key`)
reads back from the committed column family exactly what the model committed. A new kind
adds its contract to `CONTRACTS` (the first test fails until it does). Store level: seconds.
"""

from __future__ import annotations

import random

import pyarrow as pa
import pytest
from test_session_store import Model as SessionModel
from test_store_models import WindowModel

from spark_statestore import Serdes, ThreadCache, TransactionalDatabase
from spark_statestore.kinds import KINDS, build_store
from spark_statestore.stores.rocksdb_scan import scan_chunks
from spark_statestore.stores.session_api import SessionSpec
from spark_statestore.stores.spec import StoreSpec

VARIANTS = ("memory", "rocksdb", "cached", "typed")
KEYS = ["", "a", "a\x00", "ab", "b", "ba", "c"]  # prefixes of each other; ASCII: str order is byte order
STEPS = 400


class Harness:
    """One store of `spec` as `variant` builds it, and the model-side view of its keys and
    values (str; the bytes stores hold them UTF-8 encoded)."""

    def __init__(self, spec: StoreSpec, variant: str, directory: str) -> None:
        self.spec, self.variant, self.directory = spec, variant, directory
        self.persistent = variant != "memory"
        self.typed = variant == "typed"
        self.db = None
        self.cache = ThreadCache(1500)
        self.store = self._open()

    def _open(self):
        self.layers = {}
        if not self.persistent:
            return build_store(self.spec)
        # a small limit: the transaction spills to its staging area now and then
        self.db = TransactionalDatabase(self.directory, uncommitted_max_bytes=200)
        layers = {}
        if self.variant in ("cached", "typed") and self.spec.cached:
            layers["cache"] = self.cache  # a few entries: evictions flush in the middle of a walk
        if self.typed:
            layers["serdes"] = (Serdes.string(), Serdes.string())
        self.layers = layers
        return build_store(self.spec, self.db, **layers)

    def reopen(self) -> None:
        self.close()
        self.store = self._open()

    def close(self) -> None:
        self.store.close()
        if self.db is not None:
            self.db.close()

    def key(self, key):
        """A model key (or None) as the store takes it."""
        return key if self.typed or key is None else key.encode()

    def out(self, data):
        """What the store returned, as the model holds it."""
        return data if self.typed or data is None else data.decode()

    def committed_rows(self) -> list[tuple]:
        """The committed column family read through the kind's key schema:
        `(key, value, *parts)` in stored order (what the bulk readers serve)."""
        kind, spec = self.spec.store_kind, self.spec
        live = kind.live_keys(spec, self.store, lambda key, default: default)  # no changelogs after it
        lo, hi = (None, None) if live is None else live
        end = kind.data_end(spec)
        rows = []
        for keys, values in scan_chunks(self.db.db.column_family(spec.name), lo, hi, 16):
            data = [(k, v) for k, v in zip(keys, values) if end is None or k < end]
            if not data:
                continue
            stored = pa.array([k for k, _ in data], pa.binary())
            user, parts = kind.key_columns(spec, stored)
            assert user.to_pylist() == [kind.user_key(spec, k) for k, _ in data]  # one schema, two paths
            columns = [p.to_pylist() for p in parts]
            rows += [(u.decode(), v.decode(), *more) for u, (_, v), *more in zip(user.to_pylist(), data, *columns)]
        return rows


class KeyValueContract:
    """A key-value store is a dict with sorted iteration."""

    specs = (StoreSpec.key_value("kv"),)

    def model(self, spec: StoreSpec) -> dict:
        return {}

    def snapshot(self, model: dict) -> dict:
        return dict(model)

    def restore(self, model: dict, snapshot: dict) -> dict:
        return dict(snapshot)

    def rows(self, model: dict) -> list[tuple]:
        return sorted(model.items())

    def step(self, h: Harness, model: dict, rng: random.Random) -> None:
        store, key, value = h.store, rng.choice(KEYS), rng.choice([None, "x", "yy", "zzz"])
        op = rng.randrange(8)
        if op == 0:
            store.put(h.key(key), h.key(value))
            if value is None:
                model.pop(key, None)
            else:
                model[key] = value
        elif op == 1:
            assert h.out(store.delete(h.key(key))) == model.pop(key, None)
        elif op == 2 and value is not None:
            assert h.out(store.put_if_absent(h.key(key), h.key(value))) == model.get(key)
            model.setdefault(key, value)
        elif op == 3:
            pairs = [(rng.choice(KEYS), rng.choice([None, "p", "q"])) for _ in range(rng.randrange(4))]
            store.put_all([(h.key(k), h.key(v)) for k, v in pairs])
            for k, v in pairs:
                if v is None:
                    model.pop(k, None)
                else:
                    model[k] = v
        elif op == 4:
            keys = rng.sample(KEYS, 3)
            assert [h.out(v) for v in store.get_all([h.key(k) for k in keys])] == [model.get(k) for k in keys]
        elif op == 5:
            lo, hi = rng.choice([None, *KEYS]), rng.choice([None, *KEYS])
            expected = [
                (k, v) for k, v in sorted(model.items()) if (lo is None or k >= lo) and (hi is None or k <= hi)
            ]
            if lo is not None and hi is not None and lo > hi:
                expected = []
            reverse = rng.random() < 0.5
            got = (store.reverse_range if reverse else store.range)(h.key(lo), h.key(hi))
            assert [(h.out(k), h.out(v)) for k, v in got] == (expected[::-1] if reverse else expected)
        elif op == 6:
            expected = [(k, v) for k, v in sorted(model.items()) if k.startswith(key)]
            assert [(h.out(k), h.out(v)) for k, v in store.prefix_scan(h.key(key))] == expected
        else:
            assert h.out(store.get(h.key(key))) == model.get(key)

    def check(self, h: Harness, model: dict) -> None:
        assert [(h.out(k), h.out(v)) for k, v in h.store.all()] == sorted(model.items())
        assert [(h.out(k), h.out(v)) for k, v in h.store.reverse_all()] == sorted(model.items())[::-1]


class WindowContract:
    """A window store is `WindowModel` (KIP-428 expiry on the records' clock, duplicates)."""

    RETENTION, SIZE = 30, 10
    specs = (
        StoreSpec.window("w", RETENTION, SIZE, segment_interval=7),
        StoreSpec.window("dups", RETENTION, SIZE, retain_duplicates=True, segment_interval=7),
    )

    def model(self, spec: StoreSpec) -> WindowModel:
        return WindowModel(spec.params.retention_period, spec.params.retain_duplicates)

    def snapshot(self, model: WindowModel) -> tuple:
        return model.snapshot()

    def restore(self, model: WindowModel, snapshot: tuple) -> WindowModel:
        model.restore(snapshot)
        model.dropped = 0  # a reopened store counts anew; a rollback keeps the count: see `step`
        return model

    def rows(self, model: WindowModel) -> list[tuple]:
        return [(k, v, start) for k, start, v in model.select(None, None, 0, 2**63)]

    def step(self, h: Harness, model: WindowModel, rng: random.Random) -> None:
        store, key = h.store, rng.choice(KEYS)
        t = max(0, model.stream_time + rng.randint(-40, 8))
        t_to = t + rng.randint(0, 50)
        op = rng.randrange(5)
        reverse = rng.random() < 0.5
        if op <= 1:
            value = rng.choice([None, "x", "yy"])
            store.put(h.key(key), h.key(value), t)
            model.put(key, value, t)
        elif op == 2:
            assert h.out(store.get(h.key(key), t)) == model.get(key, t)
        elif op == 3:
            expected = [(s, v) for _, s, v in model.select(key, key, t, t_to)]
            got = (store.backward_fetch if reverse else store.fetch)(h.key(key), t, t_to)
            assert [(s, h.out(v)) for s, v in got] == (expected[::-1] if reverse else expected)
        else:
            lo, hi = rng.choice([None, *KEYS]), rng.choice([None, *KEYS])
            expected = model.select(lo, hi, t, t_to)
            got = (store.backward_fetch_range if reverse else store.fetch_range)(h.key(lo), h.key(hi), t, t_to)
            got = [(h.out(w.key), w.window.start, h.out(v)) for w, v in got]
            assert got == (expected[::-1] if reverse else expected)

    def check(self, h: Harness, model: WindowModel) -> None:
        store, kind = h.store, h.spec.store_kind
        assert store.observed_stream_time == model.stream_time
        assert kind.dropped_records(store) == model.dropped
        assert [(h.out(w.key), w.window.start, h.out(v)) for w, v in store.all()] == model.select(
            None, None, 0, 2**63
        )


class SessionContract:
    """A session store is `test_session_store.Model` (retention on the records' clock)."""

    specs = (StoreSpec.of("session", "s", SessionSpec.of("s", 25)),)

    def model(self, spec: StoreSpec) -> SessionModel:
        return SessionModel(spec.params.retention_period)

    def snapshot(self, model: SessionModel) -> tuple:
        return dict(model.sessions), model.stream_time

    def restore(self, model: SessionModel, snapshot: tuple) -> SessionModel:
        model.sessions, model.stream_time = dict(snapshot[0]), snapshot[1]
        return model

    def rows(self, model: SessionModel) -> list[tuple]:
        return [(w.key, v, w.start, w.end) for w, v in model.find(None, None, 0, 2**63)]

    def step(self, h: Harness, model: SessionModel, rng: random.Random) -> None:
        store, key = h.store, rng.choice(KEYS)
        start = max(0, model.stream_time + rng.randint(-30, 6))
        end = start + rng.randint(0, 6)
        op = rng.randrange(5)
        reverse = rng.random() < 0.5
        if op <= 1:
            value = rng.choice([None, "x", "yy"])
            store.put(h.key(key), start, end, h.key(value))
            model.put(key, start, end, value)
        elif op == 4:
            session = rng.choice(sorted(model.sessions) or [(key, start, end)])
            assert h.out(store.fetch_session(h.key(session[0]), *session[1:])) == model.sessions.get(session)
        elif op == 2:
            expected = model.find(key, key, start, end, reverse, single=True)
            got = (store.backward_find_sessions if reverse else store.find_sessions)(h.key(key), start, end)
            assert [(h.out(w.key), w.start, w.end, h.out(v)) for w, v in got] == [
                (w.key, w.start, w.end, v) for w, v in expected
            ]
        else:
            lo, hi = rng.choice([None, *KEYS]), rng.choice([None, *KEYS])
            expected = model.find(lo, hi, start, end, reverse)
            read = store.backward_find_sessions_range if reverse else store.find_sessions_range
            got = read(h.key(lo), h.key(hi), start, end)
            assert [(h.out(w.key), w.start, w.end, h.out(v)) for w, v in got] == [
                (w.key, w.start, w.end, v) for w, v in expected
            ]

    def check(self, h: Harness, model: SessionModel) -> None:
        assert h.store.observed_stream_time == model.stream_time
        got = [(h.out(w.key), h.out(v), w.start, w.end) for w, v in h.store.all()]
        assert got == self.rows(model)


CONTRACTS = {"key_value": KeyValueContract(), "window": WindowContract(), "session": SessionContract()}


def test_every_registered_kind_has_a_contract():
    assert sorted(CONTRACTS) == sorted(KINDS)


CASES = [
    pytest.param(kind, index, variant, id=f"{spec.name}-{variant}")
    for kind in KINDS
    for index, spec in enumerate(CONTRACTS[kind].specs if kind in CONTRACTS else ())
    for variant in VARIANTS
]


@pytest.mark.parametrize("seed", [1, 2])
@pytest.mark.parametrize(("kind", "index", "variant"), CASES)
def test_every_store_of_a_kind_keeps_its_contract(tmp_path, kind, index, variant, seed):
    contract = CONTRACTS[kind]
    spec = contract.specs[index]
    rng = random.Random(seed)
    h = Harness(spec, variant, str(tmp_path / "db"))
    model = contract.model(spec)
    committed = contract.snapshot(model)
    try:
        for step in range(STEPS):
            roll = rng.random()
            if h.persistent and roll < 0.04:
                h.store.commit()
                committed = contract.snapshot(model)
                assert h.committed_rows() == contract.rows(model)
            elif h.persistent and roll < 0.06:
                h.store.rollback()
                dropped = getattr(model, "dropped", None)
                model = contract.restore(model, committed)
                if dropped is not None:
                    model.dropped = dropped  # the late records stay counted
            elif h.persistent and roll < 0.07:
                h.reopen()
                model = contract.restore(model, committed)
            else:
                contract.step(h, model, rng)
            if step % 25 == 0:
                contract.check(h, model)
        contract.check(h, model)
        if "cache" in h.layers:  # the walk went through the cache and out of it
            assert h.cache.hits and h.cache.evicts, (h.cache.hits, h.cache.evicts)
        rows = [tuple(h.out(x) if isinstance(x, (bytes, str)) else x for x in row) for row in
                h.spec.store_kind.records(h.store)]
        assert rows == contract.rows(model)  # what the version reader serves
    finally:
        h.close()
