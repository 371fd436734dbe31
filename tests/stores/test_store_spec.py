"""`StoreSpec`, the one description of a store: the records derived from it keep the bytes
that checkpoints and databases already hold, and read back to the same spec."""

from __future__ import annotations

import datetime
import json

import pytest

from spark_statestore import Stores
from spark_statestore.partition import Layout, StoreSpec
from spark_statestore.spark import KeyValue, Session, Window
from spark_statestore.stores.names import META_COLUMN_FAMILY
from spark_statestore.stores.spec import Clock, WindowSpec
from spark_statestore.txn import TransactionalDatabase


def test_the_layout_record_keeps_its_bytes():
    layout = Layout.of(
        [
            StoreSpec.key_value("kv", key_serde="string", value_serde="int64"),
            StoreSpec.window("w", 100, 10, segment_interval=40, clock="external"),
        ],
        4,
    )
    assert layout.to_json() == (
        '{"partitions": 4, "stores": {"kv": {"key_serde": "string", "kind": "key_value", "value_serde": "int64"}, '
        '"w": {"key_serde": "bytes", "kind": "window", "value_serde": "bytes", "window": {"clock": "external", '
        '"retain_duplicates": false, "retention_period": 100, "segment_interval": 40, "window_size": 10}}}}'
    )
    assert Layout.from_json(layout.to_json(), "test") == layout


def test_the_rocksdb_store_records_keep_their_bytes(tmp_path):
    db = TransactionalDatabase(tmp_path / "db")
    db.key_value_store("kv")
    db.window_store("w", 100, 10, retain_duplicates=True, clock=Clock.WATERMARK)
    meta = db.db.column_family(META_COLUMN_FAMILY)
    assert meta.get(b"store:kv") == b'{"kind": "key_value"}'
    assert meta.get(b"store:w") == (
        b'{"kind": "window", "retain_duplicates": true, "retention_period": 100, "window_size": 10}'
    )
    db.close()


def test_the_watermark_is_one_clock_under_every_public_spelling():
    """Window and session stream time and TTL name the watermark with one `Clock` member,
    whichever public spelling declared it; each records the spelling it always recorded."""
    on_watermark = [
        StoreSpec.window("w", 100, 10, clock="external"),
        StoreSpec.window("w", 100, 10, clock="Watermark"),
        StoreSpec.window("w", 100, 10, clock=Clock.WATERMARK),
        Window("w", 100, 10).spec(),
        Window("w", 100, 10, clock="watermark").spec(),
        Session("s", gap=10).spec(),
    ]
    assert {spec.params.clock for spec in on_watermark} == {Clock.WATERMARK}
    assert {spec.params.as_dict()["clock"] for spec in on_watermark} == {"external"}
    assert Stores.in_memory_session_store("s", 100, clock="external").clock is Clock.WATERMARK
    ttl = [StoreSpec.key_value("t", ttl=5, ttl_clock="event_time"), KeyValue("t", ttl=5, ttl_clock="event_time").spec()]
    assert {spec.ttl.clock for spec in ttl} == {Clock.WATERMARK}
    assert {spec.ttl.as_dict()["clock"] for spec in ttl} == {"event_time"}
    on_records = [StoreSpec.window("w", 100, 10), Window("w", 100, 10, clock="records").spec()]
    assert {spec.params.clock for spec in on_records} == {Clock.RECORDS}
    assert KeyValue("t", ttl=5).spec().ttl.clock is Clock.PROCESSING_TIME


@pytest.mark.parametrize(
    "declare",
    [
        lambda clock: StoreSpec.window("w", 100, 10, clock=clock),
        lambda clock: Window("w", 100, 10, clock=clock),
        lambda clock: Session("s", gap=10, clock=clock),
    ],
)
@pytest.mark.parametrize("bad", ["wall", "event_time", None, Clock.PROCESSING_TIME])
def test_a_bad_clock_is_refused_naming_the_value_and_every_spelling(declare, bad):
    with pytest.raises(ValueError) as refused:
        declare(bad)
    assert str(refused.value).startswith("clock must be one of 'records', 'watermark', 'external', got ")
    assert repr(bad) in str(refused.value)


@pytest.mark.parametrize("bad", ["wall", "watermark", "records", Clock.RECORDS])
def test_a_bad_ttl_clock_is_refused_naming_the_value_and_every_spelling(bad):
    for declare in (lambda: StoreSpec.key_value("t", ttl=5, ttl_clock=bad), lambda: KeyValue("t", ttl=5, ttl_clock=bad)):
        with pytest.raises(ValueError) as refused:
            declare()
        assert str(refused.value).startswith("ttl_clock must be one of 'processing_time', 'event_time', got ")
        assert repr(bad) in str(refused.value)


def test_a_spec_reads_back_from_its_record_and_caching_is_not_recorded():
    spec = StoreSpec.window("w", 100, 10, segment_interval=40, cached=False, key_serde="string")
    back = StoreSpec.from_dict("w", json.loads(json.dumps(spec.as_dict())))
    assert back.as_dict() == spec.as_dict() and back.params == spec.params
    assert (spec.cached, back.cached) == (False, True)
    assert spec.params == WindowSpec(100, 10, False, 40, Clock.RECORDS)
    assert StoreSpec.window("d", 100, 10, retain_duplicates=True).cached is False  # duplicates are never cached


def test_the_database_opens_the_store_a_spec_describes(tmp_path):
    db = TransactionalDatabase(tmp_path / "db")
    kv = db.open_store(StoreSpec.key_value("kv"))
    win = db.open_store(StoreSpec.window("w", 100, 10))
    win.put(b"a", b"1", 50)
    kv.put(b"k", b"v")
    db.commit({"n": 1})
    assert (win.retention_period, win.window_size) == (100, 10) and kv.get(b"k") == b"v"
    db.close()
    db = TransactionalDatabase(tmp_path / "db")
    with pytest.raises(ValueError, match=r"store 'w' .* was created as .*'window_size': 10.*cannot open it as"):
        db.open_store(StoreSpec.window("w", 100, 20))
    with pytest.raises(ValueError, match=r"store 'kv' .* was created as \{'kind': 'key_value'\}"):
        db.open_store(StoreSpec.window("kv", 100, 10))
    db.close()


def test_a_ttl_is_recorded_only_when_set_and_reads_back():
    plain = StoreSpec.key_value("kv", key_serde="string")
    assert plain.as_dict() == {"key_serde": "string", "kind": "key_value", "value_serde": "bytes"}  # bytes as before
    assert plain.store_record() == {"kind": "key_value"}
    ttl = StoreSpec.key_value("t", ttl=datetime.timedelta(minutes=1), ttl_clock="event_time")
    assert json.dumps(ttl.as_dict(), sort_keys=True) == (
        '{"key_serde": "bytes", "kind": "key_value", "ttl": {"clock": "event_time", "duration": 60000}, '
        '"value_serde": "bytes"}'
    )
    # neither layout opens the other, nor does another duration or clock
    assert ttl.store_record() == {"kind": "key_value_ttl", "ttl": {"clock": "event_time", "duration": 60000}}
    assert StoreSpec.from_dict("t", json.loads(json.dumps(ttl.as_dict()))) == ttl
    assert StoreSpec.from_dict("kv", {"kind": "key_value"}).ttl is None  # older records: no ttl
    with pytest.raises(ValueError, match=r"store 'w' of kind 'window' has a ttl"):
        StoreSpec.from_dict("w", {**StoreSpec.window("w", 10, 5).as_dict(), "ttl": {"duration": 5}})
    with pytest.raises(TypeError, match=r"the ttl of store 't' must be an object with int duration"):
        StoreSpec.from_dict("t", {"kind": "key_value", "ttl": {"duration": "5"}})


def test_a_layout_with_a_changed_ttl_is_refused(tmp_path):
    from spark_statestore.partition.layout import LayoutMismatchError

    recorded = Layout.of([StoreSpec.key_value("t", ttl=1000)], 1)
    with pytest.raises(LayoutMismatchError, match=r"store 't' .* was created as .*'duration': 1000"):
        Layout.of([StoreSpec.key_value("t", ttl=2000)], 1).check_against(recorded, "ckpt", "test")
