"""Exceptions raised by spark_statestore.

Every error that concerns a file or directory names it, so an operator can find the
offending object in the checkpoint location or the local state directory.
"""

from __future__ import annotations


class StateStoreError(Exception):
    """Base class of every error this package raises on purpose."""


class StoreClosedError(StateStoreError):
    """A store, view or database was used after `close()`."""


class StoreLockedError(StateStoreError):
    """A local database directory is held by another opener (process or store)."""


class CorruptStateError(StateStoreError):
    """A database, changelog or snapshot failed validation; the message names the path."""


class MissingStateError(StateStoreError):
    """A file needed to restore a version is missing; the message names it and the version."""


class AttemptSupersededError(StateStoreError):
    """A late attempt of a batch tried to publish after Spark committed the batch."""


class StoreUnreachableError(StateStoreError):
    """The checkpoint location did not answer a request after every attempt (network
    down, the store stopped, throttled or failing); the message names the file, the
    attempts and the last error. Nothing committed is lost: the task may be retried."""
