"""Fetch the JVM jars the tests, examples and benchmarks run beside Spark, from Maven Central
with `mvn`, into `maven/jars/<bundle>/` (git ignores it; a bundle fetched once is reused).

Bundles:
- `kafka-broker`: Apache Kafka's own broker (`org.apache.kafka:kafka_2.13`) and its runtime
  dependencies, for a single-node KRaft broker on loopback (`tests/support/kafka_broker.py`).
- `spark-kafka-<minor>`: Spark's Kafka connector for a pyspark minor
  (`org.apache.spark:spark-sql-kafka-0-10_2.13`) with the runtime dependencies that pyspark's
  own `jars/` lacks, as a user's `--packages` would add them (jars pyspark already ships,
  such as zstd or slf4j, are left out so the classpath holds one copy of each).
- `hadoop-aws-<hadoop version>`: Hadoop's S3A filesystem (`org.apache.hadoop:hadoop-aws`, of
  the Hadoop client pyspark ships), for `s3a://` checkpoint locations. hadoop-aws depends on
  the AWS SDK's `bundle` (all of the SDK, 655 MB); the bundle is left out and the SDK modules
  S3A uses (s3, s3-transfer-manager, sts and what they need) fetched instead: 19 MB (less the
  jars pyspark ships), enough for S3A's reads, writes, listings, renames and deletes.

Maven Central as served here (checked on 2026-11-28) has no whole connector for most patch
releases: the jars of 4.0.5, 4.1.4, 4.2.1 and 4.3.0 are missing (4.3 has none at all), those
of 4.0.1, 4.0.2 and 4.1.0 have only their POM, and 4.0.3, 4.0.4, 4.1.2 and 4.1.3 lack their
spark-token-provider-kafka dependency. CONNECTORS names, for each minor, the newest patch whose
jar and dependencies resolve (a patch of the same minor as the installed pyspark), or None.

    python maven/fetch.py kafka-broker spark-kafka-4.2     # fetch (no-op when present)
    python maven/fetch.py --path spark-kafka-4.2            # print the bundle's folder
    python maven/fetch.py hadoop-aws                        # S3A for the installed pyspark's Hadoop
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
JARS = HERE / "jars"
KAFKA_VERSION = "4.1.1"
# pyspark minor -> the spark-sql-kafka-0-10_2.13 version fetched for it (None: not served)
CONNECTORS: dict[str, str | None] = {"4.0": "4.0.0", "4.1": "4.1.1", "4.2": "4.2.0", "4.3": None}
# Hadoop version (of pyspark's hadoop-client-api jar) -> the AWS SDK v2 version its hadoop-aws
# is built against (hadoop-project's aws-java-sdk-v2.version)
AWS_SDKS: dict[str, str] = {"3.5.0": "2.35.4"}
# the SDK modules S3A uses, fetched in place of the SDK's whole `bundle`
AWS_SDK_MODULES = ("s3", "s3-transfer-manager", "sts")
_DONE = ".complete"


class NotServed(Exception):
    """The bundle's artifact is not served by the Maven repository this machine reaches."""


def artifacts(bundle: str) -> list[str]:
    """The Maven coordinates (group:artifact:version) a bundle is made of."""
    if bundle == "kafka-broker":
        return [f"org.apache.kafka:kafka_2.13:{KAFKA_VERSION}"]
    if bundle.startswith("spark-kafka-"):
        minor = bundle.removeprefix("spark-kafka-")
        if minor not in CONNECTORS:
            raise ValueError(f"bundle {bundle!r}: pyspark minor {minor!r} is not one of {sorted(CONNECTORS)}")
        version = CONNECTORS[minor]
        if version is None:
            raise NotServed(f"Maven Central as served here has no spark-sql-kafka-0-10_2.13 for pyspark {minor}")
        return [f"org.apache.spark:spark-sql-kafka-0-10_2.13:{version}"]
    if bundle.startswith("hadoop-aws-"):
        hadoop = bundle.removeprefix("hadoop-aws-")
        if hadoop not in AWS_SDKS:
            raise NotServed(f"hadoop-aws {hadoop}: its AWS SDK modules are not known here (known: {sorted(AWS_SDKS)})")
        sdk = AWS_SDKS[hadoop]
        return [f"org.apache.hadoop:hadoop-aws:{hadoop}"] + [f"software.amazon.awssdk:{m}:{sdk}" for m in AWS_SDK_MODULES]
    raise ValueError(f"unknown bundle {bundle!r} (kafka-broker, spark-kafka-<minor>, hadoop-aws-<hadoop version>)")


# artifacts left out of a bundle's dependencies (group:artifact): the AWS SDK's whole bundle
_EXCLUDED = {"org.apache.hadoop:hadoop-aws": "software.amazon.awssdk:bundle"}


def bundle_dir(bundle: str) -> Path:
    return JARS / bundle


def fetched(bundle: str) -> list[Path] | None:
    """The bundle's jars if it was fetched completely, else None."""
    folder = bundle_dir(bundle)
    if not (folder / _DONE).exists():
        return None
    return sorted(folder.glob("*.jar"))


def _pom(coordinates: list[str]) -> str:
    def exclusions(group: str, artifact: str) -> str:
        excluded = _EXCLUDED.get(f"{group}:{artifact}")
        if excluded is None:
            return ""
        g, a = excluded.split(":")
        return f"<exclusions><exclusion><groupId>{g}</groupId><artifactId>{a}</artifactId></exclusion></exclusions>"

    deps = "".join(
        f"<dependency><groupId>{g}</groupId><artifactId>{a}</artifactId><version>{v}</version>{exclusions(g, a)}</dependency>"
        for g, a, v in (c.split(":") for c in coordinates)
    )
    return (
        '<project xmlns="http://maven.apache.org/POM/4.0.0"><modelVersion>4.0.0</modelVersion>'
        "<groupId>local.spark_statestore</groupId><artifactId>jar-fetch</artifactId><version>1</version>"
        f"<dependencies>{deps}</dependencies></project>"
    )


def _artifact_name(jar: Path) -> str:
    """`zstd-jni-1.5.7-7.jar` -> `zstd-jni`: the name without its version."""
    parts = jar.stem.split("-")
    for i, part in enumerate(parts):
        if part[:1].isdigit():
            return "-".join(parts[:i])
    return jar.stem


def _pyspark_artifacts() -> set[str]:
    import pyspark

    return {_artifact_name(jar) for jar in (Path(pyspark.__file__).parent / "jars").glob("*.jar")}


def fetch(bundle: str, quiet: bool = True) -> list[Path]:
    """Fetch `bundle` (its artifacts and their runtime dependencies) unless present."""
    done = fetched(bundle)
    if done is not None:
        return done
    coordinates = artifacts(bundle)
    if shutil.which("mvn") is None:
        raise RuntimeError(f"fetching {bundle} needs Maven (`mvn` on PATH): apt-get install maven")
    folder = bundle_dir(bundle)
    staging = Path(tempfile.mkdtemp(prefix=f".{bundle}-", dir=JARS.parent if JARS.exists() else None))
    try:
        (staging / "pom.xml").write_text(_pom(coordinates))
        command = ["mvn", "-B", "-f", str(staging / "pom.xml"), "dependency:copy-dependencies",
                   "-DincludeScope=runtime", f"-DoutputDirectory={staging / 'jars'}"]
        if quiet:
            command.insert(1, "-q")
        result = subprocess.run(command, capture_output=True, text=True, check=False)
        if result.returncode != 0:
            raise RuntimeError(f"mvn could not fetch {bundle} ({', '.join(coordinates)}):\n"
                               + (result.stdout + result.stderr)[-3000:])
        jars = sorted((staging / "jars").glob("*.jar"))
        if bundle.startswith(("spark-kafka-", "hadoop-aws-")):
            ships = _pyspark_artifacts()
            jars = [jar for jar in jars if _artifact_name(jar) not in ships]
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
        for jar in jars:
            shutil.copy2(jar, folder / jar.name)
        (folder / _DONE).write_text("\n".join(coordinates) + "\n")
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return sorted(folder.glob("*.jar"))


def connector_bundle(minor: str) -> str | None:
    """The Kafka connector's bundle for a pyspark minor, or None where none is served."""
    return f"spark-kafka-{minor}" if CONNECTORS.get(minor) else None


def pyspark_hadoop() -> str:
    """The version of the Hadoop client pyspark ships (its hadoop-client-api jar)."""
    import pyspark

    jars = sorted((Path(pyspark.__file__).parent / "jars").glob("hadoop-client-api-*.jar"))
    if not jars:
        raise RuntimeError(f"pyspark {pyspark.__version__} ships no hadoop-client-api jar")
    return jars[0].stem.removeprefix("hadoop-client-api-")


def hadoop_aws_bundle() -> str:
    """The S3A bundle for the installed pyspark's Hadoop client."""
    return f"hadoop-aws-{pyspark_hadoop()}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("bundles", nargs="+")
    parser.add_argument("--path", action="store_true", help="print each bundle's folder, fetching nothing")
    args = parser.parse_args(argv)
    JARS.mkdir(parents=True, exist_ok=True)
    for bundle in args.bundles:
        if bundle == "hadoop-aws":  # the one for the installed pyspark
            bundle = hadoop_aws_bundle()
        if args.path:
            print(bundle_dir(bundle))
            continue
        try:
            was = fetched(bundle)
            jars = fetch(bundle)
        except NotServed as error:
            print(f"maven: {bundle}: {error} (skipped)", file=sys.stderr)
            continue
        if was is None:
            print(f"maven: {bundle}: {len(jars)} jars in {os.path.relpath(bundle_dir(bundle))}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
