"""The pyspark internals spark_statestore relies on (`spark_statestore.spark.compat`):
each one exercised on the real pyspark, and each check names the internal when pyspark
no longer has it."""

from __future__ import annotations

import os

import pandas as pd
import pytest

from spark_statestore.spark import compat
from spark_statestore.spark.driver.metrics import TaskRecordsParam


def test_a_changed_worker_order_is_named(monkeypatch):
    from pyspark import worker

    def invoke_udf(message_receiver, outfile):  # sends the accumulators before the output
        worker.send_accumulator_updates(outfile)
        serializer.dump_stream(iter(()), outfile)  # noqa: F821 - never run, only read

    monkeypatch.setattr(worker, "invoke_udf", invoke_udf)
    with pytest.raises(compat.PysparkInternalError, match="WORKER_SENDS_ACCUMULATORS_LAST"):
        compat.check_internals()


def test_a_missing_tws_client_method_is_named(monkeypatch):
    from pyspark.sql.streaming.stateful_processor_api_client import StatefulProcessorApiClient

    monkeypatch.delattr(StatefulProcessorApiClient, "get_timestamps")
    with pytest.raises(compat.PysparkInternalError, match="TWS_HANDLE_TIMESTAMPS.*get_timestamps"):
        compat.check_internals()


def test_a_handle_without_the_api_client_is_named():
    with pytest.raises(compat.PysparkInternalError, match="TWS_HANDLE_TIMESTAMPS.*has no API client"):
        compat.event_time_watermark(object())


@pytest.mark.spark
def test_accumulators_are_sent_after_the_output_and_before_success(spark, tmp_path):
    """What run_at_task_end relies on: its function runs once per task, after every output
    row was produced, and what it returns reaches the driver's accumulator."""
    accumulator = spark.sparkContext.accumulator([], TaskRecordsParam())
    marker_dir = str(tmp_path / "ends")
    os.makedirs(marker_dir)

    def count_rows(frames):
        from pyspark import TaskContext

        produced = []
        partition = TaskContext.get().partitionId()  # the context is gone when finish() runs

        def finish():
            with open(os.path.join(marker_dir, str(partition)), "w") as f:
                f.write(str(sum(produced)))
            return {"partition": partition, "rows": sum(produced)}

        compat.run_at_task_end(accumulator, finish)
        for frame in frames:
            produced.append(len(frame))
            yield frame

    out = spark.range(0, 1000, numPartitions=4).mapInPandas(count_rows, "id long").collect()
    assert len(out) == 1000
    records = sorted(accumulator.value, key=lambda r: r["partition"])
    assert [r["partition"] for r in records] == [0, 1, 2, 3]
    assert sum(r["rows"] for r in records) == 1000  # every row was out before finish ran
    assert sorted(os.listdir(marker_dir)) == ["0", "1", "2", "3"]


@pytest.mark.spark
def test_listener_bus_and_driver_log(spark):
    compat.drain_listener_bus(spark, 5_000)
    emit = compat.driver_logger(spark)
    assert emit is not None
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
