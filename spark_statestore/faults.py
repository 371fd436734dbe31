"""Named fault points in the commit protocols, for failure testing.

Protocol code calls `fault_point("commit:after-marker")` between its steps. Normally that does
nothing. Tests install a handler (`injected(fn)`) that raises at a chosen point, or set
the environment variable `SPARK_STATESTORE_FAULT` so that a process (a writer subprocess,
a Spark Python worker) kills itself with SIGKILL there:

    SPARK_STATESTORE_FAULT="commit:after-marker"        # kill at the first time
    SPARK_STATESTORE_FAULT="commit:after-chunk@3"       # kill at the third time
    SPARK_STATESTORE_FAULT_ONCE_FILE=/tmp/fired          # only if this file does not
                                                         # exist yet (it is created first)
"""

from __future__ import annotations

import contextlib
import os
import signal
from typing import Callable, Iterator

Handler = Callable[[str], None]

_handler: Handler | None = None
_seen: dict[str, int] = {}


def fault_point(name: str) -> None:
    """A step boundary of a protocol: give an installed handler the chance to fail here."""
    if _handler is not None:
        _handler(name)


def set_handler(handler: Handler | None) -> None:
    global _handler
    _handler = handler


@contextlib.contextmanager
def injected(handler: Handler) -> Iterator[None]:
    """Install `handler` for the duration of the block."""
    previous = _handler
    set_handler(handler)
    try:
        yield
    finally:
        set_handler(previous)


def _kill_from_environment(name: str) -> None:
    spec = os.environ.get("SPARK_STATESTORE_FAULT", "")
    target, _, nth = spec.partition("@")
    if name != target:
        return
    _seen[name] = _seen.get(name, 0) + 1
    if _seen[name] != int(nth or 1):
        return
    once = os.environ.get("SPARK_STATESTORE_FAULT_ONCE_FILE")
    if once:
        try:
            fd = os.open(once, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            return
        os.close(fd)
    os.kill(os.getpid(), signal.SIGKILL)


if os.environ.get("SPARK_STATESTORE_FAULT"):
    set_handler(_kill_from_environment)
