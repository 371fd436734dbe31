"""The reference model of a TTL key-value store: the spec the stores are tested against.

* The store has a clock (-1 until it first moves; it never goes back).
* A write of a value sets the entry's expiry to clock + ttl (at most 2**63 - 1); a write
  of None removes the entry, expired or not. A write before the clock first moves is
  written at the clock's first time: its expiry is that time + ttl (pending until then).
* An entry is live while its expiry is above the clock. Reads (get, ranges, prefix, all,
  delete's and put_if_absent's previous value) see live entries only, in key order.
* `advance(now)` moves the clock, then removes the `limit` stored entries with the
  smallest (expiry, key) among those at or below the clock (pending entries first among
  equal expiries: they lead the store's index): those are the batch's
  `expire` changes. What is stored (live or expired, not yet removed) is `stored`.
"""

from __future__ import annotations

MAX_TIME = 2**63 - 1


class TtlReference:
    def __init__(self, ttl: int, limit: int) -> None:
        self.ttl = ttl
        self.limit = limit
        self.now = -1
        self.pending: int | None = None  # the expiry of entries written before the first move
        self.stored: dict[bytes, tuple[int | None, bytes]] = {}  # expiry None: pending

    def copy(self) -> "TtlReference":
        other = TtlReference(self.ttl, self.limit)
        other.now, other.pending, other.stored = self.now, self.pending, dict(self.stored)
        return other

    def expiry(self, key: bytes) -> float:
        """The entry's expiry (inf: pending before the clock's first move)."""
        expiry = self.stored[key][0]
        if expiry is None:
            return float("inf") if self.pending is None else self.pending
        return expiry

    def get(self, key: bytes) -> bytes | None:
        entry = self.stored.get(key)
        return entry[1] if entry is not None and self.expiry(key) > self.now else None

    def put(self, key: bytes, value: bytes | None) -> None:
        if value is None:
            self.stored.pop(key, None)
        else:
            self.stored[key] = (None if self.now == -1 else min(self.now + self.ttl, MAX_TIME), value)

    def delete(self, key: bytes) -> bytes | None:
        previous = self.get(key)
        if previous is not None:
            self.put(key, None)
        return previous

    def put_if_absent(self, key: bytes, value: bytes) -> bytes | None:
        previous = self.get(key)
        if previous is None:
            self.put(key, value)
        return previous

    def items(self) -> list[tuple[bytes, bytes]]:
        return sorted((k, v) for k, (_, v) in self.stored.items() if self.expiry(k) > self.now)

    def advance(self, now: int) -> list[bytes]:
        """Move the clock; returns the keys removed as expired, in removal order."""
        if self.now == -1 < now:
            self.pending = min(now + self.ttl, MAX_TIME)
        self.now = max(self.now, now)
        expired = [(self.expiry(k), e is not None, k) for k, (e, _) in self.stored.items()]
        due = sorted(d for d in expired if d[0] <= self.now)[: self.limit]
        for _, _, key in due:
            del self.stored[key]
        return [key for _, _, key in due]
