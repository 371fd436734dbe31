"""The state layer on a Spark standalone cluster on loopback (2 workers, 1 core each).

1. Throughput: the same stateful workload (running totals per key, per-partition with
   `partition_function`, 4 state partitions) with one executor and with two
   (`spark.cores.max` 1 and 2), rows/s over the batches after the first, and the median
   per-task open and prepare times of the partition state.
2. Restore: a partition of `--restore-keys` keys is built on one worker; that worker is
   killed for good and the next batch runs on the other one, which restores the
   partition from the checkpoint location (snapshot + changelogs): the task's restore time.

This machine has two cores for the driver, both executors and the masters, so two
executors cannot be twice as fast here; the ratio says how the state layer scales when
the cores are there, and what it costs when they are not.

    python benchmarks/cluster.py [--batches N] [--rows N] [--keys N] [--restore-keys N]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
TESTS = os.path.join(os.path.dirname(HERE), "tests", "support")
sys.path.insert(0, HERE)
sys.path.insert(0, TESTS)

import pandas as pd  # noqa: E402
from common import print_table  # noqa: E402
from standalone import StandaloneCluster  # noqa: E402

JOB = os.path.join(TESTS, "cluster_jobs.py")


def write_input(directory: str, batches: int, rows: int, keys: int) -> None:
    import numpy as np

    rng = np.random.default_rng(1)
    os.makedirs(directory)
    for n in range(batches):
        path = os.path.join(directory, f"{n:04d}.json")
        pd.DataFrame({"key": [f"key-{k:08d}" for k in rng.integers(0, keys, rows)]}).to_json(
            path + ".tmp", orient="records", lines=True
        )
        os.utime(path + ".tmp", (1_000_000 + n, 1_000_000 + n))
        os.replace(path + ".tmp", path)


def run_job(cluster: StandaloneCluster, workdir: str, *args: str) -> dict:
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
    done = subprocess.run([sys.executable, JOB, cluster.master_url, workdir, "--adapter", "partition", "--report", *args],
                          capture_output=True, text=True, env=env, timeout=3600)
    if done.returncode != 0:
        raise SystemExit(f"job failed:\n{done.stderr[-3000:]}")
    return json.loads([line for line in done.stdout.splitlines() if line.startswith("{")][-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batches", type=int, default=6)
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--keys", type=int, default=100_000)
    parser.add_argument("--restore-keys", type=int, default=1_000_000)
    args = parser.parse_args()
    root = tempfile.mkdtemp(prefix="bench-cluster-")
    cluster = StandaloneCluster(os.path.join(root, "cluster"), workers=2)
    try:
        rates = {}
        for executors in (1, 2):
            workdir = os.path.join(root, f"throughput-{executors}")
            write_input(os.path.join(workdir, "input"), args.batches, args.rows, args.keys)
            rates[executors] = run_job(cluster, workdir, "--max-cores", str(executors))
            print(f"{executors} executor(s): {rates[executors]}", flush=True)
        workdir = os.path.join(root, "restore")
        write_input(os.path.join(workdir, "input"), 1, args.restore_keys * 2, args.restore_keys)
        run_job(cluster, workdir, "--max-cores", "1", "--partitions", "1")  # builds the partition
        ran_on = {int(name.split("-")[3][1:]) for name in os.listdir(os.path.join(workdir, "markers"))}
        for index in ran_on:
            cluster.kill_worker(index)  # the worker and the local copy are lost
        cluster.add_worker()
        write_input(os.path.join(workdir, "more"), 1, 1000, args.restore_keys)
        shutil.move(os.path.join(workdir, "more", "0000.json"), os.path.join(workdir, "input", "0001.json"))
        restore = run_job(cluster, workdir, "--max-cores", "1", "--partitions", "1")
        print(f"restore: {restore}", flush=True)
    finally:
        cluster.stop()
        shutil.rmtree(root, ignore_errors=True)
    rows = [[f"{n} executor(s)", r["rows_per_second"], r["open_ms"], r["prepare_ms"]] for n, r in rates.items()]
    print(f"\n{args.batches} batches of {args.rows:,} rows, {args.keys:,} keys, 4 state partitions")
    print_table(["run", "rows/s", "open ms (median)", "prepare ms (median)"], rows)
    print(f"restore of a {args.restore_keys:,}-key partition on a new executor: {restore['restore_seconds']:.2f} s")
    print(f"headline: 2-executor/1-executor rows per second = {rates[2]['rows_per_second'] / rates[1]['rows_per_second']:.2f}")


if __name__ == "__main__":
    main()
