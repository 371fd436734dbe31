"""`spark.conf` settings of the state layer (API.md), read and checked on the driver.

They are read when a processor is built, so a bad value fails there, before any task
runs, with a `ValueError` naming the key and the value; the checked values travel to the
tasks inside the pickled processor. A `spark.statestore.*` key that no setting reads (a
misspelling, which would otherwise be ignored) fails there too, naming the closest known key. Byte sizes accept Spark's notation (`64m`, `10mb`).
"""

from __future__ import annotations

import difflib
import os
import re
import tempfile
from dataclasses import dataclass
from typing import Any, Callable, Iterable

from spark_statestore.checkpoint import object_store
from spark_statestore.checkpoint.object_store import S3Settings
from spark_statestore.partition.options import PartitionOptions
from spark_statestore.spark.reader.options import parse_bool, parse_int  # noqa: F401  (also this module's)
from spark_statestore.spark.driver.slots import session_task_slots, share_per_task, task_cpus
from spark_statestore.spark.signals import SECRET_KEY, TARGET_KEY
from spark_statestore.txn.database import DEFAULT_UNCOMMITTED_MAX_BYTES
from spark_statestore.txn.isolation import IsolationLevel

ISOLATION_LEVEL = "spark.statestore.isolationLevel"
CACHE_MAX_BYTES = "spark.statestore.cache.maxBytes"
UNCOMMITTED_MAX_BYTES = "spark.statestore.uncommitted.maxBytes"
SNAPSHOT_INTERVAL = "spark.statestore.snapshotInterval"
SNAPSHOT_COLUMNS = "spark.statestore.snapshotColumns"
MIN_BATCHES_TO_RETAIN = "spark.statestore.minBatchesToRetain"
LOCAL_DIR = "spark.statestore.localDir"
LOCK_TIMEOUT = "spark.statestore.lockTimeout"
ROCKSDB_MEMORY_BYTES = "spark.statestore.rocksdb.memoryBytes"
EARLY_TRIGGER_ENABLED = "spark.statestore.earlyTrigger.enabled"
SIGNAL_PORT = "spark.statestore.earlyTrigger.signalPort"
ADMISSION = "spark.statestore.earlyTrigger.admission"
LOCAL_MAX_IDLE = "spark.statestore.localCopy.maxIdleSeconds"
KEEP_OPEN_PARTITIONS = "spark.statestore.keepOpen.partitions"
KEEP_OPEN_IDLE = "spark.statestore.keepOpen.idleSeconds"

_UNITS = {"": 1, "b": 1, "k": 1 << 10, "kb": 1 << 10, "m": 1 << 20, "mb": 1 << 20, "g": 1 << 30, "gb": 1 << 30, "t": 1 << 40, "tb": 1 << 40}
_SIZE = re.compile(r"^\s*(-?[0-9]{1,30})\s*([a-zA-Z]*)\s*$")


def parse_bytes(key: str, value: str, minimum: int) -> int:
    """A byte size (`10485760`, `10m`, `64mb`) of at least `minimum`."""
    match = _SIZE.match(str(value))
    unit = match.group(2).lower() if match else None
    if not match or unit not in _UNITS:
        raise ValueError(f"{key} must be a byte size such as 10485760 or 10m, got {value!r}")
    number = int(match.group(1)) * _UNITS[unit]
    if number < minimum:
        raise ValueError(f"{key} must be at least {minimum}, got {value!r}")
    return number


def parse_port(key: str, value: str) -> int:
    port = parse_int(key, value, 0)
    if port > 65535:
        raise ValueError(f"{key} must be a port number in 0..65535, got {value!r}")
    return port


def parse_isolation(key: str, value: str) -> IsolationLevel:
    try:
        return IsolationLevel.parse(value, key)
    except ValueError:
        raise ValueError(f"{key} must be READ_COMMITTED or READ_UNCOMMITTED, got {value!r}") from None


def parse_local_dir(key: str, value: str | None) -> str | None:
    if value is not None and not value.strip():
        raise ValueError(f"{key} must be a directory path, got {value!r}")
    return value


PROVIDER_CLASS = "spark.sql.streaming.stateStore.providerClass"
ROCKSDB_PROVIDER = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"


def check_rocksdb_provider(get: Callable[[str], str | None]) -> None:
    """transformWithStateInPandas and transformWithState run only on Spark's RocksDB state
    store provider; say so when the processor is built, naming the key, rather than let the
    first batch die with Spark's own error, which does not name it."""
    value = get(PROVIDER_CLASS)
    if value != ROCKSDB_PROVIDER:
        given = repr(value) if value else "nothing (Spark's default, HDFSBackedStateStoreProvider)"
        raise ValueError(
            f"transformWithStateInPandas and transformWithState need {PROVIDER_CLASS}={ROCKSDB_PROVIDER} (in the session's conf, "
            f"or conf/spark-defaults.conf with --properties-file), got {given}"
        )


def session_conf(spark: Any) -> Callable[[str], str | None]:
    """A lookup of a session's configuration keys (None: not set)."""

    def get(key: str) -> str | None:
        return spark.conf.get(key, None)

    return get


@dataclass(frozen=True)
class Setting:
    """One `spark.statestore.*` key: its default (as Spark would hold it, or None: unset)
    and how its value is read and checked."""

    key: str
    field: str
    default: str | None
    parse: Callable[[str, Any], Any]


_PROTOCOL = PartitionOptions()  # the partition protocol's defaults, which its settings share
SETTINGS = (
    Setting(ISOLATION_LEVEL, "isolation_level", "READ_COMMITTED", parse_isolation),
    Setting(CACHE_MAX_BYTES, "cache_max_bytes", "10485760", lambda k, v: parse_bytes(k, v, 0)),
    Setting(
        UNCOMMITTED_MAX_BYTES,
        "uncommitted_max_bytes",
        str(DEFAULT_UNCOMMITTED_MAX_BYTES),
        lambda k, v: parse_bytes(k, v, -1),
    ),
    Setting(SNAPSHOT_INTERVAL, "snapshot_interval", str(_PROTOCOL.snapshot_interval), lambda k, v: parse_int(k, v, 1)),
    Setting(
        SNAPSHOT_COLUMNS, "snapshot_columns", "true" if _PROTOCOL.snapshot_columns else "false", parse_bool
    ),
    Setting(
        MIN_BATCHES_TO_RETAIN, "min_batches_to_retain", str(_PROTOCOL.min_batches_to_retain),
        lambda k, v: parse_int(k, v, 1),
    ),
    Setting(LOCAL_DIR, "local_dir", None, parse_local_dir),
    Setting(LOCK_TIMEOUT, "lock_timeout", str(int(_PROTOCOL.lock_timeout)), lambda k, v: float(parse_int(k, v, 0))),
    Setting(ROCKSDB_MEMORY_BYTES, "rocksdb_memory_bytes", "268435456", lambda k, v: parse_bytes(k, v, 1 << 20)),
    Setting(EARLY_TRIGGER_ENABLED, "early_trigger_enabled", "true", parse_bool),
    Setting(SIGNAL_PORT, "signal_port", "0", parse_port),
    Setting(ADMISSION, "admission", "true", parse_bool),
    Setting(LOCAL_MAX_IDLE, "local_max_idle_seconds", "3600", lambda k, v: float(parse_int(k, v, 0))),
    Setting(KEEP_OPEN_PARTITIONS, "keep_open_partitions", "8", lambda k, v: parse_int(k, v, 0)),
    Setting(KEEP_OPEN_IDLE, "keep_open_idle_seconds", "30", lambda k, v: float(parse_int(k, v, 0))),
)
DEFAULTS = {s.key: s.default for s in SETTINGS if s.default is not None}
PREFIX = "spark.statestore."
# Keys the JVM shim's plugin publishes in the driver's conf (never set by a user).
PUBLISHED = (TARGET_KEY, SECRET_KEY)
KNOWN_KEYS = tuple(s.key for s in SETTINGS) + PUBLISHED


def check_keys(keys: Iterable[str]) -> None:
    """Refuse a `spark.statestore.*` key that nothing reads, naming the closest known key:
    a misspelled setting would otherwise keep its default without a word."""
    by_lower = {key[len(PREFIX):].lower(): key for key in KNOWN_KEYS}  # compared without the common prefix
    for key in sorted(k for k in keys if k.startswith(PREFIX) and k not in KNOWN_KEYS):
        close = difflib.get_close_matches(key[len(PREFIX):].lower(), list(by_lower), n=1, cutoff=0.6)
        hint = f"; did you mean {by_lower[close[0]]}?" if close else ""
        known = ", ".join(s.key for s in SETTINGS)
        raise ValueError(f"unknown setting {key}{hint} (the spark.statestore settings are: {known})")


@dataclass(frozen=True)
class StateStoreSettings:
    """Checked values of the `spark.statestore.*` settings (build with `from_conf`,
    `from_spark` or `defaults()`)."""

    isolation_level: IsolationLevel
    cache_max_bytes: int
    uncommitted_max_bytes: int
    snapshot_interval: int
    snapshot_columns: bool
    min_batches_to_retain: int
    local_dir: str | None
    lock_timeout: float
    rocksdb_memory_bytes: int
    early_trigger_enabled: bool
    signal_port: int
    admission: bool
    local_max_idle_seconds: float
    keep_open_partitions: int
    keep_open_idle_seconds: float
    task_slots: int = 1
    # the session's `spark.hadoop.fs.s3a.*` keys: how `s3a://` locations are reached
    s3: S3Settings = S3Settings()

    @classmethod
    def from_conf(
        cls, get: Callable[[str], str | None], task_slots: int = 1, keys: Iterable[str] = ()
    ) -> "StateStoreSettings":
        """Settings from a lookup of configuration keys (None = not set), for executors
        that run `task_slots` tasks at once; `keys`: the names set (where the per-bucket
        S3A keys are found)."""
        values = {}
        for setting in SETTINGS:
            found = get(setting.key)
            values[setting.field] = setting.parse(setting.key, setting.default if found is None else found)
        task_cpus(get)  # a bad spark.task.cpus fails here, naming the key
        return cls(task_slots=task_slots, s3=S3Settings.from_conf(get, keys), **values)

    @classmethod
    def defaults(cls) -> "StateStoreSettings":
        return cls.from_conf(lambda key: None)

    @classmethod
    def from_spark(cls, spark: Any) -> "StateStoreSettings":
        """Settings of a SparkSession, classic or Spark Connect, read through `spark.conf`
        alone (a session's conf holds what its SparkConf was started with, too); an
        unknown `spark.statestore.*` key among them is refused (`check_keys`)."""
        keys = list(spark.conf.getAll)
        check_keys(keys)
        get = session_conf(spark)
        settings = cls.from_conf(get, session_task_slots(spark, get), keys)
        object_store.use(settings.s3)  # the driver reads the state (metrics, reader) as the tasks do
        return settings

    def cache_bytes_per_task(self) -> int:
        """This executor's share of `spark.statestore.cache.maxBytes` for one task."""
        return share_per_task(self.cache_max_bytes, self.task_slots)

    def rocksdb_bytes_per_task(self) -> int:
        """This executor's share of `spark.statestore.rocksdb.memoryBytes` for one task
        slot (at least 1 MiB)."""
        return max(1 << 20, share_per_task(self.rocksdb_memory_bytes, self.task_slots))

    def resolve_local_dir(self) -> str:
        """Where local RocksDB copies live in this process: the configured directory, else
        next to Spark's local directories (they survive the application, so a restart on
        the same machine finds its copies), else the system temporary directory."""
        if self.local_dir:
            return self.local_dir
        spark_dirs = os.environ.get("SPARK_LOCAL_DIRS") or os.environ.get("LOCAL_DIRS")
        if spark_dirs:
            first = spark_dirs.split(",")[0].rstrip("/")
            return os.path.join(os.path.dirname(first) or first, "spark-statestore")
        return os.path.join(tempfile.gettempdir(), "spark-statestore")
