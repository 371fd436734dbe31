"""Reading state with `format("spark_statestore")` against reading the same records from
parquet, in one run.

The state: `--records` records of a key-value store (string keys, int64 values) split
over `--partitions` partitions, written by the partition state as one batch and marked
committed in a commit log, with a snapshot so a reader restores a snapshot plus one
changelog. The same records are also written as parquet files (one per partition).
Both are read by Spark with `local[2]` and aggregated (`count` and `sum(value)`), and so
is a Python data source that yields the parquet files' Arrow batches as they are (no
state work: what any Python data source costs Spark, the ceiling of any of them: Spark
turns every Arrow batch of one into rows).

The reads are compared in rounds, in turns: two untimed rounds first (a cold JVM's JIT
and Spark's first Python workers made whichever read came first look slowest: a best of
three per read, read after read, gave the state reader 0.38 to 1.29 of the ceiling on one
machine), then `--rounds` timed rounds, the order of the reads rotated each round. Each
ratio is taken within a round (reads that saw the same load) and reported as the median
over the rounds with its range. Each read also gets the CPU seconds of the driver's JVM and
of the Python processes (from /proc: what a shared machine's load moves least). The change
feed of both batches (every change: 1.1x the records) is timed the same way, for its own
rows per second, and a selective read (a key range holding 0.25% of the records) on both
sides: the filters Spark pushes to the state reader (pyspark 4.1+) bound each partition's
scan. A `load()` refused at planning (a bad option) is timed against one of the Python
data source above (median of 5 each): Spark starts a new Python worker for each, which
imports the source's modules, as it does for the first read of a session. The last two
lines: the state reader's rows per second over parquet's and over the Python source's.

    python benchmarks/state_reader.py [--records N] [--partitions P] [--rounds N] [--warmups N]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from statistics import median

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

from common import print_table  # noqa: E402

from spark_statestore import Serdes  # noqa: E402
from spark_statestore.partition import (  # noqa: E402
    Layout,
    PartitionOptions,
    PartitionState,
    WorkerResources,
    record_query_layout,
)
from spark_statestore.spark import KeyValue, register_reader  # noqa: E402
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition  # noqa: E402

STORE = KeyValue("totals", Serdes.string(), Serdes.int64())


def write_state(location: str, local: str, records: int, partitions: int) -> None:
    """Batch 0 writes every record; batch 1 rewrites a tenth; a snapshot of version 0 is taken."""
    record_query_layout(location, Layout.of([STORE.spec()], partitions))
    per = records // partitions
    for batch in range(2):
        for p in range(partitions):
            options = PartitionOptions(partitions=partitions, snapshot_interval=1)
            state = PartitionState(location, p, [STORE.spec()], WorkerResources(local), options)
            state.open(batch)
            totals = STORE.typed(state.store("totals"))
            keys = pa.array([f"p{p}-key-{i:08d}" for i in range(per)])
            if batch == 1:
                keys = keys.slice(0, per // 10)
            totals.put_columns(keys, np.arange(len(keys), dtype=np.int64) + batch)
            state.prepare()
            state.close()
            state.wait_for_snapshots()
    os.makedirs(os.path.join(location, "commits"), exist_ok=True)
    for batch in range(2):
        with open(os.path.join(location, "commits", str(batch)), "w") as f:
            f.write("v1\n{}")


def write_parquet(directory: str, records: int, partitions: int) -> None:
    os.makedirs(directory)
    per = records // partitions
    for p in range(partitions):
        keys = [f"p{p}-key-{i:08d}" for i in range(per)]
        values = np.arange(per, dtype=np.int64)
        values[: per // 10] += 1
        pq.write_table(pa.table({"key": keys, "value": values}), os.path.join(directory, f"{p}.parquet"))


class ReadyBatches(DataSource):
    """`format("ready_batches")`: the parquet files under `path` as a Python data source
    whose `read` yields their Arrow batches unchanged, one input partition per file."""

    @classmethod
    def name(cls) -> str:
        return "ready_batches"

    def schema(self) -> str:
        if "fail" in self.options:  # for timing a refused load
            raise ValueError(f"option fail={self.options['fail']!r}")
        return "partition int, key string, value long"

    def reader(self, schema) -> DataSourceReader:
        return _ReadyReader(self.options["path"])


class _ReadyReader(DataSourceReader):
    def __init__(self, path: str) -> None:
        self.path = path

    def partitions(self) -> list:
        return [InputPartition(name) for name in sorted(os.listdir(self.path))]

    def read(self, partition):
        table = pq.read_table(os.path.join(self.path, partition.value))
        number = pa.array(np.full(len(table), int(partition.value.split(".")[0]), np.int32))
        start = 0
        for batch in table.to_batches(65_536):
            yield pa.RecordBatch.from_arrays(
                [number.slice(start, len(batch)), batch.column(0), batch.column(1)], ["partition", "key", "value"]
            )
            start += len(batch)


def app_cpu_seconds() -> dict[str, float]:
    """CPU seconds used so far by this process's descendants (the Spark driver's JVM and
    its Python workers), from /proc: `jvm` for the Java processes, `python` for the rest
    (Spark's Python daemon, its workers and planners, with their ended children's time);
    0 for both where there is no /proc."""
    used = {"jvm": 0.0, "python": 0.0}
    if not os.path.isdir("/proc"):
        return used
    children: dict[int, list[int]] = {}
    stats: dict[int, tuple[str, float]] = {}
    tick = os.sysconf("SC_CLK_TCK")
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                head, rest = f.read().rsplit(")", 1)
        except OSError:  # the process ended meanwhile
            continue
        fields = rest.split()
        children.setdefault(int(fields[1]), []).append(int(entry))
        kind = "jvm" if head.split("(", 1)[1] == "java" else "python"
        stats[int(entry)] = (kind, sum(int(t) for t in fields[11:15]) / tick)  # own and reaped children's
    todo = list(children.get(os.getpid(), []))
    while todo:
        pid = todo.pop()
        kind, seconds = stats.get(pid, ("python", 0.0))
        used[kind] += seconds
        todo += children.get(pid, [])
    return used


SELECTIVE = "key >= 'p1-key-00010000' and key < 'p1-key-00012500'"


@dataclass
class Timings:
    """One read's measurements over the rounds: wall seconds, CPU seconds of the JVM and of
    the Python processes, and the (count, sum) result of the last round."""

    wall: list[float] = field(default_factory=list)
    jvm: list[float] = field(default_factory=list)
    python: list[float] = field(default_factory=list)
    result: tuple = ()


def interleaved(reads: dict[str, Callable], where: str, warmups: int, rounds: int) -> dict[str, Timings]:
    """Each read of `reads` (name: a DataFrame factory) aggregated (`count(key)`,
    `sum(value)`) once per round, in turns: `warmups` untimed rounds first (the JVM's JIT
    and Spark's Python workers warm), then `rounds` timed ones, the order rotated each round
    so that no read always follows the same one or comes first (a read's time depends on
    what ran before it, and a shared machine's load drifts: reads compared within a round
    saw the same load)."""
    names = list(reads)
    out = {name: Timings() for name in names}
    for turn in range(warmups + rounds):
        shift = turn % len(names)
        for name in names[shift:] + names[:shift]:
            started, cpu = time.perf_counter(), app_cpu_seconds()
            result = tuple(reads[name]().where(where).selectExpr("count(key)", "sum(value)").collect()[0])
            wall, after = time.perf_counter() - started, app_cpu_seconds()
            if turn >= warmups:
                timings = out[name]
                timings.wall.append(wall)
                timings.jvm.append(after["jvm"] - cpu["jvm"])
                timings.python.append(after["python"] - cpu["python"])
                timings.result = result
    return out


def ratios(numerator: Timings, denominator: Timings) -> list[float]:
    """Per round, `denominator`'s wall seconds over `numerator`'s: `numerator`'s rows per
    second over `denominator`'s, for reads of the same rows."""
    return [theirs / ours for ours, theirs in zip(numerator.wall, denominator.wall, strict=True)]


def spread(values: list[float]) -> str:
    """The median of `values` and their range."""
    return f"{median(values):.2f} (range {min(values):.2f} to {max(values):.2f}, {len(values)} rounds)"


def failed_load_seconds(load) -> float:
    """Median wall seconds of `load(i)` for i in 0..4, each refused at planning. Spark plans
    a read in a Python worker that it reuses after a success but not after an error, so
    each of these imports the source's modules into a new worker, as the first read of a
    session does (a success is then planned in about 0.03 s)."""
    times = []
    for attempt in range(5):
        started = time.perf_counter()
        try:
            load(attempt)
        except Exception:  # noqa: BLE001 - the refusal is what is timed
            pass
        else:
            raise SystemExit("a load meant to be refused at planning was not")
        times.append(time.perf_counter() - started)
    return sorted(times)[2]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=9, help="timed rounds of the reads (in turns)")
    parser.add_argument("--warmups", type=int, default=2, help="untimed rounds first")
    args = parser.parse_args()
    work = tempfile.mkdtemp(prefix="bench-reader-")
    location, parquet = os.path.join(work, "checkpoint"), os.path.join(work, "parquet")
    started = time.perf_counter()
    write_state(location, os.path.join(work, "local"), args.records, args.partitions)
    write_parquet(parquet, args.records, args.partitions)
    print(f"wrote {args.records:,} records twice in {time.perf_counter() - started:.0f} s", flush=True)
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false").getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    register_reader(spark)
    spark.dataSource.register(ReadyBatches)

    def state_reader():
        return spark.read.format("spark_statestore").option("checkpointLocation", location).option("store", "totals")

    reads = {
        "state": lambda: state_reader().load(),
        "ready": lambda: spark.read.format("ready_batches").load(parquet),
        "parquet": lambda: spark.read.parquet(parquet),
    }
    loads = [os.getloadavg()[0]]
    try:
        # first, while no Python worker has imported anything (a read leaves workers behind)
        plan_state = failed_load_seconds(lambda i: state_reader().option("batchId", f"x{i}").load())
        plan_ready = failed_load_seconds(
            lambda i: spark.read.format("ready_batches").option("fail", str(i)).load(parquet)
        )
        full = interleaved(reads, "true", args.warmups, args.rounds)
        loads.append(os.getloadavg()[0])
        selective = interleaved({k: reads[k] for k in ("state", "parquet")}, SELECTIVE, 1, args.rounds)
        changes = interleaved(
            {"changes": lambda: state_reader().option("readChangeFeed", "true").option("changeStartBatchId", "0").load()},
            "true", 1, args.rounds,
        )["changes"]
        loads.append(os.getloadavg()[0])
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)
    for timings in (full, selective):
        if timings["state"].result != timings["parquet"].result:
            raise SystemExit(f"the reads disagree: state {timings['state'].result}, parquet {timings['parquet'].result}")
    per_million = 1e6 / args.records
    labels = {
        "state": "state reader (snapshot + changelog per partition)",
        "parquet": "parquet",
        "ready": "Python data source yielding the parquet batches",
    }
    rows = [
        [labels[name], args.records / median(t.wall), median(t.jvm) * per_million, median(t.python) * per_million]
        for name, t in full.items()
    ]
    count = changes.result[0]
    rows.append([
        "state change feed (batches 0 and 1, every change)", count / median(changes.wall),
        median(changes.jvm) * 1e6 / count, median(changes.python) * 1e6 / count,
    ])
    print(f"\n{args.records:,} records, {args.partitions} partitions, local[2], median of {args.rounds} rounds "
          f"after {args.warmups} warm-up rounds, reads in turns")
    print_table(["read", "rows/s", "JVM CPU s per 1M rows", "Python CPU s per 1M rows"], rows)
    print(f"\nselective read ({SELECTIVE}: {selective['state'].result[0]:,} records), median of {args.rounds}")
    print_table(
        ["read", "seconds", "JVM CPU s", "Python CPU s"],
        [[name, median(t.wall), median(t.jvm), median(t.python)] for name, t in selective.items()],
    )
    print(f"selective read: parquet seconds / state reader seconds = {spread(ratios(selective['state'], selective['parquet']))}")
    print(
        f"a load() refused at planning (median of 5): state reader {plan_state:.2f} s, Python data "
        f"source {plan_ready:.2f} s: state reader / Python data source = {plan_state / plan_ready:.2f}"
    )
    print("load average (1 min) at the start, after the full reads, at the end: " + ", ".join(f"{x:.1f}" for x in loads))
    ceiling = ratios(full["state"], full["ready"])
    print(f"per round, state reader / Python-source ceiling: {', '.join(f'{r:.2f}' for r in ceiling)}")
    cpu = [(rj + rp) / (sj + sp) for sj, sp, rj, rp in zip(full["state"].jvm, full["state"].python, full["ready"].jvm,
                                                          full["ready"].python, strict=True)]
    print(f"CPU seconds (JVM + Python) of the Python-source ceiling / of the state reader = {spread(cpu)}")
    print(f"state reader / parquet rows per second = {spread(ratios(full['state'], full['parquet']))}")
    print(f"headline: state reader / Python-source ceiling rows per second = {spread(ceiling)}")


if __name__ == "__main__":
    main()
