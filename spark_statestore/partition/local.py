"""The local side of a partition's state:
`<local_dir>/<hash of the checkpoint location>/<partition>/` holding the RocksDB copy
(`db/`), prepared changelogs (`changelogs/`) and snapshots being uploaded
(`snapshots/`).

An exclusive lock on the partition directory (an `flock` on its `LOCK` file) is held from
open to close; taking it touches the file, which so says when the copy was last used. It covers more than RocksDB's own lock: a restore may replace a corrupt
database, so nobody else may be in the directory then. A second opener, in this or
another process, waits up to its timeout and then gets `StoreLockedError`.

A process may keep a copy open (and locked) between uses (`OpenCopies`). An opener that
finds the lock taken asks for it: it writes a byte to the copy's `RELEASE` FIFO, which the
keeper listens on, and the keeper releases the copy unless a task of its own is using it.
"""

from __future__ import annotations

import fcntl
import hashlib
import logging
import os
import shutil
import stat
import time

from spark_statestore.checkpoint.files import CHANGELOG
from spark_statestore.checkpoint.names import changelog_name
from spark_statestore.errors import StoreLockedError

log = logging.getLogger("spark_statestore.partition")


class LocalPartitionDir:
    """Paths and the lock of one partition's local state."""

    def __init__(self, local_dir: str, checkpoint_location: str, partition: int) -> None:
        digest = hashlib.sha1(checkpoint_location.encode("utf-8")).hexdigest()[:16]
        self.root = os.path.join(os.path.abspath(local_dir), digest, str(partition))
        self.db_path = os.path.join(self.root, "db")
        self.changelog_dir = os.path.join(self.root, "changelogs")
        self.snapshot_dir = os.path.join(self.root, "snapshots")
        self.release_path = os.path.join(self.root, "RELEASE")
        self._lock_fd: int | None = None

    def changelog(self, version: int) -> str:
        return os.path.join(self.changelog_dir, changelog_name(version))

    def lock(self, timeout: float) -> None:
        """Take the partition's exclusive lock, waiting up to `timeout` seconds. A file where
        the copy's directory or one of its subdirectories should be, or a directory where
        the lock file should be, is removed: the copy is a cache of the durable state."""
        _discard_unless_directory(os.path.dirname(self.root))
        _discard_unless_directory(self.root)
        os.makedirs(self.root, exist_ok=True)
        lock_path = os.path.join(self.root, "LOCK")
        if os.path.isdir(lock_path):
            shutil.rmtree(lock_path, ignore_errors=True)  # never a lock file another opener holds
        fd = os.open(lock_path, os.O_CREAT | os.O_RDWR, 0o644)
        deadline = time.monotonic() + max(timeout, 0.0)
        delay = 0.002
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    os.close(fd)
                    raise StoreLockedError(
                        f"the partition state in {self.root} is held by another task "
                        f"(waited {timeout:.1f}s for its lock)"
                    ) from None
                self.request_release()  # again at every try: the keeper may have been busy
                time.sleep(delay)
                delay = min(delay * 2, 0.25)
                continue
            if _holds_file_at(fd, lock_path):
                break
            # A sweep removed the lock file between our open and our lock: the lock we got
            # guards nothing, and another opener may hold a new file. Open that one.
            os.close(fd)
            os.makedirs(self.root, exist_ok=True)
            fd = os.open(lock_path, os.O_CREAT | os.O_RDWR, 0o644)
        self._lock_fd = fd
        self.touch()
        _discard_unless_directory(self.changelog_dir)
        _discard_unless_directory(self.snapshot_dir)

    def lock_is_current(self) -> bool:
        """Whether the held lock is on the file now at `LOCK` and the database is there
        (the copy's directory was not deleted or replaced while it was held)."""
        if self._lock_fd is None:
            return False
        lock_path = os.path.join(self.root, "LOCK")
        return _holds_file_at(self._lock_fd, lock_path) and os.path.exists(os.path.join(self.db_path, "CURRENT"))

    def touch(self) -> None:
        """Record that the copy is used now (see `sweep_idle_copies`)."""
        if self._lock_fd is not None:
            os.utime(self._lock_fd)

    def request_release(self) -> None:
        """Ask a process that keeps this copy open while idle to release it: one byte into
        the `RELEASE` FIFO. Nothing happens when nobody listens (or something else is there)."""
        try:
            fd = os.open(self.release_path, os.O_WRONLY | os.O_NONBLOCK | os.O_NOFOLLOW)
        except OSError:  # no FIFO, or no reader (ENXIO)
            return
        try:
            if stat.S_ISFIFO(os.fstat(fd).st_mode):
                os.write(fd, b"r")
        except OSError:  # the pipe is full: requests are waiting already
            pass
        finally:
            os.close(fd)

    def listen_for_release(self) -> tuple[int, int]:
        """Open this copy's `RELEASE` FIFO (made if missing; anything else there is
        replaced): a read end that becomes readable when another opener asks for the copy,
        and a write end that keeps the read end from reporting end-of-file. The lock must be
        held; close both with `stop_listening`."""
        if self._lock_fd is None:
            raise RuntimeError(f"the lock of {self.root} is not held")
        path = self.release_path
        try:
            if not stat.S_ISFIFO(os.lstat(path).st_mode):
                _discard(path)
                os.mkfifo(path, 0o600)
        except FileNotFoundError:
            os.mkfifo(path, 0o600)
        read_end = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW)
        try:
            write_end = os.open(path, os.O_WRONLY | os.O_NONBLOCK | os.O_NOFOLLOW)
        except BaseException:
            os.close(read_end)
            raise
        return read_end, write_end

    @staticmethod
    def stop_listening(ends: tuple[int, int]) -> None:
        for fd in ends:
            os.close(fd)

    def unlock(self) -> None:
        """Let the copy go; its last use is now (a holder may have held it for longer than
        a sweep lets a copy sit idle, see `sweep_idle_copies`)."""
        fd = self._lock_fd
        if fd is not None:
            try:
                self.touch()
            except OSError:  # the time is a hint for sweeps: letting go must not fail on it
                pass
            self._lock_fd = None
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)

    @property
    def locked(self) -> bool:
        return self._lock_fd is not None

    def wipe_db(self) -> None:
        """Remove the local database (to restore it from the durable copy), or whatever
        file or link is where it should be."""
        _discard(self.db_path)

    def prepared_versions(self) -> list[int]:
        """Versions of the prepared changelogs kept locally."""
        try:
            names = os.listdir(self.changelog_dir)
        except FileNotFoundError:
            return []
        return sorted(v for v in map(CHANGELOG.parse, names) if v is not None)

    def remove_changelog(self, version: int) -> None:
        try:
            os.remove(self.changelog(version))
        except FileNotFoundError:
            pass


def _holds_file_at(fd: int, path: str) -> bool:
    """Whether the open file `fd` is the file now at `path` (not one removed or replaced)."""
    try:
        now = os.stat(path)
        held = os.fstat(fd)
    except OSError:
        return False
    return (now.st_dev, now.st_ino) == (held.st_dev, held.st_ino)


def _discard(path: str) -> None:
    """Remove what is at `path`: a directory tree, or a file or link itself (not its target)."""
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path, ignore_errors=True)
    else:
        try:
            os.remove(path)
        except FileNotFoundError:
            pass


def _discard_unless_directory(path: str) -> None:
    """Remove a file (or a dangling link) where a directory should be."""
    if not os.path.isdir(path):
        try:
            os.remove(path)
        except OSError:  # nothing there, or another opener made the directory meanwhile
            pass


def sweep_idle_copies(local_dir: str, max_idle_seconds: float) -> list[str]:
    """Delete the local copies under `local_dir` (any query, any partition) that no task
    used for `max_idle_seconds` and that nobody holds now; returns what was deleted.

    On a cluster a partition's next batch often runs on another executor, so copies pile
    up on executors that no longer own their partitions. A deleted copy costs nothing but
    a restore or a catch-up from the durable state if its partition comes back. Ages are
    measured on this host's own clock (the lock file's time against now), so hosts whose
    clocks disagree do not matter. The age is checked again once the lock is held, so a
    copy a task used (and let go) between the first check and the lock is kept."""
    deleted = []
    now = time.time()
    try:
        queries = os.listdir(local_dir)
    except OSError:  # no directory (yet), or not one
        return deleted
    for query in queries:
        query_dir = os.path.join(local_dir, query)
        try:
            partitions = os.listdir(query_dir)
        except OSError:  # not a directory, gone, or not ours
            continue
        for partition in partitions:
            root = os.path.join(query_dir, partition)
            lock_path = os.path.join(root, "LOCK")
            try:
                if now - os.path.getmtime(lock_path) < max_idle_seconds:
                    continue
                fd = os.open(lock_path, os.O_RDWR)
            except OSError:
                continue
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                if not _holds_file_at(fd, lock_path):
                    continue  # another sweep deleted this copy between our open and our lock
                if now - os.fstat(fd).st_mtime < max_idle_seconds:
                    continue  # a task used it (and let go) between our age check and our lock
                for name in os.listdir(root):
                    if name != "LOCK":
                        _discard(os.path.join(root, name))
                os.remove(lock_path)
                deleted.append(root)
            except BlockingIOError:
                continue  # in use right now
            except OSError as e:  # housekeeping: a copy that cannot go now never fails a task
                log.warning("could not delete the idle local copy %s: %s", root, e)
            finally:
                os.close(fd)
    return deleted
