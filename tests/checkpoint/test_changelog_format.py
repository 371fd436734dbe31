"""The changelog reader and writer on their own: what one writes the other reads back
exactly, across block limits (records and bytes), as Python bytes and as binary Arrow
columns (deletions null); changelogs of format 2 (interleaved
records, written by earlier versions) still read; and bodies no writer makes, in either
format, with valid checksums and ids, are refused naming the file."""

from __future__ import annotations

import hashlib
import random
import struct
import zlib

import pyarrow as pa
import pytest

from spark_statestore import CorruptStateError
from spark_statestore.checkpoint.changelog import Changelog, ChangelogWriter
from spark_statestore.checkpoint.changelog_header import ChangelogHeader
from spark_statestore.checkpoint.records import DELETED, MAX_BLOCK_BYTES, MAX_BLOCK_RECORDS

HEADER = ChangelogHeader(partition=0, version=7, base_version=6, base_id=0, stores=("a", "b"), layout={})
BLOCK = struct.Struct(">BHIII")
RECORD_V2 = struct.Struct(">BHII")


def _written(path, ranges: dict, blocks: list[tuple[str, list, list]]) -> Changelog:
    with open(path, "wb") as out:
        writer = ChangelogWriter(out, HEADER)
        for store, spans in ranges.items():
            for lo, hi in spans:
                writer.delete_range(store, lo, hi)
        for store, keys, values in blocks:
            writer.put_block(store, keys, values)
        ident = writer.finish()
    changelog = Changelog(str(path), 7, 0)
    assert changelog.id == ident
    return changelog


def test_what_is_written_is_read_back_exactly_across_block_limits(tmp_path):
    rng = random.Random(5)
    ranges = {"a": [(b"a0", b"a5")], "b": [(b"", b"\x00"), (b"q", b"r")]}
    blocks = []
    for store, count in (("a", 30_000), ("b", MAX_BLOCK_RECORDS + 5_000)):
        keys = sorted({rng.randbytes(rng.randrange(1, 40)) for _ in range(count)})
        values = [None if rng.random() < 0.2 else rng.randbytes(rng.randrange(300 if store == "a" else 3))
                  for _ in keys]
        blocks.append((store, keys, values))
    big = [b"big"], [b"x" * (MAX_BLOCK_BYTES + 10)]  # one record over the byte budget of a block
    blocks.append(("a", *big))
    blocks.append(("b", [b"empty", b"gone"], [b"", None]))  # an empty value is not a deletion
    changelog = _written(tmp_path / "7.changelog", ranges, blocks)
    expected = [(store, k, v) for store, keys, values in blocks for k, v in zip(keys, values)]
    assert changelog.records == len(expected) + 3
    assert changelog.ranges() == ranges
    assert list(changelog.entries()) == expected
    # blocks hold at most MAX_BLOCK_RECORDS records and about MAX_BLOCK_BYTES bytes
    sizes = [len(keys) for _, keys, _ in changelog.write_blocks()]
    assert max(sizes) <= MAX_BLOCK_RECORDS and len(sizes) > len(blocks)
    assert _column_entries(changelog) == expected


def _column_entries(changelog: Changelog) -> list:
    """`entries()` through `write_columns()`: binary Arrow arrays, null where deleted."""
    out = []
    for store, keys, values in changelog.write_columns():
        assert keys.type == values.type == pa.binary() and keys.null_count == 0
        assert values.null_count == sum(v is None for v in values.to_pylist())
        out += [(store, k, v) for k, v in zip(keys.to_pylist(), values.to_pylist())]
    return out


def test_single_puts_and_blocks_read_back_the_same(tmp_path):
    pairs = [(b"k%03d" % i, None if i % 3 == 0 else b"v" * i) for i in range(100)]
    one = tmp_path / "one"
    with open(one, "wb") as out:
        writer = ChangelogWriter(out, HEADER)
        for key, value in pairs:
            writer.put("b", key, value)
        writer.finish()
    block = _written(tmp_path / "block", {}, [("b", [k for k, _ in pairs], [v for _, v in pairs])])
    assert list(Changelog(str(one)).entries()) == list(block.entries()) == [("b", k, v) for k, v in pairs]


@pytest.mark.parametrize("write, error, match", [
    (lambda w: w.put_block("a", [b"k", b"l"], [b"v"]), ValueError, r"2 keys and 1 values for store 'a'"),
    (lambda w: w.put("zz", b"k", b"v"), ValueError, r"store 'zz' is not one of this changelog's stores \['a', 'b'\]"),
    (lambda w: w.put("a", "k", b"v"), TypeError, r"keys of store 'a' must be bytes and its values bytes or None"),
    (lambda w: w.put("a", b"k", memoryview(b"v")), TypeError, r"values bytes or None"),
    (lambda w: w.put_block("a", [b"%d" % i for i in range(70_000)] + ["str"], [b""] * 70_001), TypeError,
     r"must be bytes"),  # refused before its first block is written
    (lambda w: w.put_block("a", (k for k in [b"k"]), [b"v"]), TypeError, r"keys and values must be sequences"),
    (lambda w: w.delete_range("a", b"z", b"a"), ValueError, r"needs bytes lo <= hi, got bytes: b'z' and bytes: b'a'"),
    (lambda w: w.delete_range("a", b"a", None), ValueError, r"needs bytes lo <= hi"),
    (lambda w: (w.put("a", b"k", b"v"), w.delete_range("a", b"a", b"b")), ValueError,
     r"range deletions must be written before the writes"),
])
def test_a_writer_refuses_what_its_reader_would_refuse_and_the_file_stays_valid(tmp_path, write, error, match):
    path = tmp_path / "7.changelog"
    with open(path, "wb") as out:
        writer = ChangelogWriter(out, HEADER)
        with pytest.raises(error, match=match):
            write(writer)
        writer.put("b", b"after", b"ok")
        writer.finish()
    assert list(Changelog(str(path), 7, 0).entries())[-1] == ("b", b"after", b"ok")


def test_nothing_is_written_after_the_trailer(tmp_path):
    path = tmp_path / "7.changelog"
    with open(path, "wb") as out:
        writer = ChangelogWriter(out, HEADER)
        writer.put("a", b"k", b"v")
        writer.finish()
        with pytest.raises(ValueError, match="finished"):
            writer.put("a", b"l", b"w")
        with pytest.raises(ValueError, match="already finished"):
            writer.finish()
    assert list(Changelog(str(path), 7, 0).entries()) == [("a", b"k", b"v")]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("fmt", [2, 3])
def test_a_file_that_shrinks_after_it_was_verified_is_refused_not_read_forever(tmp_path, fmt):
    body = _v2(1, 0, b"k", b"v" * 100) * 3 if fmt == 2 else _block(0, 0, [b"k"] * 3, [b"v" * 100] * 3)
    path = _file(tmp_path / "7.changelog", fmt, body, 3)
    changelog = Changelog(path, 7, 0)
    with open(path, "r+b") as f:
        f.truncate(len(open(path, "rb").read()) - 150)
    with pytest.raises(CorruptStateError, match=r"7\.changelog.*(truncated|ends inside)"):
        list(changelog.entries())


def _file(path, fmt: int, body: bytes, records: int) -> str:
    """A changelog of format `fmt` around `body`, its trailer counting `records`, with a
    valid checksum and id: only the body is wrong."""
    raw = HEADER.to_json()
    head = struct.pack(">4sHI", b"SSCL", fmt, len(raw)) + raw + body
    ident = int.from_bytes(hashlib.blake2b(head, digest_size=8).digest(), "big") & ((1 << 63) - 1) or 1
    end = struct.pack(">4sQQ", b"END!", records, ident)
    with open(path, "wb") as out:
        out.write(head + end + struct.pack(">I", zlib.crc32(end, zlib.crc32(head))))
    return str(path)


def _block(kind: int, store: int, keys: list[bytes], values: list[bytes | None], *, key_lens=None) -> bytes:
    key_lens = key_lens or [len(k) for k in keys]
    value_lens = [DELETED if v is None else len(v) for v in values]
    data = [v or b"" for v in values]
    return (BLOCK.pack(kind, store, len(keys), sum(map(len, keys)), sum(map(len, data)))
            + struct.pack(f">{len(keys)}I", *key_lens) + struct.pack(f">{len(keys)}I", *value_lens)
            + b"".join(keys) + b"".join(data))


def _v2(op: int, store: int, key: bytes, value: bytes) -> bytes:
    return RECORD_V2.pack(op, store, len(key), len(value)) + key + value


def test_format_2_changelogs_still_read(tmp_path):
    body = _v2(2, 1, b"a", b"c") + _v2(1, 0, b"k", b"v") + _v2(0, 1, b"gone", b"") + _v2(1, 1, b"e", b"")
    changelog = Changelog(_file(tmp_path / "7.changelog", 2, body, 4), 7, 0)
    assert changelog.format == 2
    assert changelog.ranges() == {"b": [(b"a", b"c")]}
    assert list(changelog.entries()) == [("a", b"k", b"v"), ("b", b"gone", None), ("b", b"e", b"")]
    assert _column_entries(changelog) == list(changelog.entries())


PUT = _block(0, 0, [b"k"], [b"v"])


@pytest.mark.parametrize("fmt, body, records, match", [
    (3, _block(2, 0, [b"k"], [b"v"]), 1, r"invalid block \(kind 2, store 0, 1 records\)"),
    (3, _block(0, 2, [b"k"], [b"v"]), 1, r"invalid block \(kind 0, store 2, 1 records\)"),
    (3, BLOCK.pack(0, 0, 0, 0, 0), 0, r"invalid block \(kind 0, store 0, 0 records\)"),
    (3, PUT + _block(1, 0, [b"a"], [b"b"]), 2, r"range deletion after its writes"),
    (3, _block(1, 1, [b"z"], [b"a"]), 1, r"range deletion whose end b'a' comes before its start b'z'"),
    (3, _block(1, 1, [b"z"], [None]), 1, r"range deletion without an end"),
    (3, _block(0, 0, [b"k", b"l"], [b"v", b"w"], key_lens=[2, 1]) , 2, r"key lengths do not add up"),
    (3, PUT + PUT[:9], 2, r"ends inside a block header"),
    (3, PUT + PUT[:-1], 2, r"ends inside a block"),
    (3, PUT + PUT, 3, r"holds 2 records, but its trailer says 3"),
    (3, PUT + PUT, 1, r"holds 2 records, but its trailer says 1"),
    (2, _v2(3, 0, b"k", b"v"), 1, r"invalid record \(op 3, store 0\)"),
    (2, _v2(1, 0, b"k", b"v") + _v2(2, 0, b"a", b"b"), 2, r"range deletion after its writes"),
    (2, _v2(1, 0, b"k", b"v") + RECORD_V2.pack(1, 0, 5, 50) + b"short", 2, r"ends inside a record"),
    (2, _v2(1, 0, b"k", b"v"), 2, r"holds 1 records, but its trailer says 2"),
])
def test_bodies_no_writer_makes_are_refused_naming_the_file(tmp_path, fmt, body, records, match):
    changelog = Changelog(_file(tmp_path / "7.changelog", fmt, body, records), 7, 0)  # checksum and id hold
    with pytest.raises(CorruptStateError, match=rf"changelog .*7\.changelog.*{match}"):
        changelog.ranges()
        list(changelog.entries())


def test_a_block_cannot_claim_more_bytes_than_the_file_holds(tmp_path):
    """A crafted header asking for a huge block is refused before anything is read."""
    body = BLOCK.pack(0, 0, 1 << 30, 1 << 31, 1 << 31) + b"\x00" * 64
    changelog = Changelog(_file(tmp_path / "7.changelog", 3, body, 1 << 30), 7, 0)
    with pytest.raises(CorruptStateError, match=r"7\.changelog.*ends inside a block"):
        list(changelog.entries())
