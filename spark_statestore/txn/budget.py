"""`MemoryBudget`: the uncommitted bytes of one transaction, against its limit (KIP-892).

*Uncommitted bytes* is one quantity (`uncommitted_cost`), used for every decision and
every report: the key and value bytes of the buffered records (KIP-892's count; a
tombstone counts its key, a pending range deletion its bounds) plus `ENTRY_COST` per
record, what CPython takes for a record beyond those bytes (the bytes objects' headers,
the dict slot and the sorted index; measured against RSS by `benchmarks/memory.py`).

The keyspaces of a `TransactionalDatabase` charge the budget what each write adds to (or
frees from) their in-memory buffers; the database gives the budget the function that
spills the buffers to disk, called as soon as the bytes in memory pass the limit. The
budget also keeps the total (in memory and spilled) and its peak, and can call a watcher
once per transaction when the total first passes a threshold (the in-flight signal of
the early trigger). The total is never below the bytes in memory, so a transaction that
spills has always passed a threshold equal to the limit first.
"""

from __future__ import annotations

import math
from typing import Callable

# Per record: the key's and the value's bytes-object headers (2 x 33), their rounding to
# CPython's 16-byte allocation classes (about 2 x 8 on average), the dict slot and the
# sorted index entry (about 69); measured with distinct key and value objects.
ENTRY_COST = 152


def uncommitted_cost(nbytes: int, records: int) -> int:
    """The uncommitted bytes of `records` buffered records holding `nbytes` key and value
    bytes (a change of both: what a write adds or frees)."""
    return nbytes + records * ENTRY_COST


class MemoryBudget:
    """Uncommitted bytes in memory and spilled, their peak, the limit and the spill hook.

    `charge` runs on every write, so its common case is one addition and one comparison
    against `ceiling`: the bytes in memory past which something has to happen (a spill
    at the limit, the watcher at its threshold). The peak is kept lazily: the total only
    ever falls in a charge that frees bytes, so that is where the peak so far is noted."""

    __slots__ = ("limit", "memory", "spilled", "_peak", "ceiling", "_spill", "_threshold", "_watch_at", "_watcher")

    def __init__(self, limit: float, spill: Callable[[], None]) -> None:
        self.limit = limit  # uncommitted bytes the buffers may hold before spilling (math.inf: no limit)
        self.memory = 0  # uncommitted bytes in memory
        self.spilled = 0  # uncommitted bytes moved to the spill area
        self._peak = 0  # the peak noted before the total last fell
        self._spill = spill
        self._threshold = math.inf
        self._watch_at = math.inf  # the threshold while the watcher has not fired yet
        self._watcher: Callable[[int], None] | None = None
        self.ceiling = limit  # bytes in memory past which a charge calls `passed`

    @property
    def total(self) -> int:
        """Uncommitted bytes of the transaction, in memory and spilled."""
        return self.memory + self.spilled

    @property
    def peak(self) -> int:
        """The largest total of the transaction so far."""
        return max(self._peak, self.memory + self.spilled)

    def charge(self, delta: int, entries: int = 0) -> None:
        """A write changed the in-memory buffers by `delta` key and value bytes and
        `entries` records."""
        cost = delta + entries * ENTRY_COST  # uncommitted_cost, inlined: called per write
        if cost < 0:
            total = self.memory + self.spilled
            if total > self._peak:
                self._peak = total
        memory = self.memory + cost
        self.memory = memory
        if memory > self.ceiling:
            self.passed(memory)

    def passed(self, memory: int) -> None:
        """The bytes in memory went past `ceiling` (a charge's uncommon case): fire the
        watcher and spill, as due."""
        if memory + self.spilled > self._watch_at:
            self._fire(memory + self.spilled)
        if memory > self.limit:
            self._spill()
        self._set_ceiling()

    def _set_ceiling(self) -> None:
        self.ceiling = min(self.limit, self._watch_at - self.spilled)

    def spilled_to_disk(self, nbytes: int, entries: int) -> None:
        """`nbytes` key and value bytes in `entries` buffered records moved from memory to
        the spill area."""
        moved = uncommitted_cost(nbytes, entries)
        self.memory -= moved
        self.spilled += moved
        self._set_ceiling()

    def watch(self, threshold: int, watcher: Callable[[int], None] | None) -> None:
        """Call `watcher(total)` once per transaction when the total passes `threshold`."""
        self._threshold = math.inf if watcher is None or threshold < 0 else threshold
        self._watch_at = self._threshold
        self._watcher = watcher
        self._set_ceiling()

    def _fire(self, total: int) -> None:
        self._watch_at = math.inf  # once per transaction
        self._set_ceiling()
        if self._watcher is not None:
            self._watcher(total)

    def reset(self) -> None:
        """The transaction ended (commit or rollback): nothing is uncommitted any more."""
        self.memory = 0
        self.spilled = 0
        self._peak = 0
        self._watch_at = self._threshold
        self._set_ceiling()
