"""The micro-batches a streaming query with one file source ran, read from its checkpoint."""

from __future__ import annotations

import json
import os
from collections import defaultdict

import pandas as pd


def batches(checkpoint: str) -> tuple[list[int], dict[int, int], dict[int, list[str]]]:
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


def cumulative_counts(checkpoint: str) -> dict[int, dict[str, int]]:
    """For every committed batch, the number of input rows per key up to and including it."""
    committed, _, files = batches(checkpoint)
    running: dict[str, int] = defaultdict(int)
    out = {}
    for batch in committed:
        for path in sorted(files.get(batch, [])):
            for key in pd.read_json(path, lines=True)["key"]:
                running[key] += 1
        out[batch] = dict(running)
    return out


def kafka_batches(checkpoint: str) -> tuple[list[int], dict[int, int], dict[int, dict[tuple[str, int], tuple[int, int]]]]:
    """Committed batches of a query with one Kafka source, each batch's watermark, and the
    offsets each batch read: {(topic, partition): (from, until)} (until exclusive). The
    offset log's source line holds each partition's end offset after the batch; a batch
    starts where the previous one ended, and a partition first seen starts at 0 (Spark
    reads partitions added to a topic from their earliest offset)."""
    committed = sorted(int(n) for n in os.listdir(os.path.join(checkpoint, "commits")) if n.isdigit())
    watermarks: dict[int, int] = {}
    ranges: dict[int, dict[tuple[str, int], tuple[int, int]]] = {}
    previous: dict[tuple[str, int], int] = {}
    for batch in committed:
        with open(os.path.join(checkpoint, "offsets", str(batch))) as f:
            lines = f.read().splitlines()
        watermarks[batch] = json.loads(lines[1])["batchWatermarkMs"]
        ends = {(topic, int(p)): offset for topic, parts in json.loads(lines[2]).items() for p, offset in parts.items()}
        ranges[batch] = {tp: (previous.get(tp, 0), end) for tp, end in ends.items() if end > previous.get(tp, 0)}
        previous = ends
    return committed, watermarks, ranges
