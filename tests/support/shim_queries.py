"""Streaming queries for the early-trigger tests: a file stream, a query whose batches wait for
the test, messages as tasks send them, and waiting for what a test needs (shipped to the
Python workers by value: they cannot import the tests)."""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
from collections.abc import Iterable, Iterator
from pathlib import Path

from pyspark import cloudpickle

from spark_statestore.spark.signals import REPORT, SECRET_KEY, TARGET_KEY, Signal, SignalTarget, send

INTERVAL = "36500 days"  # a century: Spark aligns processing-time triggers to multiples of the
# interval since the epoch, so an hourly query would run a batch nobody woke at every full hour
LIMIT = 64 << 20

cloudpickle.register_pickle_by_value(sys.modules[__name__])


def shim_session(spark):
    """A child session of the shared SparkSession (its own streaming query manager, so the
    listener touches no other test's queries) with the shim activated in it; `target` is
    where tasks send signals, as the session's conf says."""
    from spark_statestore.spark.driver.jvm import activate_shim

    child = spark.newSession()
    child.status = activate_shim(child)
    child.target = SignalTarget.parse(child.conf.get(TARGET_KEY), child.conf.get(SECRET_KEY))
    return child


class FileStream:
    """A directory of text files read by a streaming query; `add` publishes one atomically.
    Its checkpoint has a `statestore` directory, so the driver writes its batch files."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.input = root / "input"
        self.input.mkdir(parents=True)
        self.checkpoint = str(root / "checkpoint")
        (root / "checkpoint" / "statestore").mkdir(parents=True)
        self.files = 0

    def add(self, *lines: str) -> None:
        self.files += 1
        staged = self.root / f"staged-{self.files}.txt"
        staged.write_text("".join(f"{line}\n" for line in lines or ["row"]))
        os.replace(staged, self.input / f"part-{self.files:04d}.txt")

    def start(self, session, transform=None, **trigger):
        frame = session.readStream.format("text").option("maxFilesPerTrigger", 1).load(str(self.input))
        if transform is not None:
            frame = frame.mapInPandas(transform, "value string")
        return (
            frame.writeStream.format("noop").option("checkpointLocation", self.checkpoint)
            .trigger(**(trigger or {"processingTime": INTERVAL})).start()
        )

    def batch_file(self, batch: int) -> dict | None:
        """The driver's file of a batch, None while there is none."""
        path = Path(self.checkpoint) / "statestore" / "_batches" / f"{batch}.json"
        return json.loads(path.read_text()) if path.exists() else None


def batches(query) -> list[int]:
    """The ids of the batches that processed rows."""
    return sorted({p["batchId"] for p in query.recentProgress if p["numInputRows"] > 0})


def wait_until(predicate, timeout: float = 300.0, what: str = "") -> None:
    """Poll `predicate` until true; `timeout` only bounds a hang (a batch of a real query can
    take minutes on a loaded machine)."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout}s: {what or predicate}")
        time.sleep(0.05)


def gate(control: Path, held_batches: set[int], signal_target=None):
    """A mapInPandas function that holds the batches `held_batches` (writes
    `running-<batch>`, then waits for `release-<batch>`), and, given a signal target,
    sends a crossing signal from tasks whose rows contain `big`, as a task attempt does
    (keyed on its `taskAttemptId()`)."""

    def run(frames):
        from pyspark import TaskContext

        from spark_statestore.spark.signals import CROSSING, Signal, send

        context = TaskContext.get()
        batch = int(context.getLocalProperty("streaming.sql.batchId"))
        frames = list(frames)
        if signal_target is not None and any(frame["value"].eq("big").any() for frame in frames):
            query_id = context.getLocalProperty("sql.streaming.queryId")
            send(signal_target, Signal(CROSSING, query_id, batch, context.partitionId(), context.taskAttemptId(),
                                       2 * LIMIT, LIMIT))
        if batch in held_batches:
            (control / f"running-{batch}").touch()
            # longer than any wait of the test holding it, which releases it however it ends (`gated`, `Held`)
            deadline = time.monotonic() + 600
            while not (control / f"release-{batch}").exists() and time.monotonic() < deadline:
                time.sleep(0.02)
        yield from frames

    return run


def release_and_stop(control: Path, held_batches: Iterable[int], queries: Iterable) -> None:
    """Releases the batches (held now, or that a query would hold later), then stops the
    queries: what a test holding batches does however it ends, as a held task otherwise
    keeps a core of the shared session for the gate's whole hold (the next tests fail slowly)."""
    for batch in held_batches:
        (control / f"release-{batch}").touch()
    for query in queries:
        query.stop()


@contextlib.contextmanager
def gated(session, control: Path, held_batches: set[int], signal_target=None) -> Iterator:
    """`gate(control, ...)` (`control` made here) for the queries the block starts in
    `session`: however the block ends, its batches are released and those queries stopped."""
    control.mkdir()
    before = {query.id for query in session.streams.active}
    try:
        yield gate(control, held_batches, signal_target)
    finally:
        release_and_stop(control, held_batches, [q for q in session.streams.active if q.id not in before])


class Held:
    """A query over a `FileStream` whose batches `held` wait for the test (`running`,
    `release`), started with batch 0 done; leaving its `with` block releases them all and
    stops the query."""

    def __init__(self, session, root: Path, held: set[int], signal_target=None, **trigger) -> None:
        self.stream = FileStream(root / "stream")
        self.control, self.held = root / "control", held
        self.control.mkdir()
        self.stream.add("a")
        self.query = self.stream.start(session, gate(self.control, held, signal_target), **trigger)
        self.id = str(self.query.id)
        wait_until(lambda: self.stream.batch_file(0) is not None, what="batch 0 and its file")

    def __enter__(self) -> Held:
        return self

    def __exit__(self, *exc: object) -> None:
        release_and_stop(self.control, self.held, [self.query])

    def running(self, batch: int) -> None:
        wait_until(lambda: (self.control / f"running-{batch}").exists(), what=f"batch {batch} running")

    def release(self, batch: int) -> None:
        (self.control / f"release-{batch}").touch()


def report(session, query_id: str, batch: int, partition: int, size: int, limit: int = LIMIT,
           kind: int = REPORT) -> None:
    """A task's message, as a task of `batch` would send it (a task attempt id of its own)."""
    report.attempts = getattr(report, "attempts", 1_000_000) + 1
    assert send(session.target, Signal(kind, query_id, batch, partition, report.attempts, size, limit))


def early(held: Held, batch: int) -> dict | None:
    """The early trigger of a batch as its file says (waiting for the file)."""
    wait_until(lambda: held.stream.batch_file(batch) is not None, what=f"the file of batch {batch}")
    return held.stream.batch_file(batch)["early_trigger"]
