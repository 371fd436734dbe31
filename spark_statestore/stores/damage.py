"""Damaged RocksDB data: the error to raise for it, and the marker that keeps a damaged
copy from being opened again (its owner rebuilds it from a durable copy)."""

from __future__ import annotations

import os
import re

from spark_statestore.errors import CorruptStateError

# written into a database directory once RocksDB reported damaged data in it
DAMAGE_MARKER = "DAMAGE-REPORTED"
_DAMAGED_FILE = re.compile(r"(/\S+?\.(?:sst|log|blob))\b")


def storage_error(error: BaseException) -> BaseException:
    """The error to raise for an exception from rocksdict: data corruption (block
    checksum mismatches, truncated files) becomes `CorruptStateError` naming the file, and
    the database directory is marked damaged; anything else is returned unchanged."""
    if type(error) is not Exception:
        return error
    text = str(error)
    if not text.startswith(("Corruption", "IO error")):
        return error
    match = _DAMAGED_FILE.search(text)
    where = "a RocksDB database"
    if match is not None:
        where = match.group(1)
        directory = os.path.dirname(where)
        if os.path.isdir(directory):
            try:
                with open(os.path.join(directory, DAMAGE_MARKER), "w") as marker:
                    marker.write(text)
            except OSError:
                pass
    damaged = CorruptStateError(f"RocksDB cannot read {where}: {text}")
    damaged.__cause__ = error
    return damaged
