"""The durable file names (`checkpoint/names.py`) and the changelog header type: every name
made parses back, names this package does not write never parse, and a header written
is read back as it was (bad headers refused naming the field)."""

from __future__ import annotations

import pytest

from spark_statestore import CorruptStateError
from spark_statestore.checkpoint import files, names
from spark_statestore.checkpoint.changelog_header import ChangelogHeader, parse_base_id


@pytest.mark.parametrize("version", [0, 7, 10**18])
def test_names_made_parse_back(version):
    assert files.CHANGELOG.parse(names.changelog_name(version)) == version
    assert files.ASIDE.parse(names.aside_name(version, 0xAB)) == (version, 0xAB)
    assert files.METRICS.parse(names.metrics_name(version, 0xAB)) == (version, 0xAB)
    assert files.MANIFEST.parse(names.manifest_name(version).rsplit("/", 1)[1]) == version
    assert names.manifest_name(version) == f"snapshots/{version}.manifest"
    assert names.snapshot_file_name(version, "CURRENT") == f"snapshots/{version}/CURRENT"
    assert names.is_shared_file(names.shared_file_name("ab" * 32, 12))


@pytest.mark.parametrize(
    "name", ["007.changelog", "².changelog", "1a.changelog", "-1.changelog", "notes.txt", "3.manifest"]
)
def test_names_this_package_does_not_write_are_not_changelogs(name):
    assert files.CHANGELOG.parse(name) is None
    assert files.ASIDE.parse(name) is None


def test_other_names_are_refused():
    assert files.ASIDE.parse("3.00ab.changelog") is None  # the id has 16 hex digits
    assert files.MANIFEST.parse("03.manifest") is None
    assert not names.is_shared_file("sst/../x.sst") and not names.is_shared_file(5)
    for bad in ("../x", "a/b", "", ".hidden", None, "x..y"):
        assert not names.is_snapshot_file(bad)
    assert names.is_snapshot_file("000012.sst")


def test_durable_locations():
    assert names.statestore_dir("/ck") == "/ck/statestore" and names.partition_dir("/ck", 3) == "/ck/statestore/3"
    assert names.commits_dir("/ck") == "/ck/commits" and names.commit_name(5) == "5"
    assert [names.number_of(n) for n in ("0", "12", "012", "_layout", "5.compact", "")] == [0, 12, None, None, None, None]


def test_a_header_reads_back_as_written():
    header = ChangelogHeader(2, 7, 6, 0x1234, ("a", "b"), {"partitions": None, "stores": {}})
    raw = header.to_json()
    assert raw == (
        b'{"base_id": 4660, "base_version": 6, "layout": {"partitions": null, "stores": {}}, "partition": 2, '
        b'"stores": ["a", "b"], "version": 7}'
    )  # the bytes are part of the changelog's id: sorted keys, always the same
    assert ChangelogHeader.parse(raw, "c") == header
    assert parse_base_id(raw, "c") == 0x1234


@pytest.mark.parametrize("raw, match", [
    (b"{", r"c has an unreadable header"),
    (b"[1]", r"c has a header that is not an object"),
    (b'{"stores": "a", "version": 1, "base_version": 0, "base_id": 0}', r"c names no stores in its header"),
    (b'{"stores": [], "version": true, "base_version": 0, "base_id": 0}', r"c has no valid version in its header"),
    (b'{"stores": [], "version": 1, "base_version": 0}', r"c has no valid base_id in its header"),
])
def test_a_bad_header_is_refused_naming_the_field(raw, match):
    with pytest.raises(CorruptStateError, match=match):
        ChangelogHeader.parse(raw, "c")


def test_choosing_a_file_reads_only_the_base_id():
    assert parse_base_id(b'{"base_id": 5, "stores": 3}', "c") == 5
    with pytest.raises(CorruptStateError, match=r"c has no valid base_id in its header"):
        parse_base_id(b'{"base_id": "5"}', "c")
