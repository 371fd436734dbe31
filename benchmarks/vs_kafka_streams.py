"""Kafka Streams against Spark with this library's stores, on the same topic and machine.

One topic (`--records` records over `--keys` keys in `--partitions` partitions, event time
advancing `--events-per-second` records per second of event time, 5% of records late by 5 to
40 s: the main job's stream) is read in turn by
  kafka-streams   benchmarks/kafka_streams (Kafka Streams 4.4.0, DSL windowed counts, RocksDB
                  window stores and record cache at their defaults, exactly_once_v2,
                  num.stream.threads=2; commit.interval.ms 1000 for the throughput run, as
                  Kafka Streams' docs advise for throughput under exactly-once, its default
                  100 ms for the latency run)
  per-partition   Spark (local[2]) with this library's window stores per partition
                  (`windowed_counts_ks.build_query`: mapInArrow, the same windows)
  tws             Spark (local[2]) running the main job's StoreProcessor (examples/
                  windowed_counts.py) in transformWithStateInPandas (its rate over
                  `--tws-batches` batches of `--tws-batch` records: it is far slower)
each under `taskset` on the same 2 cores (the broker and the load generator share them:
the machine has 2), and measured for: records/s at steady state (Kafka Streams: its committed
offsets from 10% of the topic to the end; Spark: the batches after the first, wall time between
their ends); end-to-end latency p50/p99 of a window's final count (from the moment the window
could close, its end + grace in event time = wall time, to a read_committed consumer receiving
it) at a fixed input rate of half the slower throughput of the first two; peak RSS of the
process tree; state bytes on disk (local RocksDB, and durable: changelog topics or the
checkpoint's statestore/); time to restore after SIGKILL with the local state deleted.

Kafka Streams' and the per-partition job's outputs must be equal (the script exits 1 if not).

The machine may be shared: wall-clock rates then depend on what else runs. So the two sides'
throughput runs alternate (`--repeats`, A B A B), medians are reported, and for each run the
script also reads from /proc the CPU seconds (user+system) per record of the side's own
processes (Kafka Streams' JVM; Spark's driver, its JVM and Python workers; not the broker,
which both share; Kafka Streams also writes its changelogs through it), the 1-minute load
average while it ran, and the cores the rest of the machine kept busy (`proc_tree.py`). The
line before the headline is the CPU ratio: Kafka Streams' CPU seconds per record over ours.

    ./dev bench vs_kafka_streams --kafka            # 4M records, 100k keys
    ... --records 2000000                           # 22 minutes here at a load of 4 to 44
    ./dev bench vs_kafka_streams --kafka --quick    # a smoke run (12 minutes here at a load of 2 to 11)
    ... --profile                                   # cProfile in the per-partition Python workers
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import pstats
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from typing import Any

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "examples"))
sys.path.insert(0, HERE)

import windowed_counts_ks  # noqa: E402
from local_kafka import LocalKafka, connector_jars  # noqa: E402
from proc_tree import Mark, TreeStats, others_cores  # noqa: E402

CORES = "0,1"
KS_THROUGHPUT = {"commit.interval.ms": 1000, "producer.batch.size": 262144}
EVENT_SCHEMA_LATE = (5_000, 40_000)


# -- input ---------------------------------------------------------------------------------------


def produce_topic(kafka: Any, topic: str, records: int, keys: int, per_second: int, seed: int = 11) -> None:
    """The main job's stream: JSON values {"key", "ts"} keyed by the sensor, timestamped ts."""
    rng = np.random.default_rng(seed)
    ts = 1 + np.arange(records, dtype=np.int64) * 1000 // per_second
    late = rng.random(records) < 0.05
    ts = np.where(late, np.maximum(1, ts - rng.integers(*EVENT_SCHEMA_LATE, records)), ts)
    names = [f"sensor-{k}" for k in range(keys)]
    chosen = rng.integers(0, keys, records)
    kafka.produce(topic, ((names[k], f'{{"key":"{names[k]}","ts":{t}}}', t)
                          for k, t in zip(chosen.tolist(), ts.tolist(), strict=True)))


class Feeder(threading.Thread):
    """Produces `rate` records a second for `seconds`, timestamped with the wall clock (5% of
    them late by 5 to 40 s)."""

    def __init__(self, kafka: Any, topic: str, rate: int, seconds: float, keys: int) -> None:
        super().__init__(daemon=True)
        self.kafka, self.topic, self.rate, self.seconds, self.keys = kafka, topic, rate, seconds, keys

    def run(self) -> None:
        from confluent_kafka import Producer

        producer = Producer({**self.kafka.client_config(), "linger.ms": 5, "enable.idempotence": True})
        rng = np.random.default_rng(3)
        started = time.time()
        sent = self.sent = 0
        while (now := time.time()) < started + self.seconds:
            due = int((now - started) * self.rate) - sent
            if due > 0:
                ms = int(now * 1000)
                ts = np.where(rng.random(due) < 0.05, ms - rng.integers(*EVENT_SCHEMA_LATE, due), ms)
                for k, t in zip(rng.integers(0, self.keys, due).tolist(), ts.tolist(), strict=True):
                    name = f"sensor-{k}"
                    while True:
                        try:
                            producer.produce(self.topic, key=name, value=f'{{"key":"{name}","ts":{t}}}', timestamp=t)
                            break
                        except BufferError:
                            producer.poll(0.05)
                sent += due
                self.sent = sent
                producer.poll(0)
            time.sleep(0.01)
        producer.flush(60)


class Latencies(threading.Thread):
    """Reads an output topic as it is written (read_committed) and keeps, for each window
    that could close after `after_ms`, the time from its close (end + grace) to its receipt."""

    def __init__(self, kafka: Any, topic: str, after_ms: int) -> None:
        super().__init__(daemon=True)
        self.kafka, self.topic, self.after_ms = kafka, topic, after_ms
        self.values: list[float] = []
        self.stop = threading.Event()

    def run(self) -> None:
        from confluent_kafka import Consumer

        consumer = Consumer({**self.kafka.client_config(), "group.id": f"latency-{uuid.uuid4().hex}",
                             "auto.offset.reset": "earliest", "isolation.level": "read_committed",
                             "enable.auto.commit": False})
        consumer.subscribe([self.topic])
        try:
            while not self.stop.is_set():
                for message in consumer.consume(10_000, timeout=0.2):
                    if message.error() is not None:
                        continue
                    received = time.time() * 1000
                    window = json.loads(message.value())
                    closes = window["window_end"] + windowed_counts_ks.GRACE_MS
                    if closes >= self.after_ms:
                        self.values.append((received - closes) / 1000)
        finally:
            consumer.close()


# -- processes -----------------------------------------------------------------------------------


class Process:
    """A process started under `taskset` in its own session, its stdout lines in a list, its
    tree's RSS and CPU sampled (`stats`; at each `progress ` line too, so that a Spark job's
    CPU is read as its batches end). Every one started is killed when the run ends, however
    it ends."""

    started: list[Process] = []

    def __init__(self, command: list[str], log: str, env: dict | None = None) -> None:
        Process.started.append(self)
        self.lines: list[str] = []
        self.progress: list[dict] = []  # the `progress ` lines' JSON, each with the tree's Mark when read
        self.log = open(log, "a")
        self.popen = subprocess.Popen(["taskset", "-c", CORES, *command], stdout=subprocess.PIPE,
                                      stderr=self.log, text=True, start_new_session=True, env=env)
        self.stats = TreeStats(self.popen.pid)
        self.stats.start()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.popen.stdout:
            if line.startswith("progress "):
                self.progress.append({**json.loads(line[len("progress "):]), "mark": self.stats.sample()})
            self.lines.append(line.rstrip("\n"))
            self.log.write(line)
            self.log.flush()

    def wait_line(self, prefix: str, timeout: float = 600) -> str:
        deadline = time.monotonic() + timeout
        while True:
            found = [line for line in self.lines if line.startswith(prefix)]
            if found:
                return found[-1]
            if self.popen.poll() is not None:
                raise RuntimeError(f"{self.popen.args[3:6]} exited with {self.popen.returncode} before "
                                   f"printing {prefix!r}: see {self.log.name}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"no {prefix!r} within {timeout} s: see {self.log.name}")
            time.sleep(0.1)

    def kill(self) -> None:
        if self.popen.poll() is None:
            os.killpg(self.popen.pid, signal.SIGKILL)
        self.popen.wait()
        self.stats.stop.set()

    def terminate(self) -> None:
        if self.popen.poll() is None:
            os.killpg(self.popen.pid, signal.SIGTERM)
            try:
                self.popen.wait(timeout=90)
            except subprocess.TimeoutExpired:
                self.kill()
        self.stats.stop.set()


def du(path: str) -> int:
    total = 0
    for folder, _, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(folder, name)).st_size
            except OSError:
                pass
    return total


# -- Kafka Streams -------------------------------------------------------------------------------


def kafka_streams(kafka: Any, args: Any, topic: str, output: str, config: dict, log: str,
                  app: str | None = None) -> tuple[Process, str, str]:
    """The Kafka Streams application on 2 threads (a new one, or `app` again)."""
    app = app or f"ks-{uuid.uuid4().hex[:8]}"
    state = os.path.join(args.workdir, app)
    command = windowed_counts_ks.kafka_streams_command(kafka.bootstrap, topic, output, app, state, 2, config,
                                                       heap="1g")
    return Process(command, log), app, state


def measured(rate: float, first: Mark, last: Mark, process: Process) -> dict:
    """A throughput run's figures: its rate, and between the two marks its tree's CPU seconds
    per record and the cores the rest of the machine kept busy; the 1-minute load averages
    seen while the process ran (min, median, max)."""
    loads = process.stats.loads or [float("nan")]
    return {"rate": rate, "cpu_per_record": (last.cpu - first.cpu) / max(rate * (last.wall - first.wall), 1e-9),
            "cpu": last.cpu - first.cpu, "others": others_cores(first, last),
            "load": (min(loads), statistics.median(loads), max(loads)), "rss": process.stats.peak}


def describe(kind: str, result: dict) -> str:
    low, mid, high = result["load"]
    return (f"{kind}: {result['rate']:,.0f} records/s, {result['cpu_per_record'] * 1e6:,.1f} CPU us/record "
            f"({result['cpu']:,.1f} CPU s), load average {low:.1f}/{mid:.1f}/{high:.1f} (min/median/max), "
            f"other processes {result['others']:.2f} cores")


def run_kafka_streams(kafka: Any, args: Any, topic: str, total: int, restore: bool) -> dict:
    """Throughput, CPU, peak RSS and state bytes over the whole topic, then (`restore`) the
    restore after SIGKILL with the local state deleted."""
    output = f"out-ks-{uuid.uuid4().hex[:6]}"
    kafka.create_topic(output, args.partitions)
    log = os.path.join(args.workdir, "kafka-streams.log")
    process, app, state = kafka_streams(kafka, args, topic, output, KS_THROUGHPUT, log)
    samples = []
    while True:
        done = windowed_counts_ks.committed(kafka.bootstrap, app, topic, args.partitions)
        samples.append((done, process.stats.sample()))
        if done >= total:
            break
        if process.popen.poll() is not None:
            raise RuntimeError(f"Kafka Streams exited with {process.popen.returncode}: see {log}")
        time.sleep(0.5)
    n0, first = next(s for s in samples if s[0] >= total * 0.1)
    last = samples[-1][1]
    rate = (samples[-1][0] - n0) / (last.wall - first.wall) if last.wall > first.wall else float("nan")
    result = {**measured(rate, first, last, process), "output": output, "local": du(state),
              "durable": sum(du(d) for d in glob.glob(os.path.join(kafka.workdir, "data", f"{app}-*-changelog-*")))}
    process.kill()  # SIGKILL, then the restore with the local state deleted
    line = describe("kafka-streams", result)
    if restore:
        shutil.rmtree(state)
        restarted, _, _ = kafka_streams(kafka, args, topic, output, KS_THROUGHPUT, log, app)
        restored = restarted.wait_line("restored ")
        restarted.terminate()
        records, ms = (int(x) for x in restored.split()[1:3])
        result["restore"] = ms / 1000
        line += f", restored {records:,} changelog records in {ms / 1000:.1f} s"
    print(line, flush=True)
    return result


# -- Spark ---------------------------------------------------------------------------------------


def spark_driver(kafka: Any, args: Any, job: dict, log: str) -> Process:
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
    return Process([sys.executable, os.path.abspath(__file__), "--driver", json.dumps(job)], log, env)


def steady(process: Process) -> dict:
    """Records per second of the data batches after the first (wall time between their ends),
    and the CPU the driver's tree spent between them."""
    data = [p for p in process.progress if p["rows"] > 0]
    if len(data) < 2:
        raise RuntimeError(f"{len(data)} data batches: give more records")
    rate = sum(p["rows"] for p in data[1:]) / (data[-1]["ended"] - data[0]["ended"])
    return measured(rate, data[0]["mark"], data[-1]["mark"], process)


def run_spark(kafka: Any, args: Any, kind: str, topic: str, total: int, restore: bool) -> dict:
    """Throughput, CPU, peak RSS and state bytes of a Spark job over the topic, then
    (`restore`) its restore after SIGKILL with the local state deleted."""
    name = f"{kind}-{uuid.uuid4().hex[:6]}"
    output = f"out-{name}"
    kafka.create_topic(output, args.partitions)
    checkpoint, local = os.path.join(args.workdir, name, "checkpoint"), os.path.join(args.workdir, name, "local")
    tws = kind == "tws"
    per_batch = args.tws_batch if tws else max(total // args.batches, 1)
    job = {"kind": kind, "bootstrap": kafka.bootstrap, "topic": topic, "output": output, "checkpoint": checkpoint,
           "local": local, "partitions": args.partitions, "max_offsets": per_batch,
           "trigger": "processing" if tws else "available_now", "profile": args.profile and not tws,
           "profile_dir": os.path.join(args.workdir, name, "profile")}
    log = os.path.join(args.workdir, f"{name}.log")
    process = spark_driver(kafka, args, job, log)
    if tws:  # stop after the batches it is given
        while len([p for p in process.progress if p["rows"]]) < args.tws_batches:
            if process.popen.poll() is not None:
                raise RuntimeError(f"the Spark driver exited with {process.popen.returncode}: see {log}")
            time.sleep(0.5)
        process.kill()
    else:
        process.wait_line("done", timeout=7200)
        process.popen.wait()
        process.stats.stop.set()
    result = {**steady(process), "local": du(local), "durable": du(os.path.join(checkpoint, "statestore")),
              "output": output}
    line = describe(kind, result)
    if restore:
        result["restore"] = spark_restore(kafka, args, job, log)
        line += f", restore {result['restore']:.1f} s"
    print(line, flush=True)
    if job["profile"]:
        result["profile"] = job["profile_dir"]
    return result


def spark_restore(kafka: Any, args: Any, job: dict, log: str) -> float:
    """Seconds the first batch's slowest task took to open its state after a driver running
    `job` was killed with SIGKILL and the local copies deleted (the topic gets 64 more records)."""
    killed = spark_driver(kafka, args, {**job, "trigger": "processing", "profile": False}, log)
    killed.wait_line("started")
    killed.kill()
    shutil.rmtree(job["local"], ignore_errors=True)
    kafka.produce(job["topic"], [(f"sensor-{p}", '{"key":"sensor-%d","ts":1}' % p, 1) for p in range(64)])
    restarted = spark_driver(kafka, args, {**job, "trigger": "processing", "profile": False}, log)
    restarted.wait_line("progress ")
    restarted.kill()
    from spark_statestore.spark import StateStoreMetrics

    tasks = StateStoreMetrics(job["checkpoint"]).tasks()
    first = tasks[tasks["batch_id"] == tasks["batch_id"].max()]
    return float(first["open_seconds"].max())


def driver(job: dict) -> None:
    """A Spark driver running one job (in a process of its own, so that it can be killed)."""
    from pyspark.sql.streaming.listener import StreamingQueryListener

    import kafka_windowed_counts
    import windowed_counts

    jars = [str(jar) for jar in connector_jars()]
    spark = (windowed_counts.session_builder("local[2]").config("spark.jars", ",".join(jars))
             .config("spark.sql.shuffle.partitions", str(job["partitions"]))
             .config("spark.sql.execution.arrow.maxRecordsPerBatch", "100000")
             .config("spark.statestore.localDir", job["local"]).getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")

    class Progress(StreamingQueryListener):
        def onQueryStarted(self, event: Any) -> None:
            pass

        def onQueryProgress(self, event: Any) -> None:
            print("progress " + json.dumps({"batch": event.progress.batchId, "rows": event.progress.numInputRows,
                                            "ended": time.time()}), flush=True)

        def onQueryIdle(self, event: Any) -> None:
            pass

        def onQueryTerminated(self, event: Any) -> None:
            pass

    spark.streams.addListener(Progress())
    trigger = {"availableNow": True} if job["trigger"] == "available_now" else {"processingTime": "0 seconds"}
    max_offsets = job["max_offsets"] if job["trigger"] == "available_now" or job["kind"] == "tws" else None
    if job["kind"] == "tws":
        processor = windowed_counts.WindowedCounts(job["checkpoint"], spark=spark)
        query = kafka_windowed_counts.build_query(spark, job["bootstrap"], job["topic"], job["output"],
                                                  job["checkpoint"], processor, trigger, max_offsets)
    else:
        wrap = windowed_counts_ks.profiled(job["profile_dir"]) if job["profile"] else None
        query = windowed_counts_ks.build_query(spark, job["bootstrap"], job["topic"], job["output"], job["checkpoint"],
                                               job["partitions"], trigger, max_offsets, wrap=wrap)
    print("started", flush=True)
    query.awaitTermination()
    if query.exception() is not None:
        raise SystemExit(f"the query failed: {query.exception()}")
    from spark_statestore.spark.compat import drain_listener_bus

    drain_listener_bus(spark)
    print("done", flush=True)
    spark.stop()


# -- latency -------------------------------------------------------------------------------------


def latency(kafka: Any, args: Any, kind: str, rate: int) -> dict:
    """p50 and p99 seconds from a window's close to its receipt, at `rate` records a second,
    the CPU seconds per record fed the side's processes spent meanwhile, and the median
    1-minute load average while they ran."""
    topic, output = f"live-{kind}-{uuid.uuid4().hex[:6]}", f"live-out-{kind}-{uuid.uuid4().hex[:6]}"
    kafka.create_topic(topic, args.partitions)
    kafka.create_topic(output, args.partitions)
    log = os.path.join(args.workdir, f"latency-{kind}.log")
    if kind == "kafka-streams":
        process, _, _ = kafka_streams(kafka, args, topic, output, {}, log)
        process.wait_line("state RUNNING")
    else:
        name = f"latency-{uuid.uuid4().hex[:6]}"
        process = spark_driver(kafka, args, {
            "kind": kind, "bootstrap": kafka.bootstrap, "topic": topic, "output": output, "partitions": args.partitions,
            "checkpoint": os.path.join(args.workdir, name, "checkpoint"), "local": os.path.join(args.workdir, name, "local"),
            "max_offsets": None, "trigger": "processing", "profile": False, "profile_dir": ""}, log)
        process.wait_line("started")
    started = time.time()
    reader = Latencies(kafka, output, int((started + args.warmup_seconds) * 1000))
    reader.start()
    feeder = Feeder(kafka, topic, rate, args.latency_seconds, args.keys)
    first = process.stats.sample()
    feeder.start()
    feeder.join()
    time.sleep(windowed_counts_ks.GRACE_MS / 1000 + 5)  # the last windows the feed closed
    cpu = (process.stats.sample().cpu - first.cpu) / max(feeder.sent, 1)
    load = statistics.median(process.stats.loads)
    reader.stop.set()
    reader.join()
    process.kill()
    if not reader.values:
        return {"p50": float("nan"), "p99": float("nan"), "latency_cpu": cpu, "latency_load": load}
    p50, p99 = np.percentile(reader.values, [50, 99])
    print(f"{kind} latency at {rate:,} records/s: p50 {p50:.2f} s, p99 {p99:.2f} s ({len(reader.values):,} windows), "
          f"{cpu * 1e6:,.1f} CPU us/record, load average {load:.1f} (median)", flush=True)
    return {"p50": float(p50), "p99": float(p99), "latency_cpu": cpu, "latency_load": load}


# -- profile -------------------------------------------------------------------------------------


def print_profile(directory: str, top: int = 25) -> None:
    files = glob.glob(os.path.join(directory, "*.prof"))
    if not files:
        print("no profile written")
        return
    stats = pstats.Stats(*files)
    print(f"\ncProfile of the per-partition Python workers ({len(files)} tasks), by cumulative time:")
    stats.sort_stats("cumulative").print_stats(top)
    print("by own time:")
    stats.sort_stats("tottime").print_stats(top)


def medians(repeats: list[dict]) -> dict:
    """One side's figures over its repeats: the median of each number, the load's extremes
    over all of them, the first run's output topic and the last's restore."""
    loads = [r["load"] for r in repeats]
    numbers = {name: statistics.median(r[name] for r in repeats)
               for name in ("rate", "cpu_per_record", "cpu", "others", "rss", "local", "durable")}
    return {**numbers, "load": (min(x[0] for x in loads), statistics.median(x[1] for x in loads),
                                max(x[2] for x in loads)),
            "output": repeats[0]["output"], **{k: repeats[-1][k] for k in ("restore", "profile") if k in repeats[-1]}}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=4_000_000)
    parser.add_argument("--keys", type=int, default=100_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--events-per-second", type=int, default=20_000, help="records per second of event time")
    parser.add_argument("--batches", type=int, default=8, help="per-partition micro-batches over the topic")
    parser.add_argument("--repeats", type=int, default=2,
                        help="throughput runs of each side, alternating (Kafka Streams, per-partition, ...)")
    parser.add_argument("--tws-batch", type=int, default=100_000, help="records per transformWithState batch")
    parser.add_argument("--tws-batches", type=int, default=3, help="transformWithState batches measured (with the first)")
    parser.add_argument("--latency-seconds", type=float, default=60)
    parser.add_argument("--warmup-seconds", type=float, default=20)
    parser.add_argument("--quick", action="store_true", help="a smoke-test size")
    parser.add_argument("--profile", action="store_true", help="cProfile the per-partition Python workers")
    parser.add_argument("--skip", default="", help="comma-separated: tws, latency")
    parser.add_argument("--workdir", default="")
    parser.add_argument("--driver", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.driver:
        driver(json.loads(args.driver))
        return 0
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # the processes below are killed on SIGTERM too
    try:
        return run(args)
    finally:
        for process in Process.started:
            process.kill()


def run(args: argparse.Namespace) -> int:
    """The whole comparison (see the module's docstring)."""
    if args.quick:
        args.records, args.keys, args.batches, args.events_per_second = 200_000, 10_000, 4, 2_000
        args.tws_batch, args.tws_batches = 20_000, 2
        args.latency_seconds, args.warmup_seconds = 25, 5
    keep = bool(args.workdir)
    args.workdir = os.path.abspath(args.workdir or tempfile.mkdtemp(prefix="bench-vs-ks-"))
    os.makedirs(args.workdir, exist_ok=True)
    skip = set(filter(None, args.skip.split(",")))
    windowed_counts_ks.kafka_streams_build.build()
    shutil.rmtree(os.path.join(args.workdir, "kafka"), ignore_errors=True)  # a new broker each run
    with LocalKafka(os.path.join(args.workdir, "kafka")) as kafka:
        topic = "events"
        kafka.create_topic(topic, args.partitions)
        started = time.time()
        produce_topic(kafka, topic, args.records, args.keys, args.events_per_second)
        print(f"topic: {args.records:,} records, {args.keys:,} keys, {args.partitions} partitions "
              f"({time.time() - started:.0f} s to produce)", flush=True)
        runs: dict[str, list[dict]] = {"kafka-streams": [], "per-partition": []}
        for repeat in range(args.repeats):  # A B A B: each side's runs spread over the same stretch of time
            last = repeat == args.repeats - 1
            runs["kafka-streams"].append(run_kafka_streams(kafka, args, topic, args.records, restore=last))
            runs["per-partition"].append(run_spark(kafka, args, "per-partition", topic, args.records, restore=last))
        results = {kind: medians(repeats) for kind, repeats in runs.items()}
        ks = windowed_counts_ks.windows_of(kafka.records(runs["kafka-streams"][0]["output"]))
        ours = windowed_counts_ks.windows_of(kafka.records(runs["per-partition"][0]["output"]))
        agree = bool(ks) and ks == ours
        print(f"results: Kafka Streams {len(ks):,} windows, per-partition {len(ours):,}: "
              f"{'equal' if agree else 'DIFFERENT'}", flush=True)
        if "tws" not in skip:
            try:
                results["tws"] = medians([run_spark(kafka, args, "tws", topic, args.records, restore=True)])
            except RuntimeError as error:  # the table still shows the others
                print(f"tws: failed: {error}", flush=True)
        rate = int(min(results["kafka-streams"]["rate"], results["per-partition"]["rate"]) / 2)
        for kind in results:
            if "latency" in skip:
                results[kind].update(p50=float("nan"), p99=float("nan"), latency_cpu=float("nan"))
                continue
            kind_rate = rate if kind != "tws" else int(min(rate, results["tws"]["rate"] / 2))
            results[kind]["latency_rate"] = kind_rate
            try:
                results[kind].update(latency(kafka, args, kind, kind_rate))
            except RuntimeError as error:
                print(f"{kind} latency: failed: {error}", flush=True)
                results[kind].update(p50=float("nan"), p99=float("nan"), latency_cpu=float("nan"))
    if args.profile and "profile" in results["per-partition"]:
        print_profile(results["per-partition"]["profile"])
    from common import print_table

    mib = 1 << 20
    rows = [[kind, r["rate"], r["cpu_per_record"] * 1e6, f"{r['load'][1]:.1f} ({r['load'][0]:.1f}-{r['load'][2]:.1f})",
             r["others"], r.get("latency_rate", 0), r["p50"], r["p99"], r["latency_cpu"] * 1e6, r["rss"] / mib,
             r["local"] / mib, r["durable"] / mib, r.get("restore", float("nan"))] for kind, r in results.items()]
    print(f"\n{args.records:,} records, {args.keys:,} keys, {args.partitions} partitions, 2 cores "
          f"(taskset -c {CORES}); Kafka Streams and per-partition results equal: {agree}; medians of "
          f"{args.repeats} alternating throughput runs a side (tws: one). CPU is user+system seconds of the "
          f"side's own processes (Kafka Streams' JVM; Spark's driver, its JVM and Python workers), not the "
          f"broker's, which both share; load: the 1-minute load average during the runs, median (min-max); "
          f"other cores: what the rest of the machine (other jobs, the broker) kept busy meanwhile")
    print_table(["system", "records/s", "CPU us/record", "load", "other cores", "latency run records/s", "p50 s",
                 "p99 s", "latency run CPU us/record", "peak RSS MiB", "local state MiB", "durable state MiB",
                 "restore s"], rows)
    if not keep:
        shutil.rmtree(args.workdir, ignore_errors=True)
    ratio = results["per-partition"]["rate"] / results["kafka-streams"]["rate"]
    cpu_ratio = results["kafka-streams"]["cpu_per_record"] / results["per-partition"]["cpu_per_record"]
    print(f"cpu: Kafka Streams / spark_statestore per-partition CPU seconds per record = {cpu_ratio:.2f}")
    print(f"headline: spark_statestore per-partition / Kafka Streams records per second = {ratio:.2f}")
    return 0 if agree else 1


if __name__ == "__main__":
    sys.exit(main())
