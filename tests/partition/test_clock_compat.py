"""State written by main's code on every clock (`data/clocks_main`, written by
`support/clock_state.py` at commit 99dfd3f: window and session stores on the watermark and
on records, TTL stores on event and processing time, a persistent TTL store on event time)
opens with the same public declarations and means the same: the recorded clocks are
read back as the clocks they were, and today's code records them with the same bytes."""

from __future__ import annotations

import shutil
from pathlib import Path

import clock_state as cs
import pytest

from spark_statestore import Stores
from spark_statestore.partition import PartitionOptions, PartitionState, WorkerResources
from spark_statestore.partition.layout import Layout, read_query_layout, record_query_layout

WRITTEN = Path(__file__).resolve().parent / "data" / "clocks_main"
DURABLE = ["_layout"] + [f"0/{batch}.changelog" for batch in range(cs.BATCHES)]


@pytest.fixture
def written(tmp_path: Path) -> Path:
    """A copy of what main wrote (opening it writes to it)."""
    shutil.copytree(WRITTEN, tmp_path / "written")
    return tmp_path / "written"


def test_todays_code_records_the_clocks_with_mains_bytes(tmp_path):
    cs.write_state(str(tmp_path / "today"))
    for name in DURABLE:  # the layout and the changelog headers hold every store's spec
        today = (tmp_path / "today" / "checkpoint" / "statestore" / name).read_bytes()
        assert today == (WRITTEN / "checkpoint" / "statestore" / name).read_bytes(), name


def test_the_declarations_open_mains_state_on_the_clocks_it_was_written_on(written, tmp_path):
    checkpoint = str(written / "checkpoint")
    assert set(read_query_layout(checkpoint).stores) == set(cs.SPECS)
    record_query_layout(checkpoint, Layout.of(cs.SPECS, 1))  # the driver's check: not refused
    state = PartitionState(
        checkpoint, 0, cs.SPECS, WorkerResources(str(tmp_path / "local")), PartitionOptions()
    )
    state.open(cs.BATCHES)  # restored from main's snapshot and changelogs
    store = state.store
    # stream time: the last watermark (2500) on the watermark, the records' latest time on records
    assert store("win_watermark").observed_stream_time == store("ses_watermark").observed_stream_time == 2_500
    assert (
        store("win_records").observed_stream_time == 4_000
        and store("ses_records").observed_stream_time == 4_050
    )
    assert store("ttl_event").time == 2_500 and store("ttl_processing").time == cs.timestamp(cs.BATCHES - 1)
    assert [k for k, _ in store("ttl_event").all()] == [b"k3"]  # k0..k2 expire at or below 2500
    assert [k for k, _ in store("ttl_processing").all()] == [b"k2", b"k3"]  # k0, k1 at or below 11800
    # what is live is measured from each store's own clock
    for name, live in [("win_watermark", True), ("win_records", False)]:
        store(name).put(b"late", b"v", 1_600)
        assert (store(name).get(b"late", 1_600) is not None) is live, name
    for name, live in [("ses_watermark", True), ("ses_records", False)]:
        store(name).put(b"late", 1_600, 1_600, b"v")
        assert (store(name).fetch_session(b"late", 1_600, 1_600) is not None) is live, name
    state.advance_clocks(cs.timestamp(cs.BATCHES), None)  # processing time moves, no watermark
    assert [k for k, _ in store("ttl_event").all()] == [b"k3"]
    assert [k for k, _ in store("ttl_processing").all()] == [b"k3"]
    for spec in cs.SPECS:  # the batch ends at watermark 3000: only watermark-clocked stores move
        spec.store_kind.at_watermark(spec, store(spec.name), 3_000)
    assert store("win_watermark").observed_stream_time == store("ses_watermark").observed_stream_time == 3_000
    assert (
        store("win_records").observed_stream_time == 4_000
        and store("ses_records").observed_stream_time == 4_050
    )
    state.close()


def test_a_persistent_ttl_store_on_event_time_reopens_as_it_was_declared(written):
    path = written / "ttl_db"
    with pytest.raises(ValueError, match="processing_time"):  # the database records its clock
        Stores.persistent_key_value_store("t", path, ttl=cs.TTL, ttl_clock="processing_time")
    store = Stores.persistent_key_value_store("t", path, ttl=cs.TTL, ttl_clock="event_time")
    assert store.time == 5_000 and store.get(b"a") == b"1" and store.committed_offset("src") == 1
    store.advance_time(5_999)
    assert store.get(b"a") == b"1"
    store.advance_time(6_000)
    assert store.get(b"a") is None
    store.close()
