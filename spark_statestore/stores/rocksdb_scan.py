"""Reads over a RocksDB column family: range scans, one-seek lookups of the first and
last key in a range, and a `Seeker` that reseeks one iterator; all raise for damaged
data instead of ending early.

rocksdict's `ReadOptions.set_iterate_lower_bound` sets an upper bound, so lower bounds
are applied with `seek` and a check in Python.
"""

from __future__ import annotations

from itertools import islice
from typing import Iterator

import rocksdict

from spark_statestore.errors import CorruptStateError
from spark_statestore.stores.damage import storage_error


def scan_column_family(
    cf: rocksdict.Rdict, lo: bytes | None, hi: bytes | None, reverse: bool
) -> Iterator[tuple[bytes, bytes]]:
    opts = rocksdict.ReadOptions()
    if hi is not None:
        opts.set_iterate_upper_bound(hi)
    last: bytes | None = None
    if not reverse:
        # not bound to a name: an error raised below must not hold the iterator (see _status)
        for item in cf.items(read_opt=opts) if lo is None else cf.items(from_key=lo, read_opt=opts):
            last = item[0]
            yield item
    else:
        for item in cf.items(backwards=True, read_opt=opts):
            if lo is not None and item[0] < lo:
                return
            last = item[0]
            yield item
    _check_scan_end(cf, opts, lo, hi, last, reverse)


def scan_pairs(cf: rocksdict.Rdict, lo: bytes | None, hi: bytes | None) -> list[tuple[bytes, bytes]]:
    """Forward over `lo <= key < hi`, every pair in one list: one C-level pass of one
    iterator (no Python step per pair); a damaged table raises instead of ending early."""
    opts = rocksdict.ReadOptions()
    if hi is not None:
        opts.set_iterate_upper_bound(hi)
    pairs = list(cf.items(read_opt=opts) if lo is None else cf.items(from_key=lo, read_opt=opts))
    _check_scan_end(cf, opts, lo, hi, pairs[-1][0] if pairs else None, False)
    return pairs


def scan_chunks(
    cf: rocksdict.Rdict, lo: bytes | None, hi: bytes | None, size: int
) -> Iterator[tuple[list[bytes], list[bytes]]]:
    """Forward over `lo <= key < hi` as `(keys, values)` lists of up to `size` pairs: two
    C-level iterators (keys, values) instead of a Python step per pair. Only for a
    database nothing writes to while it is read (a private copy), where both iterators see
    the same entries; a damaged table raises instead of ending the scan early."""
    opts = rocksdict.ReadOptions()
    if hi is not None:
        opts.set_iterate_upper_bound(hi)
    start = {} if lo is None else {"from_key": lo}
    keys_it, values_it = cf.keys(read_opt=opts, **start), cf.values(read_opt=opts, **start)
    last: bytes | None = None
    while True:
        keys, values = list(islice(keys_it, size)), list(islice(values_it, size))
        if len(keys) != len(values):
            raise CorruptStateError(f"a scan of {len(keys)} keys read {len(values)} values from {cf.path()}")
        if not keys:
            break
        last = keys[-1]
        yield keys, values
    del keys_it, values_it  # see _status
    _check_scan_end(cf, opts, lo, hi, last, False)


def _check_scan_end(
    cf: rocksdict.Rdict, opts: rocksdict.ReadOptions, lo: bytes | None, hi: bytes | None,
    last: bytes | None, reverse: bool,
) -> None:
    """rocksdict's item iterators end silently where RocksDB hit damaged data: look once
    more from where the scan ended, and raise if RocksDB reports an error there."""
    it = cf.iter(opts)
    if not reverse:
        if last is None:
            it.seek_to_first() if lo is None else it.seek(lo)
        else:
            it.seek(last)
            if it.valid():
                it.next()
    elif last is None:
        it.seek_to_last() if hi is None else it.seek_for_prev(hi)
    else:
        it.seek_for_prev(last)
        if it.valid():
            it.prev()
    error = None if it.valid() else _status(it)
    del it  # see _status
    if error is not None:
        raise storage_error(error)


class Seeker:
    """Repeated forward reads below one bound by one reseeked iterator: what a skip-scan
    (one seek per window start) costs without creating an iterator per seek, which costs
    about as much as the seek itself.

    Every read of a seeker sees one point in time, the one its iterator was created at
    (a reader beside a commit sees all of it or none). `close()` (the database's, at its
    close) releases the iterator; reads after that find nothing. A read that meets damaged
    data releases it too, and raises `CorruptStateError`."""

    __slots__ = ("__weakref__", "_at", "_it", "_opts")

    def __init__(self, cf: rocksdict.Rdict, hi: bytes) -> None:
        # kept as long as the iterator: rocksdict's iterator reads its upper bound from
        # these options (dropped, the bound's memory was reused and reads ended early)
        self._opts = rocksdict.ReadOptions()
        self._opts.set_iterate_upper_bound(hi)
        self._it: rocksdict.RdictIter | None = cf.iter(self._opts)
        self._at: bytes | None = None  # the key the iterator is on after `first`

    def first(self, key: bytes) -> tuple[bytes, bytes] | None:
        """The first pair at or after `key` (below the bound), by one seek."""
        it = self._it
        if it is None:
            return None
        it.seek(key)
        if it.valid():
            self._at = found = it.key()
            return found, it.value()
        del it
        self._at = None
        self._raise_if_damaged()
        return None

    def run(self, key: bytes, upper: bytes, limit: int) -> list[tuple[bytes, bytes]]:
        """Up to `limit` pairs from `key` up to `upper` (exclusive); no seek where `first`
        just found `key`. `more` reads on from where this stopped."""
        it = self._it
        if it is None:
            return []
        if key != self._at:
            it.seek(key)
        del it
        return self.more(upper, limit)

    def more(self, upper: bytes, limit: int) -> list[tuple[bytes, bytes]]:
        """Up to `limit` more pairs of the last `run`, below `upper`."""
        it = self._it
        if it is None:
            return []
        self._at = None
        pairs: list[tuple[bytes, bytes]] = []
        append, current, value, step = pairs.append, it.key, it.value, it.next
        for _ in range(limit):
            found = current()  # None where the iterator is no longer valid
            if found is None:
                del it, current, value, step
                self._raise_if_damaged()
                break
            if found >= upper:
                break
            append((found, value()))
            step()
        return pairs

    def _raise_if_damaged(self) -> None:
        """Where the iterator stopped without reaching its bound, RocksDB's error, raised
        once the iterator is released (see `_status`)."""
        error = None if self._it is None else _status(self._it)
        if error is not None:
            self._it = None
            raise storage_error(error)

    def close(self) -> None:
        self._it = None


def _status(it: rocksdict.RdictIter) -> Exception | None:
    """RocksDB's error where an invalid iterator stopped (None: at the end of its range).

    Returned, not raised, and without a traceback: an iterator keeps its database open
    (and locked), so no frame an error goes through may hold one, or a caller that keeps
    the error (a task's failure) would keep the database open after `close()`."""
    try:
        it.status()
    except Exception as e:
        return e.with_traceback(None)
    return None


def first_in(cf: rocksdict.Rdict, lo: bytes, hi: bytes | None) -> tuple[bytes, bytes] | None:
    """The first pair with `lo <= key < hi`, by one seek."""
    it = cf.iter()
    it.seek(lo)
    entry = _entry_within(it, lo, hi)
    del it  # see _status
    if isinstance(entry, Exception):
        raise storage_error(entry)
    return entry


def last_in(cf: rocksdict.Rdict, lo: bytes | None, hi: bytes) -> tuple[bytes, bytes] | None:
    """The last pair with `lo <= key < hi`, by one seek."""
    it = cf.iter()
    it.seek_for_prev(hi)
    if it.valid() and it.key() >= hi:
        it.prev()
    entry = _entry_within(it, lo, hi)
    del it  # see _status
    if isinstance(entry, Exception):
        raise storage_error(entry)
    return entry


def _entry_within(
    it: rocksdict.RdictIter, lo: bytes | None, hi: bytes | None
) -> tuple[bytes, bytes] | Exception | None:
    """The pair the iterator points at if `lo <= key < hi` (else None); RocksDB's error
    (see `_status`) where an invalid iterator stopped."""
    if not it.valid():
        return _status(it)
    key = it.key()
    if (lo is not None and key < lo) or (hi is not None and key >= hi):
        return None
    return key, it.value()
