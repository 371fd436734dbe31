"""`HeldSessions`: the sessions of recently touched keys, held in memory by the
transactional session store, so that merging a record reads RocksDB only for a key not
held rather than once per record.

Merging a record reads its key's sessions, removes what merges and puts the merged one.
Through the transactional keyspace that read is a seek in RocksDB merged with a scan of
the transaction's buffer, and a buffer that is scanned keeps a sorted index that every
later write inserts into (measured: most of a record's cost). Held here, a key's sessions
are read from committed data once and then kept up to date by the store's own writes;
the buffer stays a plain dict.

A held key answers exactly what the keyspace would, because the keyspace is the store's
alone and the store tells the view of each write (`wrote`) and expiry (`expired`). A key
written while not held is `blind`: read through the keyspace until its writes are
committed. What the keyspace does that the store does not drops the view (its `epoch`
moves: a rollback, a replay of changelogs into it, a range deletion), and while a range
deletion is pending nothing is held. A commit keeps the view (committed data is then what
it holds); a spill moves the buffer, not what it means, and keeps it too.

Bounded: at most `MAX_BYTES` of memory (estimated: `KEY_COST` a key and `SESSION_COST` a
session besides their bytes, measured with tracemalloc), the least recently used keys
dropped first (blind until the transaction commits: they may have writes of it); a key
with more than `MAX_PER_KEY` sessions is not held. A view that thrashes (most loads evict
a key: far more keys are touched once each than it can hold) stops loading for a while.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from spark_statestore.stores.session_layout import Window

MAX_BYTES = 8 << 20
MAX_PER_KEY = 64
WINDOW = 4096  # loads between looks at whether the view thrashes
PAUSE = 16 * WINDOW  # lookups that load nothing after it did
KEY_COST = 300  # a key's dict of sessions and its entry in the view
SESSION_COST = 150  # a session's entry: its (start, end) tuple and the dict slot


class HeldSessions:
    """See module docstring. `keyspace` is a transactional keyspace (`generation`,
    `epoch`, `staging`, `ranges`)."""

    __slots__ = ("_blind", "_bytes", "_epoch", "_evictions", "_generation", "_held", "_ks", "_loads", "_on", "_pause")

    def __init__(self, keyspace: Any) -> None:
        self._ks = keyspace
        self._held: dict[bytes, dict[Window, bytes]] = {}  # in recency order
        self._blind: set[bytes] = set()
        self._bytes = 0  # estimated memory held
        self._loads = 0  # loads since the last look at how the view fares
        self._evictions = 0  # keys evicted since then
        self._pause = 0  # lookups left that load nothing (the view was thrashing)
        self._generation = keyspace.generation
        self._epoch = keyspace.epoch
        self._on = not keyspace.ranges

    def _sync(self) -> bool:
        """Whether the view may be used now, after following what the keyspace did since."""
        ks = self._ks
        if ks.generation != self._generation:
            self._generation = ks.generation
            if ks.epoch != self._epoch:
                self._epoch = ks.epoch
                self._held.clear()
                self._blind.clear()
                self._bytes = 0
            elif ks.staging is None:  # the transaction committed: its writes are committed data
                self._blind.clear()
            self._on = not ks.ranges
        return self._on

    def get(self, key: bytes) -> dict[Window, bytes] | None:
        """`key`'s held sessions (keyed by `(start, end)`), or None: read the keyspace
        (and `load` what was read, if `may_load`)."""
        if not self._sync():
            return None
        held = self._held
        sessions = held.pop(key, None)
        if sessions is not None:
            held[key] = sessions  # the most recently used
        return sessions

    def may_load(self, key: bytes) -> bool:
        """Whether `key`'s sessions read from committed data may be held (`get` just gave
        None for it). Not while the view thrashes: when most of `WINDOW` loads evicted a
        key (keys are touched once each while the bound holds far fewer), loading costs
        more than the view saves, and loads pause for `PAUSE` lookups."""
        if self._pause:
            self._pause -= 1
            return False
        if self._loads >= WINDOW:
            thrashing = self._evictions * 2 > self._loads
            self._loads = self._evictions = 0
            if thrashing:
                self._pause = PAUSE
                return False
        return self._on and key not in self._blind

    def load(self, key: bytes, sessions: dict[Window, bytes]) -> None:
        """Hold `sessions`: every live session of `key` in committed data (`may_load`)."""
        if len(sessions) > MAX_PER_KEY:
            return
        self._held[key] = sessions
        self._bytes += _cost(key, sessions)
        self._loads += 1
        self._evict()

    def _evict(self) -> None:
        """Drop the least recently used keys until the view is within its bound."""
        held = self._held
        while self._bytes > MAX_BYTES and held:
            evicted = next(iter(held))
            self._bytes -= _cost(evicted, held.pop(evicted))
            self._blind.add(evicted)  # it may have writes of this transaction: read through
            self._evictions += 1

    def wrote(self, key: bytes, start: int, end: int, value: bytes | None) -> None:
        """The store wrote the session (None: removed it)."""
        self.wrote_many(((key, start, end, value),))

    def wrote_many(self, changes: Iterable[tuple[bytes, int, int, bytes | None]]) -> None:
        """The store wrote each `(key, start, end, value)` (None: removed it)."""
        if not self._sync():
            return
        held, blind = self._held, self._blind
        size = self._bytes
        for key, start, end, value in changes:
            sessions = held.get(key)
            if sessions is None:
                blind.add(key)
                continue
            old = sessions.pop((start, end), None)
            if old is not None:
                size -= SESSION_COST + len(old)
            if value is not None:
                sessions[(start, end)] = value
                size += SESSION_COST + len(value)
        self._bytes = size
        if size > MAX_BYTES:
            self._evict()

    def expired(self, key: bytes, start: int, end: int) -> None:
        """The store deleted the session because it expired (no read can see it any more,
        so a key not held stays readable from committed data)."""
        sessions = self._held.get(key) if self._sync() else None
        old = None if sessions is None else sessions.pop((start, end), None)
        if old is not None:
            self._bytes -= SESSION_COST + len(old)


def _cost(key: bytes, sessions: dict[Window, bytes]) -> int:
    return KEY_COST + len(key) + SESSION_COST * len(sessions) + sum(map(len, sessions.values()))
