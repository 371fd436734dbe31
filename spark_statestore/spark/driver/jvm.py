"""The driver part of spark_statestore in the driver's JVM, from Python (classic sessions, py4j).

The shim (`jvm-shim/`, packaged as `spark_statestore/jars/spark-statestore-shim.jar`) holds the
early trigger: the signal receiver, the governor, the listener that installs a wakeable clock
as each query's trigger clock when it starts, and the per-batch files. With
`spark.plugins=io.sparkstatestore.shim.StateStorePlugin` (and the jar on the driver's
classpath) it starts with the SparkContext, for classic and Spark Connect sessions alike.

`activate_shim(spark)` gives a classic session the same without the plugin: it starts the
driver part unless it runs already (from the classpath when the jar was given with
`spark.jars` / `--jars`; otherwise the packaged jar is loaded into the running driver by a
child class loader of Spark's) and registers its listener with the session. It never raises
for a shim that cannot be used; the returned `ShimStatus` says why. Only queries started after
activation are wakeable: the clock has to be in place before the query's first wait.
`wake`, `query_trigger`, `decision`, `signal_stats` and `metrics_source` ask the driver part
(tests, tools).
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from spark_statestore.spark import compat

log = logging.getLogger("spark_statestore.spark.driver.jvm")

SHIM_CLASS = "io.sparkstatestore.shim.EarlyTrigger"
JAR_PATH = Path(__file__).resolve().parents[2] / "jars" / "spark-statestore-shim.jar"

_lock = threading.Lock()
_facades: dict[int, tuple[Any, str]] = {}  # id(py4j gateway) -> (shim facade, "classpath" | "loaded")


@dataclass(frozen=True)
class ShimStatus:
    """Whether early triggers can work in a session, and why not."""

    available: bool
    reason: str = ""
    source: str = ""  # "plugin" (spark.plugins), "classpath" or "loaded" (the packaged jar, into the running driver)


@dataclass(frozen=True)
class QueryTrigger:
    """A running query's trigger as the shim saw it start.

    `kind` is `processingTime`, `once`, `availableNow`, `continuous`, `realTime` or
    `unknown`; `wakeable` is true when the shim's clock is installed and the trigger waits
    (a processing-time interval above 0), else `reason` says why not. `early_wakes` counts the waits between
    batches that a wake cut short; `polls` the waits cut short to look again for input after
    a woken trigger that ran no batch; `dropped_wakes` the wakes dropped because the batch
    they were meant to start had run already; `wake_pending`: a wake waits for the next wait."""

    query_id: str
    run_id: str
    kind: str
    interval_ms: int
    wakeable: bool
    reason: str
    early_wakes: int
    polls: int
    dropped_wakes: int
    wake_pending: bool


def shim_jar() -> str | None:
    """Path of the packaged shim jar (for `spark.jars` / `--jars`), None if the package was
    built without it (no JDK or pyspark at build time)."""
    return str(JAR_PATH) if JAR_PATH.is_file() else None


class _Unavailable(Exception):
    pass


def _jvm_session(spark: Any) -> Any:
    """The session's JVM object; `_Unavailable` for Spark Connect or a stopped context."""
    jsession = compat.jvm_session(spark)
    if jsession is None:
        raise _Unavailable(
            f"{type(spark).__module__}.{type(spark).__name__} has no driver JVM reachable from Python "
            "(a Spark Connect session?); early triggers need a classic SparkSession"
        )
    if compat.context_stopped(spark):
        raise _Unavailable("the SparkContext is stopped")
    return jsession


def _classpath_facade(spark: Any) -> Any | None:
    """A shim facade from the driver's classpath, None if the classes are not on it."""
    from py4j.java_gateway import JavaClass

    node = compat.driver_jvm(spark)
    for part in SHIM_CLASS.split("."):
        node = getattr(node, part)
    return node() if isinstance(node, JavaClass) else None


def _load_packaged(spark: Any, jsession: Any) -> Any:
    """A shim facade from the packaged jar, loaded by a child of Spark's class loader."""
    jar = shim_jar()
    if jar is None:
        raise _Unavailable(
            f"the shim jar is not on the driver's classpath and not packaged ({JAR_PATH} is missing: "
            "the package was built without a JDK or pyspark; build it with `python jvm-shim/build.py`)"
        )
    from py4j.protocol import Py4JError

    gateway, jvm = compat.py4j_gateway(spark), compat.driver_jvm(spark)
    try:
        urls = gateway.new_array(jvm.java.net.URL, 1)
        urls[0] = jvm.java.io.File(jar).toURI().toURL()
        loader = jvm.java.net.URLClassLoader(urls, jsession.getClass().getClassLoader())
        facade_class = loader.loadClass(SHIM_CLASS)
        constructor = facade_class.getConstructor(gateway.new_array(jvm.java.lang.Class, 0))
        return constructor.newInstance(gateway.new_array(jvm.java.lang.Object, 0))
    except Py4JError as e:
        raise _Unavailable(f"cannot load {SHIM_CLASS} from {jar}: {_java_message(e)}") from None


def _java_message(error: Exception) -> str:
    java = getattr(error, "java_exception", None)
    return str(java) if java is not None else str(error).strip().splitlines()[0]


def _facade(spark: Any, load: bool) -> tuple[Any, str]:
    """The driver's shim facade and where its classes came from, found once per driver
    JVM; with `load`, the packaged jar is loaded when the classes are not on the classpath."""
    jsession = _jvm_session(spark)
    key = id(compat.py4j_gateway(spark))
    with _lock:
        found = _facades.get(key)
        if found is None:
            facade = _classpath_facade(spark)
            if facade is not None:
                found = (facade, "classpath")
            elif load:
                found = (_load_packaged(spark, jsession), "loaded")
            else:
                raise _Unavailable("the shim is not active in this driver")
            _facades[key] = found
        return found


def activate_shim(spark: Any) -> ShimStatus:
    """Start the driver part of a classic SparkSession's driver unless it runs (the plugin's)
    and register its listener with the session (once; later calls only report). Never
    raises: the status says why it is unavailable."""
    try:
        facade, source = _facade(spark, load=True)
        started_by = facade.activate(_jvm_session(spark))
    except _Unavailable as e:
        return ShimStatus(False, str(e))
    except Exception as e:  # noqa: BLE001 - py4j and JVM failures become a status
        return ShimStatus(False, f"cannot start the driver part of spark_statestore: {_java_message(e)}")
    return ShimStatus(True, "", "plugin" if started_by == "plugin" else source)


def _ask(spark: Any, what: str, call: Any) -> Any:
    """`call(facade)`, None when the shim is not active or the call fails (asking is best effort)."""
    try:
        facade, _ = _facade(spark, load=False)
        return call(facade)
    except Exception as e:  # noqa: BLE001
        log.debug("%s unknown: %s", what, e)
        return None


def wake(spark: Any, query_id: str, after_batch: int | None = None) -> bool:
    """Start the query's next batch as soon as possible: end its current wait between
    batches, or its next wait if a batch is running. With `after_batch`, the wake is for the
    batch after that one only, and is dropped if the query has run that batch by its next
    wait. False if the query has no wakeable clock (shim not active, query not running or
    started before activation, a trigger that never waits)."""
    if after_batch is None:
        return bool(_ask(spark, f"wake of query {query_id}", lambda facade: facade.wake(str(query_id))))
    if isinstance(after_batch, bool) or not isinstance(after_batch, int) or not -1 <= after_batch < 1 << 63:
        raise ValueError(f"after_batch must be a batch id (an int from -1 to 2**63 - 1), got {after_batch!r}")
    return bool(_ask(spark, f"wake of query {query_id} after batch {after_batch}",
                     lambda facade: facade.wakeAfter(str(query_id), int(after_batch))))


def query_trigger(spark: Any, query_id: str) -> QueryTrigger | None:
    """The query's trigger as the shim saw it start; None when the shim did not see the
    running query start (or is not active)."""
    found = _ask(spark, f"trigger of query {query_id}", lambda facade: facade.query(str(query_id)))
    if found is None:
        return None
    clock = found.clock()
    return QueryTrigger(
        query_id=str(query_id),
        run_id=found.runId(),
        kind=found.kind(),
        interval_ms=int(found.intervalMs()),
        wakeable=bool(found.wakeable()),
        reason=found.reason(),
        early_wakes=int(clock.earlyReturns()) if clock is not None else 0,
        polls=int(clock.polls()) if clock is not None else 0,
        dropped_wakes=int(clock.droppedWakes()) if clock is not None else 0,
        wake_pending=bool(clock.isWakePending()) if clock is not None else False,
    )


def decision(spark: Any, query_id: str, batch_id: int) -> dict | None:
    """The governor's early trigger of a batch as in its batch file's `early_trigger`, None
    when there is none (or the shim is not active)."""
    found = _ask(spark, "decision", lambda facade: facade.decision(str(query_id), int(batch_id)))
    if found is None:
        return None
    return {
        "source": found.source(), "partition": int(found.partition()), "uncommitted_bytes": int(found.uncommittedBytes()),
        "limit": int(found.limit()), "woken": bool(found.woken()), "reason": found.reason(),
    }


def signal_stats(spark: Any) -> dict[str, int]:
    """The signal receiver's datagrams by outcome (accepted, malformed, bad_tag, replayed, stale)."""
    found = _ask(spark, "signal stats", lambda facade: facade.signalStats())
    return {str(k): int(v) for k, v in (found or {}).items()}


def metrics_source(spark: Any) -> dict[str, int]:
    """The values of the driver's metrics source `spark_statestore` by their names in Spark's
    metrics sinks (`<app id>.driver.spark_statestore.<query>.<metric>`); empty when it is not
    registered or the shim is not active (classic sessions: Connect clients read a sink)."""
    found = _ask(spark, "metrics source", lambda facade: facade.metricsSource())
    return {str(k): int(v) for k, v in (found or {}).items()}
