"""The example jobs, run as a user runs them (their own process and Spark), checked
against references computed from their input."""

from __future__ import annotations

import collections
import glob
import os
import re
import subprocess
import sys

import pandas as pd
import pytest
import paths

pytestmark = pytest.mark.spark
EXAMPLES = str(paths.EXAMPLES)


def _run(script: str, *args: str) -> str:
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
    done = subprocess.run(
        [sys.executable, os.path.join(EXAMPLES, script), *args], capture_output=True, text=True, env=env, timeout=600
    )
    assert done.returncode == 0, f"{script} failed:\n{done.stderr[-4000:]}"
    return done.stdout + done.stderr


def _input(workdir: str) -> pd.DataFrame:
    return pd.concat(pd.read_json(p, lines=True) for p in sorted(glob.glob(os.path.join(workdir, "input", "*.json"))))


def test_the_main_job_prints_a_line_per_batch_and_repeats_no_warning(tmp_path):
    workdir = str(tmp_path / "windowed")
    log = _run("windowed_counts.py", "--workdir", workdir, "--files", "4", "--events-per-file", "200", "--fresh")
    commits = [n for n in os.listdir(os.path.join(workdir, "checkpoint", "commits")) if n.isdigit()]
    lines = re.findall(r"^batch +(\d+): +(\d+) input rows", log, re.MULTILINE)
    assert sorted(int(b) for b, _ in lines) == sorted(int(n) for n in commits)
    assert sum(int(rows) for _, rows in lines) == 800
    assert re.search(r"^batch +0: .* 0 late events and +0 closed-window updates dropped", log, re.MULTILINE), (
        "batch 0 dropped rows before any watermark"
    )
    warnings = collections.Counter(
        re.sub(r"^\S+ \S+ WARN ", "", line) for line in log.splitlines() if " WARN " in line
    )
    assert not [w for w, n in warnings.items() if n > 1], warnings
    assert "TimerStateImpl" not in log


def test_customer_totals_with_apply_in_pandas_with_state(tmp_path):
    workdir = str(tmp_path / "customers")
    _run("customer_totals.py", "--workdir", workdir, "--files", "3", "--purchases-per-file", "120")
    rows = pd.read_parquet(os.path.join(workdir, "output"))
    latest = rows.sort_values("purchases").groupby("customer").last()
    purchases = _input(workdir)
    expected = purchases.groupby("customer")["amount_cents"].agg(["sum", "count"])
    assert latest["spend_cents"].to_dict() == expected["sum"].to_dict()
    assert latest["purchases"].to_dict() == expected["count"].to_dict()
    assert latest["batches"].max() <= 3 and (latest["batches"] >= 1).all()


def test_change_stream_is_one_change_per_page_and_batch_in_a_chain(tmp_path):
    workdir = str(tmp_path / "changes")
    _run("change_stream.py", "--workdir", workdir, "--files", "3", "--views-per-file", "500")
    changes = pd.read_parquet(os.path.join(workdir, "output")).sort_values(["key", "batch_id"])
    assert not changes.duplicated(["key", "batch_id"]).any()  # de-duplicated: one change per page and batch
    for page, chain in changes.groupby("key"):
        olds, news = chain["old_value"].tolist(), chain["new_value"].tolist()
        assert pd.isna(olds[0]) and olds[1:] == news[:-1], page  # each change starts where the last ended
    views = _input(workdir)["page"].value_counts().to_dict()
    assert changes.groupby("key")["new_value"].last().to_dict() == views


def test_schema_evolution_restarts_with_a_compatible_schema_then_a_migration(tmp_path):
    log = _run("schema_evolution.py", "--workdir", str(tmp_path / "evolution"))
    assert "store 'totals'" in log and "field 'purchases' changes type from int64 to string" in log
    migrated, before = log.split("--- v3 (migrated in batch 4)")[1].split("--- time travel to batch 3")
    assert re.findall(r"\|(\w+) *\|(\d+) *\|", migrated) == [("ann", "3"), ("bob", "3"), ("cy", "2"), ("dee", "2")]
    assert re.findall(r"\|(\w+) *\|([\d.]+) *\|(\d+) *\|", before) == [
        ("ann", "0.0", "2"), ("bob", "19.0", "3"), ("cy", "9.5", "2")
    ]


def _readme_totals() -> type:
    """The README's `Totals` processor, exactly as the README writes it."""
    from spark_statestore import Serdes
    from spark_statestore.spark import KeyValue, StoreProcessor, Window

    with open(os.path.join(os.path.dirname(EXAMPLES), "README.md")) as f:
        readme = f.read()
    block = readme[readme.index("class Totals(StoreProcessor):"):]
    source = block[: block.index("\nprocessor = Totals(")]
    namespace = {"pd": pd, "Serdes": Serdes, "KeyValue": KeyValue, "Window": Window, "StoreProcessor": StoreProcessor,
                 "__name__": "readme_totals"}
    exec(compile(source, "README.md", "exec"), namespace)  # noqa: S102 - the README's own code
    return namespace["Totals"]


@pytest.mark.versioned
def test_a_store_processor_in_a_connect_session_without_the_operator_says_why(connect_spark, tmp_path):
    """pyspark 4.0's Spark Connect client has no transformWithStateInPandas: building a
    processor there fails at once, saying from which version it has (run on 4.0:
    `./dev test --pyspark 4.0`); with_stores and partition_function still build."""
    from spark_statestore import Serdes
    from spark_statestore.errors import StateStoreError
    from spark_statestore.spark import KeyValue, compat, partition_function, with_stores

    if compat.FACTS.connect_transform_with_state:
        pytest.skip(f"the Spark Connect client of pyspark {compat.VERSION} has transformWithStateInPandas")
    with pytest.raises(StateStoreError, match=r"transformWithStateInPandas is in the Spark Connect client from pyspark 4\.1"):
        _readme_totals()(str(tmp_path / "tws"), spark=connect_spark)
    stores = [KeyValue("totals", Serdes.string(), Serdes.int64())]
    assert callable(with_stores(lambda *a: iter(()), str(tmp_path / "aipws"), stores, spark=connect_spark))
    assert callable(partition_function(lambda *a: iter(()), str(tmp_path / "map"), stores, partitions=2,
                                       spark=connect_spark))
