"""A new user's first three Spark runs, timed side by side on the same input.

What the README offers first: `./dev example` (examples/windowed_counts.py run with python),
the same job under the README's spark-submit line (`--properties-file
conf/spark-defaults.conf`), and the README's "In Spark" snippet in a spark-submit driver
with the same properties file. Each run is a fresh driver process (JVM start included),
fed the same generated events (the example's generator, same seed), and each must succeed.
The goal (issue 26): all three within 1.5x of each other's wall time.

    python benchmarks/first_hour.py [--files 12] [--events-per-file 2000] [--repeats 1]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [os.path.join(ROOT, "examples"), os.path.join(ROOT, "tests", "support"), ROOT]

from common import print_table  # noqa: E402
from test_readme import _by_name, _local  # noqa: E402
from windowed_counts import generate  # noqa: E402

SPARK_SUBMIT = [os.path.join(os.path.dirname(sys.executable), "spark-submit"),
                "--properties-file", os.path.join(ROOT, "conf", "spark-defaults.conf")]
SNIPPET_PRELUDE = "from pyspark.sql import SparkSession\nspark = SparkSession.builder.getOrCreate()\n"


def _run(name: str, command: list[str], workdir: str) -> tuple[float, str]:
    """Wall seconds and output of `command` (kept in `workdir`, shown if it fails)."""
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable,
               PYTHONPATH=os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")])))
    log = os.path.join(workdir, f"{name}.log")
    start = time.perf_counter()
    with open(log, "w") as out:
        done = subprocess.run(command, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=ROOT, check=False)
    seconds = time.perf_counter() - start
    with open(log) as f:
        output = f.read()
    if done.returncode:
        sys.exit(f"{name} failed (exit {done.returncode}):\n{output[-4000:]}")
    return seconds, output


def _summary(output: str) -> str:
    """The main job's last line of figures (batches, rows written to state, late events)."""
    lines = [line for line in output.splitlines() if line.startswith("batches: ")]
    if not lines:
        sys.exit(f"no summary line in the job's output:\n{output[-4000:]}")
    return lines[-1]


def runs(base: str, files: int, events: int, attempt: int) -> dict[str, float]:
    """One fresh run of each way, each in its own directory under `base`; the main job's
    figures must be the same with python and under spark-submit (same state partitions)."""
    job = os.path.join(ROOT, "examples", "windowed_counts.py")
    sizes = ["--files", str(files), "--events-per-file", str(events)]
    snippet_dir = os.path.join(base, f"snippet{attempt}")
    generate(os.path.join(snippet_dir, "events"), files, events)  # what the example generates for itself
    script = os.path.join(snippet_dir, "readme_in_spark.py")
    with open(script, "w") as f:
        f.write(SNIPPET_PRELUDE + _local(_by_name()["In Spark#0"].code, snippet_dir))
    example, example_out = _run(f"example{attempt}", [sys.executable, job, "--workdir",
                                                      os.path.join(base, f"example{attempt}"), *sizes], base)
    submit, submit_out = _run(f"submit{attempt}", [*SPARK_SUBMIT, job, "--workdir",
                                                   os.path.join(base, f"submit{attempt}"), *sizes], base)
    if _summary(example_out) != _summary(submit_out):
        sys.exit(f"the job's figures differ: python: {_summary(example_out)}; spark-submit: {_summary(submit_out)}")
    print(f"run {attempt}: both ways of the main job: {_summary(example_out)}")
    snippet, _ = _run(f"snippet{attempt}", [*SPARK_SUBMIT, script], base)
    return {"./dev example": example, "README spark-submit line": submit, "README 'In Spark' snippet": snippet}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--files", type=int, default=12)
    parser.add_argument("--events-per-file", type=int, default=2_000)
    parser.add_argument("--repeats", type=int, default=1, help="runs of each way; the best counts")
    args = parser.parse_args()
    best: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="first-hour-") as base:
        for attempt in range(args.repeats):
            for name, seconds in runs(base, args.files, args.events_per_file, attempt).items():
                best[name] = min(best.get(name, seconds), seconds)
    fastest = min(best.values())
    print(f"{args.files} files x {args.events_per_file} events, best of {args.repeats}, fresh driver each run")
    print_table(["run", "wall s", "vs fastest"], [[name, s, s / fastest] for name, s in best.items()])
    print(f"headline: slowest/fastest first-hour run wall time = {max(best.values()) / fastest:.2f}")


if __name__ == "__main__":
    main()
