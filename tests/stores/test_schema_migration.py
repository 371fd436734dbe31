"""A value schema migration (`migrate=`) as a version of the state of its own: applied once,
in the first batch after it was declared, durable and atomic with that batch, resumable
after a fault or a SIGKILL at each of its steps, and readable with time travel before it
(old shape) and after it (new shape)."""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys

import migration_workload as wl
import pytest

from spark_statestore import Serdes, Stores
from spark_statestore.faults import injected
from spark_statestore.partition import PartitionState, WorkerResources
from spark_statestore.partition.reading import StateLocation
from spark_statestore.serde.evolution import SchemaEvolutionError, evolved
from spark_statestore.stores import migration
from spark_statestore.stores.ttl import ENTRY, time_of
from spark_statestore.tools.export import records
from paths import SUPPORT

WORKLOAD = str(SUPPORT / "migration_workload.py")


def _records(checkpoint: str, batch: int) -> dict:
    """The store as a reader from outside the query sees it as of `batch` (no migrate function)."""
    state = StateLocation.open(checkpoint)
    return {r["key"]: r["value"] for r in records(state, state.store("totals"), batch, [0])}


def _check(checkpoint: str, ttl: bool = False) -> None:
    """Every committed version reads as the model, in the shape of its time."""
    for batch in range(wl.last_committed(checkpoint) + 1):
        want = {k: dataclasses.asdict(v) for k, v in wl.expected(batch, ttl).items()}
        assert _records(checkpoint, batch) == want, batch


def _dirs(tmp_path):
    checkpoint, local = str(tmp_path / "ckpt"), str(tmp_path / "local")
    os.makedirs(checkpoint)
    return checkpoint, local


def test_a_migration_runs_once_in_the_first_batch_and_time_travel_sees_both_shapes(tmp_path, monkeypatch):
    monkeypatch.setattr(migration, "CHUNK", 7)
    checkpoint, local = _dirs(tmp_path)
    assert wl.run(checkpoint, local, "v1") == [0, 0, 0]
    with pytest.raises(SchemaEvolutionError, match="field 'total' changes type from int64 to string"):
        wl.evolve_declarations([dataclasses.replace(wl.declaration("v2"), value_serde=Serdes.record(wl.TotalV2))], checkpoint)
    rewritten = wl.run(checkpoint, local, "v2")
    assert rewritten == [len(wl.expected(2)), 0]  # every value once, in batch 3 only
    _check(checkpoint)
    assert set(_records(checkpoint, 2)["k00"]) == {"total", "label"}
    assert set(_records(checkpoint, 3)["k00"]) == {"total", "seen"}
    # the query restarts again with the same declaration: nothing more to migrate
    assert wl.run(checkpoint, str(tmp_path / "new-executor"), "v2") == []
    spec = StateLocation.open(checkpoint).store("totals")
    assert len(spec.value_schemas) == 2 and '"migrated_since":3' in spec.value_schemas[1]


def test_a_fault_in_the_middle_of_a_migration_leaves_the_state_as_it_was(tmp_path, monkeypatch):
    monkeypatch.setattr(migration, "CHUNK", 7)
    checkpoint, local = _dirs(tmp_path)
    wl.run(checkpoint, local, "v1")
    seen = []

    def fail_at_third_chunk(point):
        if point == "migration:after-chunk":
            seen.append(point)
            if len(seen) == 3:
                raise RuntimeError("injected")

    with injected(fail_at_third_chunk), pytest.raises(RuntimeError, match="injected"):
        wl.run(checkpoint, local, "v2")
    assert wl.last_committed(checkpoint) == 2
    _check(checkpoint)
    assert wl.run(checkpoint, local, "v2") == [len(wl.expected(2)), 0]  # the retry migrates every value
    _check(checkpoint)


POINTS = [
    ("open:after-apply", 1),
    ("migration:after-chunk", 1),
    ("migration:after-chunk", 4),
    ("prepare:after-local-write", 1),
    ("prepare:after-publish", 1),
]


@pytest.mark.parametrize("ttl", [False, True], ids=["plain", "ttl"])
@pytest.mark.parametrize("point,nth", POINTS)
def test_a_kill_at_each_step_of_a_migration_is_resumed(tmp_path, point, nth, ttl):
    """Also of a TTL store: each entry keeps its value and its expiry (`_check` reads every
    version on its clock; an entry of batch 1 must be gone in batch 4)."""
    checkpoint, local = _dirs(tmp_path)
    wl.run(checkpoint, local, "v1", ttl)

    def phase_v2(env=None):
        args = [sys.executable, WORKLOAD, checkpoint, local, "--phase", "v2", "--chunk", "7"]
        args += ["--ttl"] * ttl
        return subprocess.run(args, check=False, capture_output=True, text=True, env={**os.environ, **(env or {})}, timeout=300)

    killed = phase_v2({"SPARK_STATESTORE_FAULT": f"{point}@{nth}"})
    assert killed.returncode == -signal.SIGKILL, f"{point} was not reached: {killed.stderr[-2000:]}"
    assert wl.last_committed(checkpoint) == 2
    _check(checkpoint, ttl)
    done = phase_v2()
    assert done.returncode == 0, done.stderr[-2000:]
    assert wl.last_committed(checkpoint) == wl.LAST_BATCH
    _check(checkpoint, ttl)


def test_a_window_store_migrates_its_values_once_and_only_when_due():
    store = Stores.in_memory_window_store("w", 1000, 10)
    v1 = Serdes.record(wl.TotalV1)
    for start in (0, 10, 20):
        store.put(b"k", v1.encode(wl.TotalV1(start, "x")), start)
    v2 = evolved(Serdes.record(wl.TotalV2, migrate=wl.migrate), v1.history_json(), "w", lambda: 5)
    assert migration.migrate_if_due(store, v2, 3, 4) == 0  # before the migration's batch
    assert migration.migrate_if_due(store, v2, 5, 6) == 0  # state from after it
    assert migration.migrate_if_due(store, v2, 3, 6) == 3  # the first batch from it on
    assert [v2.decode(v) for _, v in store.all()] == [wl.TotalV2(f"{s}:x", 1) for s in (0, 10, 20)]
    assert all(not v2.written_before_migration(v) for _, v in store.all())
    assert migration.migrate_if_due(store, v2, 3, 6) == 0  # nothing left from before it


def test_a_migration_of_a_ttl_store_keeps_each_entrys_expiry(tmp_path, monkeypatch):
    monkeypatch.setattr(migration, "CHUNK", 7)
    checkpoint, local = _dirs(tmp_path)
    wl.run(checkpoint, local, "v1", ttl=True)
    live = {k for batch in (1, 2) for k in wl.batch_keys(batch)}  # batch 0's expired at batch 3's clock, 30
    declared = wl.driver(checkpoint, "v2", ttl=True)
    assert wl.run_batch(checkpoint, local, declared, 3) == len(live)
    state = PartitionState(checkpoint, 0, [declared.spec()], WorkerResources(local))
    state.open(4)  # version 3: every entry's expiry is that of its last write (10 ms per batch + 25)
    stored = {k[1:]: time_of(v) for k, v in state.store("totals").inner.all() if k[:1] == ENTRY}
    state.close()
    last = {Serdes.string().encode(k): b for b in range(4) for k in wl.batch_keys(b)}
    assert stored == {k: b * 10 + wl.TTL for k, b in last.items() if b > 0}
    assert wl.run(checkpoint, local, "v2", ttl=True) == [0]
    _check(checkpoint, ttl=True)
    # an entry last written in batch 1 (expiry 35) was migrated in batch 3 and is gone in batch 4
    only_batch_1 = set(wl.batch_keys(1)) - set(wl.batch_keys(2)) - set(wl.batch_keys(3))
    assert only_batch_1 and all(_records(checkpoint, 4)[k] == {"total": "+", "seen": 1} for k in only_batch_1)


def test_taking_back_a_migration_that_has_not_run_is_refused_with_the_true_reason(tmp_path):
    checkpoint, local = _dirs(tmp_path)
    wl.run(checkpoint, local, "v1")
    wl.driver(checkpoint, "v2")  # the migration is declared for batch 3; the query stops before it runs
    with pytest.raises(SchemaEvolutionError) as refused:
        wl.driver(checkpoint, "v1")
    message = str(refused.value)
    assert (
        "schema version 2 (total string not null, seen int64 not null) is a migration declared to take "
        "effect in batch 3, which has not committed, so no committed value was written with it"
    ) in message
    assert "field 'total' changes type from string to int64" in message
    assert "written with schema" not in message
    _check(checkpoint)  # nothing changed
    assert wl.run(checkpoint, local, "v2") == [len(wl.expected(2)), 0]  # declared again, it runs
    _check(checkpoint)
    with pytest.raises(SchemaEvolutionError, match="its values were written with schema version 2"):
        wl.driver(checkpoint, "v1")  # now it has run: values were written with it


@dataclasses.dataclass
class TotalV2b:  # TotalV2 and an optional field: a compatible change of it
    total: str
    seen: int = 0
    note: str | None = None


@dataclasses.dataclass
class TotalV3:  # no compatible change of TotalV2
    total: bytes


def test_a_migration_that_has_not_run_is_followed_only_by_a_change_its_values_can_reach():
    """Before the migration's batch committed, the values written before it reach a new
    shape only through the declared migrate: another migration (which would need the
    first one's) or a compatible change without migrate are refused on the driver (every
    task failed reading the old values)."""
    recorded = evolved(Serdes.record(wl.TotalV2, migrate=wl.migrate), Serdes.record(wl.TotalV1).history_json(),
                       "totals", lambda: 3).history_json()
    old = Serdes.record(wl.TotalV1).encode(wl.TotalV1(7, "x"))
    for declared in (Serdes.record(TotalV3, migrate=lambda v: TotalV3(b"")), Serdes.record(TotalV2b)):
        with pytest.raises(SchemaEvolutionError, match="migration declared to take effect in batch 3, which has not"):
            evolved(declared, recorded, "totals", lambda: 3)
        evolved(declared, recorded, "totals", lambda: 4)  # once batch 3 committed, as any change
    compatible = Serdes.record(TotalV2b, migrate=lambda v: TotalV2b(f"{v['total']}:{v['label']}", 1))
    assert evolved(compatible, recorded, "totals", lambda: 3).decode(old) == TotalV2b("7:x", 1)
