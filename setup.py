"""Package build hook: the early trigger's JVM shim is compiled into the package.

Everything else about the package is declared in pyproject.toml. `build_py` (run for
wheels, sdist installs and `pip install -e .`) first builds
`spark_statestore/jars/spark-statestore-shim.jar` from `jvm-shim/` when the jar is missing
or older than its sources (see jvm-shim/build.py). Without a JDK or pyspark the package
still builds, without the jar, and says why; early triggers are then unavailable.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

BUILD_SCRIPT = Path(__file__).resolve().parent / "jvm-shim" / "build.py"


def build_shim() -> None:
    """Build the shim jar into the source tree if it is stale; report the outcome."""
    if not BUILD_SCRIPT.is_file():
        print(f"spark_statestore: no JVM shim sources ({BUILD_SCRIPT} is missing); building without the jar",
              file=sys.stderr)
        return
    spec = importlib.util.spec_from_file_location("spark_statestore_shim_build", BUILD_SCRIPT)
    builder = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(builder)
    if not builder.is_stale():
        return
    path, reason = builder.build_jar()
    if path is None:
        print(f"spark_statestore: building without the JVM shim jar (early triggers will be unavailable): {reason}",
              file=sys.stderr)
    else:
        print(f"spark_statestore: JVM shim built: {path}")


class BuildPyWithShim(build_py):
    """`build_py` that builds the shim jar first, so it is package data like any other."""

    def run(self) -> None:
        build_shim()
        self.__dict__.pop("data_files", None)  # computed lazily: look again, the jar may be new
        super().run()


setup(cmdclass={"build_py": BuildPyWithShim})
