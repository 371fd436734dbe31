"""Changelog files: the change set of one version of a partition's state.

Layout (all integers big-endian)::

    b"SSCL" | u16 format | u32 header length | header (JSON: `ChangelogHeader`)
    body: blocks of records, range deletions first (`records` has the layout)
    b"END!" | u64 record count | u64 id | u32 CRC-32 of every byte before it

The `id` identifies the version the changelog produces by content: a hash of everything
before the trailer, header included, so of the version it builds on (`base_id`) too.
Two attempts of one batch that wrote the same changes on the same base produce the same
id; anything else produces another. It sits in the trailer, so a reader learns it from
the last 24 bytes of the file (one ranged read) without downloading the changelog.

A reader verifies the whole file (magic, format, trailer, checksum, and that the id is
the hash of the content) before handing out a single record, so nothing is ever applied
from a damaged file; records no writer makes (unknown operations or stores, range
deletions after writes or with an end before their start, a count other than the
trailer's) are refused. Format 3 is written; format 2 (interleaved records) is still read.

`publish_changelog` never loses a durable changelog that a later version may build on:
when another attempt of the same batch already published a different changelog of the
version, that one is first kept under `aside_name(version, id)`, so a restore can follow
the chain of identities whichever attempt published last.
"""

from __future__ import annotations

import hashlib
import os
import struct
import zlib
from itertools import repeat
from collections.abc import Container, Iterator, Mapping, Sequence
from typing import BinaryIO

import pyarrow as pa

from spark_statestore.checkpoint.changelog_header import ChangelogHeader, parse_base_id
from spark_statestore.checkpoint.filesystem import DurableDir
from spark_statestore.checkpoint.names import aside_name, changelog_name
from spark_statestore.checkpoint.records import RANGES, WRITES, Block, encode_blocks, read_blocks, read_records_v2
from spark_statestore.errors import CorruptStateError
from spark_statestore.validation import columns_are_bytes, describe

MAGIC = b"SSCL"
TRAILER = b"END!"
FORMAT = 3
READABLE_FORMATS = (2, 3)
_PREFIX = struct.Struct(">4sHI")
_END = struct.Struct(">4sQQI")
_READ_BYTES = 1 << 20
_ID_MASK = (1 << 63) - 1


def _id_of(digest: "hashlib._Hash") -> int:
    """A changelog id from the hash of its content (never 0: 0 is the empty state)."""
    return int.from_bytes(digest.digest(), "big") & _ID_MASK or 1


class ChangelogWriter:
    """Writes one changelog file (a transaction's change sink: records name their store,
    which must be one of the header's `stores`); `finish()` adds the trailer."""

    def __init__(self, out: BinaryIO, header: ChangelogHeader) -> None:
        self._index = {name: i for i, name in enumerate(header.stores)}
        self._out = out
        self._crc = 0
        self._hash = hashlib.blake2b(digest_size=8)
        self._records = 0
        self._writes_started = False
        self.id = 0
        raw = header.to_json()
        self._emit(_PREFIX.pack(MAGIC, FORMAT, len(raw)) + raw)

    def _emit(self, data: bytes) -> None:
        self._crc = zlib.crc32(data, self._crc)
        self._hash.update(data)
        self._out.write(data)

    def _blocks(self, kind: int, store: str, keys: Sequence[bytes], values: Sequence[bytes | None]) -> None:
        """Check everything first (a file is never left with part of a call in it), then write."""
        if self.id:
            raise ValueError("the changelog is finished: nothing can be written after its trailer")
        index = self._index.get(store) if isinstance(store, str) else None
        if index is None:
            raise ValueError(f"store {store!r} is not one of this changelog's stores {list(self._index)}")
        if not isinstance(keys, Sequence) or not isinstance(values, Sequence):
            raise TypeError(f"keys and values must be sequences, got {describe(keys)} and {describe(values)}")
        if len(keys) != len(values):
            raise ValueError(f"{len(keys)} keys and {len(values)} values for store {store!r}")
        if not columns_are_bytes(keys, values):
            raise TypeError(f"keys of store {store!r} must be bytes and its values bytes or None")
        for block in encode_blocks(kind, index, keys, values):
            self._emit(block)
        self._records += len(keys)

    def delete_range(self, store: str, lo: bytes, hi: bytes) -> None:
        """Every key of `store` in [lo, hi) is deleted (range deletions come first)."""
        if self._writes_started:
            raise ValueError("range deletions must be written before the writes")
        if type(lo) is not bytes or type(hi) is not bytes or lo > hi:
            raise ValueError(f"a range deletion needs bytes lo <= hi, got {describe(lo)} and {describe(hi)}")
        self._blocks(RANGES, store, (lo,), (hi,))

    def put(self, store: str, key: bytes, value: bytes | None) -> None:
        """A final value of `key` in `store` (`None` = deleted)."""
        self.put_block(store, (key,), (value,))

    def put_block(self, store: str, keys: Sequence[bytes], values: Sequence[bytes | None]) -> None:
        """The final values of `keys` in `store` (`None` = deleted). A transaction writes
        them in key order, which makes the changelog's id the same for the same change set;
        the reader does not depend on it (a key written twice ends with its last value)."""
        self._writes_started = True
        self._blocks(WRITES, store, keys, values)

    @property
    def records(self) -> int:
        return self._records

    def finish(self) -> int:
        """Write the trailer; returns the changelog's id."""
        if self.id:
            raise ValueError("the changelog is already finished")
        self.id = _id_of(self._hash)
        end = _END.pack(TRAILER, self._records, self.id, 0)[:-4]
        crc = zlib.crc32(end, self._crc)
        self._out.write(end + struct.pack(">I", crc))
        return self.id


def _header_length(prefix: bytes, where: str) -> int:
    """The header length a changelog's prefix gives (the prefix checked)."""
    if len(prefix) < _PREFIX.size:
        raise CorruptStateError(f"{where} is truncated ({len(prefix)} bytes)")
    magic, fmt, header_len = _PREFIX.unpack_from(prefix)
    if magic != MAGIC:
        raise CorruptStateError(f"{where} is not a changelog (magic {magic!r})")
    if fmt not in READABLE_FORMATS:
        raise CorruptStateError(f"{where} has format {fmt}; this version reads formats {READABLE_FORMATS}")
    return header_len


def parse_trailer(tail: bytes, where: str) -> tuple[int, int]:
    """The record count and the id of a changelog from its last 24 bytes (not
    verified)."""
    if len(tail) != _END.size:
        raise CorruptStateError(f"{where} is truncated ({len(tail)} trailer bytes)")
    trailer, count, ident, _ = _END.unpack(tail)
    if trailer != TRAILER:
        raise CorruptStateError(f"{where} has no trailer; it is truncated or not a changelog")
    return count, ident


def durable_changelog_id(durable: DurableDir, name: str, version: int, size: int | None = None) -> int:
    """The id of the durable changelog `name`, from its trailer alone (`size`: as listed;
    if the file was replaced since, it is looked up again). `FileNotFoundError` if it is
    gone; `CorruptStateError` if it has no valid trailer."""
    return durable_changelog_trailer(durable, name, version, size)[1]


def durable_changelog_trailer(durable: DurableDir, name: str, version: int, size: int | None = None) -> tuple[int, int]:
    """The record count and the id of the durable changelog `name` (see `durable_changelog_id`)."""
    where = f"changelog {durable.uri(name)} (version {version})"
    for attempt in range(2):
        if size is None or attempt:
            size = durable.size(name)
        if size < _PREFIX.size + _END.size:
            error = CorruptStateError(f"{where} is truncated ({size} bytes)")
            continue
        try:
            return parse_trailer(durable.read_range(name, size - _END.size, _END.size), where)
        except CorruptStateError as e:
            error = e
    raise error


def durable_changelog_base_id(durable: DurableDir, name: str, version: int) -> int:
    """The `base_id` in the header of the durable changelog `name` (two small ranged reads;
    not verified: use it to choose a file, and verify the file before applying it)."""
    where = f"changelog {durable.uri(name)} (version {version})"
    header_len = _header_length(durable.read_range(name, 0, _PREFIX.size), where)
    return parse_base_id(durable.read_range(name, _PREFIX.size, header_len), where)


def durable_changelog_header(durable: DurableDir, name: str, version: int, partition: int) -> ChangelogHeader:
    """The header of the durable changelog `name` of `partition`, every field checked (two
    small ranged reads; the body is not verified: to check what a file builds on without
    reading it)."""
    where = f"changelog {durable.uri(name)} of partition {partition} (version {version})"
    header_len = _header_length(durable.read_range(name, 0, _PREFIX.size), where)
    return ChangelogHeader.parse(durable.read_range(name, _PREFIX.size, header_len), where)


def publish_changelog(durable: DurableDir, version: int, local_path: str, ident: int, scratch: str) -> object:
    """Publish the local changelog `local_path` (id `ident`) as version `version`; returns
    the published file's info. A different valid changelog of `version` that is already
    durable is first kept under `aside_name` (downloaded to `scratch`, a local directory,
    and named by the id in its own trailer)."""
    name = changelog_name(version)
    try:
        existing = durable_changelog_id(durable, name, version)
    except (FileNotFoundError, CorruptStateError):
        existing = None
    if existing is not None and existing != ident:
        temp = os.path.join(scratch, f"{version}.replaced")
        try:
            durable.download(name, temp)
            kept = Changelog(temp, version)
            durable.publish_file(aside_name(version, kept.id), temp)
        except (FileNotFoundError, CorruptStateError):
            pass  # gone or damaged since: nothing to keep
        finally:
            if os.path.exists(temp):
                os.remove(temp)
    return durable.publish_file(name, local_path)


def follow_chain(
    durable: DurableDir, changelogs: Container[int], asides: Mapping[int, Container[int]], head: int
) -> dict[int, tuple[str, int]]:
    """The file and id of each version below `head` whose set-aside changelog, rather than
    its `N.changelog`, is the one the next version builds on (every other version: its
    `N.changelog`). Versions without set-aside copies cost nothing."""
    chosen: dict[int, tuple[str, int]] = {}
    for version in sorted((v for v in asides if v < head and v + 1 in changelogs), reverse=True):
        later = chosen.get(version + 1, (changelog_name(version + 1), 0))[0]
        try:
            base_id = durable_changelog_base_id(durable, later, version + 1)
        except (FileNotFoundError, CorruptStateError):
            continue  # the later changelog is checked when it is applied
        if base_id in asides[version]:
            chosen[version] = (aside_name(version, base_id), base_id)
    return chosen


class Changelog:
    """A verified changelog file: `header`, `id`, and its records by `ranges()` and `entries()`."""

    def __init__(
        self, path: str, version: int | None = None, partition: int | None = None, source: str | None = None
    ) -> None:
        """Verify the changelog at `path`; `source` names it in errors when `path` is a
        local copy of a durable file (default: `path`)."""
        self.path = path
        where = f"changelog {source or path}" + ("" if version is None else f" (version {version})")
        try:
            size = os.path.getsize(path)
        except OSError as e:
            raise CorruptStateError(f"{where} cannot be read: {e}") from e
        with open(path, "rb") as f:
            prefix = f.read(_PREFIX.size)
            header_len = _header_length(prefix, where)
            if size < _PREFIX.size + header_len + _END.size:
                raise CorruptStateError(f"{where} is truncated ({size} bytes)")
            crc = zlib.crc32(prefix)
            digest = hashlib.blake2b(prefix, digest_size=8)
            header_raw = f.read(header_len)
            crc = zlib.crc32(header_raw, crc)
            digest.update(header_raw)
            remaining = size - _PREFIX.size - header_len - _END.size
            while remaining > 0:
                chunk = f.read(min(remaining, _READ_BYTES))
                if not chunk:
                    raise CorruptStateError(f"{where} is truncated")
                crc = zlib.crc32(chunk, crc)
                digest.update(chunk)
                remaining -= len(chunk)
            end = f.read(_END.size)
        trailer, count, ident, stored_crc = _END.unpack(end)
        if trailer != TRAILER or zlib.crc32(end[:-4], crc) != stored_crc:
            raise CorruptStateError(f"{where} fails its checksum; nothing was applied from it")
        if ident != _id_of(digest):
            raise CorruptStateError(f"{where} has an id ({ident:x}) that is not the hash of its content")
        self.header = ChangelogHeader.parse(header_raw, where)
        self.records = count
        self.format = _PREFIX.unpack_from(prefix)[1]
        self.id = ident
        self._where = where
        self._body_start = _PREFIX.size + header_len
        self._body_end = size - _END.size
        if version is not None and self.header.version != version:
            raise CorruptStateError(f"{where} holds version {self.header.version}")
        if partition is not None and self.header.partition != partition:
            raise CorruptStateError(
                f"{where} belongs to partition {self.header.partition!r}, not to partition {partition}"
            )

    @property
    def version(self) -> int:
        return self.header.version

    @property
    def base_version(self) -> int:
        return self.header.base_version

    @property
    def base_id(self) -> int:
        """The id of the version this changelog builds on (0: the empty state)."""
        return self.header.base_id

    @property
    def stores(self) -> tuple[str, ...]:
        return self.header.stores

    def _blocks(self, ranges_only: bool = False) -> Iterator[Block]:
        read = read_blocks if self.format == FORMAT else read_records_v2
        with open(self.path, "rb") as f:
            yield from read(f, self._body_start, self._body_end, self.stores, self.records, self._where, ranges_only)

    def ranges(self) -> dict[str, list[tuple[bytes, bytes]]]:
        """Range deletions per store (they come first in the file)."""
        out: dict[str, list[tuple[bytes, bytes]]] = {}
        for _, store, starts, ends in self._blocks(ranges_only=True):
            out.setdefault(store, []).extend(zip(_as_list(starts), _as_list(ends)))
        return out

    def write_columns(self) -> Iterator[tuple[str, pa.Array, pa.Array]]:
        """`(store, keys, values)` of the puts and deletes (null), in file order, as binary
        Arrow arrays (format 3: no Python step per record)."""
        for kind, store, keys, values in self._blocks():
            if kind == WRITES:
                yield store, _as_array(keys), _as_array(values)

    def write_blocks(self) -> Iterator[tuple[str, Sequence[bytes], Sequence[bytes | None]]]:
        """`(store, keys, values)` of the puts and deletes (`None`), in file order."""
        for kind, store, keys, values in self._blocks():
            if kind == WRITES:
                yield store, _as_list(keys), _as_list(values)

    def entries(self) -> Iterator[tuple[str, bytes, bytes | None]]:
        """`(store, key, value or None)` for every put and delete, in file order."""
        for store, keys, values in self.write_blocks():
            yield from zip(repeat(store), keys, values)


def _as_list(column: pa.Array | Sequence[bytes | None]) -> Sequence[bytes | None]:
    return column.to_pylist() if isinstance(column, pa.Array) else column


def _as_array(column: pa.Array | Sequence[bytes | None]) -> pa.Array:
    return column if isinstance(column, pa.Array) else pa.array(column, pa.binary())
