"""Persistent window store over a keyspace, with the read semantics of the in-memory one.

Key layout (time first, like the in-memory store's segments):

* without duplicates: ``window_start (8 bytes, big-endian) | key``
* with duplicates:    ``window_start | escape(key) | sequence (8 bytes)``; the key is
  escaped (see `serde.escape`) so that a key that is a prefix of another cannot
  interleave with it, and the sequence keeps put order.

Byte order is (window start, key, put order), the API's forward order, so `fetch_all`
and `all` are single ordered scans, and expiry is one `delete_range` below a
segment boundary: data older than the retention period is dropped a segment at a time
(`segment_interval`), and reads filter the rest. Single-key fetches skip-scan
(`window_layout.skip_scan`): one seek per window start that exists in the range, the
same work as the in-memory store's per-segment lookups.

The observed stream time and the next duplicate sequence block live in the same
keyspace under keys starting with 0xff (data keys start below 0x80), so they commit
with the data.
"""

from __future__ import annotations

from bisect import bisect_left
from itertools import repeat
from operator import itemgetter
from typing import Any, Callable, Iterator

from spark_statestore.serde import escape, unescape
from spark_statestore.stores.api import prefix_end
from spark_statestore.stores.damage import storage_error
from spark_statestore.stores.keyspace import KeySpace
from spark_statestore.stores.spec import WindowSpec
from spark_statestore.stores.window_api import CHUNK_RECORDS, WindowStore
from spark_statestore.stores.window_layout import (
    skip_scan,
    skip_scan_backward,
    start_of,
    stored_keys,
    ws_bytes,
)
from spark_statestore.stores.windowed import WindowColumns, Windowed, records_of, window_of
from spark_statestore.validation import check_window_columns, keys_are_bytes, times_are_valid

STREAM_TIME_KEY = b"\xff\x01stream_time"
_SEQUENCE_KEY = b"\xff\x02sequence"
_SEQUENCE_BLOCK = 1 << 16
_first, _second = itemgetter(0), itemgetter(1)
_after_start = itemgetter(slice(8, None))  # a stored key without its window start


class RocksDBWindowStore(WindowStore):
    """KIP-428 window store on a `KeySpace` (see module docstring)."""

    persistent = True

    def __init__(
        self, name: str, keyspace: KeySpace, spec: WindowSpec, on_close: Callable[[], Any] | None = None
    ) -> None:
        super().__init__(name, spec, on_close)
        self._ks = keyspace
        self.segment_interval = spec.segment
        self._load_stream_state()

    def _load_stream_state(self) -> None:
        """Read the stream time and the duplicate sequence from the keyspace."""
        self._stream_time = self._persisted_stream_time()
        self._expired_below = 0
        raw = self._ks.get(_SEQUENCE_KEY)
        self._sequence = self._sequence_limit = 0 if raw is None else int.from_bytes(raw, "big")

    def _persisted_stream_time(self) -> int:
        raw = self._ks.get(STREAM_TIME_KEY)
        return -1 if raw is None else int.from_bytes(raw, "big", signed=True)

    @property
    def keyspace(self) -> KeySpace:
        return self._ks

    # -- encoding -----------------------------------------------------------------------

    def _key_part(self, key: bytes) -> bytes:
        return escape(key) if self.retain_duplicates else key

    def _key_part_end(self, key: bytes) -> bytes:
        """Exclusive upper bound, after the window start, of every entry of `key`."""
        if self.retain_duplicates:
            return prefix_end(escape(key))  # type: ignore[return-value]
        return key + b"\x00"

    def _next_sequence(self) -> bytes:
        seq = self._sequence
        if seq >= self._sequence_limit:
            self._sequence_limit = seq + _SEQUENCE_BLOCK
            self._ks.put(_SEQUENCE_KEY, self._sequence_limit.to_bytes(8, "big"))
        self._sequence = seq + 1
        return seq.to_bytes(8, "big")

    # -- writes -------------------------------------------------------------------------

    def _put_live(self, key: bytes, value: bytes | None, window_start: int) -> None:
        if self.retain_duplicates:
            if value is not None:
                self._ks.put(ws_bytes(window_start) + escape(key) + self._next_sequence(), value)
        elif value is None:
            self._ks.delete(ws_bytes(window_start) + key)
        else:
            self._ks.put(ws_bytes(window_start) + key, value)

    def _put_live_columns(self, keys: list[bytes], values: list[bytes | None], starts: list[int]) -> None:
        """Live records in bulk: one window-start prefix per distinct start, and the
        keyspace takes the columns (a transaction buffers them by chunks)."""
        if self.retain_duplicates:
            super()._put_live_columns(keys, values, starts)
            return
        self._ks.put_columns(stored_keys(keys, starts), values)

    def _advance(self, time: int) -> None:
        """A new stream time: persist it (with the data) and expire what fell out."""
        self._stream_time = time
        self._ks.put(STREAM_TIME_KEY, time.to_bytes(8, "big", signed=True))
        self._expire()

    def _expire(self) -> None:
        """Drop whole segments that lie entirely below the live range."""
        live_from = self._stream_time - self.retention_period + 1
        boundary = (live_from // self.segment_interval) * self.segment_interval
        if boundary > self._expired_below:
            self._ks.delete_range(b"", ws_bytes(boundary))
            self._expired_below = boundary

    # -- reads --------------------------------------------------------------------------

    def _get_live(self, key: bytes, window_start: int) -> bytes | None:
        if not self.retain_duplicates:
            return self._ks.get(ws_bytes(window_start) + key)
        prefix = ws_bytes(window_start) + escape(key)
        found = self._ks.last(prefix, prefix_end(prefix))  # type: ignore[arg-type]
        return None if found is None else found[1]

    def get_all(self, keys: list[bytes], window_starts: list[int]) -> list[bytes | None]:
        """Many windows' values by one multi-get (the latest put, with duplicates)."""
        if self.retain_duplicates:
            return super().get_all(keys, window_starts)
        if not self._open:
            raise self._closed()
        lists = type(keys) is list and type(window_starts) is list and len(keys) == len(window_starts)
        if not (lists and keys_are_bytes(keys) and times_are_valid(window_starts)):
            checked = check_window_columns(keys, window_starts)
            keys, window_starts = list(map(_first, checked)), list(map(_second, checked))
        if not keys:
            return []
        try:
            values = self._ks.get_many(stored_keys(keys, window_starts))
        except Exception as e:
            raise storage_error(e) from None
        expired_up_to = self.observed_stream_time - self.retention_period
        if min(window_starts) > expired_up_to:
            return values
        return [None if s <= expired_up_to else v for v, s in zip(values, window_starts)]

    def _read_key(self, key: bytes, lo: int, hi: int, reverse: bool) -> Iterator[tuple[int, bytes]]:
        return self._walk_key_backward(key, lo, hi) if reverse else self._walk_key(key, lo, hi)

    def _read_range(
        self, key_from: bytes | None, key_to: bytes | None, lo: int, hi: int, reverse: bool
    ) -> Iterator[tuple[Windowed, bytes]]:
        scan = self._ks.scan
        if key_from is None and key_to is None:
            return self._windowed(scan(ws_bytes(lo), ws_bytes(hi + 1), reverse))
        if reverse:
            return self._skip_range_backward(key_from, key_to, lo, hi)
        return self._skip_range(key_from, key_to, lo, hi)

    def _read_range_columns(
        self, key_from: bytes | None, key_to: bytes | None, lo: int, hi: int
    ) -> WindowColumns:
        """Every key's windows in [lo, hi] by one bulk scan (the layout's order is the
        read order): keys cut from the stored keys at C level, each window start decoded
        once for its run of keys (bisect over the sorted keys)."""
        if self.retain_duplicates or key_from is not None or key_to is not None:
            return super()._read_range_columns(key_from, key_to, lo, hi)
        stored, values = self._ks.scan_columns(ws_bytes(lo), ws_bytes(hi + 1))
        starts: list[int] = []
        i, count = 0, len(stored)
        while i < count:
            start = start_of(stored[i])
            j = bisect_left(stored, ws_bytes(start + 1), i)
            starts += repeat(start, j - i)
            i = j
        return WindowColumns(list(map(_after_start, stored)), values, starts)

    def _walk_key(self, key: bytes, lo: int, hi: int) -> Iterator[tuple[int, bytes]]:
        """Forward, all by one seeker (one point in time): the skip-scan finds each window
        of the key, and with duplicates the window's entries are read on from there."""
        part = self._key_part(key)
        seeker = self._ks.seeker(ws_bytes(lo), ws_bytes(hi + 1))
        if not self.retain_duplicates:
            for w, _, value in skip_scan(seeker.first, part, lo, hi, False):
                yield w, value  # type: ignore[misc]
            return
        end = prefix_end(part)
        for w, stored, _ in skip_scan(seeker.first, part, lo, hi, True):
            upper = ws_bytes(w) + end  # type: ignore[operator]
            pairs = seeker.run(stored, upper, CHUNK_RECORDS)
            while True:
                for _, value in pairs:
                    yield w, value
                if len(pairs) < CHUNK_RECORDS:
                    break
                pairs = seeker.more(upper, CHUNK_RECORDS)

    def _walk_key_backward(self, key: bytes, lo: int, hi: int) -> Iterator[tuple[int, bytes]]:
        part = self._key_part(key)
        dups = self.retain_duplicates
        end = prefix_end(part)
        for w, _, value in skip_scan_backward(self._ks.last, part, self._key_part_end(key), lo, hi, dups):
            if dups:
                window = ws_bytes(w)
                for _, entry in self._ks.scan(window + part, window + end, True):  # type: ignore[operator]
                    yield w, entry
            else:
                yield w, value  # type: ignore[misc]

    def _windowed(self, entries: Iterator[tuple[bytes, bytes]]) -> Iterator[tuple[Windowed, bytes]]:
        """Decode stored entries into `(Windowed, value)`; the window is rebuilt only when
        the 8-byte window-start prefix changes."""
        new = tuple.__new__
        size = self.window_size
        dups = self.retain_duplicates
        prefix = None
        window = None
        for stored, value in entries:
            if stored[:8] != prefix:
                prefix = stored[:8]
                window = window_of(int.from_bytes(prefix, "big"), size)
            key = unescape(stored, 8)[0] if dups else stored[8:]
            yield new(Windowed, (key, window)), value

    def _skip_range(
        self, key_from: bytes | None, key_to: bytes | None, lo: int, hi: int
    ) -> Iterator[tuple[Windowed, bytes]]:
        """Forward over windows, the records of `_skip_range_chunks`."""
        size = self.window_size
        for columns in self._skip_range_chunks(key_from, key_to, lo, hi):
            yield from records_of(columns, size)

    def _read_range_chunks(
        self, key_from: bytes | None, key_to: bytes | None, lo: int, hi: int
    ) -> Iterator[WindowColumns]:
        if key_from is None and key_to is None:  # one scan: cut into chunks
            return super()._read_range_chunks(key_from, key_to, lo, hi)
        return self._skip_range_chunks(key_from, key_to, lo, hi)

    def _skip_range_chunks(
        self, key_from: bytes | None, key_to: bytes | None, lo: int, hi: int
    ) -> Iterator[WindowColumns]:
        """Forward over windows, the records of the key range in each, as columns of
        `CHUNK_RECORDS` (the last may hold fewer), all by one seeker: a seek finds the
        next window start that exists, wherever in that window it lands, and where it
        landed inside the key range the window's records start there, without a second
        seek."""
        seeker = self._ks.seeker(ws_bytes(lo), ws_bytes(hi + 1))
        low = b"" if key_from is None else self._key_part(key_from)
        high = None if key_to is None else self._key_part_end(key_to)
        dups = self.retain_duplicates
        keys: list[bytes] = []
        values: list[bytes] = []
        starts: list[int] = []
        t = lo
        while t <= hi:
            found = seeker.first(ws_bytes(t) + low)
            if found is None:
                break
            stored = found[0]
            w = start_of(stored)
            upper = ws_bytes(w + 1) if high is None else ws_bytes(w) + high
            if w > t and stored[8:] < low:  # landed before the key range of a later window
                stored = ws_bytes(w) + low
            room = CHUNK_RECORDS - len(keys)
            pairs = seeker.run(stored, upper, room)
            while True:
                raw = map(_first, pairs)
                keys += [unescape(k, 8)[0] for k in raw] if dups else map(_after_start, raw)
                values += map(_second, pairs)
                starts += repeat(w, len(pairs))
                if len(pairs) < room:
                    break  # the window's records end here
                yield WindowColumns(keys, values, starts)
                keys, values, starts = [], [], []
                room = CHUNK_RECORDS
                pairs = seeker.more(upper, room)
            t = w + 1
        if keys:
            yield WindowColumns(keys, values, starts)

    def _skip_range_backward(
        self, key_from: bytes | None, key_to: bytes | None, lo: int, hi: int
    ) -> Iterator[tuple[Windowed, bytes]]:
        """Backward over windows; in each, one reverse scan of the key range."""
        ks = self._ks
        floor = ws_bytes(lo)
        low = b"" if key_from is None else self._key_part(key_from)
        high = None if key_to is None else self._key_part_end(key_to)
        t = hi
        while t >= lo:
            bound = ws_bytes(t + 1) if high is None else ws_bytes(t) + high
            found = ks.last(floor, bound)
            if found is None:
                return
            w = start_of(found[0])
            if w < t and high is not None and found[0][8:] >= high:
                t = w
                continue
            upper = ws_bytes(w + 1) if high is None else ws_bytes(w) + high
            yield from self._windowed(ks.scan(ws_bytes(w) + low, upper, True))
            t = w - 1

    def flush(self) -> None:
        if not self._open:
            raise self._closed()
        self._ks.flush()
