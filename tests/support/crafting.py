"""Changelogs crafted to pass their checksums: rewritten with another header or extra
records, or with a trailer that lies, for the tests of what verifies but must be refused."""

from __future__ import annotations

import io
import struct
import zlib
from pathlib import Path

from spark_statestore.checkpoint.changelog import Changelog, ChangelogWriter
from spark_statestore.checkpoint.changelog_header import ChangelogHeader
from spark_statestore.checkpoint.records import RANGES


def rewrite(path: str, header: ChangelogHeader, extra: list[tuple], first: list[tuple] = ()) -> None:
    """Write changelog `path` again with `header`: `first` range deletions, its own records,
    then `extra` (store, key, value) records, with a valid checksum and id."""
    original = list(Changelog(path, 3).entries())
    out = io.BytesIO()
    writer = ChangelogWriter(out, header)
    for store, lo, hi in first:
        writer._blocks(RANGES, store, (lo,), (hi,))  # past the writer's own lo <= hi check
    for store, key, value in original + extra:
        writer.put(store, key, value)
    writer.finish()
    Path(path).write_bytes(out.getvalue())


def retrail(path: str, count_delta: int = 0, ident: int | None = None) -> None:
    """Rewrite the trailer of `path` with another record count and/or id, checksum recomputed."""
    raw = Path(path).read_bytes()
    body, trailer = raw[:-24], raw[-24:]
    magic, count, old_id, _ = struct.unpack(">4sQQI", trailer)
    end = struct.pack(">4sQQ", magic, count + count_delta, old_id if ident is None else ident)
    Path(path).write_bytes(body + end + struct.pack(">I", zlib.crc32(end, zlib.crc32(body))))
