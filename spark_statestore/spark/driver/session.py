"""What the driver keeps for each SparkSession that runs stateful operators.

* the log of the committed batches' metrics (`BatchLog`);
* the early trigger: where tasks send their signals (`early_trigger.signal_target`; the
  governor runs in the driver's JVM), which travels in the operator config.

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

from spark_statestore.spark.driver.early_trigger import signal_target
from spark_statestore.spark.driver.metrics import BatchLog
from spark_statestore.spark.driver.settings import StateStoreSettings
from spark_statestore.spark.reader import register_reader

log = logging.getLogger("spark_statestore.spark")


class SessionServices:
    """The metrics log and the early trigger of one SparkSession (module docstring)."""

    def __init__(self, spark: Any, settings: StateStoreSettings) -> None:
        self.spark = spark
        self.signal_target = signal_target(spark, settings)  # where tasks send early-trigger signals
        # the driver part logs each batch from the tasks' reports where it receives them
        self.batch_log = BatchLog(spark, logged_by_driver=self.signal_target is not None)
        register_reader(spark)  # the state of the operators built here can be read back

    @property
    def stopped(self) -> bool:
        return self.batch_log.stopped

    def stop(self) -> None:
        """Stop listening."""
        self.batch_log.stop()


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


@atexit.register
def _stop_all() -> None:
    # before pyspark's own exit handler stops the JVM: a listener left registered makes the
    # JVM call back into a Python that is gone
    with _lock:
        for services in _services:
            services.stop()
