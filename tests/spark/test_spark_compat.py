"""The pyspark internals spark_statestore relies on (`spark_statestore.spark.compat`):
each one exercised on the real pyspark, and each check names the internal when pyspark
no longer has it."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys

import pandas as pd
import pyspark
import pytest

from spark_statestore.spark import compat
from spark_statestore.spark.compat import minors

pytestmark = pytest.mark.versioned


@pytest.fixture(scope="session")
def spark(classic_spark):
    """These tests need the driver's JVM (py4j, the shim, accumulators): classic only."""
    return classic_spark


def test_a_changed_worker_order_is_named(monkeypatch):
    from pyspark import worker

    def invoke_udf(message_receiver, outfile):  # sends the accumulators before the output
        worker.send_accumulator_updates(outfile)
        serializer.dump_stream(iter(()), outfile)  # noqa: F821 - never run, only read

    monkeypatch.setattr(worker, compat.FACTS.task_function, invoke_udf)
    with pytest.raises(compat.PysparkInternalError, match="WORKER_SENDS_ACCUMULATORS_LAST"):
        compat.check_internals()


def test_a_missing_tws_client_method_is_named(monkeypatch):
    from pyspark.sql.streaming.stateful_processor_api_client import StatefulProcessorApiClient

    monkeypatch.delattr(StatefulProcessorApiClient, "get_timestamps")
    with pytest.raises(compat.PysparkInternalError, match="TWS_HANDLE_TIMESTAMPS.*get_timestamps"):
        compat.check_internals()


def test_a_missing_worker_function_is_named(monkeypatch):
    """A pyspark whose worker lost the task function (its name differs between minors) fails
    with our error naming it, the version and the supported range, not an AttributeError."""
    from pyspark import worker

    monkeypatch.delattr(worker, compat.FACTS.task_function)
    with pytest.raises(compat.PysparkInternalError) as error:
        compat.check_internals()
    message = str(error.value)
    assert f"pyspark.worker.{compat.FACTS.task_function} is gone" in message
    assert "WORKER_SENDS_ACCUMULATORS_LAST" in message
    assert f"pyspark {pyspark.__version__}" in message and f"supports {minors.supported_range()}" in message


def test_a_changed_read_udfs_is_named(monkeypatch):
    from pyspark import worker

    monkeypatch.setattr(worker, "read_udfs", lambda pickleSer, udf_info_list: None)
    with pytest.raises(compat.PysparkInternalError, match=r"UDF_UNPICKLED_IN_TASK.*read_udfs takes \('pickleSer'"):
        compat.check_internals()


def test_a_missing_tws_client_module_is_named(monkeypatch):
    facts = dataclasses.replace(compat.FACTS, tws_client_module="pyspark.sql.streaming.no_such_client")
    monkeypatch.setitem(minors.MINORS, minors.minor_of(pyspark.__version__), facts)
    with pytest.raises(compat.PysparkInternalError, match="TWS_HANDLE_TIMESTAMPS.*no_such_client"):
        compat.check_internals()


@pytest.mark.parametrize(
    "fact, method",
    [
        ("row_transform_with_state", "transformWithState"),
        ("connect_transform_with_state", "transformWithState"),
        ("reader_filter_pushdown", "pushFilters"),
    ],
)
def test_a_capability_fact_that_does_not_hold_is_named(monkeypatch, fact, method):
    facts = dataclasses.replace(compat.FACTS, **{fact: not getattr(compat.FACTS, fact)})
    monkeypatch.setitem(minors.MINORS, minors.minor_of(pyspark.__version__), facts)
    name = fact.upper()
    with pytest.raises(compat.PysparkInternalError, match=f"{name}.*(has|lacks) {method}"):
        compat.check_internals()


@pytest.mark.parametrize("version", ["4.4.0", "3.5.3", "5.0.0"])
def test_an_unsupported_minor_is_named(monkeypatch, version):
    monkeypatch.setattr(pyspark, "__version__", version)
    with pytest.raises(compat.PysparkInternalError) as error:
        compat.check_internals()
    assert f"pyspark {version} is not supported" in str(error.value)
    assert "known for pyspark 4.0, 4.1, 4.2, 4.3 only" in str(error.value)


def test_minors_with_a_capability_are_named():
    assert minors.minors_with("stream_admission_control") == "pyspark 4.2, 4.3"


def test_minor_of_a_version():
    assert [minors.minor_of(v) for v in ("4.3.0", "4.3.1.dev0", "4.3")] == ["4.3", "4.3", "4.3"]


@pytest.mark.parametrize(
    "patch",
    [
        "import pyspark; pyspark.__version__ = '4.4.0'",
        f"from pyspark import worker; del worker.{compat.FACTS.task_function}",
    ],
)
def test_the_import_fails_with_our_error(patch):
    """What `import spark_statestore.spark` does on a pyspark without the internals."""
    script = f"{patch}\nimport spark_statestore.spark"
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert result.returncode != 0
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("spark_statestore.spark.compat.minors.PysparkInternalError: pyspark "), last
    assert minors.supported_range() in last


def test_a_handle_without_the_api_client_is_named():
    with pytest.raises(compat.PysparkInternalError, match="TWS_HANDLE_TIMESTAMPS.*has no API client"):
        compat.event_time_watermark(object())


def test_the_transform_with_state_eval_types_are_this_pyspark_s():
    """Each operator's eval types are named as this pyspark names them (a renamed one would
    leave a StoreProcessor's tasks without their operator's name), and outside a task's
    unpickling there is no operator (the driver's processor keeps the one it was built with)."""
    from pyspark.util import PythonEvalType

    kinds = [k for k, name in compat._TRANSFORM_WITH_STATE.items()
             if name == "transformWithStateInPandas" or compat.FACTS.row_transform_with_state]
    assert all(isinstance(getattr(PythonEvalType, k, None), int) for k in kinds), kinds
    assert compat.transform_with_state_operator() is None


@pytest.mark.spark
def test_accumulators_are_sent_after_the_output_and_before_success(spark, tmp_path):
    """What run_at_task_end relies on: its function runs once per task, after every output
    row was produced, on an accumulator the task registers itself (nothing on the driver
    but the sink `accept_task_end_updates` puts there for pyspark before 4.2)."""
    compat.accept_task_end_updates()
    marker_dir = str(tmp_path / "ends")
    os.makedirs(marker_dir)

    def count_rows(frames):
        from pyspark import TaskContext

        produced = []
        partition = TaskContext.get().partitionId()  # the context is gone when finish() runs

        def finish():
            with open(os.path.join(marker_dir, str(partition)), "w") as f:
                f.write(str(sum(produced)))

        compat.run_at_task_end(finish)
        for frame in frames:
            produced.append(len(frame))
            yield frame

    for _ in range(2):  # a reused worker runs each task's hook once, its own
        out = spark.range(0, 1000, numPartitions=4).mapInPandas(count_rows, "id long").collect()
        assert len(out) == 1000
        ends = {name: int(open(os.path.join(marker_dir, name)).read()) for name in os.listdir(marker_dir)}
        assert sorted(ends) == ["0", "1", "2", "3"]
        assert sum(ends.values()) == 1000  # every row was out before finish ran
        for name in ends:
            os.remove(os.path.join(marker_dir, name))


@pytest.mark.spark
def test_listener_bus_and_driver_log(spark):
    compat.drain_listener_bus(spark, 5_000)
    emit = compat.driver_logger(spark, "spark_statestore.batches")
    if compat.is_connect(spark):
        assert emit is None
    else:
        emit("spark_statestore compat test line")  # reaches log4j without an error


@pytest.mark.spark
def test_task_local_properties_name_the_batch_and_query(spark, tmp_path):
    source = tmp_path / "in"
    source.mkdir()
    pd.DataFrame({"key": ["a", "b"]}).to_json(source / "0.json", orient="records", lines=True)
    seen = []

    def record(frame, batch_id):
        seen.append((batch_id, frame.collect()))

    def tag(frames):
        from pyspark import TaskContext

        context = TaskContext.get()
        for frame in frames:
            yield frame.assign(
                batch=context.getLocalProperty(compat.BATCH_ID_PROPERTY),
                query=context.getLocalProperty(compat.QUERY_ID_PROPERTY),
            )

    stream = spark.readStream.schema("key string").json(str(source)).mapInPandas(tag, "key string, batch string, query string")
    query = stream.writeStream.foreachBatch(record).option("checkpointLocation", str(tmp_path / "ck")).trigger(availableNow=True).start()
    query.awaitTermination()
    assert [batch for batch, _ in seen] == [0]
    rows = seen[0][1]
    assert len(rows) == 2
    assert {(r["batch"], r["query"]) for r in rows} == {("0", str(query.id))}


@pytest.mark.spark
def test_the_arrow_schema_of_a_ddl(spark, monkeypatch):
    schema = compat.arrow_schema("key string, n long")
    assert [(f.name, str(f.type)) for f in schema] == [("key", "string"), ("n", "int64")]
    import pyspark.sql.pandas.types as types

    monkeypatch.delattr(types, "to_arrow_schema")
    with pytest.raises(compat.PysparkInternalError, match="ARROW_SCHEMA.*to_arrow_schema is gone"):
        compat.arrow_schema("key string")


@pytest.mark.spark
def test_a_connect_client_exits_quietly_once_its_session_stopped(connect_server):
    """The batch log's listener outlives a stopped Connect session until the interpreter
    exits: its exit handler must not try to reach the gone session."""
    code = (
        "from pyspark.sql import SparkSession\n"
        "from spark_statestore.spark.driver.session import session_services\n"
        f"spark = SparkSession.builder.remote({connect_server.url!r}).getOrCreate()\n"
        "services = session_services(spark)\n"
        "spark.stop()\n"
        "assert services.stopped\n"
        "print('stopped')\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("SPARK_CONNECT_MODE_ENABLED", "SPARK_REMOTE")}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == "stopped"
    assert "Failed to remove the listener" not in done.stderr, done.stderr[-3000:]
