"""The durable side of a partition's state, through `pyarrow.fs`.

`resolve_location` turns a checkpoint location (a local path, `file://`, `s3://` (or
Hadoop's `s3a://`), `hdfs://`, `gs://`) into a pyarrow filesystem and a path.
`DurableDir` holds the files of one partition under `<location>/statestore/<partition>/`
and publishes every file atomically: on filesystems with an atomic rename (local, HDFS)
it writes a temporary name and renames it; on object stores (S3, GCS) one put of the
whole object is atomic already. Readers therefore never see half a file.

Durable files are regular files, never anything else: a read opens nothing that is not
one (on a local filesystem a FIFO would block the reader and a symbolic link could lead
out of the checkpoint), and a listing names every durable-looking entry that is not one
(`scan`), so that it is reported instead of being taken for a missing file.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import shutil
import stat
import time
import uuid
from typing import Any, Callable, Iterable, TypeVar
from urllib.parse import urlparse

import pyarrow.fs as pafs

from spark_statestore.checkpoint import object_store
from spark_statestore.errors import CorruptStateError, StoreUnreachableError

log = logging.getLogger(__name__)
_RENAMING = {"local", "hdfs"}
TEMP_PREFIX = ".tmp-"
# an object store request that failed is tried again after 0.2 s, 0.4 s, ... (at most 5 s)
_FIRST_BACKOFF = 0.2
_MAX_BACKOFF = 5.0
_COPY_BYTES = 1 << 20
T = TypeVar("T")


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
    given = location
    if scheme in ("s3a", "s3n"):
        location = "s3" + location[len(scheme) :]
    parsed = urlparse(location)
    if parsed.scheme == "s3" and not parsed.query:
        if not parsed.netloc:
            raise ValueError(f"checkpoint location {given!r} names no bucket")
        return object_store.filesystem(parsed.netloc), f"{parsed.netloc}{parsed.path}".rstrip("/")
    try:
        fs, path = pafs.FileSystem.from_uri(location)
    except Exception as e:  # pyarrow raises ArrowInvalid / ArrowNotImplementedError / OSError
        raise ValueError(f"checkpoint location {location!r} is not a filesystem pyarrow can open: {e}") from e
    return fs, path.rstrip("/")


class NotAFileError(CorruptStateError):
    """A durable name that is not a regular file (a FIFO, a directory, a symbolic link, ...)."""


def _kind(mode: int) -> str | None:
    """What a file of `mode` (an `lstat`'s) is, when it is not a regular file."""
    if stat.S_ISREG(mode):
        return None
    kinds = {stat.S_ISDIR: "a directory", stat.S_ISFIFO: "a FIFO", stat.S_ISSOCK: "a socket",
             stat.S_ISCHR: "a character device", stat.S_ISBLK: "a block device"}  # fmt: skip
    return next((what for test, what in kinds.items() if test(mode)), "not a regular file")


def _link(path: str) -> str:
    """How a symbolic link at `path` is described (where it leads; whether it dangles)."""
    try:
        target = os.readlink(path)
    except OSError:
        target = "?"
    dangling = "" if os.path.exists(path) else ", which does not exist"
    return f"a symbolic link to {target}{dangling}"


class DurableDir:
    """The durable files of one partition; names are relative to its root."""

    def __init__(self, fs: pafs.FileSystem, root: str) -> None:
        self.fs = fs
        self.root = root.rstrip("/")
        self._renames = fs.type_name in _RENAMING
        self._local = fs.type_name == "local"
        self._made_dirs: set[str] = set()
        self._attempts = 1 if self._local else object_store.attempts(self.root.lstrip("/").split("/", 1)[0])

    def __repr__(self) -> str:
        return f"DurableDir({self.fs.type_name}:{self.root})"

    def path(self, name: str) -> str:
        return f"{self.root}/{name}"

    def uri(self, name: str) -> str:
        """A readable location of `name` for error messages."""
        prefix = "" if self.fs.type_name == "local" else f"{self.fs.type_name}://"
        return prefix + self.path(name)

    def _retrying(self, what: str, name: str, action: Callable[[], T]) -> T:
        """`action()`, tried again after a failed request up to the attempts in use
        (`fs.s3a.attempts.maximum`), each retry logged; then `StoreUnreachableError` naming
        `name`. A missing file or one that is not a regular file is an answer, not a failure."""
        attempt = 1
        while True:
            try:
                return action()
            except (FileNotFoundError, NotADirectoryError, IsADirectoryError, NotAFileError):
                raise
            except OSError as e:
                if self._attempts <= 1:
                    raise
                if attempt >= self._attempts:
                    raise StoreUnreachableError(
                        f"{self.uri(name)}: {what} failed {attempt} times, giving up ({e})"
                    ) from e
                delay = min(_MAX_BACKOFF, _FIRST_BACKOFF * 2 ** (attempt - 1))
                log.warning("spark_statestore: %s %s failed (attempt %d of %d), again in %.1f s: %s",
                            what, self.uri(name), attempt, self._attempts, delay, e)
                time.sleep(delay)
                attempt += 1

    def _ensure_parent(self, path: str) -> None:
        parent = path.rsplit("/", 1)[0]
        if self._renames and parent not in self._made_dirs:  # object stores have no directories
            self.fs.create_dir(parent, recursive=True)
            self._made_dirs.add(parent)

    def _publish(self, name: str, write) -> pafs.FileInfo:
        final = self.path(name)
        self._ensure_parent(final)
        if not self._renames:

            def put() -> pafs.FileInfo:
                with self.fs.open_output_stream(final) as out:
                    write(out)
                    size = out.tell()
                # what was put is known: asking the store (a HEAD request) would only repeat it
                return pafs.FileInfo(final, pafs.FileType.File, size=size)

            return self._retrying("writing", name, put)
        directory, base = final.rsplit("/", 1)
        temp = f"{directory}/{TEMP_PREFIX}{uuid.uuid4().hex}-{base}"
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

    def _odd(self, name: str) -> str | None:
        """What `name` is when it is not a regular file reached without a symbolic link from
        this directory's root down (local filesystems; elsewhere: None, and a directory
        fails to open). `FileNotFoundError` naming it if it does not exist."""
        if not self._local:
            return None
        parts = name.split("/") if name else []  # "": the root itself
        paths = [self.root] + [f"{self.root}/{'/'.join(parts[: i + 1])}" for i in range(len(parts))]
        for path in paths:
            try:
                mode = os.lstat(path).st_mode
            except (FileNotFoundError, NotADirectoryError):
                raise FileNotFoundError(f"{self.uri(name)} does not exist") from None
            if stat.S_ISLNK(mode):
                return _link(path) if path == paths[-1] else f"reached through {path}, {_link(path)}"
        return _kind(mode)

    def _regular(self, name: str) -> str:
        """The path of `name`, a regular file (`NotAFileError` naming it and what it is if not)."""
        odd = self._odd(name)
        if odd is not None:
            raise NotAFileError(not_a_file(self.uri(name), odd))
        return self.path(name)

    def _open(self, name: str, ranged: bool = False) -> Any:
        """`name` opened for reading (`ranged`: for reads at an offset), a regular file.
        Locally it is opened without following a link and without blocking, then checked
        again (it may have been replaced since `_regular` looked: a FIFO opened the usual way
        would block until a writer came)."""
        path = self._regular(name)
        if not self._local:
            return self.fs.open_input_file(path) if ranged else self.fs.open_input_stream(path)
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError as e:
            if e.errno != errno.ELOOP:  # ELOOP: O_NOFOLLOW met a link
                raise
            raise NotAFileError(not_a_file(self.uri(name), _link(path))) from None
        odd = _kind(os.fstat(fd).st_mode)
        if odd is not None:
            os.close(fd)
            raise NotAFileError(not_a_file(self.uri(name), odd))
        return os.fdopen(fd, "rb")

    def read_bytes(self, name: str) -> bytes:
        def read() -> bytes:
            with self._open(name) as src:
                return src.read()

        return self._retrying("reading", name, read)

    def read_range(self, name: str, offset: int, nbytes: int) -> bytes:
        """Up to `nbytes` of `name` from `offset` (one ranged read on object stores)."""

        def read() -> bytes:
            with self._open(name, ranged=True) as src:
                src.seek(offset)
                return src.read(nbytes)

        return self._retrying("reading", name, read)

    def download(self, name: str, local_path: str) -> None:
        """Copy `name` to a local file (through a temporary name)."""
        temp = f"{local_path}.part"

        def copy() -> None:
            with self._open(name) as src, open(temp, "wb") as out:
                while True:
                    chunk = src.read(_COPY_BYTES)
                    if not chunk:
                        break
                    out.write(chunk)

        self._retrying("downloading", name, copy)
        os.replace(temp, local_path)

    def list(self, subdir: str = "") -> list[pafs.FileInfo]:
        """Regular files directly under `subdir` (temporary files excluded); [] if it is missing."""
        return self.scan(subdir)[0]

    def scan(self, subdir: str = "", temporaries: bool = False) -> tuple[list[pafs.FileInfo], dict[str, str]]:
        """The regular files directly under `subdir` (as `list`; with `temporaries`, a
        crashed publish's temporary files too), and every other entry's base name with what
        it is (a directory, a FIFO, a symbolic link (never followed), ...)."""
        base = self.path(subdir) if subdir else self.root
        if self._local:
            return self._scan_local(subdir, base, temporaries)
        selector = pafs.FileSelector(base, allow_not_found=True, recursive=False)
        files, others = [], {}
        for info in self._retrying("listing", subdir, lambda: self.fs.get_file_info(selector)):
            if info.base_name.startswith(TEMP_PREFIX) and not temporaries:
                continue
            if info.type == pafs.FileType.File:
                files.append(info)
            else:
                others[info.base_name] = "a directory" if info.type == pafs.FileType.Directory else "not a regular file"
        return files, others

    def _scan_local(
        self, subdir: str, base: str, temporaries: bool
    ) -> tuple[list[pafs.FileInfo], dict[str, str]]:
        """`scan` with `os.scandir`, which sees links as links (pyarrow follows them and leaves
        dangling ones out)."""
        try:
            odd = self._odd(subdir)
        except FileNotFoundError:
            return [], {}
        if odd != "a directory":
            raise NotAFileError(f"{self.uri(subdir) if subdir else self.root} is {odd}, not a directory of durable files")
        files, others = [], {}
        try:
            entries = list(os.scandir(base))
        except (FileNotFoundError, NotADirectoryError):
            return [], {}
        for entry in entries:
            if entry.name.startswith(TEMP_PREFIX) and not temporaries:
                continue
            try:
                info = entry.stat(follow_symlinks=False)
            except FileNotFoundError:
                continue  # deleted since it was listed
            odd = _link(entry.path) if entry.is_symlink() else _kind(info.st_mode)
            if odd is None:
                files.append(pafs.FileInfo(entry.path, pafs.FileType.File, size=info.st_size, mtime_ns=info.st_mtime_ns))
            else:
                others[entry.name] = odd
        return files, others

    def size(self, name: str) -> int:
        """The size of `name` in bytes (`FileNotFoundError` if it does not exist, or is
        not a file: a directory, or on an object store a prefix)."""
        path = self._regular(name)
        if not self._renames:
            # on an object store, one request (a HEAD): `get_file_info` on S3 adds a LIST when the key is
            # missing, to tell a missing name from a prefix, which is not a file either
            return self._retrying("looking up", name, lambda: self._object_size(path))
        info = self.fs.get_file_info(path)
        if info.type != pafs.FileType.File:
            raise FileNotFoundError(self.uri(name))
        return info.size

    def _object_size(self, path: str) -> int:
        with self.fs.open_input_file(path) as src:
            return src.size()

    def exists(self, name: str) -> bool:
        """Whether `name` is a regular file (`NotAFileError` if it is something else)."""
        try:
            self.size(name)
            return True
        except (FileNotFoundError, IsADirectoryError):
            return False

    def delete(self, names: Iterable[str]) -> int:
        """Delete files (missing ones are fine); returns how many were deleted."""
        deleted = 0
        for name in names:
            try:
                self._retrying("deleting", name, lambda: self.fs.delete_file(self.path(name)))  # noqa: B023
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

    def delete_stale_temporaries(self, listed: Iterable[pafs.FileInfo], older_than: float = 3600.0) -> int:
        """Remove the temporary files among `listed` (a `scan` with `temporaries`) that a
        crashed publish left behind: those older than `older_than` seconds."""
        now = time.time()
        stale = [
            info.path
            for info in listed
            if info.base_name.startswith(TEMP_PREFIX)
            and info.mtime is not None
            and now - info.mtime.timestamp() > older_than
        ]
        for path in stale:
            try:
                self.fs.delete_file(path)
            except FileNotFoundError:
                pass  # another retention run took it
        return len(stale)


def not_a_file(uri: str, what: str) -> str:
    """The message of a durable name that is not a regular file."""
    return (
        f"{uri} is {what}, not a regular file: durable files are regular files of the checkpoint "
        f"(nothing else is opened, no link is followed); replace it with the file, or remove it"
    )


def small_json(data: bytes, limit: int) -> Any:
    """The JSON document in `data`, read as a file of at most `limit` bytes (one byte more
    was asked for, to tell); `ValueError` saying what is wrong."""
    if len(data) > limit:
        raise ValueError(f"is larger than {limit} bytes")
    try:
        return json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"is not JSON ({e})") from None
