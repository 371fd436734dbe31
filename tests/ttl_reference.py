"""The reference model of a TTL key-value store: the spec the stores are tested against.

* The store has a clock (-1 until it first moves; it never goes back).
* A write of a value sets the entry's expiry to clock + ttl (at most 2**63 - 1); a write
  of None removes the entry, expired or not.
* An entry is live while its expiry is above the clock. Reads (get, ranges, prefix, all,
  delete's and put_if_absent's previous value) see live entries only, in key order.
* `advance(now)` moves the clock, then removes the `limit` stored entries with the
  smallest (expiry, key) among those at or below the clock: those are the batch's
  `expire` changes. What is stored (live or expired, not yet removed) is `stored`.
"""

from __future__ import annotations

MAX_TIME = 2**63 - 1


class TtlReference:
    def __init__(self, ttl: int, limit: int) -> None:
        self.ttl = ttl
        self.limit = limit
        self.now = -1
        self.stored: dict[bytes, tuple[int, bytes]] = {}

    def copy(self) -> "TtlReference":
        other = TtlReference(self.ttl, self.limit)
        other.now, other.stored = self.now, dict(self.stored)
        return other

    def get(self, key: bytes) -> bytes | None:
        entry = self.stored.get(key)
        return entry[1] if entry is not None and entry[0] > self.now else None

    def put(self, key: bytes, value: bytes | None) -> None:
        if value is None:
            self.stored.pop(key, None)
        else:
            self.stored[key] = (min(self.now + self.ttl, MAX_TIME), value)

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
        return sorted((k, v) for k, (e, v) in self.stored.items() if e > self.now)

    def advance(self, now: int) -> list[bytes]:
        """Move the clock; returns the keys removed as expired, in removal order."""
        self.now = max(self.now, now)
        due = sorted((e, k) for k, (e, _) in self.stored.items() if e <= self.now)[: self.limit]
        for _, key in due:
            del self.stored[key]
        return [key for _, key in due]
