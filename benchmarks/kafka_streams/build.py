"""Build the Kafka Streams side of benchmarks/vs_kafka_streams.py with Maven.

The application (`WindowedCounts.java`, Kafka Streams 4.4.0 from Maven Central) and its
runtime dependencies go to the git-ignored `maven/jars/kafka-streams-app/` (the jar, and
`lib/` for the dependencies), as `maven/fetch.py` puts the jars it fetches. It is rebuilt
when a source or the POM is newer than the jar.

    ./dev bench kafka_streams                  # build (no-op when up to date)
    python benchmarks/kafka_streams/build.py --classpath
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
OUT = HERE.parent.parent / "maven" / "jars" / "kafka-streams-app"
JAR = OUT / "windowed-counts.jar"
MAIN_CLASS = "spark_statestore.bench.WindowedCounts"


def _sources() -> list[Path]:
    return [HERE / "pom.xml", *sorted((HERE / "src").rglob("*.java"))]


def stale() -> bool:
    """True when the jar is missing or older than a source or the POM."""
    if not JAR.exists() or not (OUT / "lib").is_dir():
        return True
    built = JAR.stat().st_mtime
    return any(source.stat().st_mtime > built for source in _sources())


def build(quiet: bool = True) -> Path:
    """Build the application unless it is up to date; the jar's path."""
    if not stale():
        return JAR
    if shutil.which("mvn") is None:
        raise RuntimeError("building benchmarks/kafka_streams needs Maven (`mvn` on PATH) and a JDK 17+")
    shutil.rmtree(OUT / "lib", ignore_errors=True)  # no jar of an older dependency set stays behind
    command = ["mvn", "-B", "-f", str(HERE / "pom.xml"), "package"]
    if quiet:
        command.insert(1, "-q")
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    if result.returncode != 0 or not JAR.exists():
        raise RuntimeError(f"mvn could not build benchmarks/kafka_streams (exit {result.returncode}):\n"
                           + (result.stdout + result.stderr)[-3000:])
    os.utime(JAR)  # newer than every source, also when mvn found nothing to recompile
    return JAR


def classpath() -> str:
    """The application's class path (built first when stale)."""
    return os.pathsep.join(str(jar) for jar in [build(), *sorted((OUT / "lib").glob("*.jar"))])


def command(*arguments: str, java: str = "java", heap: str | None = None) -> list[str]:
    """The `java` command line that runs the application with `name=value` arguments."""
    options = [f"-Xmx{heap}"] if heap else []
    return [java, *options, "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn", "-cp", classpath(), MAIN_CLASS,
            *arguments]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--classpath", action="store_true", help="print the class path (building first)")
    args = parser.parse_args(argv)
    was_stale = stale()
    jar = build()
    if args.classpath:
        print(classpath())
    else:
        print(f"kafka_streams: {os.path.relpath(jar)} {'built' if was_stale else 'up to date'}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
