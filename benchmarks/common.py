"""Helpers shared by the benchmark scripts: timing and table printing.

Benchmarks compare things side by side in one process run and report ratios, because
the machine is shared and absolute times are noisy. Each measurement is the best of a
few repeats.
"""

from __future__ import annotations

import gc
import time
from typing import Callable


def best_time(fn: Callable[[], object], repeats: int = 3, setup: Callable[[], object] | None = None) -> float:
    """Smallest wall time of `repeats` runs of `fn` (after `setup`, untimed)."""
    best = float("inf")
    for _ in range(repeats):
        if setup is not None:
            setup()
        gc.collect()
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def print_table(headers: list[str], rows: list[list[object]]) -> None:
    """A fixed-width table (markdown-compatible)."""
    cells = [[str(h) for h in headers]] + [[_fmt(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    line = lambda r: "| " + " | ".join(c.rjust(w) for c, w in zip(r, widths, strict=True)) + " |"  # noqa: E731
    print(line(cells[0]))
    print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for r in cells[1:]:
        print(line(r))


def _fmt(value: object) -> str:
    if isinstance(value, float):
        if value >= 1000:
            return f"{value:,.0f}"
        return f"{value:.2f}"
    return str(value)
