"""The reader's bulk paths give what the per-record paths give: Arrow decoding of every
serde the reader supports against decoding value by value (random values, nulls, bytes a
serde did not write), a version's records read in bulk against the store API (time
travel over snapshots and changelogs, deleted keys, expired windows, window stores with
and without duplicates, an empty partition, chunk boundaries, TTL stores, values of older
record schema versions), and the change feed's columns against reading the changelog
record by record."""

from __future__ import annotations

import dataclasses
import os
import random
import shutil

import partition_workload as wl
import pyarrow as pa
import pytest
from pyspark.sql.pandas.types import to_arrow_type
from record_types import TotalV1, TotalV2

from spark_statestore import Serdes
from spark_statestore.checkpoint.changelog import Changelog
from spark_statestore.errors import StateStoreError
from spark_statestore.partition import PartitionOptions, PartitionState, StoreSpec, WorkerResources
from spark_statestore.partition.columnar import binary_array
from spark_statestore.partition.layout import Layout, record_query_layout
from spark_statestore.partition.reading import StateLocation, VersionReader, change_columns
from spark_statestore.serde import Serde, serde_for, unescape
from spark_statestore.serde.evolution import evolved
from spark_statestore.spark import KeyValue
from spark_statestore.spark.reader.columns import column_for, decode_arrow, value_column


class Point(Serde):
    """A serde of the user's (shown by its repr)."""

    def encode(self, value: tuple) -> bytes:
        return b"%d,%d" % value

    def decode(self, data: bytes) -> tuple:
        x, y = data.split(b",")
        return int(x), int(y)


POINT = f"{__name__}:Point"


def _value(identity: str, rng: random.Random):
    if identity in ("int64", "int64_key"):
        return rng.choice([0, -1, 2**63 - 1, -(2**63), rng.randint(-(2**63), 2**63 - 1)])
    if identity == "float64":
        return rng.choice([0.0, -0.0, 1e308, -2.5, float("inf"), rng.uniform(-1e9, 1e9)])
    if identity in ("string", "json"):
        text = "".join(rng.choice("aé€\U0001f600\x00z") for _ in range(rng.randint(0, 6)))
        return {"t": text, "n": rng.randint(0, 9)} if identity == "json" else text
    if identity in ("bytes", "pickle"):
        return rng.randbytes(rng.randint(0, 9)) if identity == "bytes" else [rng.random(), "x"]
    if identity == "tuple(str,int)":
        return ("k%d" % rng.randint(0, 99), rng.randint(-5, 5))
    if identity == "tuple(bytes)":
        return (rng.randbytes(rng.randint(0, 4)),)
    return (rng.randint(0, 9), rng.randint(0, 9))


IDENTITIES = [
    "bytes", "string", "json", "pickle", "int64", "int64_key", "float64", "tuple(str,int)", "tuple(bytes)", POINT
]


def _per_value(identity: str, raw: list) -> list:
    """What the reader gave before the bulk path: the serde, one value at a time."""
    column = column_for(identity)
    return pa.array(column.convert(raw), to_arrow_type(column.type)).to_pylist()


@pytest.mark.parametrize("identity", IDENTITIES)
@pytest.mark.parametrize("seed", range(3))
def test_bulk_decoding_equals_the_serde_for_every_identity(identity, seed):
    rng = random.Random(seed)
    serde = serde_for(identity)
    count = rng.choice([0, 1, 17, 300])
    raw = [None if rng.random() < 0.2 else serde.encode(_value(identity, rng)) for _ in range(count)]
    decoded = decode_arrow(column_for(identity), binary_array(raw))
    assert decoded.type == to_arrow_type(column_for(identity).type)
    assert decoded.to_pylist() == _per_value(identity, raw)
    window = binary_array(raw).slice(count // 3)  # an array that starts inside its buffers
    assert decode_arrow(column_for(identity), window).to_pylist() == _per_value(identity, raw[count // 3 :])


@pytest.mark.parametrize("identity", ["int64", "int64_key", "float64"])
def test_bytes_a_fixed_width_serde_did_not_write_are_named_by_the_serde(identity):
    raw = [bytes(8), b"\x01\x02\x03"]
    with pytest.raises(ValueError, match=f"serde {identity} cannot decode data"):
        decode_arrow(column_for(identity), binary_array(raw))


def test_snapshots_without_columns_files_are_read_from_their_databases(dirs):
    """`snapshot_columns=False`: the snapshots' manifests list no columns file, and a bulk
    read of a snapshot's version restores and scans its database, with the same rows."""
    import glob
    import json

    from spark_statestore.checkpoint.snapshot_columns import COLUMNS_FILE
    from spark_statestore.partition.columns_copy import ColumnsCopy

    checkpoint, local = dirs
    spec = _kv_state(checkpoint, local, columns=False)
    manifests = glob.glob(os.path.join(checkpoint, "statestore", "0", "snapshots", "*.manifest"))
    assert manifests
    for name in manifests:
        with open(name) as f:
            assert COLUMNS_FILE not in {e["name"] for e in json.load(f)["files"]}
    location = StateLocation.open(checkpoint)
    with VersionReader(location, 0, 1, 2, merge_records=1 << 20) as bulk:
        assert not isinstance(bulk.db, ColumnsCopy)
        assert _bulk_records(bulk, spec, 64) == [(b"k%03d" % i, b"v1-%d" % i) for i in range(50)]


def test_the_columns_switch_flipped_across_restarts_reads_every_version_the_same(dirs):
    """`snapshot_columns` changed at every restart: some snapshots have a columns file,
    some not, and every version reads in bulk what the batches wrote (deletes included)."""
    import glob
    import json

    from spark_statestore.checkpoint.snapshot_columns import COLUMNS_FILE

    checkpoint, local = dirs
    spec = StoreSpec.key_value("kv")
    record_query_layout(checkpoint, Layout.of([spec], 1))
    expected: dict[bytes, bytes] = {}
    versions = []
    for batch in range(6):
        options = PartitionOptions(snapshot_interval=1, snapshot_columns=batch % 2 == 0)
        state = PartitionState(checkpoint, 0, [spec], WorkerResources(local), options)
        state.open(batch)
        for i in range(batch, 40, 3):
            key, value = b"k%03d" % i, b"v%d-%d" % (batch, i)
            state.store("kv").put(key, value)
            expected[key] = value
        state.store("kv").put(b"k%03d" % (batch * 5), None)
        expected.pop(b"k%03d" % (batch * 5), None)
        state.prepare()
        state.close()
        state.wait_for_snapshots()
        versions.append(sorted(expected.items()))
    with_file = set()
    for name in glob.glob(os.path.join(checkpoint, "statestore", "0", "snapshots", "*.manifest")):
        with open(name) as f:
            if COLUMNS_FILE in {e["name"] for e in json.load(f)["files"]}:
                with_file.add(int(os.path.basename(name).split(".")[0]))
    assert with_file and len(with_file) < 5, with_file  # a mix of both kinds of snapshot
    location = StateLocation.open(checkpoint)
    for version, rows in enumerate(versions):  # batch N's version is N
        with VersionReader(location, 0, version, len(versions) - 1, merge_records=1 << 20) as bulk:
            assert _bulk_records(bulk, spec, 7) == rows, version


def _bulk_records(reader: VersionReader, spec: StoreSpec, chunk: int) -> list:
    rows = []
    for columns in reader.columns(spec, chunk):
        keys, values = columns.keys.to_pylist(), columns.values.to_pylist()
        rows += list(zip(keys, values, *(part.to_pylist() for part in columns.parts)))
    return rows


@pytest.mark.parametrize("seed", range(3))
def test_a_version_read_in_bulk_is_the_version_the_store_serves(dirs, seed):
    checkpoint, local = dirs
    record_query_layout(checkpoint, Layout.of(wl.SPECS, 1))
    batches = 20
    wl.run(checkpoint, local, batches, seed=seed, snapshot_interval=3, min_batches_to_retain=100)
    state = StateLocation.open(checkpoint)
    chunk = random.Random(seed).choice([1, 7, 64])
    for version in range(-1, batches):
        for spec in wl.SPECS:
            with VersionReader(state, 0, version, batches - 1) as per_record:
                expected = list(per_record.records(spec))
            for merge in (0, 40, 1 << 20):  # changelogs written into the copy, merged in bulk, or both
                with VersionReader(state, 0, version, batches - 1, merge_records=merge) as bulk:
                    assert _bulk_records(bulk, spec, chunk) == expected, (version, spec.name, merge)


def test_window_stores_with_duplicates_and_an_empty_store(dirs):
    checkpoint, local = dirs
    specs = [
        StoreSpec.window("dups", 100, 10, retain_duplicates=True, segment_interval=20),
        StoreSpec.key_value("empty"),
    ]
    record_query_layout(checkpoint, Layout.of(specs, 1))
    rng = random.Random(5)
    for batch in range(8):
        state = PartitionState(checkpoint, 0, specs, WorkerResources(local), PartitionOptions(snapshot_interval=3))
        state.open(batch)
        store = state.store("dups")
        for _ in range(40):
            key = rng.choice([b"a", b"a\x00", b"a\x00\x01", b"b", b"\x00"])
            store.put(key, rng.randbytes(3), max(0, batch * 30 + rng.randint(-60, 5)))
        state.prepare()
        state.close()
        state.wait_for_snapshots()
    location = StateLocation.open(checkpoint)
    for version in range(8):
        for spec in specs:
            with VersionReader(location, 0, version, 7) as per_record:
                expected = list(per_record.records(spec))
            with VersionReader(location, 0, version, 7, merge_records=1 << 20) as bulk:
                assert _bulk_records(bulk, spec, 5) == expected
            assert expected or spec.name == "empty"


def _per_record_changes(changelog: Changelog, spec: StoreSpec, version: int) -> list:
    """The change feed as it was read before the bulk path: record by record."""
    out = []
    window = spec.params  # a window store's WindowSpec, None for key-value
    for lo, hi in changelog.ranges().get(spec.name, ()):
        if window is not None and lo == b"":
            out.append((version, "expire", None, None, int.from_bytes(hi[:8], "big")))
    for store, key, value in changelog.entries():
        if store != spec.name:
            continue
        change = "delete" if value is None else "put"
        if window is None:
            out.append((version, change, key, value, None))
        elif key[:1] < b"\x80":
            user_key = unescape(key, 8)[0] if window.retain_duplicates else key[8:]
            out.append((version, change, user_key, value, int.from_bytes(key[:8], "big")))
    return out


def test_change_columns_are_the_changelogs_records(dirs):
    checkpoint, local = dirs
    record_query_layout(checkpoint, Layout.of(wl.SPECS, 1))
    wl.run(checkpoint, local, 20, seed=3, snapshot_interval=4, min_batches_to_retain=100)
    state = StateLocation.open(checkpoint)
    changelogs = os.path.join(checkpoint, "statestore", "0")
    for spec in wl.SPECS:
        bulk = []
        for chunk in change_columns(state, 0, spec, 0, 19):
            starts = chunk.parts[0].to_pylist() if chunk.parts else [None] * len(chunk)
            bulk += [
                (chunk.batch_id, *row)
                for row in zip(chunk.change.to_pylist(), chunk.keys.to_pylist(), chunk.values.to_pylist(), starts)
            ]
        expected = [
            row
            for version in range(20)
            for row in _per_record_changes(Changelog(os.path.join(changelogs, f"{version}.changelog")), spec, version)
        ]
        assert bulk == expected
        assert any(row[1] == "delete" for row in expected)
        assert spec.params is None or any(row[1] == "expire" for row in expected)


@pytest.mark.parametrize("craft", ["inverted range", "record count"])
def test_a_crafted_changelog_is_refused_by_the_bulk_reader_naming_it(tmp_path, craft):
    """Checksummed changelogs that no writer makes: the bulk merge reads every block with
    the checks the apply path has."""
    from crafting import retrail, rewrite

    checkpoint = str(tmp_path / "checkpoint")
    os.makedirs(checkpoint)
    record_query_layout(checkpoint, Layout.of(wl.SPECS, 1))
    wl.run(checkpoint, str(tmp_path / "local"), 4, snapshot_interval=100)
    path = os.path.join(checkpoint, "statestore", "0", "3.changelog")
    if craft == "inverted range":
        rewrite(path, Changelog(path, 3).header, [], first=[("kv", b"z", b"a")])
    else:
        retrail(path, count_delta=1000)
    state = StateLocation.open(checkpoint)
    with pytest.raises(StateStoreError, match=r"3\.changelog"):
        with VersionReader(state, 0, 3, 3, merge_records=1 << 20) as reader:
            list(reader.columns(state.store("kv")))


def test_a_ttl_store_read_in_bulk_is_what_the_ttl_store_serves(dirs):
    """Live entries only, their user keys and values, on each version's clock (the clock
    in the snapshot or in changelogs merged in memory); expired entries still stored
    (expiry is bounded per batch) are left out."""
    checkpoint, local = dirs
    record_query_layout(checkpoint, Layout.of(wl.TTL_SPECS, 1))
    for batch in range(14):
        state = wl.partition_state(checkpoint, local, ttl=True, snapshot_interval=4, min_batches_to_retain=100)
        wl.run_batch(state, 3, batch, checkpoint)
        state.wait_for_snapshots()
    location = StateLocation.open(checkpoint)
    spec = location.store("ttl")
    hidden = 0
    for version in range(-1, 14):
        with VersionReader(location, 0, version, 13) as per_record:
            expected = list(per_record.records(spec))
            stored = sum(1 for key in per_record.db.db.column_family("ttl").keys() if key[:1] == b"\x00")
        hidden += stored - len(expected)
        for merge in (0, 7, 1 << 20):
            with VersionReader(location, 0, version, 13, merge_records=merge) as bulk:
                assert _bulk_records(bulk, spec, 3) == expected, (version, merge)
    assert hidden > 0  # some versions hold expired entries the clock hides


def test_values_of_older_schema_versions_are_upgraded_by_the_bulk_reader(dirs):
    """A record store holding values written under v1 and v2 of its schema: the bulk
    reader's struct column is each value decoded with its version, in v2's shape."""
    checkpoint, local = dirs
    v1 = Serdes.record(TotalV1)
    v2 = evolved(Serdes.record(TotalV2), v1.history_json(), "totals", lambda: 1)
    spec = KeyValue("totals", Serdes.string(), v2).spec()
    record_query_layout(checkpoint, Layout.of([spec], 1))
    rng = random.Random(2)
    for batch in range(6):
        state = PartitionState(checkpoint, 0, [spec], WorkerResources(local), PartitionOptions(snapshot_interval=3))
        state.open(batch)
        for _ in range(30):
            key = b"k%d" % rng.randint(0, 40)
            if rng.random() < 0.1:
                state.store("totals").put(key, None)
            elif batch < 3 or rng.random() < 0.3:
                state.store("totals").put(key, v1.encode(TotalV1(rng.randint(-9, 9), "l")))
            else:
                state.store("totals").put(key, v2.encode(TotalV2(rng.random(), rng.randint(0, 5), rng.choice([None, "n"]))))
        state.prepare()
        state.close()
        state.wait_for_snapshots()
    location = StateLocation.open(checkpoint)
    column = value_column(spec)
    versions = set()
    for version in range(6):
        with VersionReader(location, 0, version, 5) as per_record:
            pairs = list(per_record.records(spec))
        versions |= {value[:2] for _, value in pairs}
        expected = [dataclasses.asdict(v2.decode(value)) for _, value in pairs]
        with VersionReader(location, 0, version, 5, merge_records=1 << 20) as bulk:
            decoded = [row for chunk in bulk.columns(spec, 8) for row in decode_arrow(column, chunk.values).to_pylist()]
        assert decoded == expected
    assert versions == {b"\x01\x00", b"\x02\x00"}  # both versions were read


def _snapshot_columns_file(checkpoint: str, version: int) -> tuple[str, str, dict]:
    """The local path of partition 0's columns file of snapshot `version`, its manifest's
    path, and the manifest."""
    import json

    from spark_statestore.checkpoint.snapshot_columns import COLUMNS_FILE

    root = os.path.join(checkpoint, "statestore", "0")
    manifest_path = os.path.join(root, "snapshots", f"{version}.manifest")
    with open(manifest_path) as f:
        manifest = json.load(f)
    entry = next(e for e in manifest["files"] if e["name"] == COLUMNS_FILE)
    return os.path.join(root, entry["durable"]), manifest_path, manifest


def _kv_state(checkpoint: str, local: str, columns: bool = True) -> StoreSpec:
    """Batches 0..2 of a key-value store with a snapshot of every version (`columns`:
    with their columns files)."""
    spec = StoreSpec.key_value("kv")
    record_query_layout(checkpoint, Layout.of([spec], 1))
    options = PartitionOptions(snapshot_interval=1, snapshot_columns=columns)
    for batch in range(3):
        state = PartitionState(checkpoint, 0, [spec], WorkerResources(local), options)
        state.open(batch)
        for i in range(50):
            state.store("kv").put(b"k%03d" % i, b"v%d-%d" % (batch, i))
        state.prepare()
        state.close()
        state.wait_for_snapshots()
    return spec


def test_a_snapshot_read_in_bulk_is_read_from_its_columns_file(dirs):
    """The bulk read of a version that is a snapshot reads the snapshot's columns file, not
    RocksDB: a columns file rewritten (manifest and all) with another value is what it
    reads, so the equality tests above cover that path."""
    import hashlib
    import json

    import pyarrow.ipc as ipc

    checkpoint, local = dirs
    spec = _kv_state(checkpoint, local)
    path, manifest_path, manifest = _snapshot_columns_file(checkpoint, 1)
    reader = ipc.open_file(pa.memory_map(path))
    batches = [reader.get_batch_with_custom_metadata(i) for i in range(reader.num_record_batches)]
    with ipc.new_file(path + ".new", reader.schema) as writer:
        for batch, meta in batches:
            if meta[b"column_family"] == b"kv":
                values = batch.column(1).to_pylist()
                values[0] = b"changed"
                batch = pa.record_batch([batch.column(0), pa.array(values, pa.binary())], schema=batch.schema)
            writer.write_batch(batch, custom_metadata=meta)
    os.replace(path + ".new", path)
    entry = next(e for e in manifest["files"] if e["durable"].endswith("COLUMNS.arrow"))
    with open(path, "rb") as f:
        entry["sha256"], entry["size"] = hashlib.sha256(f.read()).hexdigest(), os.path.getsize(path)
    with open(manifest_path, "w") as f:
        json.dump(manifest, f)
    location = StateLocation.open(checkpoint)
    with VersionReader(location, 0, 1, 2, merge_records=1 << 20) as bulk:
        assert _bulk_records(bulk, spec, 64)[0] == (b"k000", b"changed")
    with VersionReader(location, 0, 1, 2) as per_record:  # the database's records, as ever
        assert next(iter(per_record.records(spec))) == (b"k000", b"v1-0")


@pytest.mark.parametrize("damage", ["bytes", "order", "gone", "another version's"])
def test_a_damaged_columns_file_is_passed_over_for_the_snapshots_database(dirs, damage, caplog):
    """A columns file whose bytes differ from its manifest's SHA-256, whose keys are out of
    order (a crafted file with a manifest to match), that is gone, or that is another
    version's (with a manifest to match: its recorded version is checked), is not read: the
    snapshot's RocksDB files serve the read (the same rows), with a warning naming it."""
    import hashlib
    import json
    import logging

    import pyarrow.ipc as ipc

    checkpoint, local = dirs
    spec = _kv_state(checkpoint, local)
    path, manifest_path, manifest = _snapshot_columns_file(checkpoint, 1)
    if damage == "bytes":
        with open(path, "r+b") as f:
            f.seek(os.path.getsize(path) // 2)
            byte = f.read(1)
            f.seek(-1, 1)
            f.write(bytes([byte[0] ^ 0xFF]))
    elif damage == "gone":
        os.remove(path)
    else:
        if damage == "order":
            keys = pa.array([b"b", b"a"], pa.binary())
            schema = pa.schema([("key", pa.binary()), ("value", pa.binary())])
            with ipc.new_file(path, schema) as writer:
                writer.write_batch(
                    pa.record_batch([keys, keys], schema=schema), custom_metadata={b"column_family": b"kv"}
                )
        else:
            shutil.copyfile(_snapshot_columns_file(checkpoint, 0)[0], path)
        entry = next(e for e in manifest["files"] if e["durable"].endswith("COLUMNS.arrow"))
        with open(path, "rb") as f:
            entry["sha256"], entry["size"] = hashlib.sha256(f.read()).hexdigest(), os.path.getsize(path)
        with open(manifest_path, "w") as f:
            json.dump(manifest, f)
    location = StateLocation.open(checkpoint)
    with caplog.at_level(logging.WARNING, logger="spark_statestore.partition.reading"):
        with VersionReader(location, 0, 1, 2, merge_records=1 << 20) as bulk:
            rows = _bulk_records(bulk, spec, 64)
    assert rows == [(b"k%03d" % i, b"v1-%d" % i) for i in range(50)]
    assert "COLUMNS.arrow" in caplog.text and "snapshot 1" in caplog.text


def test_a_read_that_must_write_changelogs_restores_the_snapshot_after_all(dirs):
    """Where more changelog records follow a snapshot than a read merges in memory, the
    columns file cannot stand in for the copy (nothing can be written to it): the read is
    made from the restored copy, with the same rows."""
    checkpoint, local = dirs
    spec = _kv_state(checkpoint, local)
    location = StateLocation.open(checkpoint)
    with VersionReader(location, 0, 2, 2) as per_record:
        expected = list(per_record.records(spec))
    with VersionReader(location, 0, 2, 2, merge_records=10) as bulk:  # 50 records follow snapshot 1
        assert _bulk_records(bulk, spec, 7) == expected
    assert expected == [(b"k%03d" % i, b"v2-%d" % i) for i in range(50)]


def test_verify_names_a_damaged_columns_file(dirs):
    """`python -m spark_statestore verify` checks a snapshot's columns file too (a restore
    of the database does not download it)."""
    from spark_statestore.tools.verification import verify_state

    checkpoint, local = dirs
    _kv_state(checkpoint, local)
    assert not verify_state(checkpoint).problems
    path, _, _ = _snapshot_columns_file(checkpoint, 1)
    with open(path, "ab") as f:
        f.write(b"x")
    problems = verify_state(checkpoint).problems
    assert [p.what for p in problems] == ["snapshot of version 1"] and "COLUMNS.arrow" in problems[0].message


def test_a_columns_file_above_the_memory_bound_is_not_read(dirs, monkeypatch):
    """A columns file is read whole into memory: one larger than `COLUMNS_READ_BYTES` is
    not used (the snapshot is restored and scanned, with the same rows)."""
    import spark_statestore.partition.reading as reading
    from spark_statestore.partition.columns_copy import ColumnsCopy

    checkpoint, local = dirs
    spec = _kv_state(checkpoint, local)
    location = StateLocation.open(checkpoint)
    with VersionReader(location, 0, 1, 2, merge_records=1 << 20) as bulk:
        assert isinstance(bulk.db, ColumnsCopy)
        expected = _bulk_records(bulk, spec, 64)
    monkeypatch.setattr(reading, "COLUMNS_READ_BYTES", 0)
    with VersionReader(location, 0, 1, 2, merge_records=1 << 20) as bulk:
        assert not isinstance(bulk.db, ColumnsCopy)
        assert _bulk_records(bulk, spec, 64) == expected == [(b"k%03d" % i, b"v1-%d" % i) for i in range(50)]


class _Changelog:
    """What `Overlay.of` reads of a changelog: range deletions, then blocks of writes."""

    def __init__(self, ranges: list, blocks: list) -> None:
        self._ranges, self._blocks = ranges, blocks

    def ranges(self) -> dict:
        return {"s": self._ranges, "other": [(b"", b"\xff")]}

    def write_columns(self):
        for keys, values in self._blocks:
            yield "s", binary_array(keys), binary_array(values)
            yield "other", binary_array([b"a"]), binary_array([b"x"])

    def write_blocks(self):
        for store, keys, values in self.write_columns():
            yield store, keys.to_pylist(), values.to_pylist()


@pytest.mark.parametrize("seed", range(100))
def test_the_overlay_of_changelogs_is_their_writes_folded_in_order(seed):
    """`Overlay` (Arrow arrays: a stable sort keeps each key's last write; ranges delete
    earlier writes; chunks merged with new values in place or re-sorted) against a dict
    folding the same changelogs record by record: `latest` of every key, and the merge
    into a snapshot's chunks (random chunk sizes, key bounds, unsorted blocks, repeated
    keys, deletes, range deletions, another store's writes)."""
    from spark_statestore.partition.columnar import Overlay

    rng = random.Random(seed)
    universe = [b"k%02d" % i for i in range(rng.choice([5, 30]))]
    snapshot = {k: b"s" + k for k in rng.sample(universe, rng.randint(0, len(universe)))}
    changelogs, written, ranges = [], {}, []
    for _ in range(rng.randint(0, 3)):
        cuts = []
        for _ in range(rng.choice([0, 0, 1, 2])):
            lo, hi = sorted(rng.sample(universe + [b"", b"\xff"], 2))
            cuts.append((lo, hi))
            ranges.append((lo, hi))
            written.update({k: None for k in written if lo <= k < hi})
        blocks = []
        for _ in range(rng.randint(0, 3)):
            keys = [rng.choice(universe) for _ in range(rng.randint(1, 8))]
            if rng.random() < 0.5:
                keys = sorted(set(keys))
            values = [None if rng.random() < 0.2 else b"v%d" % rng.randrange(99) for _ in keys]
            blocks.append((keys, values))
            written.update(zip(keys, values))
        changelogs.append(_Changelog(cuts, blocks))
    overlay = Overlay.of(changelogs, "s")
    for key in universe:
        if key in written:
            expected = written[key]
        else:
            expected = None if any(lo <= key < hi for lo, hi in ranges) else "unchanged"
        assert overlay.latest(key, "unchanged") == expected, key
    lo, hi = rng.choice([None, b"k01"]), rng.choice([None, b"k03", b"k20"])
    model = {k: v for k, v in snapshot.items() if not any(a <= k < b for a, b in ranges)}
    model.update(written)
    expected_rows = sorted(
        (k, v) for k, v in model.items() if v is not None and (lo is None or k >= lo) and (hi is None or k < hi)
    )
    pairs = sorted(snapshot.items())
    size = rng.randint(1, 7)
    chunks = [
        (binary_array([k for k, _ in pairs[i : i + size]]), binary_array([v for _, v in pairs[i : i + size]]))
        for i in range(0, len(pairs), size)
    ]

    def in_bounds(chunk):  # the snapshot's chunks within the bounds, as `SnapshotColumns.chunks` gives them
        keys, values = chunk
        keep = [(lo is None or k >= lo) and (hi is None or k < hi) for k in keys.to_pylist()]
        return keys.filter(pa.array(keep)), values.filter(pa.array(keep))

    scanned = [c for c in map(in_bounds, chunks) if len(c[0])]
    merged = [row for keys, values in overlay.merge(iter(scanned), lo, hi) for row in zip(keys.to_pylist(), values.to_pylist())]
    assert merged == expected_rows
