"""A snapshot's records as Arrow columns: `COLUMNS.arrow`, one more file of the snapshot.

A reader of a whole store (the state reader) needs every record of a column family in key
order. Scanned out of RocksDB that is rocksdict's per-record iterators (about 0.5 us a
record per iterator); read from an Arrow IPC file it is one read. So when a snapshot is
taken, the pass that verifies the checkpoint (every entry read with checksums on, as
the snapshot's verification did before) also writes every column family's raw entries (stored keys and
values, bookkeeping keys included) into `COLUMNS.arrow` in the checkpoint directory:
one zstd-compressed record batch of `key`, `value` (binary) per chunk, its custom metadata naming the
column family, batches in column family name order and keys ascending within each.

It is uploaded with the snapshot and listed in its manifest with its size and SHA-256
like every other file of it, so it is verified the same way and retained and deleted
with the snapshot's own files (its row in `checkpoint.files`, listed by `PartitionFiles`). A restore of the database does not download it (RocksDB
does not need it); `read_snapshot_columns` reads and verifies it. A snapshot without
it (taken before it existed) is read by a scan, as before.
"""

from __future__ import annotations

import gc
import hashlib
import os
from bisect import bisect_left, bisect_right
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from itertools import islice, pairwise

import pyarrow as pa
import pyarrow.compute as pc
import rocksdict

from spark_statestore.checkpoint.filesystem import DurableDir
from spark_statestore.checkpoint.names import COLUMNS_FILE
from spark_statestore.errors import CorruptStateError, MissingStateError
from spark_statestore.stores.damage import storage_error
from spark_statestore.stores.names import DEFAULT_COLUMN_FAMILY

_FAMILY = b"column_family"
_CHUNK = 65_536
_WRITE = pa.ipc.IpcWriteOptions(compression="zstd")  # smaller than the SST files, read at ~1 GB/s


_ENTRY = pa.struct([("key", pa.binary()), ("value", pa.binary())])


def _schema() -> pa.Schema:
    return pa.schema([("key", pa.binary()), ("value", pa.binary())])


@contextmanager
def _checkpoint(path: str) -> Iterator[list[tuple[str, rocksdict.Rdict]]]:
    """The column families of the RocksDB checkpoint at `path`, opened read-only, in name
    order (`CorruptStateError`: RocksDB cannot open it); closed on exit."""
    opts = rocksdict.Options(raw_mode=True)
    try:
        names = sorted(rocksdict.Rdict.list_cf(path, opts))
        families = {n: rocksdict.Options(raw_mode=True) for n in names if n != DEFAULT_COLUMN_FAMILY}
        db = rocksdict.Rdict(path, opts, column_families=families, access_type=rocksdict.AccessType.read_only())
    except Exception as e:
        raise CorruptStateError(f"cannot open the RocksDB database at {path} to verify it: {e}") from e
    cfs: list[tuple[str, rocksdict.Rdict]] = []
    try:
        for name in names:
            cfs.append((name, db if name == DEFAULT_COLUMN_FAMILY else db.get_column_family(name)))
        yield cfs
    finally:
        for _, cf in cfs[::-1]:
            if cf is not db:
                cf.close()
        db.close()


def _checked_read() -> rocksdict.ReadOptions:
    read = rocksdict.ReadOptions()
    read.set_verify_checksums(True)
    read.fill_cache(False)
    return read


def verify_database(path: str) -> None:
    """Read every entry of every column family of the RocksDB database at `path` (a
    checkpoint) with checksums on, raising `CorruptStateError` naming what RocksDB cannot
    read; nothing is written (a snapshot without a columns file: `snapshot_columns=False`)."""
    with _checkpoint(path) as cfs:
        for name, cf in cfs:
            tail = deque(cf.keys(read_opt=_checked_read()), maxlen=1)  # a key's block is read with checksums
            _check_complete(cf, name, path, tail[0] if tail else None)


def verify_and_write_columns(path: str) -> None:
    """Read every entry of every column family of the RocksDB database at `path` (a
    checkpoint) with checksums on, raising `CorruptStateError` naming what RocksDB cannot
    read, and write them to `path/COLUMNS.arrow`."""
    target = os.path.join(path, COLUMNS_FILE)
    with (
        _checkpoint(path) as cfs,
        pa.OSFile(target + ".tmp", "wb") as sink,
        pa.ipc.new_file(sink, _schema(), options=_WRITE) as writer,
    ):
        for name, cf in cfs:
            meta = {_FAMILY: name.encode("utf-8")}
            for keys, values in _verified_chunks(cf, name, path):
                writer.write_batch(pa.record_batch([keys, values], schema=_schema()), custom_metadata=meta)
    os.replace(target + ".tmp", target)


def _verified_chunks(cf: rocksdict.Rdict, name: str, path: str) -> Iterator[tuple[pa.Array, pa.Array]]:
    """Column family `cf`'s entries in chunks, read with checksums on by one scan (its
    `(key, value)` tuples made Arrow arrays in one C-level pass); RocksDB's error where its
    iterator stopped short as `CorruptStateError` (`_check_complete`)."""
    entries = cf.items(read_opt=_checked_read())
    last: bytes | None = None
    while (pairs := _next_chunk(entries)) is not None:
        last = pairs[-1]["key"].as_py()
        yield pairs.field(0), pairs.field(1)
    del entries
    _check_complete(cf, name, path, last)


def _next_chunk(entries: Iterator[tuple[bytes, bytes]]) -> pa.StructArray | None:
    """The next `_CHUNK` of `entries` as a struct array (None: none left), made with the
    cyclic garbage collector paused: each chunk is 65,536 new tuples that live until it
    is converted, and counted as new objects they set off collections (full ones too,
    scanning every object of the process, the writer's included) that find nothing to
    free. The pause is one chunk long, and the collector is left as it was found (as
    pyspark does for its own bulk loads)."""
    paused = gc.isenabled()
    gc.disable()
    try:
        chunk = list(islice(entries, _CHUNK))
        pairs = pa.array(chunk, _ENTRY) if chunk else None
        del chunk  # its tuples are freed before the collector runs again
        return pairs
    finally:
        if paused:
            gc.enable()


def _check_complete(cf: rocksdict.Rdict, name: str, path: str, last: bytes | None) -> None:
    """Raise `CorruptStateError` with RocksDB's error if a scan of `cf` that ended after
    `last` (None: gave nothing) stopped short: rocksdict's iterators end silently on
    damage, so an iterator is placed after `last` and asked for its status."""
    it = cf.iter(_checked_read())
    if last is None:
        it.seek_to_first()
    else:
        it.seek(last)
        if it.valid():
            it.next()
    try:
        if not it.valid():
            it.status()
    except Exception as e:  # noqa: BLE001 - rocksdict raises Exception with RocksDB's status
        error = storage_error(e.with_traceback(None))
        del it
        raise CorruptStateError(f"RocksDB cannot read column family {name!r} of {path}: {error}") from None
    del it


def columns_entry(manifest: dict) -> dict | None:
    """The manifest's entry of the snapshot's columns file (None: taken without one)."""
    return next((e for e in manifest["files"] if e["name"] == COLUMNS_FILE), None)


@dataclass(frozen=True)
class SnapshotColumns:
    """The entries of each column family of one snapshot: its batches of sorted binary
    `(keys, values)` arrays, in key order."""

    families: dict[str, list[tuple[pa.Array, pa.Array]]]
    source: str

    def chunks(self, family: str, lo: bytes | None, hi: bytes | None) -> Iterator[tuple[pa.Array, pa.Array]]:
        """`(keys, values)` of `family` with `lo <= key < hi` (None: open), in key order,
        a stored batch (or the part of it in range: a slice, no copy) at a time."""
        for keys, values in self.families.get(family, ()):
            start = 0 if lo is None or keys[0].as_py() >= lo else search(keys, lo)
            end = len(keys) if hi is None or keys[-1].as_py() < hi else search(keys, hi)
            if start < end:
                yield keys.slice(start, end - start), values.slice(start, end - start)
            if end < len(keys):
                return

    def get(self, family: str, key: bytes) -> bytes | None:
        """The value of `key` in `family` (None: absent)."""
        for keys, values in self.families.get(family, ()):
            if keys[-1].as_py() >= key:
                at = search(keys, key)
                return values[at].as_py() if keys[at].as_py() == key else None
        return None


class _Keys:
    """A binary array indexed as Python bytes (for `bisect`: log n items converted)."""

    def __init__(self, keys: pa.Array) -> None:
        self.keys = keys

    def __len__(self) -> int:
        return len(self.keys)

    def __getitem__(self, i: int) -> bytes:
        return self.keys[i].as_py()


def search(keys: pa.Array, key: bytes, right: bool = False) -> int:
    """The index of the first key at or after `key` (with `right`: after it) in ascending
    binary `keys`."""
    return (bisect_right if right else bisect_left)(_Keys(keys), key)  # type: ignore[arg-type]


def read_snapshot_columns(durable: DurableDir, entry: dict) -> SnapshotColumns:
    """Read the columns file a manifest `entry` lists into memory (one read of at most its
    listed size and a byte: no local copy to write and read again), check its size and
    SHA-256 against it and its shape (every column family's keys strictly ascending), and
    read its batches (`MissingStateError`: gone; `CorruptStateError`: anything else wrong,
    naming the file)."""
    uri = durable.uri(entry["durable"])
    try:
        data = durable.read_range(entry["durable"], 0, entry["size"] + 1)  # a longer file: one byte more
    except FileNotFoundError as e:
        raise MissingStateError(f"snapshot file {uri} is missing") from e
    if len(data) != entry["size"] or hashlib.sha256(data).hexdigest() != entry["sha256"]:
        raise CorruptStateError(f"snapshot file {uri} fails its checksum")
    try:
        reader = pa.ipc.open_file(pa.py_buffer(data))
        if not reader.schema.equals(_schema()):
            raise CorruptStateError(f"snapshot file {uri} has columns {reader.schema}, not binary key and value")
        parts: dict[str, list[pa.RecordBatch]] = {}
        for i in range(reader.num_record_batches):
            batch, meta = reader.get_batch_with_custom_metadata(i)
            family = None if meta is None else meta.get(_FAMILY)
            if family is None:
                raise CorruptStateError(f"snapshot file {uri}: batch {i} names no column family")
            parts.setdefault(family.decode("utf-8"), []).append(batch)
    except (pa.ArrowInvalid, UnicodeDecodeError) as e:
        raise CorruptStateError(f"snapshot file {uri} is not a columns file: {e}") from e
    families = {family: [_checked(batch, uri, family) for batch in batches] for family, batches in parts.items()}
    for family, pairs in families.items():
        for (before, _), (after, _) in pairwise(pairs):
            if before[-1].as_py() >= after[0].as_py():
                raise CorruptStateError(f"snapshot file {uri}: the keys of column family {family!r} are not ascending")
    return SnapshotColumns(families, uri)


def _checked(batch: pa.RecordBatch, uri: str, family: str) -> tuple[pa.Array, pa.Array]:
    """A batch's keys and values, refused unless the keys are strictly ascending and
    nothing is null (what a column family's scan gives)."""
    keys, values = batch.column(0), batch.column(1)
    ascending = len(keys) < 2 or pc.all(pc.less(keys.slice(0, len(keys) - 1), keys.slice(1))).as_py()
    if not len(keys) or keys.null_count or values.null_count or not ascending:
        raise CorruptStateError(
            f"snapshot file {uri}: a batch of column family {family!r} is empty, holds nulls or has keys out of order"
        )
    return keys, values
