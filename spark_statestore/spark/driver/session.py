"""What the driver keeps for each SparkSession that runs stateful operators.

* the metrics collector (`StateStoreMetrics`: task records per batch, `recent()`);
* the early trigger: the JVM shim activated in the driver (`SessionShim`), the governor
  that decides which query's next batch starts early, and the signal server that tasks
  send in-flight crossings to (its address and secret travel in the operator config).

`session_services(spark)` makes them once per session, on the driver, when the first
operator is built; a session that stopped is forgotten (and its server closed).

A Spark Connect session is a client of a remote driver: it has no accumulators and no
JVM here to load the shim into, so its services are the state reader's registration
alone (`metrics` and `governor` are None, tasks get no signal target).
"""

from __future__ import annotations

import atexit
import logging
import threading
from typing import Any

from spark_statestore.errors import StateStoreError
from spark_statestore.spark import compat
from spark_statestore.spark.driver.governor import EarlyTriggerGovernor
from spark_statestore.spark.driver.jvm import QueryTrigger, SessionShim, ShimStatus
from spark_statestore.spark.driver.metrics import StateStoreMetrics
from spark_statestore.spark.driver.settings import EARLY_TRIGGER_ENABLED, StateStoreSettings, session_conf
from spark_statestore.spark.driver.signal_server import SignalServer, driver_addresses
from spark_statestore.spark.reader import register_reader
from spark_statestore.spark.signals import SignalTarget

log = logging.getLogger("spark_statestore.spark")


class _NoShim:
    """The shim of a session whose early triggers are switched off (nothing is loaded)."""

    status = ShimStatus(False, f"{EARLY_TRIGGER_ENABLED}=false")

    def wake(self, query_id: str) -> bool:
        return False

    def trigger(self, query_id: str) -> QueryTrigger | None:
        return None


class SessionServices:
    """The metrics collector and the early trigger of one SparkSession (module docstring)."""

    def __init__(self, spark: Any, settings: StateStoreSettings) -> None:
        self.spark = spark
        self.governor: EarlyTriggerGovernor | None = None
        self.signals: SignalServer | None = None
        self.metrics: StateStoreMetrics | None = None
        if not compat.is_connect(spark):
            shim = SessionShim(spark) if settings.early_trigger_enabled else _NoShim()
            self.governor = EarlyTriggerGovernor(settings.early_trigger_enabled, shim)
            if self.governor.active:
                bind, advertised = driver_addresses(session_conf(spark))
                self.signals = SignalServer(self.governor.on_signal, bind, advertised, settings.signal_port)
            self.metrics = StateStoreMetrics(spark, governor=self.governor)
        register_reader(spark)  # the state of the operators built here can be read back

    @property
    def signal_target(self) -> SignalTarget | None:
        """Where tasks send in-flight crossings (None: early triggers are off)."""
        return None if self.signals is None else self.signals.target

    @property
    def stopped(self) -> bool:
        return compat.context_stopped(self.spark) if self.metrics is None else self.metrics.stopped

    def stop(self) -> None:
        """Stop listening and receiving (the collected metrics stay readable)."""
        if self.metrics is not None:
            self.metrics.stop()
        if self.signals is not None:
            self.signals.close()


_lock = threading.Lock()
_services: list[SessionServices] = []


def session_services(spark: Any, settings: StateStoreSettings | None = None) -> SessionServices:
    """The services of a SparkSession (made once per session; those of sessions that
    stopped are closed and forgotten)."""
    with _lock:
        for stale in [s for s in _services if s.stopped]:
            stale.stop()
            _services.remove(stale)
        for services in _services:
            if services.spark is spark:
                return services
        services = SessionServices(spark, settings or StateStoreSettings.from_spark(spark))
        _services.append(services)
        return services


def metrics_for(spark: Any) -> StateStoreMetrics:
    """The driver's metrics collector of a SparkSession (one per session)."""
    metrics = session_services(spark).metrics
    if metrics is None:
        raise StateStoreError(
            "spark_statestore metrics are gathered through accumulators, which a Spark Connect session "
            "does not have: they are available in classic sessions only"
        )
    return metrics


@atexit.register
def _stop_all() -> None:
    # before pyspark's own exit handler stops the JVM: a listener left registered makes the
    # JVM call back into a Python that is gone
    with _lock:
        for services in _services:
            services.stop()
