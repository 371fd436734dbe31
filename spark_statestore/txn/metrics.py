"""Commit metrics of a transactional database (KIP-892's commit-rate, commit-latency-avg
and commit-latency-max), with rollbacks and spills."""

from __future__ import annotations

import time


class TransactionMetrics:
    """Counters since the database was opened; latencies in seconds."""

    __slots__ = ("commits", "commit_latency_total", "commit_latency_max", "rollbacks", "spills", "_opened")

    def __init__(self) -> None:
        self.commits = 0
        self.commit_latency_total = 0.0
        self.commit_latency_max = 0.0
        self.rollbacks = 0
        self.spills = 0
        self._opened = time.monotonic()

    def record_commit(self, seconds: float) -> None:
        self.commits += 1
        self.commit_latency_total += seconds
        if seconds > self.commit_latency_max:
            self.commit_latency_max = seconds

    @property
    def commit_latency_avg(self) -> float:
        return self.commit_latency_total / self.commits if self.commits else 0.0

    @property
    def commit_rate(self) -> float:
        """Commits per second since the database was opened."""
        elapsed = time.monotonic() - self._opened
        return self.commits / elapsed if elapsed > 0 else 0.0

    def as_dict(self) -> dict[str, float]:
        return {
            "commits": self.commits,
            "commit_rate": self.commit_rate,
            "commit_latency_avg": self.commit_latency_avg,
            "commit_latency_max": self.commit_latency_max,
            "rollbacks": self.rollbacks,
            "spills": self.spills,
        }

    def __repr__(self) -> str:
        return f"TransactionMetrics({self.as_dict()})"
