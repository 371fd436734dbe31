"""The state layer on a real Spark standalone cluster on loopback: two workers with one
core each (own work and local directories), drivers in their own processes. Exactly once
against a reference while partitions move between executors, an executor JVM is killed in
the middle of a batch, a worker is lost for good and another joins, the driver is killed
and restarted, and speculation runs two attempts of one partition at once."""

from __future__ import annotations

import collections
import contextlib
import glob
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator

import pandas as pd
import pytest

from standalone import StandaloneCluster
from paths import SUPPORT

# the cluster starting and a driver running (waited for up to 600 s by `finish`): minutes on a loaded machine
pytestmark = [pytest.mark.cluster, pytest.mark.timeout(1200)]
JOB = str(SUPPORT / "cluster_jobs.py")
KEYS = [f"key-{i}" for i in range(24)]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    started = StandaloneCluster(str(tmp_path_factory.mktemp("standalone")), workers=2)
    yield started
    started.stop()


def write_input(workdir: str, batches: int, seed: int = 1) -> list[list[str]]:
    """One file per batch (modification times in order: the file source goes by them), each
    with every key, so that every state partition has groups in every batch (a held task of
    applyInPandasWithState runs only where there are groups)."""
    import random

    rng = random.Random(seed)
    directory = os.path.join(workdir, "input")
    os.makedirs(directory, exist_ok=True)
    written = []
    for n in range(batches):
        keys = KEYS + [rng.choice(KEYS) for _ in range(rng.randint(5, 30))]  # every group in every batch
        path = os.path.join(directory, f"{n:04d}.json")
        pd.DataFrame({"key": keys}).to_json(path + ".tmp", orient="records", lines=True)
        os.utime(path + ".tmp", (1_000_000 + n, 1_000_000 + n))
        os.replace(path + ".tmp", path)
        written.append(keys)
    return written


def expected_output(batches: list[list[str]]) -> dict[int, dict[str, int]]:
    totals: collections.Counter = collections.Counter()
    out = {}
    for n, keys in enumerate(batches):
        totals.update(keys)
        out[n] = {k: totals[k] for k in set(keys)}
    return out


def actual_output(workdir: str) -> dict[int, dict[str, int]]:
    out = {}
    for path in glob.glob(os.path.join(workdir, "output", "batch=*")):
        frame = pd.read_parquet(path)
        out[int(path.rsplit("=", 1)[1])] = dict(zip(frame["key"], frame["total"], strict=True))
    return out


@pytest.fixture
def start_driver(cluster: StandaloneCluster, tmp_path) -> Iterator[Callable[..., subprocess.Popen]]:
    """`start_driver(adapter, *args)`: a driver of `cluster_jobs.py` over `tmp_path`. However
    the test ends, its held task is released and every driver it started is killed with its
    process group (a driver left running keeps the cluster's cores from the next tests)."""
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
    started = []

    def start(adapter: str, *args: str) -> subprocess.Popen:
        with open(tmp_path / f"driver-{time.monotonic_ns()}.log", "w") as log:
            started.append(subprocess.Popen(
                [sys.executable, JOB, cluster.master_url, str(tmp_path), "--adapter", adapter, *args],
                stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True))
        return started[-1]

    yield start
    (tmp_path / "release").touch()
    for driver in started:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(driver.pid, signal.SIGKILL)
        driver.wait()


def finish(driver: subprocess.Popen, workdir: str, timeout: float = 600) -> None:  # a bound on a hang
    code = driver.wait(timeout)
    logs = sorted(glob.glob(os.path.join(workdir, "driver-*.log")))
    assert code == 0, f"driver failed ({code}):\n{open(logs[-1]).read()[-5000:]}"


def markers(workdir: str) -> list[tuple[int, int, int, int]]:
    """(batch, partition, attempt, worker) of every task that ran."""
    found = []
    for name in os.listdir(os.path.join(workdir, "markers")):
        batch, partition, attempt, worker, _ = name.split("-")
        found.append((int(batch[1:]), int(partition[1:]), int(attempt[1:]), int(worker[1:])))
    return found


def wait_for(path: str, driver: subprocess.Popen, timeout: float = 300) -> str:
    """The content of `path` once it appears; fails at once if the driver ended first."""
    deadline = time.monotonic() + timeout
    while not os.path.exists(path):
        assert driver.poll() is None, f"the driver ended ({driver.returncode}) before {path} appeared"
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.2)
    return open(path).read()  # written whole (renamed into place)


def test_partitions_move_between_executors_and_an_executor_dies_mid_batch(cluster, start_driver, tmp_path):
    """Four state partitions of a `StoreProcessor` on two one-core executors (no locality
    wait): partitions run on both over the batches; in batch 2 the executor holding
    partition 1 is SIGKILLed while that task is inside the batch, and the attempt runs again
    elsewhere. (The partition function loses its executor with its worker below and runs
    speculatively; `with_stores` loses its driver: the adapters share the protocol that
    recovers.)"""
    workdir = str(tmp_path)
    batches = write_input(workdir, 4)
    driver = start_driver("tws", "--hold-batch", "2", "--hold-partition", "1")
    held_on = int(wait_for(os.path.join(workdir, "held"), driver))
    assert cluster.kill_executor(held_on), f"no executor of worker {held_on} to kill"
    open(os.path.join(workdir, "release"), "w").close()
    finish(driver, workdir)
    assert actual_output(workdir) == expected_output(batches)
    ran = markers(workdir)
    workers_of = collections.defaultdict(set)
    for batch, partition, _, worker in ran:
        workers_of[partition].add(worker)
    assert any(len(w) > 1 for w in workers_of.values()), f"no partition ever moved: {dict(workers_of)}"
    # ran again: a later attempt, or attempt 0 of a resubmitted stage (the lost executor's shuffle output)
    assert sum(1 for b, p, _, _ in ran if (b, p) == (2, 1)) >= 2, "the killed task never ran again"


def test_a_worker_lost_for_good_and_a_new_one_joining(cluster, start_driver, tmp_path):
    workdir = str(tmp_path)
    batches = write_input(workdir, 4, seed=2)
    driver = start_driver("partition", "--hold-batch", "2", "--hold-partition", "0", "--hold-every-attempt")
    held_on = int(wait_for(os.path.join(workdir, "held"), driver))
    cluster.kill_worker(held_on)  # its executor and its local copies are gone with it
    joined = cluster.add_worker()
    deadline = time.monotonic() + 300
    while not cluster.executor_registered(joined.index):  # the retry of the task stays held meanwhile
        assert driver.poll() is None and time.monotonic() < deadline, "no executor started on the new worker"
        time.sleep(0.3)
    open(os.path.join(workdir, "release"), "w").close()
    finish(driver, workdir)
    assert actual_output(workdir) == expected_output(batches)
    assert any(w == joined.index for *_, w in markers(workdir)), "the new worker never ran a task"


def test_the_driver_killed_and_restarted(start_driver, tmp_path):
    workdir = str(tmp_path)
    batches = write_input(workdir, 4, seed=3)
    driver = start_driver("group", "--hold-batch", "2", "--hold-partition", "2")
    wait_for(os.path.join(workdir, "held"), driver)
    os.killpg(driver.pid, signal.SIGKILL)  # the driver dies in the middle of batch 2
    driver.wait()
    open(os.path.join(workdir, "release"), "w").close()
    finish(start_driver("group"), workdir)  # the same checkpoint, a new driver
    assert actual_output(workdir) == expected_output(batches)


def test_speculative_attempts_of_one_partition(start_driver, tmp_path):
    """Speculation on: attempt 0 of a partition stalls, Spark starts attempt 1 of it on the
    other executor while 0 still runs, and the batch commits what one of them prepared.
    Every attempt of that task holds until released: on a loaded machine Spark may start
    the speculative attempt before attempt 0 reached its hold, and a speculative attempt
    that finished first would end the batch without anything held."""
    workdir = str(tmp_path)
    batches = write_input(workdir, 3, seed=4)
    driver = start_driver(
        "partition", "--speculation", "--hold-batch", "1", "--hold-partition", "3", "--hold-every-attempt"
    )
    wait_for(os.path.join(workdir, "held"), driver)
    deadline = time.monotonic() + 300
    while sum(1 for b, p, _, _ in markers(workdir) if (b, p) == (1, 3)) < 2:
        assert time.monotonic() < deadline, "no speculative attempt started"
        time.sleep(0.3)
    open(os.path.join(workdir, "release"), "w").close()  # the first attempt goes on too
    finish(driver, workdir)
    assert actual_output(workdir) == expected_output(batches)
