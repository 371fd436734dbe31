"""spark.conf settings and input checks, without a SparkSession."""

from __future__ import annotations

import pandas as pd
import pytest

from spark_statestore import IsolationLevel
from spark_statestore.spark import StateStoreSettings, check_columns, epoch_millis
from spark_statestore.spark.driver.settings import (
    PROVIDER_CLASS,
    ROCKSDB_PROVIDER,
    check_keys,
    check_rocksdb_provider,
    parse_bytes,
)
from spark_statestore.spark.reader.request import int_option
from paths import ROOT


def settings(**conf):
    return StateStoreSettings.from_conf(conf.get)


def test_defaults_match_the_documented_ones():
    s = settings()
    assert s.isolation_level is IsolationLevel.READ_COMMITTED
    assert (s.cache_max_bytes, s.uncommitted_max_bytes) == (10485760, 67108864)
    assert (s.snapshot_interval, s.min_batches_to_retain) == (10, 100)
    assert s.snapshot_columns is True
    assert s.local_dir is None


def test_values_and_byte_sizes():
    s = StateStoreSettings.from_conf(
        {
            "spark.statestore.isolationLevel": "read_uncommitted",
            "spark.statestore.cache.maxBytes": "64m",
            "spark.statestore.uncommitted.maxBytes": "-1",
            "spark.statestore.snapshotInterval": "5",
            "spark.statestore.snapshotColumns": "false",
            "spark.statestore.minBatchesToRetain": "20",
            "spark.statestore.localDir": "/data/state",
        }.get,
        task_slots=4,
    )
    assert s.isolation_level is IsolationLevel.READ_UNCOMMITTED
    assert s.cache_max_bytes == 64 << 20 and s.cache_bytes_per_task() == 16 << 20
    assert s.uncommitted_max_bytes == -1
    assert (s.snapshot_interval, s.min_batches_to_retain, s.resolve_local_dir()) == (5, 20, "/data/state")
    assert s.snapshot_columns is False
    assert parse_bytes("k", "10 KB", 0) == 10240


@pytest.mark.parametrize(
    "key,value,message",
    [
        ("spark.statestore.isolationLevel", "SERIALIZABLE", "must be READ_COMMITTED or READ_UNCOMMITTED, got 'SERIALIZABLE'"),
        ("spark.statestore.cache.maxBytes", "-5", "must be at least 0, got '-5'"),
        ("spark.statestore.cache.maxBytes", "ten", "must be a byte size such as 10485760 or 10m, got 'ten'"),
        ("spark.statestore.uncommitted.maxBytes", "-2", "must be at least -1, got '-2'"),
        ("spark.statestore.snapshotInterval", "0", "must be at least 1, got '0'"),
        ("spark.statestore.minBatchesToRetain", "x", "must be an integer, got 'x'"),
        ("spark.statestore.minBatchesToRetain", "1_0", "must be an integer, got '1_0'"),  # int() takes it as 10
        ("spark.statestore.snapshotInterval", "\u0663", "must be an integer, got '\u0663'"),  # another script's 3
        ("spark.statestore.snapshotInterval", "1" * 5000, "must be an integer, got '1111"),  # beyond int()'s limit
        ("spark.statestore.cache.maxBytes", "\u0661\u0660m", "must be a byte size such as 10485760 or 10m"),
        ("spark.statestore.localDir", " ", "must be a directory path, got ' '"),
        ("spark.statestore.snapshotColumns", "no", "must be true or false, got 'no'"),
        ("spark.task.cpus", "0", "spark.task.cpus must be at least 1"),
    ],
)
def test_bad_values_name_key_and_value(key, value, message):
    with pytest.raises(ValueError, match=message if message.startswith(key) else f"{key} {message}"):
        settings(**{key: value})


@pytest.mark.parametrize(
    "key,closest",
    [
        ("spark.statestore.cache.maxbyte", "spark.statestore.cache.maxBytes"),
        ("spark.statestore.snapshotinterval", "spark.statestore.snapshotInterval"),
        ("spark.statestore.earlytrigger.enable", "spark.statestore.earlyTrigger.enabled"),
    ],
)
def test_an_unknown_key_is_refused_naming_the_closest_known_one(key, closest):
    with pytest.raises(ValueError, match=rf"unknown setting {key}; did you mean {closest}\?"):
        check_keys(["spark.sql.shuffle.partitions", key])


def test_keys_of_spark_and_the_ones_the_shim_publishes_pass():
    check_keys([
        "spark.sql.shuffle.partitions", "spark.statestorex", "spark.statestore.cache.maxBytes",
        "spark.statestore.earlyTrigger.target", "spark.statestore.earlyTrigger.signingKey",
    ])
    with pytest.raises(ValueError, match=r"unknown setting spark\.statestore\.zzz \(the spark"):
        check_keys(["spark.statestore.zzz"])  # nothing close: no guess, the list of settings


def test_transform_with_state_needs_the_rocksdb_provider_named_in_the_error():
    check_rocksdb_provider({PROVIDER_CLASS: ROCKSDB_PROVIDER}.get)
    with pytest.raises(ValueError, match=rf"need {PROVIDER_CLASS}={ROCKSDB_PROVIDER} .* got nothing"):
        check_rocksdb_provider({}.get)
    with pytest.raises(ValueError, match=r"got 'my\.Provider'"):
        check_rocksdb_provider({PROVIDER_CLASS: "my.Provider"}.get)


def test_local_dir_defaults_next_to_spark_local_dirs(monkeypatch):
    monkeypatch.setenv("SPARK_LOCAL_DIRS", "/mnt/disk1/blockmgr-1234,/mnt/disk2/blockmgr-1234")
    assert settings().resolve_local_dir() == "/mnt/disk1/spark-statestore"


def test_check_columns():
    frame = pd.DataFrame({"key": ["a", "b"], "ts": [1, 2], "f": [1.0, None], "s": ["x", 1]})
    check_columns(frame, {"key": "string", "ts": "integer"})
    with pytest.raises(ValueError, match=r"input is missing column\(s\) \['when'\]"):
        check_columns(frame, {"when": "integer"})
    with pytest.raises(ValueError, match="input column 'f' has 1 null value"):
        check_columns(frame, {"f": "number"})
    with pytest.raises(TypeError, match="input column 'key' must be integer, got dtype object"):
        check_columns(frame, {"key": "integer"})
    with pytest.raises(TypeError, match="column 's' must be string"):
        check_columns(frame, {"s": "string"})
    floats = pd.DataFrame({"ts": [1.0, 2.0]})  # what Arrow makes of integers next to nulls
    check_columns(floats, {"ts": "integer"})
    assert epoch_millis(floats["ts"]).tolist() == [1, 2]
    stamps = pd.DataFrame({"t": pd.to_datetime([1000, 2000], unit="ms")})
    assert epoch_millis(stamps["t"]).tolist() == [1000, 2000]


def test_the_shipped_spark_defaults_file_holds_the_defaults():
    import os

    from spark_statestore.spark.driver.settings import DEFAULTS

    path = str(ROOT / "conf" / "spark-defaults.conf")
    entries = {}
    for line in open(path):
        line = line.strip()
        if line and not line.startswith("#"):
            key, value = line.split(None, 1)
            entries[key] = value
    assert {k: v for k, v in entries.items() if k.startswith("spark.statestore.")} == DEFAULTS
    assert StateStoreSettings.from_conf(entries.get) == settings()
    # spark-submit with this file runs as many state partitions as `./dev example` does
    example = open(os.path.join(os.path.dirname(path), "..", "examples", "windowed_counts.py")).read()
    assert f'.config("spark.sql.shuffle.partitions", "{entries["spark.sql.shuffle.partitions"]}")' in example


def test_plot_metrics_draws_every_panel():
    import io

    from spark_statestore.spark.plots import plot_metrics

    frame = pd.DataFrame(
        {
            "batch_id": [2, 0, 1],
            "rows_written": [5, 10, 7],
            "uncommitted_bytes_peak": [100, 300, 200],
            "spills": [0, 2, 1],
            "cache_hits": [3, 0, 1],
            "cache_misses": [1, 0, 3],
            "open_seconds": [0.01, 0.02, 0.03],
            "prepare_seconds": [0.001, 0.002, 0.003],
            "early_triggers": [0, 1, 0],
        }
    )
    figure = plot_metrics(frame, title="test")
    axes = figure.get_axes()
    assert len(axes) == 5  # four panels and the spills axis
    rows = axes[0].get_lines()[0]
    assert list(rows.get_xdata()) == [0, 1, 2] and list(rows.get_ydata()) == [10, 7, 5]
    ratio = axes[2].get_lines()[0].get_ydata()
    assert list(ratio) == [0.0, 0.25, 0.75]  # no lookups counts as 0
    png = io.BytesIO()
    figure.savefig(png, format="png")
    assert png.getvalue()[:8] == b"\x89PNG\r\n\x1a\n"
    with pytest.raises(ValueError, match="at least one batch"):
        plot_metrics(frame.iloc[0:0])
    calm = plot_metrics(frame.assign(spills=0))
    assert len(calm.get_axes()) == 4  # no empty spills axis
    assert calm.get_axes()[1].get_title() == "uncommitted bytes (peak per task); no spills"


def test_reader_integer_options_are_checked_like_settings_naming_the_option():
    assert int_option({"batchid": " 7 "}, "batchId") == 7  # Spark's options are case-insensitive
    assert int_option({"batchId": "+007"}, "batchId") == 7  # what Java's Long.parseLong takes
    assert int_option({}, "batchId", 3) == 3
    with pytest.raises(ValueError, match=r"option batchId must be an integer, got 'x'"):
        int_option({"batchId": "x"}, "batchId")
    with pytest.raises(ValueError, match=r"option maxRowsPerTrigger must be at least 1, got '0'"):
        int_option({"maxRowsPerTrigger": "0"}, "maxRowsPerTrigger", minimum=1)


@pytest.mark.parametrize("columns", ["true", "false"])
def test_snapshot_columns_reaches_the_tasks_snapshots(tmp_path, columns):
    """`spark.statestore.snapshotColumns=false`: a task's snapshots have no columns file
    (a query whose state nobody reads in bulk does not pay for one); true, the default: each
    has one. Both read back the same state."""
    import json
    import os

    from spark_statestore import Serdes
    from spark_statestore.checkpoint.names import COLUMNS_FILE
    from spark_statestore.spark import KeyValue
    from spark_statestore.spark.driver.operator import OperatorConfig
    from spark_statestore.spark.worker.task import TaskInfo
    from spark_statestore.spark.worker.task_state import TaskState

    checkpoint = str(tmp_path / "ckpt")
    conf = {
        "spark.statestore.localDir": str(tmp_path / "local"),
        "spark.statestore.snapshotInterval": "1",
        "spark.statestore.snapshotColumns": columns,
    }
    totals = KeyValue("totals", Serdes.string(), Serdes.int64())
    config = OperatorConfig(checkpoint, (totals,), StateStoreSettings.from_conf(conf.get))
    for name in ("offsets", "commits"):
        os.makedirs(os.path.join(checkpoint, name))
    for batch in range(3):
        with open(os.path.join(checkpoint, "offsets", str(batch)), "w") as f:  # as Spark's driver writes it
            f.write(f"v1\n{json.dumps({'batchWatermarkMs': 0, 'batchTimestampMs': 1000 + batch, 'conf': {}})}\n{{}}\n")
        state = TaskState(config, TaskInfo(batch, 0, 0, batch, "q", 1)).open()
        assert state["totals"].get("k") == (None if batch == 0 else batch - 1)
        state["totals"].put("k", batch)
        partition = state.partition
        state.finish()
        partition.wait_for_snapshots()
        with open(os.path.join(checkpoint, "commits", str(batch)), "w") as f:
            f.write("v1\n{}\n")
    snapshots = os.path.join(checkpoint, "statestore", "0", "snapshots")
    files = [set(os.listdir(os.path.join(snapshots, d))) for d in os.listdir(snapshots) if d.isdigit()]
    assert len(files) >= 2
    assert all((COLUMNS_FILE in f) == (columns == "true") for f in files), files
