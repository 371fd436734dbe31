"""A keyspace whose writes wait in a transaction buffer until commit.

rocksdict has no WriteBatchWithIndex, so the buffer is ours: a `SortedMap` of pending
puts and tombstones (`None`), a list of pending range deletions, and, once the
transaction outgrows its memory limit, a *staging* column family the buffer spills to.
Reads see the buffer first, then the staging area, then committed data, so the writer
always reads its own writes; range and prefix reads merge the three in key order, with
tombstones and pending range deletions hiding committed keys.

Byte accounting follows KIP-892: a pending put costs key + value bytes, a tombstone its
key bytes; overwriting a pending key replaces its cost instead of adding to it. The
uncommitted bytes reported and budgeted add what each buffered record costs CPython
beyond those bytes (`budget.uncommitted_cost`).
"""

from __future__ import annotations

from itertools import compress, repeat
from operator import is_, itemgetter, or_
from typing import Iterable, Iterator, Sequence

import rocksdict

from spark_statestore.faults import fault_point
from spark_statestore.stores.keyspace import ColumnFamilyKeySpace, KeySeeker, KeySpaceSeeker, columns_of
from spark_statestore.stores.merge import merge_sorted, without_tombstones
from spark_statestore.stores.rocksdb import RocksDatabase
from spark_statestore.stores.sorted_map import SortedMap
from spark_statestore.txn.apply import pair_columns
from spark_statestore.txn.budget import ENTRY_COST, MemoryBudget, uncommitted_cost

STAGING_PREFIX = "__staging__"
_MISSING = object()
_PUT = b"\x01"
_TOMBSTONE = b"\x00"
_SPILL_BATCH_BYTES = 1 << 20
_BULK_CHUNK = 4096  # pairs buffered per budget charge by `put_many`
_FEW = 16  # `put_columns` of at most this many pairs: one by one

Entry = tuple[bytes, "bytes | None"]
_first, _second = itemgetter(0), itemgetter(1)


def _staged_value(raw: bytes) -> bytes | None:
    """The value a staged record holds (None: a tombstone)."""
    return raw[1:] if raw[0] == 1 else None


def decode_staged(entries: Iterator[tuple[bytes, bytes]]) -> Iterator[Entry]:
    for key, raw in entries:
        yield key, _staged_value(raw)


class TransactionalKeySpace:
    """One store's keyspace inside a `TransactionalDatabase` transaction."""

    def __init__(self, db: RocksDatabase, name: str, budget: MemoryBudget) -> None:
        self._db = db
        self._budget = budget
        self.name = name
        self.committed = ColumnFamilyKeySpace(db, name)
        self.staging_name = STAGING_PREFIX + name
        self.staging: ColumnFamilyKeySpace | None = None  # set while the buffer has spilled
        self.pending = SortedMap()
        self.ranges: list[tuple[bytes, bytes]] = []  # pending range deletions, sorted, disjoint
        self.memory_bytes = 0  # key and value bytes buffered in memory (KIP-892's count)
        self.spilled = 0  # uncommitted bytes moved to the staging column family
        # moved by what changes where the transaction's records are (a spill, the end of the
        # transaction, a range deletion): open merged scans re-open (`_merged_scan`)
        self.generation = 0
        # moved by what changes the keyspace other than its store's own writes (a rollback, a
        # replay of changes into committed data, a range deletion): views a store derived
        # from its writes (`stores.session_view`) are dropped
        self.epoch = 0

    @property
    def entries(self) -> int:
        """Records buffered in memory: the buffer's keys (puts and tombstones)."""
        return len(self.pending.data)

    # -- writes -------------------------------------------------------------------------

    def _account(self, delta: int, entries: int = 0) -> None:
        self.memory_bytes += delta
        self._budget.charge(delta, entries)  # may spill every buffer of the transaction

    def put(self, key: bytes, value: bytes) -> None:
        # the hottest write path: one probe for an overwrite, the accounting inlined
        pending = self.pending
        data = pending.data
        old = data.get(key, _MISSING)
        if old is _MISSING:  # a new key: the sorted index and version follow (`pending.add`, inlined)
            data[key] = value
            if pending.index is not None:
                pending.index.add(key)
            pending.version += 1
            delta = len(key) + len(value)
            self.memory_bytes += delta
            budget = self._budget  # `budget.charge(delta, 1)`, its common case inlined
            memory = budget.memory + delta + ENTRY_COST
            budget.memory = memory
            if memory > budget.ceiling:
                budget.passed(memory)  # may spill every buffer of the transaction
            return
        data[key] = value  # an overwrite: nothing structural changes
        delta = len(value) if old is None else len(value) - len(old)
        if delta:  # an update of a fixed-width value (a counter) costs nothing more
            self.memory_bytes += delta
            self._budget.charge(delta)

    def delete(self, key: bytes) -> None:
        pending = self.pending
        old = pending.get(key, _MISSING)
        if old is None:
            return
        pending.set(key, None)
        if old is _MISSING:
            self._account(len(key), 1)
        else:
            self._account(-len(old))

    def put_many(self, pairs: Iterable[tuple[bytes, bytes | None]]) -> None:
        """`put` (or `delete`, for None) of every (checked) pair in order, as `put_columns`."""
        if not isinstance(pairs, list):
            pairs = list(pairs)
        self.put_columns(list(map(_first, pairs)), list(map(_second, pairs)))

    def put_columns(self, keys: Sequence[bytes], values: Sequence[bytes | None]) -> None:
        """`put` (or `delete`, for None) of every key with its value, in order. Writes of
        distinct keys go into the buffer by chunks of `_BULK_CHUNK` (one dict update and
        one charge of the budget each, so a spill comes at most a chunk late); a chunk with
        a repeated key goes pair by pair. Columns, not pairs: a tuple per record would be
        garbage-collected memory, and the collector's passes over thousands of live tuples
        cost more than the buffering itself. A write of many keys into a buffer with a
        sorted index gives the index up (the next ordered walk sorts again, once) rather
        than inserting into it key by key. A few writes go one by one: the bulk path's
        set-up costs more than it saves on them."""
        if len(keys) <= _FEW:
            self._put_each(keys, values)
            return
        if len(keys) >= _BULK_CHUNK and len(keys) * 4 >= len(self.pending):
            self.pending.drop_index()
        whole = len(keys) <= _BULK_CHUNK
        for lo in range(0, len(keys), _BULK_CHUNK):
            chunk_keys = keys if whole else keys[lo : lo + _BULK_CHUNK]
            chunk_values = values if whole else values[lo : lo + _BULK_CHUNK]
            if not self._put_chunk(chunk_keys, chunk_values):
                self._put_each(chunk_keys, chunk_values)

    def _put_each(self, keys: Sequence[bytes], values: Sequence[bytes | None]) -> None:
        put, delete = self.put, self.delete
        for key, value in zip(keys, values):
            if value is None:
                delete(key)
            else:
                put(key, value)

    def _put_chunk(self, keys: Sequence[bytes], values: Sequence[bytes | None]) -> bool:
        """Buffer a chunk of writes of distinct keys at once, counted as `put` and
        `delete` count them one by one; False (nothing done) for a chunk with a repeated
        key."""
        if not keys:
            return True
        if len(set(keys)) != len(keys):
            return False
        olds = list(map(self.pending.data.get, keys, repeat(_MISSING, len(keys))))
        added = olds.count(_MISSING)
        if added == len(keys) and None not in values:  # all new puts: the usual bulk write
            delta = sum(map(len, keys)) + sum(map(len, values))
            new_keys: Sequence[bytes] = keys
        else:
            new_keys = [key for key, old in zip(keys, olds) if old is _MISSING] if added else ()
            # a put costs its value, a new key its key too, a tombstone nothing more; what
            # a write replaces gives its value's cost back
            delta = sum(map(len, new_keys)) + sum(map(len, filter(None, values)))
            delta -= sum(map(len, [old for old in olds if old is not _MISSING and old is not None]))
        self.pending.set_many(zip(keys, values), new_keys)
        self.memory_bytes += delta
        self._budget.charge(delta, added)  # may spill every buffer of the transaction
        return True

    def delete_range(self, lo: bytes, hi: bytes) -> None:
        """Delete every key in [lo, hi): pending ones now, committed ones at commit."""
        if lo >= hi:
            return
        pending = self.pending
        freed = 0
        removed = pending.keys_between(lo, hi)
        for key in removed:
            value = pending.pop(key)
            freed += len(key) + (0 if value is None else len(value))
        if self.staging is not None:
            self.staging.delete_range(lo, hi)
        self.ranges = _add_range(self.ranges, lo, hi)
        self.generation += 1
        self.epoch += 1
        self._account(len(lo) + len(hi) - freed, -len(removed))

    # -- reads --------------------------------------------------------------------------

    def get(self, key: bytes) -> bytes | None:
        value = self.pending.get(key, _MISSING)
        if value is not _MISSING:
            return value
        if self.staging is not None:
            raw = self.staging.get(key)
            if raw is not None:
                return _staged_value(raw)
        if self.ranges and _covered(self.ranges, key):
            return None
        return self.committed.get(key)

    def get_many(self, keys: list[bytes]) -> list[bytes | None]:
        """Many gets, each answered as `get` answers it: pending writes from the buffer,
        spilled ones by one multi-get of the staging area, keys under a pending range
        deletion as absent, the rest by one multi-get of committed data. The keys the
        buffer lacks are found and their answers merged back by C-level passes."""
        out: list = list(map(self.pending.data.get, keys, repeat(_MISSING, len(keys))))
        if _MISSING not in out:
            return out
        missing = list(compress(keys, map(is_, out, repeat(_MISSING))))
        found = dict.fromkeys(missing)  # absent unless found below
        if self.staging is not None:
            staged = self.staging.get_many(missing)
            hits = list(compress(missing, staged))
            found.update(zip(hits, map(_staged_value, filter(None, staged))))
            missing = list(compress(missing, map(is_, staged, repeat(None))))
        if missing and self.ranges:  # absent: under a range deletion, not written since
            if len(self.ranges) == 1:  # the usual case (a window store's expiry): one test
                lo, hi = self.ranges[0]
                missing = list(compress(missing, map(or_, map(lo.__gt__, missing), map(hi.__le__, missing))))
            else:
                missing = [key for key in missing if not _covered(self.ranges, key)]
        if missing:
            found.update(zip(missing, self.committed.get_many(missing)))
        return list(map(found.get, keys, out))

    def _quiet(self, lo: bytes | None, hi: bytes | None) -> bool:
        """True when committed data alone answers reads of [lo, hi)."""
        if self.ranges or self.staging is not None:
            return False
        return not self.pending or not self.pending.has_key_in(lo, hi)

    def scan(
        self, lo: bytes | None, hi: bytes | None, reverse: bool = False
    ) -> Iterator[tuple[bytes, bytes]]:
        if self._quiet(lo, hi):
            return self.committed.scan(lo, hi, reverse)
        return self._merged_scan(lo, hi, reverse)

    def scan_columns(self, lo: bytes | None, hi: bytes | None) -> tuple[list[bytes], list[bytes]]:
        """A forward scan as `(keys, values)` lists: committed data's own where the
        transaction wrote nothing in the range, else the merged scan's."""
        if self._quiet(lo, hi):
            return self.committed.scan_columns(lo, hi)
        return columns_of(list(self._merged_scan(lo, hi, False)))

    def _merged_scan(
        self, lo: bytes | None, hi: bytes | None, reverse: bool
    ) -> Iterator[tuple[bytes, bytes]]:
        """The transaction's view of [lo, hi), live: a spill, commit, rollback or range
        deletion while the caller holds the scan (`generation` moved) re-opens it past the
        last key it yielded, so no record moves out from under it (a pending write that
        a spill or commit moves on is read from where it went). A database closed by then
        ends it, as a close ends every read."""
        while True:
            generation = self.generation
            for key, value in self._merged_once(lo, hi, reverse):
                yield key, value
                if self.generation != generation:
                    if reverse:
                        hi = key
                    else:
                        lo = key + b"\x00"  # the least key after `key`
                    break
            else:
                return
            if not self._db.is_open:
                return

    def _merged_once(
        self, lo: bytes | None, hi: bytes | None, reverse: bool
    ) -> Iterator[tuple[bytes, bytes]]:
        """One merged pass over [lo, hi) as things stand (an iterator, not a generator: one
        Python frame fewer per record in `_merged_scan`)."""
        committed = self._committed_outside_ranges(lo, hi, reverse)
        lower: Iterator[Entry] = committed  # type: ignore[assignment]
        if self.staging is not None:
            staged = decode_staged(self.staging.scan(lo, hi, reverse))
            lower = merge_sorted(staged, lower, reverse)
        merged = merge_sorted(self.pending.iter_items(lo, hi, True, False, reverse), lower, reverse)
        return without_tombstones(merged)

    def _committed_outside_ranges(
        self, lo: bytes | None, hi: bytes | None, reverse: bool
    ) -> Iterator[tuple[bytes, bytes]]:
        ranges = self.ranges
        if not ranges:
            yield from self.committed.scan(lo, hi, reverse)
            return
        # skip a pending range deletion that covers an end of the scan without reading it
        for a, b in ranges:
            if not reverse and a <= (lo or b"") < b:
                lo = b
            if reverse and hi is not None and a < hi <= b:
                hi = a
        if lo is not None and hi is not None and lo >= hi:
            return
        for item in self.committed.scan(lo, hi, reverse):
            if not _covered(ranges, item[0]):
                yield item

    def first(self, lo: bytes, hi: bytes | None) -> tuple[bytes, bytes] | None:
        if self._quiet(lo, hi):
            return self.committed.first(lo, hi)
        return next(self._merged_scan(lo, hi, False), None)

    def seeker(self, lo: bytes, hi: bytes) -> KeySeeker:
        """Committed data's own seeker where the transaction wrote nothing in [lo, hi)
        (so far: its iterator then reads committed data as of now), else reads merged
        with the transaction's writes, each as `first` and `scan` answer it."""
        if self._quiet(lo, hi):
            return self.committed.seeker(lo, hi)
        return KeySpaceSeeker(self, hi)

    def last(self, lo: bytes | None, hi: bytes) -> tuple[bytes, bytes] | None:
        if self._quiet(lo, hi):
            return self.committed.last(lo, hi)
        return next(self._merged_scan(lo, hi, True), None)

    def approximate_num_entries(self) -> int:
        return self.committed.approximate_num_entries() + len(self.pending)

    def flush(self) -> None:
        """Flush committed data to SST files; pending writes stay in the transaction."""
        self._db.flush()

    # -- transaction plumbing -----------------------------------------------------------

    @property
    def uncommitted_bytes(self) -> int:
        """This store's share of the transaction's uncommitted bytes (`MemoryBudget`)."""
        return uncommitted_cost(self.memory_bytes, self.entries) + self.spilled

    def spill(self) -> None:
        """Move the in-memory buffer to the staging column family (chunked batches)."""
        if not self.pending:
            return
        db = self._db
        if self.staging is None:
            self.staging = ColumnFamilyKeySpace(db, self.staging_name)
        batch = rocksdict.WriteBatch(raw_mode=True)
        size = 0
        handle = db.handle(self.staging_name)
        for key, value in self.pending.items():
            if value is None:
                batch.put(key, _TOMBSTONE, handle)
                size += len(key)
            else:
                batch.put(key, _PUT + value, handle)
                size += len(key) + len(value)
            if size >= _SPILL_BATCH_BYTES:
                db.write(batch)
                batch = rocksdict.WriteBatch(raw_mode=True)
                size = 0
        del handle
        fault_point("spill:before-last-write")
        db.write(batch)
        fault_point("spill:after-write")
        self.spilled += uncommitted_cost(self.memory_bytes, self.entries)
        self._budget.spilled_to_disk(self.memory_bytes, self.entries)
        self.memory_bytes = 0
        self.pending.clear()
        self.generation += 1

    def changes(self) -> Iterator[tuple[Sequence[bytes], Sequence[bytes | None]]]:
        """The transaction's final writes in key order (`None` = delete), as `(keys,
        values)` columns; the pending range deletions (`ranges`) apply before them."""
        if self.staging is None:
            keys = self.pending.ordered_keys()
            yield keys, list(map(self.pending.data.__getitem__, keys))
            return
        pending = self.pending.iter_items()
        yield from pair_columns(merge_sorted(pending, decode_staged(self.staging.scan(None, None)), False))

    def reset(self) -> None:
        """Forget the transaction (after commit or rollback)."""
        self.pending.clear()
        self.generation += 1
        self.ranges = []
        self.memory_bytes = 0
        self.spilled = 0
        if self.staging is not None:
            self.staging = None
            self._db.drop_column_family(self.staging_name)


def _covered(ranges: list[tuple[bytes, bytes]], key: bytes) -> bool:
    for lo, hi in ranges:
        if key < lo:
            return False
        if key < hi:
            return True
    return False


def _add_range(ranges: list[tuple[bytes, bytes]], lo: bytes, hi: bytes) -> list[tuple[bytes, bytes]]:
    """Insert [lo, hi) into sorted disjoint ranges, merging overlaps."""
    out = []
    for a, b in ranges:
        if b < lo or a > hi:
            out.append((a, b))
        else:
            lo = min(lo, a)
            hi = max(hi, b)
    out.append((lo, hi))
    out.sort()
    return out
