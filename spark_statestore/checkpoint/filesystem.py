"""The durable side of a partition's state, through `pyarrow.fs`.

`resolve_location` turns a checkpoint location (a local path, `file://`, `s3://` (or
Hadoop's `s3a://`), `hdfs://`, `gs://`) into a pyarrow filesystem and a path.
`DurableDir` holds the files of one partition under `<location>/statestore/<partition>/`
and publishes every file atomically: on filesystems with an atomic rename (local, HDFS)
it writes a temporary name and renames it; on object stores (S3, GCS) one put of the
whole object is atomic already. Readers therefore never see half a file.
"""

from __future__ import annotations

import json
import os
import shutil
import time
import uuid
from typing import Any, Iterable
from urllib.parse import urlparse

import pyarrow.fs as pafs

_RENAMING = {"local", "hdfs"}
_TEMP_PREFIX = ".tmp-"
_COPY_BYTES = 1 << 20


def resolve_location(location: str, filesystem: pafs.FileSystem | None = None) -> tuple[pafs.FileSystem, str]:
    """The filesystem and path of a checkpoint location."""
    if not isinstance(location, str) or not location:
        raise ValueError(f"checkpoint location must be a non-empty string, got {location!r}")
    if filesystem is not None:
        parsed = urlparse(location)
        path = parsed.path if parsed.scheme else location
        if parsed.scheme and parsed.scheme not in ("file",) and parsed.netloc:
            path = f"{parsed.netloc}{parsed.path}"
        return filesystem, path.rstrip("/") or "/"
    scheme = urlparse(location).scheme
    if scheme in ("", "file"):
        path = urlparse(location).path if scheme else location
        return pafs.LocalFileSystem(), os.path.abspath(path)
    if scheme in ("s3a", "s3n"):
        location = "s3" + location[len(scheme) :]
    try:
        fs, path = pafs.FileSystem.from_uri(location)
    except Exception as e:  # pyarrow raises ArrowInvalid / ArrowNotImplementedError / OSError
        raise ValueError(f"checkpoint location {location!r} is not a filesystem pyarrow can open: {e}") from e
    return fs, path.rstrip("/")


class DurableDir:
    """The durable files of one partition; names are relative to its root."""

    def __init__(self, fs: pafs.FileSystem, root: str) -> None:
        self.fs = fs
        self.root = root.rstrip("/")
        self._renames = fs.type_name in _RENAMING
        self._made_dirs: set[str] = set()

    def __repr__(self) -> str:
        return f"DurableDir({self.fs.type_name}:{self.root})"

    def path(self, name: str) -> str:
        return f"{self.root}/{name}"

    def uri(self, name: str) -> str:
        """A readable location of `name` for error messages."""
        prefix = "" if self.fs.type_name == "local" else f"{self.fs.type_name}://"
        return prefix + self.path(name)

    def _ensure_parent(self, path: str) -> None:
        parent = path.rsplit("/", 1)[0]
        if self._renames and parent not in self._made_dirs:  # object stores have no directories
            self.fs.create_dir(parent, recursive=True)
            self._made_dirs.add(parent)

    def _publish(self, name: str, write) -> pafs.FileInfo:
        final = self.path(name)
        self._ensure_parent(final)
        if not self._renames:
            with self.fs.open_output_stream(final) as out:
                write(out)
            return self.fs.get_file_info(final)
        directory, base = final.rsplit("/", 1)
        temp = f"{directory}/{_TEMP_PREFIX}{uuid.uuid4().hex}-{base}"
        try:
            with self.fs.open_output_stream(temp) as out:
                write(out)
            try:
                self.fs.move(temp, final)
            except OSError:
                if self.fs.type_name != "hdfs":
                    raise
                self.fs.delete_file(final)  # HDFS renames do not replace
                self.fs.move(temp, final)
        except BaseException:
            try:
                self.fs.delete_file(temp)
            except OSError:
                pass
            raise
        return self.fs.get_file_info(final)

    def publish_file(self, name: str, local_path: str) -> pafs.FileInfo:
        """Copy a local file to `name`, atomically; returns the published file's info."""

        def write(out) -> None:
            with open(local_path, "rb") as src:
                shutil.copyfileobj(src, out, _COPY_BYTES)

        return self._publish(name, write)

    def publish_bytes(self, name: str, data: bytes) -> pafs.FileInfo:
        return self._publish(name, lambda out: out.write(data))

    def read_bytes(self, name: str) -> bytes:
        with self.fs.open_input_stream(self.path(name)) as src:
            return src.read()

    def read_range(self, name: str, offset: int, nbytes: int) -> bytes:
        """Up to `nbytes` of `name` from `offset` (one ranged read on object stores)."""
        with self.fs.open_input_file(self.path(name)) as src:
            return src.read_at(nbytes, offset)

    def download(self, name: str, local_path: str) -> None:
        """Copy `name` to a local file (through a temporary name)."""
        temp = f"{local_path}.part"
        with self.fs.open_input_stream(self.path(name)) as src, open(temp, "wb") as out:
            while True:
                chunk = src.read(_COPY_BYTES)
                if not chunk:
                    break
                out.write(chunk)
        os.replace(temp, local_path)

    def list(self, subdir: str = "") -> list[pafs.FileInfo]:
        """Files directly under `subdir` (temporary files excluded); [] if it is missing."""
        base = self.path(subdir) if subdir else self.root
        selector = pafs.FileSelector(base, allow_not_found=True, recursive=False)
        return [
            info
            for info in self.fs.get_file_info(selector)
            if info.type == pafs.FileType.File and not info.base_name.startswith(_TEMP_PREFIX)
        ]

    def size(self, name: str) -> int:
        """The size of `name` in bytes (`FileNotFoundError` if it does not exist)."""
        info = self.fs.get_file_info(self.path(name))
        if info.type != pafs.FileType.File:
            raise FileNotFoundError(self.uri(name))
        return info.size

    def exists(self, name: str) -> bool:
        return self.fs.get_file_info(self.path(name)).type == pafs.FileType.File

    def delete(self, names: Iterable[str]) -> int:
        """Delete files (missing ones are fine); returns how many were deleted."""
        deleted = 0
        for name in names:
            try:
                self.fs.delete_file(self.path(name))
                deleted += 1
            except FileNotFoundError:
                pass
        return deleted

    def delete_dir(self, subdir: str) -> None:
        """Delete a directory and its files (missing is fine)."""
        for info in self.list(subdir):
            self.fs.delete_file(info.path)
        if self.fs.type_name in _RENAMING:
            try:
                self.fs.delete_dir(self.path(subdir))
            except (FileNotFoundError, OSError):
                pass

    def delete_stale_temporaries(self, subdir: str = "", older_than: float = 3600.0) -> int:
        """Remove temporary files a crashed publish left behind."""
        base = self.path(subdir) if subdir else self.root
        selector = pafs.FileSelector(base, allow_not_found=True, recursive=False)
        now = time.time()
        stale = [
            info.path
            for info in self.fs.get_file_info(selector)
            if info.base_name.startswith(_TEMP_PREFIX)
            and info.mtime is not None
            and now - info.mtime.timestamp() > older_than
        ]
        for path in stale:
            self.fs.delete_file(path)
        return len(stale)


def small_json(data: bytes, limit: int) -> Any:
    """The JSON document in `data`, read as a file of at most `limit` bytes (one byte more
    was asked for, to tell); `ValueError` saying what is wrong."""
    if len(data) > limit:
        raise ValueError(f"is larger than {limit} bytes")
    try:
        return json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"is not JSON ({e})") from None
