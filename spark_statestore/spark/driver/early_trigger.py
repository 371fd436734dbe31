"""Where a session's tasks send their early-trigger signals (`SignalTarget`), read when an
operator is built on the driver.

The governor and its receiver run in the driver's JVM (`jvm.py`, `jvm-shim/`), started by
the `StateStorePlugin` with the SparkContext, or, in a classic session without the plugin,
by `activate_shim` here. Either way the driver publishes the receiver's address and secret in
its conf, which this reads with `spark.conf.get`: the same in classic and Spark Connect
sessions.
"""

from __future__ import annotations

import logging
from typing import Any

from spark_statestore.spark import compat
from spark_statestore.spark.driver.jvm import activate_shim
from spark_statestore.spark.driver.settings import EARLY_TRIGGER_ENABLED, StateStoreSettings
from spark_statestore.spark.signals import SECRET_KEY, TARGET_KEY, SignalTarget

log = logging.getLogger("spark_statestore.spark.driver.early_trigger")

PLUGIN_HINT = "--jars <the shim jar> --conf spark.plugins=io.sparkstatestore.shim.StateStorePlugin"


def signal_target(spark: Any, settings: StateStoreSettings) -> SignalTarget | None:
    """The driver's signal receiver for the operators of `spark`; None (said once, in this
    process's log, why) when early triggers are off or no receiver runs in the driver."""
    if not settings.early_trigger_enabled:
        log.info("spark_statestore early triggers are off: %s=false", EARLY_TRIGGER_ENABLED)
        return None
    why = ""
    if compat.jvm_session(spark) is not None:  # classic: start the driver part unless the plugin did
        status = activate_shim(spark)
        why = status.reason
    target, secret = spark.conf.get(TARGET_KEY, None), spark.conf.get(SECRET_KEY, None)
    if target and secret:
        return SignalTarget.parse(target, secret)
    log.warning(
        "spark_statestore early triggers are off: %s. Batches that pass spark.statestore.uncommitted.maxBytes "
        "spill and wait out the trigger interval.",
        why or f"the driver runs no early-trigger receiver (start it with {PLUGIN_HINT}, "
        f"and {EARLY_TRIGGER_ENABLED} not false in its conf)",
    )
    return None
