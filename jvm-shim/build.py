"""Build the JVM shim (spark_statestore's driver part: the early trigger's plugin, signal
receiver, governor, wakeable clock and per-batch files): `javac --release 17` against
pyspark's own jars, then `jar` into `spark_statestore/jars/spark-statestore-shim.jar`.

No Maven or Gradle (no Maven repository is needed): the only inputs are the Java sources
under `jvm-shim/src`, a JDK and an installed pyspark (or `SPARK_HOME`) for the classpath.
Run it directly (`python jvm-shim/build.py [--if-stale]`); the package build
(`setup.py`) and `./dev` call `build_jar`. When something is missing, nothing is written
and the reason is returned (and printed), so a package build without a JDK still succeeds.

One jar serves pyspark 4.0 to 4.3: the shim compiles against Spark's public API
(SparkPlugin, SparkContext, SparkSession, StreamingQueryListener, Hadoop's FileSystem) and
reaches the few internals it needs by reflection, finding them itself for the running Spark
(`QueryTriggers`: the query execution class moved to a `runtime` package in 4.1); it
compiles against the jars of 4.0.5, 4.1.4, 4.2.1 and 4.3.0 alike.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
SOURCES = HERE / "src"
JAR_NAME = "spark-statestore-shim.jar"
DEFAULT_OUTPUT = HERE.parent / "spark_statestore" / "jars" / JAR_NAME


def spark_jars_dir() -> Path | None:
    """pyspark's `jars` directory: `SPARK_HOME/jars`, else the importable pyspark's."""
    candidates = []
    if os.environ.get("SPARK_HOME"):
        candidates.append(Path(os.environ["SPARK_HOME"]) / "jars")
    spec = importlib.util.find_spec("pyspark")
    if spec is not None and spec.origin:
        candidates.append(Path(spec.origin).parent / "jars")
    for candidate in candidates:
        if any(candidate.glob("spark-sql-api_*.jar")):
            return candidate
    return None


def java_sources() -> list[Path]:
    return sorted(SOURCES.rglob("*.java"))


def is_stale(output: Path = DEFAULT_OUTPUT) -> bool:
    """True if the jar is missing or older than one of the Java sources."""
    if not output.exists():
        return True
    built = output.stat().st_mtime
    return any(source.stat().st_mtime > built for source in java_sources())


def build_jar(output: Path = DEFAULT_OUTPUT) -> tuple[Path | None, str]:
    """Compile the shim and write the jar to `output`. Returns (path, "") or (None, why not)."""
    javac, jar = shutil.which("javac"), shutil.which("jar")
    if javac is None or jar is None:
        return None, "no JDK on PATH (javac and jar are needed; a JRE is not enough)"
    jars_dir = spark_jars_dir()
    if jars_dir is None:
        return None, "pyspark is not installed in the build environment and SPARK_HOME is not set"
    sources = java_sources()
    with tempfile.TemporaryDirectory(prefix="shim-build-") as scratch:
        classes = Path(scratch) / "classes"
        compiled = subprocess.run(
            [javac, "--release", "17", "-encoding", "UTF-8", "-Xlint:all,-path", "-Werror",
             "-cp", str(jars_dir / "*"), "-d", str(classes), *map(str, sources)],
            capture_output=True, text=True,
        )
        if compiled.returncode != 0:
            return None, f"javac failed against {jars_dir}:\n{compiled.stderr.strip()}"
        output.parent.mkdir(parents=True, exist_ok=True)
        staged = output.with_name(output.name + ".tmp")
        packed = subprocess.run(
            [jar, "--create", "--file", str(staged), "-C", str(classes), "."],
            capture_output=True, text=True,
        )
        if packed.returncode != 0:
            staged.unlink(missing_ok=True)
            return None, f"jar failed:\n{packed.stderr.strip()}"
        os.replace(staged, output)  # a reader never sees a half-written jar
    return output, ""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT)
    parser.add_argument("--if-stale", action="store_true", help="only build when a source is newer than the jar")
    args = parser.parse_args()
    if args.if_stale and not is_stale(args.output):
        return 0
    path, reason = build_jar(args.output)
    if path is None:
        print(f"spark_statestore: JVM shim not built: {reason}", file=sys.stderr)
        return 1
    print(f"spark_statestore: JVM shim built: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
