"""The state reader's options are checked at `load()`, on the driver, before any action:
booleans and enumerations strictly (`yes`, `1`, a typo are errors naming the option, the
value and the accepted ones), unknown option names with the closest known one, and batch
ranges against the commit log."""

from __future__ import annotations

import os

import pytest

import partition_workload as wl
from spark_statestore.partition.layout import Layout, record_query_layout
from spark_statestore.spark import register_reader

pytestmark = [pytest.mark.spark]


@pytest.fixture(scope="module")
def state(spark, tmp_path_factory):
    """A checkpoint with batches 0..2 of one partition committed in Spark's commit log."""
    checkpoint = str(tmp_path_factory.mktemp("reader-options") / "checkpoint")
    os.makedirs(os.path.join(checkpoint, "commits"))
    record_query_layout(checkpoint, Layout.of(wl.SPECS, 1))
    wl.run(checkpoint, checkpoint + "-local", 3)
    for batch in range(3):
        with open(os.path.join(checkpoint, "commits", str(batch)), "w") as f:
            f.write("v1\n{}\n")
    register_reader(spark)
    return checkpoint


def _load(spark, checkpoint: str, fmt: str = "spark_statestore", **options):
    reader = spark.read.format(fmt).option("checkpointLocation", checkpoint)
    for name, value in options.items():
        reader = reader.option(name, value)
    frame = reader.load()
    frame.columns  # noqa: B018 - a Spark Connect client analyses the read only when asked (the server calls schema())
    return frame


@pytest.mark.parametrize("value", ["yes", "1", "on", "treu", ""])
def test_a_boolean_option_that_is_not_true_or_false_fails_at_load(spark, state, value):
    with pytest.raises(Exception, match=rf"option readChangeFeed must be true or false, got '{value}'"):
        _load(spark, state, store="kv", readChangeFeed=value)


def test_boolean_options_take_true_and_false_in_any_case(spark, state):
    changes = _load(spark, state, store="kv", readChangeFeed="TRUE", changeStartBatchId=0)
    assert "change" in changes.columns
    records = _load(spark, state, store="kv", readChangeFeed="False")
    assert "change" not in records.columns and records.count() == len(wl.read_state(state, state + "-check")[0])


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"store": "kv", "batchIdd": "1"}, r"(?i)no option 'batchIdd'; did you mean batchId\?"),
        ({"store": "kv", "isolation": "READ_COMMITTED"}, r"(?i)no option 'isolation'; did you mean isolationLevel\?"),
        ({"store": "kv", "batchId": "7"}, r"option batchId 7 is after the newest committed batch \(2\)"),
        ({"store": "kv", "isolationLevel": "SERIALIZABLE"}, r"must be READ_COMMITTED or READ_UNCOMMITTED, got 'SERIALIZABLE'"),
        ({"store": "kv", "readChangeFeed": "true", "changeStartBatchId": "0", "changeEndBatchId": "9"},
         r"option changeEndBatchId 9 is after the newest committed batch \(2\)"),
        ({"store": "kv", "readChangeFeed": "true", "changeStartBatchId": "x"}, r"option changeStartBatchId must be an integer, got 'x'"),
        ({"store": "nope"}, r"has no store 'nope'"),
        # found by an adversarial probe: lenient integers, values a read would only meet later or ignore
        ({"store": "kv", "batchId": "3_0"}, r"option batchId must be an integer, got '3_0'"),
        ({"store": "kv", "batchId": "\u0663"}, r"option batchId must be an integer, got '\u0663'"),
        ({"store": "kv", "startingBatchId": "abc"}, r"option startingBatchId must be an integer, got 'abc'"),
        ({"store": "kv", "maxBatchesPerTrigger": "-1"}, r"option maxBatchesPerTrigger must be at least 1, got '-1'"),
        ({"store": "kv", "readChangeFeed": "true", "changeStartBatchId": "0", "isolationLevel": "BOGUS"},
         r"must be READ_COMMITTED or READ_UNCOMMITTED, got 'BOGUS'"),
        ({"store": "kv", "readChangeFeed": "true", "changeStartBatchId": "0", "isolationLevel": "READ_UNCOMMITTED"},
         r"READ_UNCOMMITTED does not apply to the change feed"),
        ({"store": "kv", "readChangeFeed": "true", "changeStartBatchId": "0", "batchId": "1"},
         r"option batchId reads records as of a batch"),
        ({"store": "kv", "changeStartBatchId": "0"}, r"option changeStartBatchId goes with readChangeFeed=true"),
        ({"store": "kv", "startingBatchId": "1"}, r"option startingBatchId goes with readChangeFeed=true"),
        ({"store": "kv", "readChangeFeed": "true", "maxBatchesPerTrigger": "1", "maxRowsPerTrigger": "5"},
         r"maxBatchesPerTrigger and maxRowsPerTrigger cannot go together"),
    ],
)
@pytest.mark.classic_only
def test_a_bad_option_fails_at_load_naming_it(spark, state, options, message):
    with pytest.raises(Exception, match=message):
        _load(spark, state, **options)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"startingBatchId": "-7"}, r"option startingBatchId must be at least 0, got '-7'"),
        ({"maxRowsPerTrigger": "1.5"}, r"option maxRowsPerTrigger must be an integer, got '1.5'"),
        ({"maxBatchesPerTrigger": "0"}, r"option maxBatchesPerTrigger must be at least 1, got '0'"),
    ],
)
def test_a_streams_bad_option_fails_at_load(spark, state, options, message):
    reader = spark.readStream.format("spark_statestore").option("checkpointLocation", state)
    reader = reader.option("store", "kv").option("readChangeFeed", "true")
    for name, value in options.items():
        reader = reader.option(name, value)
    with pytest.raises(Exception, match=message):
        reader.load().columns  # noqa: B018 - analysed at once in a classic session, when asked under Connect


def test_options_of_the_other_kind_of_read_of_changes_are_refused_naming_them(spark, state, tmp_path):
    """A batch read of changes refuses a stream's options, a stream the range of a batch
    read (only planning tells one from the other: the batch read's action, the stream's start)."""
    frame = _load(spark, state, store="kv", readChangeFeed="true", changeStartBatchId="0", startingBatchId="1")
    with pytest.raises(Exception, match=r"option startingBatchId applies to a stream"):
        frame.count()
    stream = (
        spark.readStream.format("spark_statestore").option("checkpointLocation", state).option("store", "kv")
        .option("readChangeFeed", "true").option("changeEndBatchId", "1").load()
    )
    query = stream.writeStream.format("noop").option("checkpointLocation", str(tmp_path / "q")).start()
    try:
        with pytest.raises(Exception, match=r"option changeEndBatchId applies to a batch read of changes"):
            query.awaitTermination(300)
    finally:
        query.stop()


def test_the_metadata_format_checks_its_options_at_load(spark, state, tmp_path):
    with pytest.raises(Exception, match=r"no option 'stores'"):
        _load(spark, state, "spark_statestore_metadata", stores="kv")
    with pytest.raises(Exception, match=r"there is no spark_statestore state under"):
        _load(spark, str(tmp_path / "nothing"), "spark_statestore_metadata")
    assert _load(spark, state, "spark_statestore_metadata").count() == 2  # one row per store of the partition
