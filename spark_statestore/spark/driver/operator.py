"""What the driver builds for a stateful operator before any task runs.

`build_operator(...)` reads and checks the session's `spark.statestore.*` settings (and, for
transformWithStateInPandas, Spark's RocksDB state store provider setting), checks
that the state can be written under the checkpoint location, records the state's layout
there (stores, serdes, partition count: a query cannot come back with other ones), and
returns the `OperatorConfig` that travels to the tasks inside the pickled function or
processor (with where tasks signal the early-trigger governor), and the metrics of the
checkpoint location (read from the durable task records: the same in a classic and a Spark
Connect session).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any, Sequence

from spark_statestore.checkpoint.filesystem import DurableDir, resolve_location
from spark_statestore.checkpoint.names import statestore_dir
from spark_statestore.errors import StateStoreError
from spark_statestore.partition.layout import Layout, record_query_layout
from spark_statestore.spark import compat
from spark_statestore.spark.declarations import Declaration, StoreDeclaration
from spark_statestore.spark.driver.evolution import evolve_declarations
from spark_statestore.spark.driver.metrics import StateStoreMetrics
from spark_statestore.spark.driver.partition_count import check_partition_count
from spark_statestore.spark.driver.session import session_services
from spark_statestore.spark.driver.settings import StateStoreSettings, check_rocksdb_provider, session_conf
from spark_statestore.spark.signals import SignalTarget
from spark_statestore.validation import check_int, describe


@dataclass(frozen=True)
class OperatorConfig:
    """Everything a task needs to open its state; built on the driver, pickled with the
    operator's function."""

    checkpoint_location: str
    declarations: tuple[Declaration, ...]
    settings: StateStoreSettings
    operator: str = "transformWithStateInPandas"
    partitions: int | None = None
    signal_target: SignalTarget | None = None  # where tasks send in-flight crossings

    def __post_init__(self) -> None:
        names = [d.name for d in self.declarations]
        if len(set(names)) != len(names):
            raise ValueError(f"stores must have distinct names, got {names}")

    def declaration(self, name: str) -> Declaration:
        for declaration in self.declarations:
            if declaration.name == name:
                return declaration
        raise KeyError(f"no store {name!r}; this operator declares {[d.name for d in self.declarations]}")

    @property
    def layout(self) -> Layout:
        return Layout.of([d.spec() for d in self.declarations], self.partitions)


def declarations_of(stores: Sequence[Declaration]) -> tuple[Declaration, ...]:
    """Check an operator's store declarations."""
    if isinstance(stores, (str, bytes)) or not isinstance(stores, Sequence):
        raise TypeError(f"stores must be a list of KeyValue(...) and Window(...) declarations, got {describe(stores)}")
    out = tuple(stores)
    for declaration in out:
        if not isinstance(declaration, StoreDeclaration):
            raise TypeError(f"stores must hold KeyValue(...) and Window(...) declarations, got {declaration!r}")
    return out


def check_checkpoint_location(location: Any) -> str:
    """Fail early, with the path, if the state cannot be written under `location`."""
    if not isinstance(location, str) or not location.strip():
        raise ValueError(f"checkpoint_location must be a non-empty string, got {location!r}")
    try:
        fs, root = resolve_location(location)
        durable = DurableDir(fs, statestore_dir(root))
        probe = f"_probe-{uuid.uuid4().hex}"
        durable.publish_bytes(probe, b"")
        durable.delete([probe])
    except ValueError:
        raise
    except Exception as e:
        raise ValueError(f"checkpoint location {location!r} is not writable: {e}") from e
    return location


def build_operator(
    checkpoint_location: str,
    stores: Sequence[Declaration],
    operator: str,
    spark: Any = None,
    partitions: int | None = None,
) -> tuple[OperatorConfig, StateStoreMetrics | None]:
    """Build, on the driver (or a Spark Connect client), what tasks of an operator need to
    open their state."""
    from pyspark.sql import SparkSession

    spark = spark or SparkSession.getActiveSession()
    if spark is None:
        raise StateStoreError("building a stateful operator needs an active SparkSession on the driver")
    compat.check_connect_operator(spark, operator)
    if operator == "transformWithStateInPandas":
        check_rocksdb_provider(session_conf(spark))
    settings = StateStoreSettings.from_spark(spark)
    declarations = declarations_of(stores)
    check_checkpoint_location(checkpoint_location)
    declarations = evolve_declarations(declarations, checkpoint_location)  # record value schemas
    if partitions is not None:
        partitions = check_int(partitions, "partitions", 1)
    services = session_services(spark, settings)
    config = OperatorConfig(
        checkpoint_location,
        declarations,
        settings,
        operator,
        partitions,
        services.signal_target,
    )
    record_query_layout(checkpoint_location, config.layout)
    check_partition_count(checkpoint_location, operator)
    metrics = StateStoreMetrics(checkpoint_location)
    services.batch_log.watch(metrics)
    return config, metrics
