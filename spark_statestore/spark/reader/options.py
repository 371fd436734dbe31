"""The options of `format("spark_statestore")` and their checks, in a module of the
standard library alone, pickled by value with the source's class (`source_class`).

Spark plans every `load()` in a new Python worker that unpickles the data source class;
by reference that imports `spark_statestore` (the stores, RocksDB, pandas and the
operator adapters: about half a second). `register_reader` registers `source_class` and
this module by value (`pyspark.cloudpickle.register_pickle_by_value`), so a worker imports nothing of the package until the options pass these checks and the
location holds state: a refused `load()` costs what a bare Python source's costs. Names
of the package are imported inside the methods that need them, after those checks.
"""

from __future__ import annotations

import difflib
import os
import re
from typing import Any
from urllib.parse import urlparse


FORMAT = "spark_statestore"
METADATA_FORMAT = "spark_statestore_metadata"
# every option the formats read (Spark passes `path` for `load(path)`)
OPTIONS = (
    "path",
    "checkpointLocation",
    "store",
    "batchId",
    "isolationLevel",
    "readChangeFeed",
    "changeStartBatchId",
    "changeEndBatchId",
    "startingBatchId",
    "maxBatchesPerTrigger",
    "maxRowsPerTrigger",
)
_BOOLEANS = {"true": True, "false": False}
_INTEGER = re.compile(r"[+-]?[0-9]{1,30}")  # ASCII digits only; 30 of them is far beyond any setting
_ISOLATION_LEVELS = ("READ_COMMITTED", "READ_UNCOMMITTED")


def parse_int(key: str, value: str, minimum: int) -> int:
    """An integer in ASCII digits, with an optional sign and surrounding spaces (Python's
    `int` would also take `3_0` as 30 and other scripts' digits)."""
    text = str(value).strip()
    if not _INTEGER.fullmatch(text):
        raise ValueError(f"{key} must be an integer, got {value!r}")
    number = int(text)
    if number < minimum:
        raise ValueError(f"{key} must be at least {minimum}, got {value!r}")
    return number


def parse_bool(key: str, value: str) -> bool:
    found = _BOOLEANS.get(str(value).strip().lower())
    if found is None:
        raise ValueError(f"{key} must be true or false, got {value!r}")
    return found


def option(options: Any, name: str, default: Any = None) -> Any:
    """An option by its case-insensitive name (Spark's options are)."""
    value = options.get(name.lower(), options.get(name))
    return default if value is None else value


def int_option(options: Any, name: str, default: int | None = None, minimum: int = 0) -> int | None:
    """An integer option of at least `minimum` (ValueError naming the option and the value)."""
    raw = option(options, name)
    return default if raw is None else parse_int(f"option {name}", raw, minimum)


def bool_option(options: Any, name: str, default: bool = False) -> bool:
    """A boolean option, `true` or `false` in any case (ValueError naming the option, the
    value and the accepted ones: `yes`, `1` or a typo are not taken for false)."""
    raw = option(options, name)
    return default if raw is None else parse_bool(f"option {name}", raw)


# the options with a value of their own kind, checked whatever the read (`check_option_values`)
INT_OPTIONS = {
    "batchId": 0,
    "changeStartBatchId": 0,
    "changeEndBatchId": 0,
    "startingBatchId": 0,
    "maxBatchesPerTrigger": 1,
    "maxRowsPerTrigger": 1,
}
STREAM_OPTIONS = ("startingBatchId", "maxBatchesPerTrigger", "maxRowsPerTrigger")
RANGE_OPTIONS = ("changeStartBatchId", "changeEndBatchId")


def check_option_values(options: Any) -> None:
    """Every option given has a value of its kind (at `load()`, for batch reads and streams
    alike: Spark asks a source for its schema there, before anything says which read it
    is): integers in ASCII digits at or above their minimum, booleans, isolation levels
    (`IsolationLevel.parse`'s names); options that belong to another kind of read are
    refused, naming it."""
    for name, minimum in INT_OPTIONS.items():
        int_option(options, name, None, minimum)
    changes = bool_option(options, "readChangeFeed")
    raw = option(options, "isolationLevel")
    isolation = None if raw is None else str(raw).strip().upper()
    if isolation is not None and (not isinstance(raw, str) or isolation not in _ISOLATION_LEVELS):
        raise ValueError(f"option isolationLevel must be READ_COMMITTED or READ_UNCOMMITTED, got {raw!r}")
    given = [name for name in (*STREAM_OPTIONS, *RANGE_OPTIONS) if option(options, name) is not None]
    if not changes and given:
        raise ValueError(f"option {given[0]} goes with readChangeFeed=true (a read of changes); this reads records")
    if changes and option(options, "batchId") is not None:
        raise ValueError(
            "option batchId reads records as of a batch; the change feed reads the batches changeStartBatchId.."
            "changeEndBatchId (or a stream from startingBatchId)"
        )
    if changes and isolation == "READ_UNCOMMITTED":
        raise ValueError("option isolationLevel READ_UNCOMMITTED does not apply to the change feed: it reads committed batches")
    if option(options, "maxBatchesPerTrigger") is not None and option(options, "maxRowsPerTrigger") is not None:
        raise ValueError("options maxBatchesPerTrigger and maxRowsPerTrigger cannot go together: give one of them")


def refuse_options(options: Any, names: tuple[str, ...], why: str) -> None:
    """Refuse the first of `names` that is given, saying `why` it does not apply."""
    for name in names:
        if option(options, name) is not None:
            raise ValueError(f"option {name} {why}")


def check_option_names(options: Any, known: tuple[str, ...], source: str) -> None:
    """Refuse an option `source` does not read, naming the closest one it does."""
    by_lower = {name.lower(): name for name in known}
    for given in options:
        if str(given).lower() in by_lower:
            continue
        close = difflib.get_close_matches(str(given).lower(), list(by_lower), n=1, cutoff=0.6)
        hint = f"; did you mean {by_lower[close[0]]}?" if close else ""
        raise ValueError(f"the {source} source has no option {given!r}{hint} (its options: {', '.join(known)})")


def checked_location(options: Any) -> str:
    """The location a read names, its options checked; on a local filesystem, refused
    (as `StateLocation.open` refuses it) where it holds no state."""
    check_option_names(options, OPTIONS, FORMAT)
    check_option_values(options)
    location = option(options, "checkpointLocation") or option(options, "path")
    if not location:
        raise ValueError(f"the {FORMAT} source needs option checkpointLocation (the query's checkpoint location)")
    parsed = urlparse(str(location))
    if parsed.scheme in ("", "file"):
        layout = os.path.join(os.path.abspath(parsed.path if parsed.scheme else str(location)), "statestore", "_layout")
        if not os.path.lexists(layout):
            raise ValueError(f"there is no spark_statestore state under {location} (no {layout})")
    return str(location)
