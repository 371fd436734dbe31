"""`OpenCopies`: local copies a process keeps open between uses of their partitions.

Most of what a task pays to open its partition is fixed: opening RocksDB, and reading back
and applying the changelog the previous batch prepared. When a task prepared its batch,
its database can instead stay open here, locked, with the prepared batch as its pending
transaction. If the same process gets the partition's next batch (a Python worker runs a
partition's batches back to back more often than not) it reuses the open database.

While a copy waits, a thread does the next open's work ahead of it, off the task's path
(`apply_ahead`): it records in the metadata, on disk, that it is applying the prepared
version (a crash may leave some of its writes on disk under the previous version's
metadata; `Recovery` then uses the copy only to re-apply that very version), commits the
pending transaction, and flushes the memtables (data first, metadata last, as closing
would; writing into a full memtable is slower: 10k sorted keys took 1.8 ms into an empty
one and about 9 ms into one of 140k entries, measured). The copy then runs ahead of what
Spark has committed, which the partition protocol allows: a local copy is only ever used
where it lies on the durable history (`Recovery`). When Spark commits the batch, as it
nearly always does, the next open, in this process or any other on the host, finds the
copy at the version it needs. When it does not (the batch is retried, or another
attempt's changelog won), the copy is ahead of or off the durable history and is rebuilt
from the durable state, which costs a restore instead of a rollback. Without
`apply_ahead` the transaction stays pending and the next open commits it (or drops it).

A kept copy is released (its database closed, its lock freed):

* on request: an opener in another process (or another opener in this one) that finds the
  lock taken writes to the copy's `RELEASE` FIFO (`LocalPartitionDir.request_release`),
  and the thread, waiting on the FIFOs of every kept copy, releases it;
* when more than `max_copies` are kept (least recently used first), after `idle_seconds`
  without use, and at `close()`.

Nothing durable depends on a kept copy: a kill loses its memtables (the database has no
write-ahead log) and the next opener catches it up from the durable changelogs, as after
any crash. Keeping a copy open does hold its share of RocksDB memory and its open files.
"""

from __future__ import annotations

import logging
import os
import select
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from spark_statestore.faults import fault_point
from spark_statestore.partition.local import LocalPartitionDir
from spark_statestore.partition.metadata import PartitionMetadata, VersionId
from spark_statestore.txn.database import TransactionalDatabase
from spark_statestore.validation import check_bool, check_int, check_seconds

log = logging.getLogger("spark_statestore.partition")


@dataclass(eq=False)
class OpenCopy:
    """A partition's local copy, open and locked, between two uses.

    `pending` is the version whose changes are the database's open transaction (prepared,
    not yet known to be committed; None once applied ahead); `options` are what the
    database was opened with (a copy is reused only by an opener that would open it the
    same way)."""

    local: LocalPartitionDir
    db: TransactionalDatabase
    pending: VersionId | None
    options: tuple[Any, ...]
    kept_at: float = field(default_factory=time.monotonic)
    ends: tuple[int, int] | None = None  # the RELEASE FIFO, while kept
    settled: bool = False  # the thread did its work on it (applied ahead, flushed)
    busy: threading.Lock = field(default_factory=threading.Lock)  # held while the thread works on it

    def release(self) -> None:
        """Close the database (its open transaction is dropped) and free the lock."""
        try:
            self.db.close()
        finally:
            self.local.unlock()


class OpenCopies:
    """The copies one process keeps open (see module docstring)."""

    def __init__(self, max_copies: int = 8, idle_seconds: float = 30.0, apply_ahead: bool = True) -> None:
        self.max_copies = check_int(max_copies, "max_copies", 0)
        self.idle_seconds = check_seconds(idle_seconds, "idle_seconds")
        self.apply_ahead = check_bool(apply_ahead, "apply_ahead")
        self._copies: dict[str, OpenCopy] = {}  # by local root, least recently kept first
        self._releasing = 0  # copies the thread took out of `_copies` and is releasing now
        self._lock = threading.Lock()
        self._wake_read, self._wake_write = os.pipe()
        os.set_blocking(self._wake_read, False)
        os.set_blocking(self._wake_write, False)
        self._thread: threading.Thread | None = None
        self._closed = False
        self.released_on_request = 0
        self.applied_ahead = 0

    def __len__(self) -> int:
        """The copies held open: kept, or being released by the thread (their locks are
        free once this counts them no more)."""
        with self._lock:
            return len(self._copies) + self._releasing

    def keep(self, copy: OpenCopy) -> bool:
        """Keep `copy` open; False (and nothing kept) when this pool keeps nothing or is closed."""
        if self.max_copies == 0 or self._closed:
            return False
        try:
            copy.ends = copy.local.listen_for_release()
        except OSError as e:  # no FIFO here (an odd filesystem): nobody could ask for it back
            log.warning("cannot keep %s open: %s", copy.local.root, e)
            return False
        copy.kept_at = time.monotonic()
        evicted = []
        with self._lock:
            if self._closed:  # closed meanwhile: its thread is gone
                LocalPartitionDir.stop_listening(copy.ends)
                copy.ends = None
                return False
            self._copies.pop(copy.local.root, None)
            self._copies[copy.local.root] = copy
            while len(self._copies) > self.max_copies:
                evicted.append(self._remove(next(iter(self._copies))))
            self._start()
        self._wake()
        for old in evicted:
            self._release(old, "more copies kept than allowed")
        return True

    def take(self, root: str) -> OpenCopy | None:
        """The copy kept for local root `root`, no longer kept (None if there is none)."""
        with self._lock:
            copy = self._copies.get(root)
            if copy is None:
                return None
            self._remove(root)
        self._wake()
        with copy.busy:  # the thread's work on it finishes first
            pass
        copy.local.touch()
        return copy

    def settle(self, timeout: float = 60.0) -> None:
        """Wait until the thread did its work on every kept copy (for tests and benchmarks
        that need one outcome of the race between that work and the next open)."""
        deadline = time.monotonic() + timeout
        while True:
            with self._lock:
                copies = list(self._copies.values())
            if all(c.settled for c in copies):
                for copy in copies:
                    with copy.busy:
                        pass
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"kept copies did not settle in {timeout}s")
            time.sleep(0.005)

    def discard(self, copy: OpenCopy, why: str) -> None:
        """Release a copy taken from this pool that cannot be used (errors are logged)."""
        self._release(copy, why)

    def close(self) -> None:
        """Release every kept copy and stop the thread (a second call does nothing)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            copies = [self._remove(root) for root in list(self._copies)]
        self._wake()
        for copy in copies:
            self._release(copy, "shutting down")
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=5.0)
            if thread.is_alive():
                return  # still releasing: it keeps its wake-up pipe
        os.close(self._wake_read)
        os.close(self._wake_write)

    # -- the listening thread -----------------------------------------------------------

    def _remove(self, root: str) -> OpenCopy:
        """Stop keeping `root` (the caller holds the pool lock)."""
        copy = self._copies.pop(root)
        if copy.ends is not None:
            LocalPartitionDir.stop_listening(copy.ends)
            copy.ends = None
        return copy

    def _release(self, copy: OpenCopy, why: str) -> None:
        try:
            with copy.busy:  # not while the thread flushes it (rocksdict refuses concurrent use)
                copy.release()
        except Exception as e:  # the copy is a cache: the next opener repairs or rebuilds it
            log.warning("releasing the kept copy %s (%s) failed: %s", copy.local.root, why, e)

    def _wake(self) -> None:
        try:
            os.write(self._wake_write, b"w")
        except BlockingIOError:  # a wake-up is pending already
            pass

    def _start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._listen, name="spark-statestore-open-copies", daemon=True)
            self._thread.start()

    def _listen(self) -> None:
        while True:
            with self._lock:
                if self._closed:
                    return
            if self._work_on_one():
                continue
            with self._lock:
                watched = {c.ends[0]: root for root, c in self._copies.items() if c.ends is not None}
                oldest = min((c.kept_at for c in self._copies.values()), default=None)
            poller = select.poll()
            poller.register(self._wake_read, select.POLLIN)
            for fd in watched:
                poller.register(fd, select.POLLIN)
            timeout = None if oldest is None else max(0.0, oldest + self.idle_seconds - time.monotonic()) * 1000
            ready = [fd for fd, _ in poller.poll(timeout)]
            _drain(self._wake_read)
            requested = []
            now = time.monotonic()
            with self._lock:
                for fd in ready:
                    root = watched.get(fd)
                    copy = self._copies.get(root) if root is not None else None
                    # still kept, and asked for (not a descriptor number reused meanwhile)
                    if copy is not None and copy.ends is not None and copy.ends[0] == fd and _drain(fd):
                        requested.append(self._remove(root))
                idle = [root for root, c in self._copies.items() if now - c.kept_at >= self.idle_seconds]
                expired = [self._remove(root) for root in idle]
                self._releasing = len(requested) + len(expired)
            for copy in requested:
                self.released_on_request += 1
                self._release(copy, "another opener asked for it")
                self._released_one()
            for copy in expired:
                self._release(copy, f"unused for {self.idle_seconds:g}s")
                self._released_one()

    def _released_one(self) -> None:
        with self._lock:
            self._releasing -= 1


    def _work_on_one(self) -> bool:
        """Apply ahead and flush one kept copy the thread has not worked on yet; False if
        there is none."""
        with self._lock:
            copy = next((c for c in self._copies.values() if not c.settled), None)
            if copy is None:
                return False
            copy.settled = True
            copy.busy.acquire()  # before the pool lock is let go: `take` waits for it
        try:
            if self.apply_ahead and copy.pending is not None:
                # on disk before any of the batch's writes (and after every earlier write,
                # in order): a crash may leave those writes without their version
                PartitionMetadata(copy.db).record_ahead(copy.pending)
                copy.db.db.flush_in_order()
                fault_point("ahead:after-marker")
                copy.db.commit(PartitionMetadata.committed_offsets(copy.pending))
                fault_point("ahead:after-commit")
                copy.pending = None
                self.applied_ahead += 1
            copy.db.db.flush_in_order()
        except Exception as e:  # the next open finds out what state the copy is in
            log.warning("working ahead on the kept copy %s failed: %s", copy.local.root, e)
        finally:
            copy.busy.release()
        return True


def _drain(fd: int) -> bool:
    """Read what is waiting in a non-blocking pipe; True if there was something."""
    found = False
    try:
        while os.read(fd, 4096):
            found = True
    except BlockingIOError:
        pass
    return found
