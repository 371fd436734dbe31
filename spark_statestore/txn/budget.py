"""`MemoryBudget`: the uncommitted bytes of one transaction, against its limit (KIP-892).

The keyspaces of a `TransactionalDatabase` charge it what each write adds to (or frees
from) their in-memory buffers: key and value bytes (KIP-892's uncommitted bytes) and
records. The memory the buffers really take is those bytes plus `ENTRY_COST` per record
(the bytes objects' headers, the dict slot and the sorted index of CPython; measured
against RSS by `benchmarks/memory.py`); the database gives the budget the function that
spills the buffers to disk, called as soon as that memory passes the limit. The budget
also keeps the total uncommitted bytes (in memory and spilled) and their peak, and can
call a watcher once per transaction when the total first passes a threshold (the
in-flight signal of the early trigger).
"""

from __future__ import annotations

import math
from typing import Callable

# Per record: the key's and the value's bytes-object headers (2 x 33), their rounding to
# CPython's 16-byte allocation classes (about 2 x 8 on average), the dict slot and the
# sorted index entry (about 69); measured with distinct key and value objects.
ENTRY_COST = 152


class MemoryBudget:
    """Uncommitted bytes in memory and spilled, their peak, the limit and the spill hook."""

    __slots__ = ("limit", "memory", "entries", "spilled", "peak", "_spill", "_threshold", "_watch_at", "_watcher")

    def __init__(self, limit: float, spill: Callable[[], None]) -> None:
        self.limit = limit  # memory the buffers may take before spilling (math.inf: no limit)
        self.memory = 0  # uncommitted key and value bytes in memory
        self.entries = 0  # records in memory
        self.spilled = 0
        self.peak = 0
        self._spill = spill
        self._threshold = math.inf
        self._watch_at = math.inf  # the threshold while the watcher has not fired yet
        self._watcher: Callable[[int], None] | None = None

    @property
    def total(self) -> int:
        """Uncommitted bytes of the transaction, in memory and spilled."""
        return self.memory + self.spilled

    @property
    def memory_cost(self) -> int:
        """What the in-memory buffers really take."""
        return self.memory + self.entries * ENTRY_COST

    def charge(self, delta: int, entries: int = 0) -> None:
        """A write changed the in-memory buffers by `delta` bytes and `entries` records."""
        memory = self.memory + delta
        self.memory = memory
        self.entries += entries
        total = memory + self.spilled
        if total > self.peak:
            self.peak = total
            if total > self._watch_at:
                self._fire(total)
        if memory + self.entries * ENTRY_COST > self.limit:
            self._spill()

    def spilled_to_disk(self, nbytes: int, entries: int) -> None:
        """`nbytes` in `entries` buffered records moved from memory to the spill area."""
        self.memory -= nbytes
        self.entries -= entries
        self.spilled += nbytes

    def watch(self, threshold: int, watcher: Callable[[int], None] | None) -> None:
        """Call `watcher(total)` once per transaction when the total passes `threshold`."""
        self._threshold = math.inf if watcher is None or threshold < 0 else threshold
        self._watch_at = self._threshold
        self._watcher = watcher

    def _fire(self, total: int) -> None:
        self._watch_at = math.inf  # once per transaction
        if self._watcher is not None:
            self._watcher(total)

    def reset(self) -> None:
        """The transaction ended (commit or rollback): nothing is uncommitted any more."""
        self.memory = 0
        self.entries = 0
        self.spilled = 0
        self.peak = 0
        self._watch_at = self._threshold
