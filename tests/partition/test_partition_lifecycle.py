"""`PartitionState`'s lifecycle: closed -> open -> prepared -> closed, and every transition
it refuses (with the error a caller sees), leaving the state where it was."""

from __future__ import annotations

import pytest

from spark_statestore import StateStoreError
from spark_statestore.partition import PartitionState, StoreSpec, WorkerResources
from spark_statestore.partition.state import Lifecycle


@pytest.fixture
def state(tmp_path):
    state = PartitionState(str(tmp_path / "ck"), 0, [StoreSpec.key_value("kv")], WorkerResources(str(tmp_path / "l")))
    yield state
    state.close()


def _prepared(state: PartitionState, batch: int = 0) -> PartitionState:
    state.open(batch)
    state.store("kv").put(b"k", b"%d" % batch)
    state.prepare()
    return state


def test_the_lifecycle_goes_closed_open_prepared_closed(state):
    assert state.lifecycle is Lifecycle.CLOSED and not state.is_open and "closed" in repr(state)
    state.open(0)
    assert state.lifecycle is Lifecycle.OPEN and state.is_open and "open for batch 0" in repr(state)
    state.store("kv").put(b"k", b"v")
    state.prepare()
    assert state.lifecycle is Lifecycle.PREPARED and state.is_open and state.prepared is not None
    assert state.store("kv").get(b"k") == b"v"  # the stores stay usable until close
    state.close()
    assert state.lifecycle is Lifecycle.CLOSED and not state.is_open and state.stores == {}
    state.close()  # closing a closed state does nothing
    state.open(1)
    assert state.lifecycle is Lifecycle.OPEN and state.store("kv").get(b"k") == b"v"


def test_open_is_refused_when_open(state):
    state.open(0)
    with pytest.raises(StateStoreError, match=r"partition 0 is already open for batch 0 \(open\)"):
        state.open(1)
    assert state.lifecycle is Lifecycle.OPEN and state.batch_id == 0


def test_open_is_refused_when_prepared(state):
    _prepared(state)
    with pytest.raises(StateStoreError, match=r"partition 0 is already open for batch 0 \(prepared\)"):
        state.open(1)
    assert state.lifecycle is Lifecycle.PREPARED


def test_prepare_is_refused_when_closed(state):
    with pytest.raises(StateStoreError, match="partition 0 is not open"):
        state.prepare()
    _prepared(state).close()
    with pytest.raises(StateStoreError, match="partition 0 is not open"):
        state.prepare()
    assert state.lifecycle is Lifecycle.CLOSED


def test_prepare_is_refused_when_prepared(state):
    _prepared(state)
    with pytest.raises(StateStoreError, match="batch 0 of partition 0 is already prepared"):
        state.prepare()
    assert state.lifecycle is Lifecycle.PREPARED


def test_stores_are_refused_when_closed(state):
    with pytest.raises(StateStoreError, match="partition 0 is not open"):
        state.store("kv")
    with pytest.raises(StateStoreError, match="partition 0 is not open"):
        state.watch_uncommitted(1, None)
    _prepared(state).close()
    with pytest.raises(StateStoreError, match="partition 0 is not open"):
        state.store("kv")


def test_a_failed_open_leaves_the_state_closed(state, monkeypatch):
    def refuse(*args):
        raise OSError("no room")

    monkeypatch.setattr(state, "_open_stores", refuse)
    with pytest.raises(OSError, match="no room"):
        state.open(0)
    assert state.lifecycle is Lifecycle.CLOSED and not state.local.locked
    monkeypatch.undo()
    state.open(0)
    assert state.lifecycle is Lifecycle.OPEN
