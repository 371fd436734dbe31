"""The local side of a partition's state:
`<local_dir>/<hash of the checkpoint location>/<partition>/` holding the RocksDB copy
(`db/`), prepared changelogs (`changelogs/`) and snapshots being uploaded
(`snapshots/`).

An exclusive lock on the partition directory (an `flock` on its `LOCK` file) is held from
open to close. It covers more than RocksDB's own lock: a restore may replace a corrupt
database, so nobody else may be in the directory then. A second opener, in this or
another process, waits up to its timeout and then gets `StoreLockedError`.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import time

from spark_statestore.checkpoint.snapshots import changelog_version
from spark_statestore.errors import StoreLockedError


class LocalPartitionDir:
    """Paths and the lock of one partition's local state."""

    def __init__(self, local_dir: str, checkpoint_location: str, partition: int) -> None:
        digest = hashlib.sha1(checkpoint_location.encode("utf-8")).hexdigest()[:16]
        self.root = os.path.join(os.path.abspath(local_dir), digest, str(partition))
        self.db_path = os.path.join(self.root, "db")
        self.changelog_dir = os.path.join(self.root, "changelogs")
        self.snapshot_dir = os.path.join(self.root, "snapshots")
        self._lock_fd: int | None = None

    def changelog(self, version: int) -> str:
        return os.path.join(self.changelog_dir, f"{version}.changelog")

    def lock(self, timeout: float) -> None:
        """Take the partition's exclusive lock, waiting up to `timeout` seconds."""
        os.makedirs(self.root, exist_ok=True)
        fd = os.open(os.path.join(self.root, "LOCK"), os.O_CREAT | os.O_RDWR, 0o644)
        deadline = time.monotonic() + max(timeout, 0.0)
        delay = 0.01
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                self._lock_fd = fd
                return
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    os.close(fd)
                    raise StoreLockedError(
                        f"the partition state in {self.root} is held by another task "
                        f"(waited {timeout:.1f}s for its lock)"
                    ) from None
            time.sleep(delay)
            delay = min(delay * 2, 0.25)

    def unlock(self) -> None:
        fd = self._lock_fd
        if fd is not None:
            self._lock_fd = None
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)

    @property
    def locked(self) -> bool:
        return self._lock_fd is not None

    def wipe_db(self) -> None:
        """Remove the local database (to restore it from the durable copy)."""
        shutil.rmtree(self.db_path, ignore_errors=True)

    def prepared_versions(self) -> list[int]:
        """Versions of the prepared changelogs kept locally."""
        try:
            names = os.listdir(self.changelog_dir)
        except FileNotFoundError:
            return []
        return sorted(v for v in map(changelog_version, names) if v is not None)

    def remove_changelog(self, version: int) -> None:
        try:
            os.remove(self.changelog(version))
        except FileNotFoundError:
            pass
