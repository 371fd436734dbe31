"""The names of the state's durable files and how each is made.

Under the query's checkpoint location::

    commits/<N>                         Spark's commit log: batch N committed
    statestore/_layout                  the stores, partition count and generations
    statestore/<partition>/             one partition's durable state (`partition_dir`):
        <V>.changelog                   the changelog that produced version V
        <V>.<id, 16 hex>.changelog      one set aside by a later attempt of batch V
        <V>.<id, 16 hex>.metrics        the metrics record of the attempt that published the
                                        changelog of V with that id (`metrics_name`)
        snapshots/<V>.manifest          the snapshot of version V (written last)
        snapshots/<V>/<file>            its small files
        sst/<sha256 prefix>-<size>.sst  its SST files, shared between snapshots
    statestore/_batches/<N>.json        the driver's facts of batch N (`batch_facts_name`),
                                        written by the JVM shim's listener

After a rescale, generation k's partitions are in `statestore/_g<k>/<partition>/`.
The local copy of a partition keeps its prepared changelogs under the same names.
`files.py` has the kinds of a partition's files in one table (each name's pattern here,
what it parses to there), and lists them. Parsing is strict: a version is a decimal without leading zeros, so a name this package
does not write (`007.changelog`, `².changelog`, `notes.txt`) is never taken for one.
"""

from __future__ import annotations

import re

STATESTORE = "statestore"
COMMITS = "commits"
SNAPSHOTS = "snapshots"
SHARED = "sst"
QUERY_LAYOUT = "_layout"  # in the state's directory: the stores and partition count of the query
BATCHES = "_batches"  # in the state's directory: per-batch facts of the driver
GENERATION_PREFIX = "_g"  # statestore/_g<k>/: the partitions of generation k (a rescale's)

_VERSION = r"(0|[1-9][0-9]{0,18})"
_NUMBER = re.compile(rf"^{_VERSION}$")
# the patterns of the base names of a partition's durable files (`files.KINDS` has what each is)
CHANGELOG = re.compile(rf"^{_VERSION}\.changelog$")
ASIDE = re.compile(rf"^{_VERSION}\.([0-9a-f]{{16}})\.changelog$")
METRICS = re.compile(rf"^{_VERSION}\.([0-9a-f]{{16}})\.metrics$")
MANIFEST = re.compile(rf"^{_VERSION}\.manifest$")
SNAPSHOT_FILE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,127}$")
COLUMNS_FILE = "COLUMNS.arrow"  # a snapshot's records as Arrow columns (snapshot_columns), among its own files
COLUMNS = re.compile(rf"^{re.escape(COLUMNS_FILE)}$")
SHARED_BASE = re.compile(r"^[0-9a-f]{32}-[0-9]{1,15}\.sst$")
_BATCH_FACTS = re.compile(rf"^{_VERSION}\.json$")


def statestore_dir(root: str) -> str:
    """The state's directory under the checkpoint location `root` (a directory per partition)."""
    return f"{root}/{STATESTORE}"


def generation_dir(root: str, generation: int) -> str:
    """The directory of the partition directories of `generation` (0: the state's own)."""
    if generation == 0:
        return statestore_dir(root)
    return f"{statestore_dir(root)}/{GENERATION_PREFIX}{generation}"


def partition_dir(root: str, partition: int, generation: int = 0) -> str:
    """The durable directory of `partition` (of `generation`) under the checkpoint location `root`."""
    return f"{generation_dir(root, generation)}/{partition}"


def commits_dir(root: str) -> str:
    """Spark's commit log under the checkpoint location `root` (`commit_name` files)."""
    return f"{root}/{COMMITS}"


def commit_name(batch: int) -> str:
    """The commit log's file for `batch` (it exists once the driver committed the batch)."""
    return str(batch)


def changelog_name(version: int) -> str:
    return f"{version}.changelog"


def aside_name(version: int, ident: int) -> str:
    """Where a durable changelog of `version` with id `ident` is kept when another attempt
    of the same batch publishes over it (see `changelog.publish_changelog`)."""
    return f"{version}.{ident:016x}.changelog"


def metrics_name(version: int, ident: int) -> str:
    """The metrics record of the attempt whose changelog of `version` has id `ident`."""
    return f"{version}.{ident:016x}.metrics"


def batch_facts_name(batch: int) -> str:
    """The driver's facts of `batch`, relative to the state's directory (`statestore_dir`)."""
    return f"{BATCHES}/{batch}.json"


def batch_facts_batch(name: str) -> int | None:
    """The batch of a facts file's base name (None for names the shim does not write)."""
    match = _BATCH_FACTS.match(name)
    return None if match is None else int(match.group(1))


def manifest_name(version: int) -> str:
    return f"{SNAPSHOTS}/{version}.manifest"


def snapshot_dir(version: int) -> str:
    """The directory of the snapshot of `version`'s own (not shared) files."""
    return f"{SNAPSHOTS}/{version}"


def snapshot_file_name(version: int, name: str) -> str:
    return f"{snapshot_dir(version)}/{name}"


def shared_file_name(sha256: str, size: int) -> str:
    """The content-addressed name of an SST file (its SHA-256 hex digest and size)."""
    return f"{SHARED}/{sha256[:32]}-{size}.sst"


def number_of(name: str) -> int | None:
    """The number that names a commit log file (a batch) or a partition's directory (None
    for any other name)."""
    match = _NUMBER.match(name)
    return None if match is None else int(match.group(1))


def is_snapshot_file(name: object) -> bool:
    """Whether a manifest's local file name is a plain file name (never a path or `..`)."""
    return isinstance(name, str) and SNAPSHOT_FILE.match(name) is not None and ".." not in name


def is_shared_file(name: object) -> bool:
    """Whether a manifest's durable name is a shared SST file's (`shared_file_name`)."""
    prefix = f"{SHARED}/"
    return isinstance(name, str) and name.startswith(prefix) and SHARED_BASE.match(name[len(prefix):]) is not None

