"""What differs between pyspark minors: the facts about pyspark internals, one entry per
supported minor.

Supporting another minor means adding its `PysparkMinor` to `MINORS` (after checking
each fact against that minor's source); nothing else in the package names a version. A
pyspark whose minor is not here fails at import (`minor_facts`). `MINORS` is the one list
of supported versions: pyproject's pyspark bounds, `./dev`'s patches and the README's
version table are checked against it (tests/tools/test_supported_versions.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from spark_statestore.errors import StateStoreError


class PysparkInternalError(StateStoreError):
    """A pyspark internal this package relies on is missing or behaves differently, or the
    installed pyspark is not a supported minor."""


@dataclass(frozen=True)
class PysparkMinor:
    """The pyspark internals of one minor that spark_statestore relies on (see the
    package docstring for what each is used for)."""

    # the minor's latest patch, which every fact was checked against and the tests run on
    patch: str
    # pyspark.worker: the function that runs one task's steps, and the calls in it whose
    # order matters (the earlier one must come first in its source)
    task_function: str
    output_then_accumulators: tuple[str, str]
    context_then_udfs: tuple[str, str]
    # pyspark.worker.read_udfs: the parameters it takes
    read_udfs_parameters: tuple[str, ...]
    # transformWithStateInPandas: the handle's attribute holding its API client, and the
    # client's module
    tws_client_attribute: str
    tws_client_module: str
    # Python streaming data sources: whether admission control exists
    # (`pyspark.sql.streaming.datasource`: ReadLimit, SupportsTriggerAvailableNow and
    # `latestOffset(start, limit)`); without it the runner calls `latestOffset()`
    stream_admission_control: bool
    # Spark's offline repartition of a stopped query's checkpoint
    # (`SparkSession._streamingCheckpointManager.repartition`, 4.2+)
    offline_repartition: bool
    # the Spark Connect client (`pyspark.sql.connect.group.GroupedData`) has
    # transformWithStateInPandas
    connect_transform_with_state: bool
    # the Row-based transformWithState (classic `pyspark.sql.pandas.group_ops` and the
    # Spark Connect client), 4.1+
    row_transform_with_state: bool
    # Python data source readers take Spark's filters (`DataSourceReader.pushFilters`, with
    # `spark.sql.python.filterPushdown.enabled`), 4.1+
    reader_filter_pushdown: bool


def _minor(patch: str, task_function: str, read_udfs_parameters: tuple[str, ...], stream_admission_control: bool,
           offline_repartition: bool, connect_transform_with_state: bool = True,
           row_transform_with_state: bool = True, reader_filter_pushdown: bool = True) -> PysparkMinor:
    """A minor's facts; what no supported minor changed is the same for all."""
    return PysparkMinor(
        patch=patch,
        task_function=task_function,
        output_then_accumulators=("dump_stream", "send_accumulator_updates"),
        context_then_udfs=("_setTaskContext", "read_udfs("),
        read_udfs_parameters=read_udfs_parameters,
        tws_client_attribute="_statefulProcessorApiClient",
        tws_client_module="pyspark.sql.streaming.stateful_processor_api_client",
        stream_admission_control=stream_admission_control,
        offline_repartition=offline_repartition,
        connect_transform_with_state=connect_transform_with_state,
        row_transform_with_state=row_transform_with_state,
        reader_filter_pushdown=reader_filter_pushdown,
    )


# Each checked against that minor's latest patch (its `patch`): its
# pyspark/worker.py and pyspark/sql/streaming/ (the JVM shim checks its own internals, the same
# in the four: QueryTriggers.java, the trigger clock; ReadLimits.java, adaptive admission:
# StreamExecution.uniqueSources, FileStreamSource.metadataLog, the sources that take a bound,
# with Python data sources' PythonMicroBatchStreamWithAdmissionControl from 4.2, as
# `stream_admission_control` says).
MINORS: dict[str, PysparkMinor] = {
    "4.0": _minor("4.0.5", "main", ("pickleSer", "infile", "eval_type"), stream_admission_control=False,
                  offline_repartition=False, connect_transform_with_state=False, row_transform_with_state=False,
                  reader_filter_pushdown=False),
    "4.1": _minor("4.1.4", "main", ("pickleSer", "infile", "eval_type"), stream_admission_control=False,
                  offline_repartition=False),
    "4.2": _minor(
        "4.2.1", "main", ("pickleSer", "infile", "eval_type", "runner_conf", "eval_conf"),
        stream_admission_control=True, offline_repartition=True,
    ),
    "4.3": _minor(
        "4.3.0", "invoke_udf", ("pickleSer", "udf_info_list", "eval_type", "runner_conf", "eval_conf"),
        stream_admission_control=True, offline_repartition=True,
    ),
}


def supported_range() -> str:
    """The supported minors, for messages ("pyspark 4.0, 4.1, 4.2, 4.3")."""
    return "pyspark " + ", ".join(MINORS)


def minors_with(capability: str) -> str:
    """The supported minors that have a capability (a boolean fact), for messages."""
    return "pyspark " + ", ".join(minor for minor, facts in MINORS.items() if getattr(facts, capability))


def minor_of(version: str) -> str:
    """"4.3" of "4.3.0", "4.3.1.dev0", ..."""
    return ".".join(version.split(".")[:2])


def internal_error(version: str, name: str, detail: str) -> PysparkInternalError:
    """The error naming a pyspark internal that is missing or behaves differently."""
    return PysparkInternalError(
        f"pyspark {version} changed an internal spark_statestore relies on: {name} ({detail}); "
        f"spark_statestore supports {supported_range()}"
    )


def minor_facts(version: str) -> PysparkMinor:
    """The facts of pyspark `version`'s minor; PysparkInternalError if it is not supported."""
    facts = MINORS.get(minor_of(version))
    if facts is None:
        raise PysparkInternalError(
            f"pyspark {version} is not supported by spark_statestore, which relies on internals "
            f"known for {supported_range()} only (PYSPARK_MINOR: spark_statestore.spark.compat.minors.MINORS)"
        )
    return facts
