"""`MemoryBudget`: the uncommitted bytes of one transaction, against its limit (KIP-892).

The keyspaces of a `TransactionalDatabase` charge it what each write adds to (or frees
from) their in-memory buffers; the database gives it the function that spills those
buffers to disk, which it calls as soon as memory passes the limit. It also keeps the
total uncommitted bytes (in memory and spilled) and their peak, and can call a watcher
once per transaction when the total first passes a threshold (the in-flight signal of
the early trigger).
"""

from __future__ import annotations

import math
from typing import Callable


class MemoryBudget:
    """Uncommitted bytes in memory and spilled, their peak, the limit and the spill hook."""

    __slots__ = ("limit", "memory", "spilled", "peak", "_spill", "_threshold", "_watch_at", "_watcher")

    def __init__(self, limit: float, spill: Callable[[], None]) -> None:
        self.limit = limit  # bytes held in memory before spilling (math.inf: no limit)
        self.memory = 0
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

    def charge(self, delta: int) -> None:
        """A write changed the in-memory buffers by `delta` bytes (negative: freed)."""
        memory = self.memory + delta
        self.memory = memory
        total = memory + self.spilled
        if total > self.peak:
            self.peak = total
            if total > self._watch_at:
                self._fire(total)
        if memory > self.limit:
            self._spill()

    def spilled_to_disk(self, nbytes: int) -> None:
        """`nbytes` of buffered writes moved from memory to the spill area."""
        self.memory -= nbytes
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
        self.spilled = 0
        self.peak = 0
        self._watch_at = self._threshold
