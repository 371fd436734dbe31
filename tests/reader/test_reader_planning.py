"""Planning a read of the state in a new Python worker: the source registered by
`register_reader` is pickled by value, so refusing its options or a location without
state imports nothing of spark_statestore (Spark starts a new worker for every `load()`
after a refused one, and importing the package costs about half a second there)."""

from __future__ import annotations

import os
import subprocess
import sys

from pyspark import cloudpickle

from spark_statestore.spark.reader import register_reader

_WORKER = """
import pickle, sys
source = pickle.loads(sys.stdin.buffer.read())
for options in ({"checkpointLocation": sys.argv[1], "batchId": "x1"}, {"checkpointLocation": sys.argv[1]}):
    try:
        source(options).schema()
    except ValueError as e:
        print(e)
print(sorted(m for m in sys.modules if m.startswith("spark_statestore")))
"""


class _Session:
    """What `register_reader` uses of a session: its conf and its data source registry."""

    def __init__(self) -> None:
        self.registered: list = []
        self.conf = self
        self.dataSource = self

    def set(self, key: str, value: str) -> None:
        pass

    def register(self, source: type) -> None:
        self.registered.append(source)


def test_a_refused_load_imports_nothing_of_the_package(tmp_path):
    session = _Session()
    register_reader(session)
    pickled = cloudpickle.dumps(session.registered[0])  # as Spark pickles a registered source
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # spark_statestore not importable there
    run = subprocess.run(
        [sys.executable, "-c", _WORKER, str(tmp_path / "nothing")],
        input=pickled, capture_output=True, env=env, cwd=tmp_path, timeout=60, check=True,
    )
    lines = run.stdout.decode().splitlines()
    assert lines[0] == "option batchId must be an integer, got 'x1'"
    assert lines[1] == f"there is no spark_statestore state under {tmp_path / 'nothing'} (no {tmp_path / 'nothing'}/statestore/_layout)"
    assert lines[2] == "[]"
