"""`TtlKeyValueStore`: a key-value store whose entries expire (see `ttl_spec`).

It keeps everything in the bytes store below it (in-memory, RocksDB, transactional, or
that store behind the record cache), so caching, transactions, changelogs, snapshots
and restore treat its entries as any others:

* an entry:       ``0x00 | key``                 -> ``expiry (8 bytes) | value``
* its expiry:     ``0x01 | expiry (8 bytes) | key`` -> ``0x01`` (the expiry index)
* the clock:      ``0xff 0x01 clock``             -> ``time (8 bytes)``
* pending expiry: ``0xff 0x01 pending``           -> ``time (8 bytes)``

Times are 8 big-endian bytes of `time + 2**63`, so byte order is time order. An entry is
expired once its expiry is at or below the clock: reads skip it at once. `advance_time`
moves the clock and deletes at most `limit` expired entries, oldest expiry first, by
walking the index from its start (bounded work, never a scan of the entries, and no
read of them: each write replaces the entry's index entry in the same transaction, so
the index holds exactly one entry per entry, with the entry's expiry). The
clock is written whenever expired entries are deleted, so a change set that deletes an
entry and its index entry at or below the clock it holds is an expiry (`decode_changes`).

The clock has no time before it first moves (-1; in Spark, the clock of a store on the
watermark does not move while the query has no watermark: Spark's 0). An entry written then is
written at the clock's first time: its expiry is `PENDING` (8 zero bytes, below every
real expiry, so pending entries lead the index) until the first move records their
expiry, first time + ttl, under the pending key (written again with each deletion of
pending entries, for `decode_changes`). Renewing their expiries at the first move instead
would rewrite a whole batch's entries in one batch and report them as changed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Iterator, Mapping, cast

from spark_statestore.cache.change import Change
from spark_statestore.stores.api import KeyValueStore
from spark_statestore.stores.clock import Clock
from spark_statestore.stores.ttl_spec import TtlSpec
from spark_statestore.validation import MAX_TIME, check_int, check_key, check_pairs, check_value

ENTRY = b"\x00"
INDEX = b"\x01"
CLOCK_KEY = b"\xff\x01clock"
PENDING_KEY = b"\xff\x01pending"
PENDING = bytes(8)  # the expiry of an entry written before the clock first moved
_MARK = b"\x01"
_BIAS = 1 << 63
DEFAULT_EXPIRY_LIMIT = 10_000  # expired entries deleted per `advance_time` (per batch, in Spark)


def time_bytes(ms: int) -> bytes:
    return (ms + _BIAS).to_bytes(8, "big")


def time_of(raw: bytes) -> int:
    return int.from_bytes(raw[:8], "big") - _BIAS


_REAL = time_bytes(0)  # every expiry but PENDING is at least this (clock >= -1, ttl >= 1)


def live_pending(pending: bytes | None, now: bytes) -> bool:
    """Whether entries written before the clock first moved are live at clock `now`
    (`pending`: their recorded expiry, None while the clock has not moved)."""
    return pending is None or pending > now


@dataclass
class TtlMetrics:
    """What the store's expiry did since it was opened."""

    expired: int = 0  # expired entries deleted
    expiry_seconds: float = 0.0


class TtlKeyValueStore(KeyValueStore):
    """Entries with an expiry over a bytes `KeyValueStore` (see module docstring)."""

    def __init__(self, inner: KeyValueStore, ttl: TtlSpec) -> None:
        super().__init__(inner.name, on_close=inner.close)
        self.inner = inner
        self.ttl = ttl
        self.metrics = TtlMetrics()
        self._load_clock()

    def _load_clock(self) -> None:
        raw = self.inner.get(CLOCK_KEY)
        self._pending = self.inner.get(PENDING_KEY)
        self._set_clock(-1 if raw is None else time_of(raw))

    def _expiry(self, now: int) -> bytes:
        return time_bytes(min(now + self.ttl.duration, MAX_TIME))

    def _set_clock(self, now: int) -> None:
        self._now = now
        self._now_b = time_bytes(now)
        self._expiry_b = PENDING if now == -1 else self._expiry(now)
        # the expiry bytes that are live although not above the clock (None: no such bytes)
        self._live_pending = PENDING if live_pending(self._pending, self._now_b) else None

    @property
    def persistent(self) -> bool:  # type: ignore[override]
        return self.inner.persistent

    @property
    def clock(self) -> Clock:
        return self.ttl.clock

    @property
    def time(self) -> int:
        """The clock: entries with an expiry at or below it are expired (-1: never moved)."""
        return self._now

    # -- writes ---------------------------------------------------------------------------

    def put(self, key: bytes, value: bytes | None) -> None:
        if not self._open:
            raise self._closed()
        key = check_key(key)
        if value is not None:
            value = check_value(value)
        self._write(key, value, self.inner.get(ENTRY + key))

    def _write(self, key: bytes, value: bytes | None, old: bytes | None) -> bytes | None:
        """Write one entry over its stored form `old`; returns the new stored form."""
        inner = self.inner
        if old is not None:
            inner.put(INDEX + old[:8] + key, None)
        if value is None:
            if old is not None:
                inner.put(ENTRY + key, None)
            return None
        expiry = self._expiry_b
        stored = expiry + value
        inner.put(ENTRY + key, stored)
        inner.put(INDEX + expiry + key, _MARK)
        return stored

    def put_all(self, pairs: Iterable[tuple[bytes, bytes | None]]) -> None:
        """Put every pair in order (one multi-get of what they replace)."""
        if not self._open:
            raise self._closed()
        pairs = check_pairs(pairs)
        stored = dict(zip((k for k, _ in pairs), self.inner.get_all([ENTRY + k for k, _ in pairs])))
        for key, value in pairs:
            stored[key] = self._write(key, value, stored[key])

    def replace_values(self, pairs: Iterable[tuple[bytes, bytes]]) -> None:
        """Give stored entries new values and keep their expiries (a schema migration's
        rewrite is not a write of the user's: it must not renew lifetimes); a key without
        an entry is left alone, and None leaves its entry alone."""
        if not self._open:
            raise self._closed()
        pairs = check_pairs(pairs)
        inner = self.inner
        for (key, value), stored in zip(pairs, inner.get_all([ENTRY + k for k, _ in pairs])):
            if stored is not None and value is not None:
                inner.put(ENTRY + key, stored[:8] + value)

    def delete(self, key: bytes) -> bytes | None:
        """Remove `key`; returns its value (None if it had none or had expired)."""
        previous = self.get(key)
        if previous is not None:
            self.put(key, None)
        return previous

    # -- reads ----------------------------------------------------------------------------

    def _live(self, stored: bytes | None) -> bytes | None:
        if stored is None or (stored[:8] <= self._now_b and stored[:8] != self._live_pending):
            return None
        return stored[8:]

    def get(self, key: bytes) -> bytes | None:
        if not self._open:
            raise self._closed()
        return self._live(self.inner.get(ENTRY + check_key(key)))

    def get_all(self, keys: Iterable[bytes]) -> list[bytes | None]:
        if not self._open:
            raise self._closed()
        live = self._live
        return [live(v) for v in self.inner.get_all([ENTRY + check_key(k) for k in keys])]

    def _entries(self, source: Iterator[tuple[bytes, bytes]]) -> Iterator[tuple[bytes, bytes]]:
        now, pending = self._now_b, self._live_pending
        with source:
            for key, stored in source:
                if key[:1] == ENTRY and (stored[:8] > now or stored[:8] == pending):
                    yield key[1:], stored[8:]

    def _read_range(
        self, key_from: bytes | None, key_to: bytes | None, reverse: bool
    ) -> Iterator[tuple[bytes, bytes]]:
        lo = ENTRY + (key_from or b"")
        hi = INDEX if key_to is None else ENTRY + key_to  # no stored key is INDEX alone
        inner = self.inner
        return self._entries(inner.reverse_range(lo, hi) if reverse else inner.range(lo, hi))

    def _read_prefix(self, prefix: bytes) -> Iterator[tuple[bytes, bytes]]:
        return self._entries(self.inner.prefix_scan(ENTRY + prefix))

    def approximate_num_entries(self) -> int:
        """About half the store's entries (each entry has one in the index), expired or not."""
        return self.inner.approximate_num_entries() // 2

    # -- the clock ------------------------------------------------------------------------

    def advance_time(self, now: int, limit: int = DEFAULT_EXPIRY_LIMIT) -> int:
        """Move the clock to `now` (it never goes back) and delete at most `limit` expired
        entries, the oldest expiries first; returns how many were deleted."""
        if not self._open:
            raise self._closed()
        now = check_int(now, "now", -1, MAX_TIME)
        limit = check_int(limit, "limit", 0)
        inner = self.inner
        moved, first = now > self._now, self._now == -1 < now
        if first:  # entries written before the first move are written at `now`
            self._pending = self._expiry(now)
        if moved:
            self._set_clock(now)
        due: list[bytes] = []
        if self._live_pending is None:  # pending entries are expired: they lead the index
            self._collect_due(INDEX + PENDING, PENDING, limit, due)
        pending_due = len(due)
        self._collect_due(INDEX + _REAL, self._now_b, limit, due)
        for index_key in due:  # an index entry's entry has its expiry (every write replaces both)
            inner.put(ENTRY + index_key[9:], None)
            inner.put(index_key, None)
        if moved or due:
            inner.put(CLOCK_KEY, self._now_b)
        if first or pending_due:
            inner.put(PENDING_KEY, cast(bytes, self._pending))
        self.metrics.expired += len(due)
        return len(due)

    def _collect_due(self, start: bytes, last: bytes, limit: int, due: list[bytes]) -> None:
        """Add to `due` the index keys from `start` on whose expiry is at or below `last`,
        until `due` holds `limit`."""
        if len(due) >= limit:
            return
        with self.inner.range(start, None) as index:
            for key, _ in index:
                if key[:1] != INDEX or key[1:9] > last:
                    return
                due.append(key)
                if len(due) >= limit:
                    return

    # -- what passes to the store below -----------------------------------------------------

    def flush(self) -> None:
        if not self._open:
            raise self._closed()
        self.inner.flush()

    def commit(self, offsets: Mapping[str, int] | None = None) -> None:
        self.inner.commit(offsets)  # type: ignore[attr-defined]

    def committed_offset(self, name: str) -> int | None:
        return self.inner.committed_offset(name)  # type: ignore[attr-defined]

    def rollback(self) -> None:
        self.inner.rollback()  # type: ignore[attr-defined]
        self._load_clock()  # the clock was part of the transaction

    def approximate_num_uncommitted_bytes(self) -> int:
        return self.inner.approximate_num_uncommitted_bytes()  # type: ignore[attr-defined]

    @property
    def transaction_metrics(self) -> Any:
        return self.inner.transaction_metrics  # type: ignore[attr-defined]

    def read_only(self, isolation: Any = "READ_COMMITTED") -> "TtlKeyValueStore":
        """A read-only view at `isolation`, on the clock that isolation level sees."""
        return TtlKeyValueStore(self.inner.read_only(isolation), self.ttl)  # type: ignore[attr-defined]


def with_ttl(store: Any, ttl: TtlSpec | None) -> Any:
    """`store` with expiring entries when `ttl` is given, else `store` itself."""
    return store if ttl is None else TtlKeyValueStore(store, ttl)


def advance_clocks(stores: Iterable[Any], processing_time: int | None, watermark: int | None, limit: int) -> int:
    """`advance_time` of every TTL store among `stores` to the time of its clock (None: it
    stays); returns how many expired entries were deleted. Both times are checked before
    any clock moves."""
    if processing_time is not None:
        processing_time = check_int(processing_time, "processing_time", -1, MAX_TIME)
    if watermark is not None:
        watermark = check_int(watermark, "watermark", -1, MAX_TIME)
    expired = 0
    for store in stores:
        if isinstance(store, TtlKeyValueStore):
            now = processing_time if store.clock is Clock.PROCESSING_TIME else watermark
            if now is not None:
                expired += store.advance_time(now, limit)
    return expired


def user_changes(changes: list[Change]) -> list[Change]:
    """What a cache flush of a TTL store's bytes means to its user: the entries' changes
    (keys and values without the layout's bytes), without the index and the clock."""
    out = []
    for change in changes:
        if change.key[:1] == ENTRY:
            new, old = change.new_value, change.old_value
            out.append(Change(change.key[1:], None if new is None else new[8:], None if old is None else old[8:]))
    return out


def decode_changes(entries: Any) -> Iterator[tuple[str, bytes, bytes | None]]:
    """`(change, key, value)` of a TTL store's change set, given `entries()`: a callable
    that iterates the set's `(stored key, value or None)` (twice). A deleted entry whose
    index entry was deleted at or below the change set's clock is an `expire` (a pending
    one: when the set holds the pending expiry, at or below its clock)."""
    clock = pending = None
    expired_keys = set()
    for key, value in entries():
        if key == CLOCK_KEY and value is not None:
            clock = value
        elif key == PENDING_KEY and value is not None:
            pending = value
    if clock is not None:
        pending_expired = pending is not None and not live_pending(pending, clock)
        for key, value in entries():
            if key[:1] == INDEX and value is None and key[1:9] <= clock:
                if key[1:9] != PENDING or pending_expired:
                    expired_keys.add(key[9:])
    for key, value in entries():
        if key[:1] != ENTRY:
            continue
        user_key = key[1:]
        if value is not None:
            yield "put", user_key, value[8:]
        else:
            yield ("expire" if user_key in expired_keys else "delete"), user_key, None
