"""What a Python worker imports. Spark starts a fresh Python process to plan every read of
the state (`spark.read.format("spark_statestore")...load()`): importing the reader must not
pull in pandas or the operator adapters, which took about a second of every load."""

from __future__ import annotations

import subprocess
import sys

import spark_statestore.spark as adapters


def _modules_after(statement: str) -> set[str]:
    code = f"import sys\n{statement}\nprint('\\n'.join(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout
    return set(out.split())


def test_planning_a_read_imports_the_reader_without_pandas_or_the_adapters():
    loaded = _modules_after("import spark_statestore.spark.reader.sources")
    assert "spark_statestore.spark.reader.sources" in loaded
    heavy = {"pandas", "spark_statestore.spark.frames", "spark_statestore.spark.processor",
             "spark_statestore.spark.group_state", "spark_statestore.spark.partitions"}
    assert not heavy & loaded


def test_every_public_name_of_the_spark_package_resolves_to_its_module():
    for name in adapters.__all__:
        value = getattr(adapters, name)
        assert value.__module__.startswith("spark_statestore.spark."), name
    assert set(adapters.__all__) <= set(dir(adapters))
    try:
        adapters.NoSuchName  # noqa: B018
    except AttributeError as e:
        assert "NoSuchName" in str(e)
    else:
        raise AssertionError("an unknown name resolved")
