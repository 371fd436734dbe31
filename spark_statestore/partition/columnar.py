"""A store's records at one version as Arrow columns, read in bulk from a private copy.

`VersionReader.records` walks the store API one record at a time (several Python frames
per record). A reader of the whole store needs none of that: the copy is private and
nothing writes to it, so the store's column family is scanned with rocksdict's C-level
key and value iterators in chunks, and each chunk becomes Arrow arrays in one C-level
pass of Arrow's, or, where the copy holds a snapshot unchanged, read from the snapshot's
columns file (`checkpoint.snapshot_columns`: no scan at all); changelogs come as Arrow
arrays per block (`Changelog.write_columns`).
What comes out is what the store serves, in the same (key) order: every key of a
key-value store; the live windows of a window store (`window_start` at or after its
observed stream time minus its retention, data keys only: the store's bookkeeping keys
start at 0xff); the live entries of a TTL store (its
`0x00 | key` entries whose expiry is above its clock, without the layout's bytes).
The changes of a TTL store are told apart per record (`ttl.decode_changes`).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Any, Callable, Iterator, Sequence

import pyarrow as pa
import pyarrow.compute as pc

from spark_statestore.checkpoint.snapshot_columns import SnapshotColumns, search
from spark_statestore.stores.rocksdb_scan import scan_chunks
from spark_statestore.stores.spec import StoreSpec
from spark_statestore.stores.ttl import (
    CLOCK_KEY, ENTRY, INDEX, PENDING, PENDING_KEY, decode_changes, live_pending, time_bytes,
)

CHUNK = 65_536
Scan = Callable[["bytes | None", "bytes | None"], Iterator[tuple[pa.Array, pa.Array]]]  # (lo, hi): sorted chunks
_INT32_LIMIT = 1 << 31


@dataclass(frozen=True)
class StoreColumns:
    """One chunk of a store's records: binary `keys` and `values`, and the `parts` its
    kind's key schema carries beside each key (`StoreKind.key_columns`: a window store's
    int64 window starts)."""

    keys: pa.Array
    values: pa.Array
    parts: tuple[pa.Array, ...] = ()

    def __len__(self) -> int:
        return len(self.keys)


def binary_array(items: list) -> pa.Array:
    """A binary Arrow array of `items` (bytes, or None for a null), built by Arrow in one
    C-level pass (a chunked array beyond 2 GiB of bytes)."""
    return pa.array(items, pa.binary())


def store_columns(
    db: Any, spec: StoreSpec, chunk: int = CHUNK, changelogs: Sequence[Any] = (),
    keys: tuple[bytes | None, bytes | None] = (None, None), snapshot: SnapshotColumns | None = None,
) -> Iterator[StoreColumns]:
    """The records of store `spec` in `db` (a loaded `TransactionalDatabase` nothing else
    writes to) with the verified `changelogs` after its version merged in, in key order,
    about `chunk` records at a time. `keys`: the stored keys `lo <= key < hi` (None: open)
    a key-value store's scan is limited to (a window store's is not: its keys lead with
    the window's start, and its kind says which are live: `StoreKind.live_keys`).
    `snapshot`: the columns of the snapshot `db` holds unchanged, read instead of
    scanning `db` (see `checkpoint.snapshot_columns`)."""
    store = db.open_store(spec)  # checks the store's recorded kind against `spec`
    scan = _scan(db, spec.name, chunk) if snapshot is None else partial(snapshot.chunks, spec.name)
    overlay = Overlay.of(changelogs, spec.name)
    kind = spec.store_kind
    live = kind.live_keys(spec, store, overlay.latest)
    lo, hi = keys if live is None else live
    if lo is not None and hi is not None and lo >= hi:
        return  # no key is in the range
    if spec.ttl is not None:
        clock = overlay.latest(CLOCK_KEY, store.get(CLOCK_KEY))
        pending = overlay.latest(PENDING_KEY, store.get(PENDING_KEY))
        yield from _ttl_columns(
            scan, overlay, (clock, pending), ENTRY + (lo or b""), INDEX if hi is None else ENTRY + hi
        )
        return
    for stored, values in overlay.merge(scan(lo, hi), lo, hi):
        user_keys, parts = kind.key_columns(spec, stored)
        yield StoreColumns(user_keys, values, parts)


def _scan(db: Any, name: str, chunk: int) -> Scan:
    """Scans of column family `name` of a loaded `TransactionalDatabase`, as binary arrays."""
    cf = db.db.column_family(name)
    return lambda lo, hi: ((binary_array(k), binary_array(v)) for k, v in scan_chunks(cf, lo, hi, chunk))


def _ttl_columns(
    scan: Scan, overlay: "Overlay", times: tuple[bytes | None, bytes | None], lo: bytes, hi: bytes
) -> Iterator[StoreColumns]:
    """A TTL store's live entries between its stored keys `lo` and `hi` (`times`: its stored
    clock and pending expiry, None: not recorded), as `TtlKeyValueStore` reads them: an
    entry is live while its expiry bytes sort above the clock's, or are `PENDING` while
    pending entries are live."""
    clock, pending = times
    now_b = time_bytes(-1) if clock is None else clock[:8]
    now = pa.scalar(now_b, pa.binary())
    pending_live = live_pending(pending, now_b)
    for keys, values in overlay.merge(scan(lo, hi), lo, hi):
        expiries = pc.binary_slice(values, 0, 8)
        live = pc.greater(expiries, now)
        if pending_live:
            live = pc.or_(live, pc.equal(expiries, pa.scalar(PENDING, pa.binary())))
        if not pc.all(live).as_py():
            keys, values = keys.filter(live), values.filter(live)
        if len(keys):
            yield StoreColumns(_after(keys, len(ENTRY)), _after(values, 8))  # without the layout's bytes


def _after(stored: pa.Array, size: int) -> pa.Array:
    """Binary `stored` without the first `size` bytes of each."""
    return pc.binary_slice(stored, size, _INT32_LIMIT)


@dataclass
class Overlay:
    """What changelogs after a snapshot do to one store: the last value written per key
    (`keys` ascending and unique, binary `values`, null: deleted) and the ranges deleted,
    as Arrow arrays: folding and merging them is Arrow's work, not a Python step per
    changed key."""

    keys: pa.Array
    values: pa.Array
    ranges: list

    @staticmethod
    def of(changelogs: Sequence[Any], store: str) -> "Overlay":
        """The changelogs' changes to `store`, folded in order (range deletions first in each)."""
        keys: list[pa.Array] = []
        values: list[pa.Array] = []
        ranges: list = []
        for changelog in changelogs:
            for lo, hi in changelog.ranges().get(store, ()):
                ranges.append((lo, hi))
                values = [_deleted_in(k, v, lo, hi) for k, v in zip(keys, values, strict=True)]
            for name, written, raw in changelog.write_columns():
                if name == store:
                    keys.append(written)
                    values.append(raw)
        if not keys:
            return Overlay(binary_array([]), binary_array([]), ranges)
        return Overlay(*_last_per_key(pa.concat_arrays(keys), pa.concat_arrays(values)), ranges)

    def latest(self, key: bytes, snapshot: Any) -> Any:
        """The value of `key` after the changelogs (None: deleted; `snapshot`: unchanged)."""
        at = search(self.keys, key)
        if at < len(self.keys) and self.keys[at].as_py() == key:
            return self.values[at].as_py()
        if any(lo <= key < hi for lo, hi in self.ranges):
            return None
        return snapshot

    def merge(
        self, chunks: Iterator[tuple[pa.Array, pa.Array]], lo: bytes | None, hi: bytes | None
    ) -> Iterator[tuple[pa.Array, pa.Array]]:
        """Sorted `(keys, values)` chunks of the snapshot with the overlay merged in, as
        binary arrays in key order, restricted to `lo <= key < hi` (None: open)."""
        start = 0 if lo is None else search(self.keys, lo)
        end = len(self.keys) if hi is None else search(self.keys, hi)
        done = start
        for keys, values in chunks:
            upto = max(done, min(end, search(self.keys, keys[-1].as_py(), right=True)))
            merged = self._merge_chunk(keys, values, done, upto)
            done = upto
            if len(merged[0]):
                yield merged
        if done < end:
            merged = self._merge_chunk(binary_array([]), binary_array([]), done, end)
            if len(merged[0]):
                yield merged

    def _merge_chunk(self, keys: pa.Array, values: pa.Array, start: int, end: int) -> tuple[pa.Array, pa.Array]:
        """One chunk of snapshot records without the keys the overlay changed or a range
        deleted, with the overlay's values of its keys `start:end` (those in this chunk's span)."""
        if start == end and not self.ranges:
            return keys, values
        changed, replaced = self.keys.slice(start, end - start), self.values.slice(start, end - start)
        drop = pc.is_in(keys, value_set=changed) if len(changed) else None
        if drop is not None and not self.ranges and not replaced.null_count and pc.sum(drop).as_py() == len(changed):
            # every changed key is in the chunk and still there: new values in place (both in key order)
            return keys, pc.replace_with_mask(values, drop, replaced)
        for lo, hi in self.ranges:
            inside = _inside(keys, lo, hi)
            drop = inside if drop is None else pc.or_(drop, inside)
        if drop is not None:
            keys, values = keys.filter(pc.invert(drop)), values.filter(pc.invert(drop))
        puts = replaced.is_valid()
        if not pc.any(puts).as_py():
            return keys, values
        keys = pa.concat_arrays([keys, changed.filter(puts)])
        values = pa.concat_arrays([values, replaced.filter(puts)])
        order = pc.sort_indices(keys)
        return keys.take(order), values.take(order)


def _inside(keys: pa.Array, lo: bytes, hi: bytes) -> pa.Array:
    """Where `lo <= key < hi`."""
    return pc.and_(pc.greater_equal(keys, pa.scalar(lo, pa.binary())), pc.less(keys, pa.scalar(hi, pa.binary())))


def _deleted_in(keys: pa.Array, values: pa.Array, lo: bytes, hi: bytes) -> pa.Array:
    """`values` with those of keys `lo <= key < hi` deleted (null)."""
    return pc.if_else(_inside(keys, lo, hi), pa.scalar(None, pa.binary()), values)


def _last_per_key(keys: pa.Array, values: pa.Array) -> tuple[pa.Array, pa.Array]:
    """`keys` ascending and unique with the value written last for each (writes in order)."""
    if len(keys) > 1 and not pc.all(pc.less(keys.slice(0, len(keys) - 1), keys.slice(1))).as_py():
        order = pc.sort_indices(keys)  # stable: a key's writes stay in order
        keys, values = keys.take(order), values.take(order)
        last = pc.not_equal(keys.slice(0, len(keys) - 1), keys.slice(1))  # the last write of its key
        last = pa.concat_arrays([last, pa.array([True])])
        keys, values = keys.filter(last), values.filter(last)
    return keys, values


@dataclass(frozen=True)
class ChangeColumns:
    """Changes of one batch: `change` (put, delete, expire), binary `keys` and `values`
    (null: none), and the `parts` of its kind's key schema (see `StoreColumns`)."""

    batch_id: int
    change: pa.Array
    keys: pa.Array
    values: pa.Array
    parts: tuple[pa.Array, ...] = ()

    def __len__(self) -> int:
        return len(self.change)


def changelog_columns(changelog: Any, spec: StoreSpec, version: int) -> Iterator[ChangeColumns]:
    """The changes of store `spec` in a verified `Changelog` of `version`, in file order:
    a window store's expiries (range deletions from the start) first, then one chunk per
    block of writes (deletes have null values). A TTL store's come as one chunk, told
    apart per record (an entry deleted with its index entry at or below the clock: `expire`)."""
    if spec.ttl is not None:
        mine = lambda: ((k, v) for store, k, v in changelog.entries() if store == spec.name)  # noqa: E731
        decoded = list(decode_changes(mine))
        if decoded:
            change, keys, values = zip(*decoded)
            yield ChangeColumns(
                version, pa.array(change, pa.string()), binary_array(list(keys)), binary_array(list(values))
            )
        return
    kind = spec.store_kind
    bounds = [hi for lo, hi in changelog.ranges().get(spec.name, ()) if lo == b""]
    expiries = kind.expiry_parts(spec, bounds) if bounds else None
    if expiries is not None:
        none = pa.nulls(len(bounds), pa.binary())
        yield ChangeColumns(version, pa.array(["expire"] * len(bounds)), none, none, expiries)
    end = kind.data_end(spec)
    for store, stored, raw in changelog.write_columns():
        if store != spec.name:
            continue
        if end is not None:  # without the store's bookkeeping
            data = pc.less(stored, pa.scalar(end, pa.binary()))
            if not pc.all(data).as_py():
                stored, raw = stored.filter(data), raw.filter(data)
            if not len(stored):
                continue
        stored, parts = kind.key_columns(spec, stored)
        change = pc.if_else(raw.is_null(), "delete", "put")
        yield ChangeColumns(version, change, stored, raw, parts)
