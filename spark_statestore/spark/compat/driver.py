"""Internals used on the driver: the py4j JVM behind a classic SparkSession, Spark's
listener bus, log4j and the scheduler's cores. A Spark Connect
session (`is_connect`) has none of them: what works there asks `spark.conf` only."""

from __future__ import annotations

import contextlib
import os
import re
from typing import Any, Callable, Iterator

import pyspark

from spark_statestore.spark.compat.minors import PysparkInternalError, internal_error


def _error(name: str, detail: str) -> PysparkInternalError:
    return internal_error(pyspark.__version__, name, detail)


def is_connect(spark: Any) -> bool:
    """Whether `spark` is a Spark Connect session (a client of a remote driver: no
    `sparkContext`, no JVM in this process)."""
    return type(spark).__module__.startswith("pyspark.sql.connect.")


def connect_host(spark: Any) -> str | None:
    """The host a Spark Connect session's client talks to (its `sc://` URL's), None if it
    cannot be told; None for a classic session."""
    if not is_connect(spark):
        return None
    try:
        return str(spark.client._builder.host).strip("[]")
    except Exception:  # noqa: BLE001 - a client without the attribute: not told
        return None


def classic_python_exec(spark: Any) -> str | None:
    """The interpreter a classic session's SparkContext names for its Python workers
    (`SparkContext.pythonExec`: PYSPARK_PYTHON of the driver, else `python3`); None for a
    Spark Connect session."""
    if is_connect(spark):
        return None
    return getattr(spark.sparkContext, "pythonExec", None)


def jvm_session(spark: Any) -> Any | None:
    """The session's JVM SparkSession (`_jsparkSession`); None without one (Spark Connect)."""
    try:
        return getattr(spark, "_jsparkSession", None)
    except Exception:  # noqa: BLE001 - Spark Connect raises its own errors for JVM attributes
        return None


def driver_jvm(spark: Any) -> Any:
    """The py4j view of the driver JVM (`SparkSession._jvm`)."""
    return spark._jvm


def py4j_gateway(spark: Any) -> Any:
    """The session's py4j gateway (`SparkContext._gateway`): one per driver JVM."""
    return spark.sparkContext._gateway


def context_stopped(spark: Any) -> bool:
    """Whether the session's SparkContext was stopped (`SparkContext._jsc` is then None);
    for a Spark Connect session, whether the client session was stopped."""
    if is_connect(spark):
        return bool(spark.is_stopped)
    return spark.sparkContext._jsc is None


@contextlib.contextmanager
def active_session(spark: Any) -> Iterator[None]:
    """Make `spark` the JVM's active session of this thread while the block runs, then
    restore the previous one. Spark checks a data source registration against the active
    session's data sources, not those of the session it is made in: a session made by
    `newSession()` is refused a format its parent (the active session) has registered,
    and without it the format is not found in it. Nothing to do without a JVM."""
    jsession = None if is_connect(spark) else jvm_session(spark)
    if jsession is None:
        yield
        return
    try:
        sessions = driver_jvm(spark).org.apache.spark.sql.SparkSession
        previous = sessions.getActiveSession()
        sessions.setActiveSession(jsession)
    except Exception as e:
        raise _error("ACTIVE_SESSION", f"SparkSession.setActiveSession through SparkSession._jvm failed: {e}") from e
    try:
        yield
    finally:
        if previous.isDefined():
            sessions.setActiveSession(previous.get())
        else:
            sessions.clearActiveSession()


def drain_listener_bus(spark: Any, timeout_ms: int = 120_000) -> None:
    """Wait until Spark delivered the listener events it already queued (`timeout_ms` only
    bounds a hang: a loaded driver's bus can run tens of seconds behind)."""
    try:
        bus = spark.sparkContext._jsc.sc().listenerBus()
    except Exception as e:
        raise _error("LISTENER_BUS", f"SparkContext._jsc.sc().listenerBus() failed: {e}") from e
    bus.waitUntilEmpty(timeout_ms)


def driver_logger(spark: Any, name: str) -> Callable[[str], None] | None:
    """A function logging a WARN line into the driver's log4j log under the logger `name`
    (None without a JVM, as in Spark Connect)."""
    jvm = None if is_connect(spark) else getattr(spark.sparkContext, "_jvm", None)
    if jvm is None:
        return None
    try:
        jlogger = jvm.org.apache.logging.log4j.LogManager.getLogger(name)
    except Exception as e:
        raise _error("DRIVER_LOG", f"log4j is not reachable through SparkContext._jvm: {e}") from e
    return jlogger.warn


_LOCAL_MASTER = re.compile(r"^local(?:\[(\*|\d+)(?:,\s*\d+)?\])?$")
_LOCAL_CLUSTER_MASTER = re.compile(r"^local-cluster\[\s*\d+\s*,\s*(\d+)\s*,")


def executor_cores(spark: Any, get: Callable[[str], str | None]) -> int:
    """Cores of one executor of this session: `spark.executor.cores` when set; in local
    mode the scheduler's cores; else the most cores of a registered executor (1, Spark's
    default on YARN and Kubernetes, while none has registered). A Spark Connect client
    cannot ask the scheduler: see `configured_cores`."""
    configured = get("spark.executor.cores")
    if configured:
        try:
            return int(configured)
        except ValueError:
            raise ValueError(f"spark.executor.cores must be an integer, got {configured!r}") from None
    if is_connect(spark):
        return configured_cores(get("spark.master"))
    try:
        context = spark.sparkContext._jsc.sc()
        backend = context.schedulerBackend()
        if backend.getClass().getSimpleName() == "LocalSchedulerBackend":
            return int(backend.totalCores())
        executors = context.statusStore().executorList(True)
        cores = [int(executors.apply(i).totalCores()) for i in range(executors.size())
                 if executors.apply(i).id() != "driver"]
    except Exception as e:
        raise _error("EXECUTOR_CORES", f"the scheduler or status store cannot be asked: {e}") from e
    return max(cores, default=1)


def configured_cores(master: str | None) -> int:
    """Executor cores told by the master URL alone (for a Spark Connect client, which can
    only read the conf): `local[N]` / `local[N,F]` -> N, `local` -> 1, `local[*]` -> the
    cores of this machine (assumed to be the server's: a local master runs where its
    client does in practice), `local-cluster[n,C,m]` -> C; any cluster master -> 1
    (Spark's default executor cores on YARN and Kubernetes; set `spark.executor.cores`
    on a standalone cluster, whose executors take every core of their worker)."""
    text = (master or "").strip()
    local = _LOCAL_MASTER.match(text)
    if local:
        cores = local.group(1) or "1"
        return (os.cpu_count() or 1) if cores == "*" else max(1, int(cores))
    cluster = _LOCAL_CLUSTER_MASTER.match(text)
    return max(1, int(cluster.group(1))) if cluster else 1

