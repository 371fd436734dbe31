"""Metrics records kept with the changelogs, and read back by anyone with the checkpoint.

The task that prepares version V of a partition keeps what it measured (a JSON object,
the Spark layer's `TaskMetrics`) next to its changelog, as `<V>.<id>.metrics` where `id`
is the id of the changelog it published (`names.metrics_name`). So the record of a
version is the one of the attempt whose changelog is the version's durable one, chosen as
recovery chooses it (`DurableHistory`: the changelog the next version builds on, a
set-aside one included; for the newest committed version, `V.changelog`). Other attempts'
records stay unread and go with their changelogs (retention).

A sidecar file, not part of the changelog: the changelog's id is the hash of its content,
and two attempts that wrote the same changes must keep producing the same id whatever
they measured; and old checkpoints, and readers of changelogs, are not touched. It is
written after the changelog is published, atomically: a task killed in between leaves a
changelog without a record (its retry, publishing that or another changelog, writes the
record of the id it published), never a partial record under a record's name.

Reading never fails for one bad record: a file that is not a record this package writes
(too large, not JSON, another partition's or version's, wrong types) is skipped and named
with what is wrong in `problems`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import pyarrow.fs as pafs

from spark_statestore.checkpoint.filesystem import DurableDir, small_json
from spark_statestore.checkpoint.names import metrics_name
from spark_statestore.errors import CorruptStateError
from spark_statestore.partition.history import DurableHistory, Vanished
from spark_statestore.partition.reading import StateLocation

FORMAT = 1
MAX_RECORD_BYTES = 1 << 16
_KEYS = {"format", "partition", "version", "changelog_id", "record"}


def write_task_record(durable: DurableDir, partition: int, version: int, ident: int, record: dict) -> pafs.FileInfo:
    """Keep `record` as the metrics of the changelog of `version` with id `ident`."""
    document = {"format": FORMAT, "partition": partition, "version": version, "changelog_id": ident, "record": record}
    data = json.dumps(document, allow_nan=False, separators=(",", ":")).encode()
    if len(data) > MAX_RECORD_BYTES:
        raise ValueError(f"the metrics record of version {version} is {len(data)} bytes (at most {MAX_RECORD_BYTES})")
    return durable.publish_bytes(metrics_name(version, ident), data)


def _parse(durable: DurableDir, name: str, size: int | None, partition: int, version: int, ident: int) -> dict:
    """The record in the file `name` (`ValueError` saying what is wrong)."""
    if size is not None and size > MAX_RECORD_BYTES:
        raise ValueError(f"is {size} bytes (at most {MAX_RECORD_BYTES})")
    document = small_json(durable.read_range(name, 0, MAX_RECORD_BYTES + 1), MAX_RECORD_BYTES)
    if not isinstance(document, dict) or set(document) != _KEYS:
        keys = sorted(document) if isinstance(document, dict) else type(document).__name__
        raise ValueError(f"is not a metrics record (keys {keys}, expected {sorted(_KEYS)})")
    expected = {"format": FORMAT, "partition": partition, "version": version, "changelog_id": ident}
    for key, value in expected.items():
        if type(document[key]) is not int or document[key] != value:
            raise ValueError(f"has {key} {document[key]!r}, expected {value!r}")
    if not isinstance(document["record"], dict):
        raise ValueError(f"has a record that is {type(document['record']).__name__}, not an object")
    return document["record"]


@dataclass
class TaskRecords:
    """Records read back: one per (version, partition) with the file it is in, and the
    files skipped, with why."""

    records: dict[tuple[int, int], dict] = field(default_factory=dict)  # (version, partition) -> record
    files: dict[tuple[int, int], str] = field(default_factory=dict)  # (version, partition) -> its file
    problems: list[str] = field(default_factory=list)


def read_partition_records(
    durable: DurableDir, partition: int, head: int, versions: set[int], out: TaskRecords
) -> None:
    """Add to `out` the record of each of `versions` (at most `head`, the newest committed)
    of `partition`: the one of its durable changelog's attempt."""
    history = DurableHistory.read(durable, partition, head)
    files = history.files.records  # the same listing
    for version in sorted(v for v in versions if v <= head and v in history.changelogs):
        try:
            ident = history.durable_id(version)
        except (Vanished, CorruptStateError) as e:
            out.problems.append(f"changelog {history.changelog_uri(version)}: {e}")
            continue
        name = metrics_name(version, ident)
        info = files.get((version, ident))
        if info is None:
            continue  # prepared before records were kept, or its task died before writing it
        try:
            out.records[(version, partition)] = _parse(durable, name, info.size, partition, version, ident)
            out.files[(version, partition)] = durable.uri(name)
        except FileNotFoundError:
            continue  # retention took it since the listing
        except (ValueError, OSError) as e:
            out.problems.append(f"metrics record {durable.uri(name)} {e}: skipped")


def committed_task_records(state: StateLocation, last: int | None = None, after: int = -1) -> TaskRecords:
    """The records of the committed versions of `state` (a checkpoint's, opened once by the
    caller: its layout is one read): of the newest `last` committed batches (all with None)
    that come after batch `after`."""
    out = TaskRecords()
    head = state.committed_batch()
    if head is None:
        return out
    first = 0 if last is None else head - last + 1  # Spark commits batches in order
    wanted = set(range(max(first, after + 1, 0), head + 1))
    if not wanted:
        return out  # nothing committed after `after`: no partition listed
    for partition in state.partitions:
        read_partition_records(state.durable(partition), partition, head, wanted, out)
    return out
