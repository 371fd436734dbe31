"""Shared fixtures: store factories parametrized over implementations."""

from __future__ import annotations

import contextlib
import itertools
import os
import sys
import uuid

import boto3
import pytest

from spark_statestore import Stores

# Spark's Python workers must run this interpreter (it has the project installed).
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
# The suite's Spark JVMs (its sessions, Connect servers, and the drivers of the examples,
# notebooks and clusters it starts) are many and short-lived: the C1 compiler alone keeps
# the CPU that C2's compiles never pay back (test_examples: a quarter less CPU). Every
# spark-submit the tests run inherits it; a SPARK_SUBMIT_OPTS of one's own wins.
os.environ.setdefault("SPARK_SUBMIT_OPTS", "-XX:TieredStopAtLevel=1")

_counter = itertools.count()



def kafka_connector() -> tuple[str | None, str]:
    """Spark's Kafka connector for the installed pyspark, as `spark.jars` gives it (fetched
    with Maven once), and why not where there is none: (jars or None, reason)."""
    import local_kafka

    version = local_kafka.connector_version()
    if version is None:
        return None, (f"Maven Central as served here has no spark-sql-kafka-0-10_2.13 for pyspark "
                      f"{local_kafka.installed_minor()} (README: pyspark versions)")
    try:
        jars = local_kafka.connector_jars()
    except Exception as error:  # a Spark session without it still serves every other test
        return None, f"fetching Spark's Kafka connector {version} failed: {error}"
    return ",".join(str(jar) for jar in jars), ""


KAFKA_JARS, NO_KAFKA_REASON = kafka_connector()


def s3a_jars() -> tuple[str | None, str]:
    """Hadoop's S3A (hadoop-aws of pyspark's Hadoop client, with the AWS SDK modules it
    uses), as `spark.jars` gives it (fetched with Maven once), and why not: (jars or None, reason)."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "maven"))
    try:
        import fetch

        return ",".join(str(jar) for jar in fetch.fetch(fetch.hadoop_aws_bundle())), ""
    except Exception as error:  # a Spark session without it still serves every other test
        return None, f"fetching hadoop-aws failed: {error}"
    finally:
        sys.path.pop(0)


S3A_JARS, NO_S3A_REASON = s3a_jars()


@pytest.fixture(params=["memory", "rocksdb"])
def kv_factory(request, tmp_path):
    """Build key-value stores of one implementation; every store is closed afterwards."""
    made = []

    def make(name: str = "kv", path=None):
        if request.param == "memory":
            store = Stores.in_memory_key_value_store(name)
        else:
            store = Stores.persistent_key_value_store(
                name, path or tmp_path / f"kv-{next(_counter)}"
            )
        made.append(store)
        return store

    make.kind = request.param
    yield make
    for store in made:
        store.close()


@pytest.fixture
def kv_store(kv_factory):
    return kv_factory()


@pytest.fixture(params=["memory", "rocksdb"])
def window_factory(request, tmp_path):
    """Build window stores of one implementation (RocksDB with small segments)."""
    made = []

    def make(retention=100, size=10, retain_duplicates=False, name="win", path=None, segment_interval=5):
        if request.param == "memory":
            store = Stores.in_memory_window_store(name, retention, size, retain_duplicates)
        else:
            store = Stores.persistent_window_store(
                name,
                path or tmp_path / f"win-{next(_counter)}",
                retention,
                size,
                retain_duplicates,
                segment_interval=segment_interval,
            )
        made.append(store)
        return store

    make.kind = request.param
    yield make
    for store in made:
        store.close()


@pytest.fixture
def dirs(tmp_path):
    """A checkpoint location and a local state directory for a partition-state test."""
    checkpoint = tmp_path / "checkpoint"
    checkpoint.mkdir()
    return str(checkpoint), str(tmp_path / "local")


def _classic_session(warehouse: str):
    """One local[2,4] SparkSession for every Spark test (4 attempts per task, so Spark
    retries tasks that fail)."""
    pyspark_sql = pytest.importorskip("pyspark.sql")
    session = (
        pyspark_sql.SparkSession.builder.master("local[2,4]")
        .appName("spark_statestore-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.warehouse.dir", warehouse)
        .config(
            "spark.sql.streaming.stateStore.providerClass",
            "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
        )
        # Spark's Kafka connector and Hadoop's S3A, as a user's --jars
        .config("spark.jars", ",".join(j for j in (KAFKA_JARS, S3A_JARS) if j))
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    return session


@pytest.fixture(scope="session")
def classic_spark(tmp_path_factory):
    """The classic SparkSession, for tests that need its JVM (py4j, the shim, sparkContext)."""
    session = _classic_session(str(tmp_path_factory.mktemp("spark-warehouse")))
    yield session
    session.stop()


@pytest.fixture(scope="session")
def connect_server(tmp_path_factory):
    """A Spark Connect server (local[2,4], the same settings), started once per run."""
    pytest.importorskip("grpc", reason="the Spark Connect client needs pyspark[connect]")
    from connect_server import ConnectServer

    server = ConnectServer(str(tmp_path_factory.mktemp("connect-server")),
                           {"spark.jars": KAFKA_JARS} if KAFKA_JARS else None)
    yield server
    server.stop()


@pytest.fixture(scope="session")
def connect_spark(connect_server):
    """A Spark Connect session of the test run's Connect server."""
    session = connect_server.session()  # marks the process: put aside after this test phase
    yield session
    session.stop()


# pyspark marks the whole process as a Spark Connect client (these environment variables)
# when a Connect session is made; classic sessions and the Spark drivers tests start as
# subprocesses must not inherit that mark: it is set only while a Connect test runs
_CONNECT_MODE = ("SPARK_CONNECT_MODE_ENABLED", "SPARK_REMOTE")
_connect_mode: dict[str, str] = {}


def _put_aside_connect_mode() -> None:
    for name in _CONNECT_MODE:
        if name in os.environ:
            _connect_mode[name] = os.environ.pop(name)


def _is_connect_test(item: pytest.Item) -> bool:
    callspec = getattr(item, "callspec", None)
    return (callspec is not None and callspec.params.get("spark") == "connect") or (
        "connect_spark" in getattr(item, "fixturenames", ())
    )


@contextlib.contextmanager
def _connect_mode_of(item: pytest.Item):
    """The Connect mark during each phase of a Connect test, its module and class fixtures
    included (they are set up inside the first test's setup), and never otherwise."""
    if _is_connect_test(item):
        os.environ.update(_connect_mode)
    try:
        yield
    finally:
        _put_aside_connect_mode()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item):
    with _connect_mode_of(item):
        yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    with _connect_mode_of(item):
        yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item):
    with _connect_mode_of(item):
        yield


@pytest.fixture(scope="session", params=["classic", "connect"])
def spark(request):
    """Every Spark test runs in a classic session and in a Spark Connect session (the
    Connect server starts once per run, when the first test asks for it)."""
    return request.getfixturevalue(f"{request.param}_spark")


@pytest.fixture(scope="session")
def kafka(tmp_path_factory):
    """A Kafka broker on loopback (Apache Kafka's jars, KRaft), for the whole run; a test
    that stops it starts it again. Skips where pyspark has no Kafka connector."""
    if KAFKA_JARS is None:
        pytest.skip(NO_KAFKA_REASON)
    import local_kafka

    broker = local_kafka.LocalKafka(tmp_path_factory.mktemp("kafka")).start()
    yield broker
    broker.kill()


def topic_name(what: str) -> str:
    """A topic of its own for a test."""
    return f"{what}-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="session")
def s3_endpoint():
    """An S3-compatible server (moto) on loopback, for the whole run."""
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    saved = {k: os.environ.get(k) for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION")}
    os.environ.update(AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing", AWS_DEFAULT_REGION="us-east-1")
    yield f"{host}:{port}"
    server.stop()
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


@pytest.fixture(scope="session")
def s3_proxy(s3_endpoint):
    """A proxy in front of the run's S3 server that counts requests and injects faults
    (tests/support/s3_proxy.py); a test that stops it or queues faults leaves it as it found it."""
    from s3_proxy import S3Proxy

    proxy = S3Proxy(s3_endpoint).start()
    yield proxy
    proxy.stop()


@pytest.fixture
def bucket(s3_endpoint):
    name = f"ckpt-{uuid.uuid4().hex[:12]}"
    boto3.client("s3", endpoint_url=f"http://{s3_endpoint}").create_bucket(Bucket=name)
    return name


def pytest_collection_modifyitems(config, items):
    """A test marked `classic_only` runs in the classic session only: its subject is the
    Python worker's side (faults, retries, restarts, rescaling, TTL, schema changes), which
    a Spark Connect client's query shares with a classic one; what Connect changes (the
    query set up by a client, its conf, sources and sinks) the tests in both sessions cover.
    So that the Connect variants still run, one module of them does in each run, in turn by
    the day of the year (`connect_rotation`); SPARK_STATESTORE_CONNECT_ALL=1 runs them all."""
    rotating = connect_rotation([item.module.__name__ for item in items
                                 if _is_connect_test(item) and item.get_closest_marker("classic_only")])
    kept, dropped = [], []
    for item in items:
        connect = _is_connect_test(item)
        classic_only = connect and item.get_closest_marker("classic_only")
        never = connect and item.get_closest_marker("needs_classic")  # what a Connect client has not
        (dropped if never or (classic_only and item.module.__name__ not in rotating) else kept).append(item)
    config.stash[_ROTATED] = sorted(rotating)
    _mark_the_fast_lane(items)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept


_ROTATED = pytest.StashKey[list]()

# The rooms of tests/ whose tests start no Spark, cluster, broker or notebook: `./dev test
# --fast` runs them (`-m fast`, minutes), and the full run runs them first.
FAST_ROOMS = ("stores", "serde", "txn", "cache", "checkpoint", "partition")
_SLOW_FIXTURES = {"spark", "classic_spark", "connect_spark", "connect_server", "kafka"}
_SLOW_MARKS = ("spark", "cluster", "kafka")


def _mark_the_fast_lane(items: list[pytest.Item]) -> None:
    """Mark `fast` every test of a fast room, refusing one that would start what the fast
    lane promises not to (a test of Spark belongs in tests/spark, tests/reader or tests/tools)."""
    tests = os.path.dirname(os.path.abspath(__file__))
    for item in items:
        room = os.path.relpath(str(item.path), tests).split(os.sep)[0]
        if room not in FAST_ROOMS:
            continue
        slow = _SLOW_FIXTURES.intersection(getattr(item, "fixturenames", ())) or [
            mark for mark in _SLOW_MARKS if item.get_closest_marker(mark)]
        if slow:
            raise pytest.UsageError(f"{item.nodeid} is in tests/{room}, a fast room, but uses {sorted(slow)}: "
                                    f"move it to a room of Spark tests (tests/spark, tests/reader or tests/tools)")
        item.add_marker(pytest.mark.fast)


def connect_rotation(modules: list[str]) -> set[str]:
    """The modules of `classic_only` tests whose Connect variants run in this run: all with
    SPARK_STATESTORE_CONNECT_ALL=1, else one on the newest pyspark minor, by the day of the
    year (every module in turn), and none on the others."""
    import pyspark

    from spark_statestore.spark.compat.minors import MINORS, minor_of

    names = sorted(set(modules))
    if os.environ.get("SPARK_STATESTORE_CONNECT_ALL") == "1":
        return set(names)
    if not names or minor_of(pyspark.__version__) != max(MINORS, key=lambda m: tuple(map(int, m.split(".")))):
        return set()  # the newest minor's run only: the others run their versioned tests
    import datetime

    return {names[datetime.date.today().timetuple().tm_yday % len(names)]}


def pytest_terminal_summary(terminalreporter, config):
    rotated = config.stash.get(_ROTATED, [])
    if rotated:
        terminalreporter.write_line(f"classic_only tests also run over Spark Connect this run: {', '.join(rotated)}")
