"""The batch reference for examples/windowed_counts.py, computed from the input files and
the batches the query actually ran (its checkpoint's file-source log and offset log).

Batch boundaries are Spark's choice (it may run a no-data batch between two data batches
when the watermark moved), and they decide which rows are late, so the reference replays
the committed batches: batch N read the files between the previous batch's source offset
and its own (offset log), and ran with the watermark its offset log records, W_N. Spark drops input rows of batch N whose event time
is at or before W_{N-1} (0 for batch 0; measured for transformWithStateInPandas in
EventTime mode). Window stores run on the watermark clock, so during batch N their stream
time is that same W_{N-1}: every row Spark lets through falls in a window that is still
live. A window is written once, when the watermark passes its end + grace: the last
batch's watermark decides which windows were written.
"""

from __future__ import annotations

import json
import os
from collections import Counter, defaultdict

import pandas as pd

WINDOWS = {"tumbling": (10_000, 10_000), "sliding": (30_000, 10_000)}
GRACE = 5_000


def _batches(checkpoint: str) -> tuple[list[int], dict[int, int], dict[int, list[str]]]:
    """Committed batches, each batch's watermark, and the files each batch read.

    The file source numbers its own log (one entry per batch that read files); a batch's
    entry in the offset log says how far into that log it read (`logOffset`)."""
    committed = sorted(int(n) for n in os.listdir(os.path.join(checkpoint, "commits")) if n.isdigit())
    watermarks = {}
    source_offsets = {}
    for batch in committed:
        with open(os.path.join(checkpoint, "offsets", str(batch))) as f:
            lines = f.read().splitlines()
        watermarks[batch] = json.loads(lines[1])["batchWatermarkMs"]
        source_offsets[batch] = json.loads(lines[2])["logOffset"]
    by_source_offset: dict[int, list[str]] = defaultdict(list)
    source_log = os.path.join(checkpoint, "sources", "0")
    seen = set()
    for name in os.listdir(source_log):
        if not (name.isdigit() or name.endswith(".compact")):
            continue  # checksum files and the like
        with open(os.path.join(source_log, name)) as f:
            for line in f.read().splitlines()[1:]:
                entry = json.loads(line)
                if entry["path"] not in seen:
                    seen.add(entry["path"])
                    by_source_offset[entry["batchId"]].append(entry["path"].removeprefix("file://"))
    files: dict[int, list[str]] = defaultdict(list)
    previous = -1
    for batch in committed:
        for offset in range(previous + 1, source_offsets[batch] + 1):
            files[batch].extend(by_source_offset.get(offset, []))
        previous = source_offsets[batch]
    return committed, watermarks, files


def reference(checkpoint: str) -> pd.DataFrame:
    committed, watermarks, files = _batches(checkpoint)
    counts: Counter = Counter()
    late_before = 0  # the watermark of the previous batch
    for batch in committed:
        for path in sorted(files.get(batch, [])):
            frame = pd.read_json(path, lines=True)
            for key, ts in zip(frame["key"], frame["ts"], strict=True):
                if ts <= late_before:
                    continue  # dropped by Spark as late
                for kind, (size, slide) in WINDOWS.items():
                    first = ts - ts % slide
                    for j in range(size // slide):
                        start = first - j * slide
                        if start >= 0:
                            counts[(key, kind, start, start + size)] += 1
        late_before = watermarks[batch]
    final = watermarks[committed[-1]] if committed else 0
    rows = [
        (key, kind, start, end, n)
        for (key, kind, start, end), n in counts.items()
        if end + GRACE <= final
    ]
    out = pd.DataFrame(rows, columns=["key", "kind", "window_start", "window_end", "count"])
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
