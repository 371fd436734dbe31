"""The batch reference for examples/windowed_counts.py, computed from the input files and
the batches the query actually ran (its checkpoint's file-source log and offset log).

Batch boundaries are Spark's choice (it may run a no-data batch between two data batches
when the watermark moved), and they decide which rows are late, so the reference replays
the committed batches: batch N read the files between the previous batch's source offset
and its own (offset log), and ran with the watermark its offset log records, W_N. A row of
batch N counts in each of its windows whose end + grace is after W_{N-1} (0 for batch 0),
as Spark SQL's window aggregation with the delay widened by the grace period counts it
(Spark drops the rows whose windows all closed, the window stores, whose stream time is
W_{N-1}, the closed windows of the others). A window is written once, when the watermark
passes its end + grace: the last batch's watermark decides which windows were written.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable

import pandas as pd
from spark_batches import batches as _batches

WINDOWS = {"tumbling": (10_000, 10_000), "sliding": (30_000, 10_000)}
GRACE = 5_000


def reference(checkpoint: str) -> pd.DataFrame:
    """The reference of a query over files (the file source's log says each batch's files)."""
    committed, watermarks, files = _batches(checkpoint)

    def rows(batch: int):
        for path in sorted(files.get(batch, [])):
            frame = pd.read_json(path, lines=True)
            yield from zip(frame["key"], frame["ts"], strict=True)

    return replay(committed, watermarks, rows)


def replay(committed: list[int], watermarks: dict[int, int], rows: Callable[[int], Iterable[tuple[str, int]]]
           ) -> pd.DataFrame:
    """The windows written by the committed batches, each batch reading `rows(batch)`: the
    (key, event time) pairs of its input."""
    counts: Counter = Counter()
    late_before = 0  # the watermark of the previous batch
    for batch in committed:
        for key, ts in rows(batch):
            for kind, (size, slide) in WINDOWS.items():
                first = ts - ts % slide
                for j in range(size // slide):
                    start = first - j * slide
                    if start >= 0 and start + size + GRACE > late_before:  # else closed: dropped as late
                        counts[(key, kind, start, start + size)] += 1
        late_before = watermarks[batch]
    final = watermarks[committed[-1]] if committed else 0
    rows_out = [
        (key, kind, start, end, n)
        for (key, kind, start, end), n in counts.items()
        if end + GRACE <= final
    ]
    out = pd.DataFrame(rows_out, columns=["key", "kind", "window_start", "window_end", "count"])
    return out.sort_values(["kind", "window_start", "key"]).reset_index(drop=True)


def compare(actual: pd.DataFrame, expected: pd.DataFrame) -> str | None:
    """None when equal, else a short description of the difference."""
    cols = ["key", "kind", "window_start", "window_end", "count"]
    a = actual[cols].sort_values(cols[:4]).reset_index(drop=True)
    e = expected[cols].sort_values(cols[:4]).reset_index(drop=True)
    if a.equals(e):
        return None
    merged = a.merge(e, on=cols[:4], how="outer", suffixes=("_actual", "_expected"), indicator=True)
    diff = merged[(merged["_merge"] != "both") | (merged["count_actual"] != merged["count_expected"])]
    return f"{len(diff)} window(s) differ ({len(a)} actual, {len(e)} expected):\n{diff.head(20).to_string()}"
