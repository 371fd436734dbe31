"""One rescale at a time: a claim published next to the query's layout.

Two rescales of one checkpoint would build the same generation in the same staging
directories, each wiping the other's, and the last switch would win over files the other
wrote. A rescale therefore claims the checkpoint first, with nothing but whole-file
writes, listings and deletes (what every `pyarrow.fs` filesystem has: object stores have
no file locks and no create-if-absent):

1. publish its own claim file `statestore/_rescale/<token>.claim` (who, when, to what);
2. list `statestore/_rescale/`: it holds the claim only if its file is the only one
   there. Otherwise it deletes its file and fails, changing nothing.

With read-after-write and list-after-write consistency (local files, HDFS, S3, GCS) two
rescales can never both hold the claim: whichever listed second saw the other's file.
Both may lose (they started together): each says so, and the next attempt runs alone.

A claim whose rescale was killed stays behind. A claim made on this host by a process
that no longer exists is removed by the next rescale; any other is reported, naming the
file, for the operator to delete once no rescale runs any more.
"""

from __future__ import annotations

import json
import os
import socket
import time
import uuid

import pyarrow.fs as pafs

from spark_statestore.checkpoint.filesystem import DurableDir
from spark_statestore.checkpoint.names import statestore_dir
from spark_statestore.errors import StateStoreError

CLAIMS = "_rescale"  # under the state's directory
_SUFFIX = ".claim"
_MAX_CLAIM_BYTES = 4096


class RescaleClaimedError(StateStoreError, ValueError):
    """Another rescale of the same checkpoint runs (or was killed holding its claim)."""


def process_alive(pid: int) -> bool:
    """Whether a process with this id runs on this host."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's: alive
        return True
    return True


class RescaleClaim:
    """This rescale's claim of the state under `root` (see module docstring); a context
    manager that publishes, checks and finally deletes its claim file."""

    def __init__(self, fs: pafs.FileSystem, root: str, location: str, what: str) -> None:
        self.durable = DurableDir(fs, f"{statestore_dir(root)}/{CLAIMS}")
        self.location = location
        self.name = f"{uuid.uuid4().hex}{_SUFFIX}"
        self.record = {"host": socket.gethostname(), "pid": os.getpid(), "started": time.time(), "what": what}

    def __enter__(self) -> "RescaleClaim":
        self.durable.publish_bytes(self.name, json.dumps(self.record).encode("utf-8"))
        try:
            others = self._others()
            if others:
                raise RescaleClaimedError(
                    f"another rescale of {self.location} holds its claim ({'; '.join(others)}): wait for it to end "
                    f"and run this one again; if no rescale runs any more (one was killed on another host), delete "
                    f"that file. Nothing was changed"
                )
        except BaseException:
            self.release()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    def release(self) -> None:
        self.durable.delete([self.name])

    def check_held(self) -> None:
        """Before the switch: this claim is still there (an operator may have deleted it,
        taking it for a killed rescale's, and another rescale may run now). A claim that
        appeared since is a loser's: it saw this one."""
        if not self.durable.exists(self.name):
            raise RescaleClaimedError(
                f"the rescale's claim {self.durable.uri(self.name)} was removed while it ran: it does not switch "
                f"(the state under {self.location} stays as it was)"
            )

    def _others(self) -> list[str]:
        """The other claims, described (those of dead processes on this host removed first)."""
        found = []
        for info in self.durable.list():
            if info.base_name == self.name or not info.base_name.endswith(_SUFFIX):
                continue
            record = self._read(info.base_name)
            if record is None:
                continue  # released while listed
            if _dead_here(record):
                self.durable.delete([info.base_name])
                continue
            found.append(f"{self.durable.uri(info.base_name)}: {json.dumps(record)[:300]}")
        return found

    def _read(self, name: str) -> object | None:
        try:
            return json.loads(self.durable.read_range(name, 0, _MAX_CLAIM_BYTES))
        except FileNotFoundError:
            return None
        except (ValueError, OSError) as e:
            return f"unreadable: {e}"


def _dead_here(record: object) -> bool:
    """A claim written on this host by a process that no longer runs."""
    if not isinstance(record, dict) or record.get("host") != socket.gethostname():
        return False
    pid = record.get("pid")
    return type(pid) is int and pid > 0 and pid != os.getpid() and not process_alive(pid)
