"""The session store interface (API.md, Kafka Streams' `SessionStore`): `SessionWindow`,
`SessionSpec` and the `SessionStore` base.

A session is a `(key, start, end)` with one value: the aggregate of records whose times
lie in [start, end], where a single record's session has `start == end`. A session is
live while `end > observed_stream_time - retention_period`; a put of a session that is not
live is dropped and counted (`metrics.dropped_records_total`). The observed stream time is
the largest session end put (`Clock.RECORDS`, the default), or what `advance_stream_time`
gives (`Clock.WATERMARK`: Spark's watermark).

Reads yield `(SessionWindow, value)`. One key's sessions come ordered by end, then start;
a range of keys is ordered by key, then end, then start (the persistent layout's byte
order, so a key range is one ordered scan); backward reads reverse the whole order.
"""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from spark_statestore.stores.api import StateStore, key_range_is_empty
from spark_statestore.stores.clock import STREAM_CLOCK, Clock
from spark_statestore.stores.damage import storage_error
from spark_statestore.stores.iterators import StoreIterator
from spark_statestore.stores.session_layout import CHANGE_FIELDS, REQUEST_FIELDS, SessionWindow, Window
from spark_statestore.stores.session_typed import TypedSessionStore
from spark_statestore.stores.window_api import WindowStoreMetrics
from spark_statestore.validation import (
    MAX_TIME,
    check_bound,
    check_items,
    check_key,
    check_name,
    check_time,
    check_value,
    describe,
    to_millis,
)

log = logging.getLogger("spark_statestore.stores")


@dataclass(frozen=True)
class SessionSpec:
    """The session part of a store's description: the retention period and the clock."""

    retention_period: int
    clock: Clock = Clock.RECORDS

    @classmethod
    def of(cls, name: Any, retention_period: Any, clock: Any = Clock.RECORDS) -> SessionSpec:
        """A checked spec for the store `name` (`retention_period`: int ms or `timedelta`)."""
        if name is None:
            raise TypeError("name cannot be None")
        check_name(name)
        retention = to_millis(retention_period, "retention_period")
        if retention < 0:
            raise ValueError("retention_period cannot be negative")
        if retention > MAX_TIME:
            raise ValueError(f"retention_period must be at most {MAX_TIME} ms, got {retention}")
        return cls(retention, STREAM_CLOCK.parse(clock))

    def as_dict(self) -> dict[str, Any]:
        """A JSON-able form (for durable metadata)."""
        return {"retention_period": self.retention_period, "clock": STREAM_CLOCK.record(self.clock)}

    @staticmethod
    def from_dict(name: str, session: Any) -> SessionSpec:
        """The session parameters of store `name` recorded as `session` (checked)."""
        if not isinstance(session, dict):
            raise TypeError(
                f"the session parameters of store {name!r} must be an object, got {describe(session)}"
            )
        retention = session.get("retention_period")
        if type(retention) is not int:
            raise TypeError(
                f"retention_period must be recorded as int milliseconds, got {describe(retention)}"
            )
        return SessionSpec.of(name, retention, session.get("clock", Clock.RECORDS))


def checked_change(key: Any, start: Any, end: Any, value: Any) -> tuple[bytes, int, int, bytes | None]:
    """One `write_sessions` change, checked as `put` checks it."""
    start, end = check_session(start, end)
    return check_key(key), start, end, check_value(value)


def checked_request(key: Any, earliest: Any, latest: Any) -> tuple[bytes, int, int]:
    """One `sessions_of_keys` request, checked as `find_sessions` checks it."""
    return check_key(key), check_time(earliest, "earliest_session_end"), check_time(latest, "latest_session_start")


def check_session(start: Any, end: Any) -> tuple[int, int]:
    """A session's start and end times: valid times with `start <= end`."""
    start, end = check_time(start, "start"), check_time(end, "end")
    if start > end:
        raise ValueError(f"start must be at most end, got start={start}, end={end}")
    return start, end


Sessions = Iterator[tuple[SessionWindow, bytes]]


class SessionStore(StateStore, ABC):
    """A store of values per session `(key, start, end)` with retention (see module docstring).

    The base class holds what every session store does the same way: argument checks, the
    observed stream time and its clock, dropping late sessions, and narrowing reads to live
    sessions. Implementations provide `_advance`, `_put_live`, `_get_live` and `_read`.
    """

    def __init__(self, name: str, spec: SessionSpec, on_close: Callable[[], Any] | None = None) -> None:
        super().__init__(name, on_close)
        self.spec = spec
        self.retention_period = spec.retention_period
        self.clock = spec.clock
        self._records_advance = spec.clock is Clock.RECORDS
        self._stream_time = -1
        self.metrics = WindowStoreMetrics()

    @property
    def observed_stream_time(self) -> int:
        """The largest session end put (or the time advanced to); -1 before the first."""
        return self._stream_time

    def _expired_up_to(self) -> int:
        """The largest session end that is no longer live."""
        return self.observed_stream_time - self.retention_period

    # -- writes -------------------------------------------------------------------------

    def put(self, key: bytes, start: int, end: int, value: bytes | None) -> None:
        """Store `value` for the session `(key, start, end)`; `None` removes it. A session
        that is not live is dropped and counted."""
        if not self._open:
            raise self._closed()
        key = check_key(key)
        start, end = check_session(start, end)
        value = check_value(value)
        if end > self._stream_time and self._records_advance:
            self._advance(end)
        if end <= self._expired_up_to():
            self.metrics.dropped_records_total += 1
            log.debug("store %r dropped a session of expired end %d", self._name, end)
            return
        self._put_live(key, start, end, value)

    def remove(self, key: bytes, start: int, end: int) -> None:
        """Remove the session `(key, start, end)`."""
        self.put(key, start, end, None)

    def write_sessions(self, changes: Iterable[tuple[bytes, int, int, bytes | None]]) -> None:
        """`put` of every `(key, start, end, value)` in order (`None` removes): what merging
        or closing many sessions writes, in one call a store may take in bulk (not in API.md).
        Every change is checked before any is written."""
        put = self.put
        for key, start, end, value in check_items(changes, "changes", CHANGE_FIELDS, checked_change):
            put(key, start, end, value)

    def advance_stream_time(self, time: int) -> None:
        """Observe stream time `time` without a session (what a watermark does), expiring
        what falls out of the retention period. Earlier times change nothing."""
        if not self._open:
            raise self._closed()
        time = check_time(time, "time")
        if time > self._stream_time:
            self._advance(time)

    @abstractmethod
    def _advance(self, time: int) -> None:
        """Take `time` (greater than the current one) as the stream time."""

    @abstractmethod
    def _put_live(self, key: bytes, start: int, end: int, value: bytes | None) -> None:
        """Write a live session (checked arguments; `None` removes)."""

    @abstractmethod
    def _get_live(self, key: bytes, start: int, end: int) -> bytes | None:
        """Read a live session (checked arguments)."""

    @abstractmethod
    def _read(
        self,
        key_from: bytes | None,
        key_to: bytes | None,
        earliest_end: int,
        latest_start: int,
        reverse: bool,
    ) -> Sessions:
        """Live sessions of the (valid) key range with `end >= earliest_end` and
        `start <= latest_start`, in the store's order (see module docstring)."""

    # -- reads --------------------------------------------------------------------------

    def fetch_session(self, key: bytes, start: int, end: int) -> bytes | None:
        """The value of the session `(key, start, end)`, or None (also once it expired)."""
        if not self._open:
            raise self._closed()
        key = check_key(key)
        start, end = check_session(start, end)
        if end <= self._expired_up_to():
            return None
        try:
            return self._get_live(key, start, end)
        except Exception as e:
            raise storage_error(e) from None

    def find_sessions(
        self, key: bytes, earliest_session_end: int, latest_session_start: int
    ) -> StoreIterator:
        """`(SessionWindow, value)` of `key`'s sessions with `end >= earliest_session_end`
        and `start <= latest_session_start`, ordered by end, then start."""
        key = self._check_read_key(key)
        return self._find(key, key, earliest_session_end, latest_session_start, False, "find_sessions")

    def backward_find_sessions(
        self, key: bytes, earliest_session_end: int, latest_session_start: int
    ) -> StoreIterator:
        """`find_sessions` in the reverse order."""
        key = self._check_read_key(key)
        return self._find(
            key, key, earliest_session_end, latest_session_start, True, "backward_find_sessions"
        )

    def find_sessions_range(
        self,
        key_from: bytes | None,
        key_to: bytes | None,
        earliest_session_end: int,
        latest_session_start: int,
    ) -> StoreIterator:
        """`find_sessions` over the keys in [key_from, key_to] (`None` = open end), ordered
        by key, then end, then start."""
        return self._find_range(key_from, key_to, earliest_session_end, latest_session_start, False)

    def backward_find_sessions_range(
        self,
        key_from: bytes | None,
        key_to: bytes | None,
        earliest_session_end: int,
        latest_session_start: int,
    ) -> StoreIterator:
        """`find_sessions_range` in the reverse order."""
        return self._find_range(key_from, key_to, earliest_session_end, latest_session_start, True)

    def fetch(self, key: bytes) -> StoreIterator:
        """Every live session of `key`."""
        return self.find_sessions(key, 0, MAX_TIME)

    def backward_fetch(self, key: bytes) -> StoreIterator:
        return self.backward_find_sessions(key, 0, MAX_TIME)

    def all(self) -> StoreIterator:
        """Every live session, ordered by key, then end, then start."""
        return self.find_sessions_range(None, None, 0, MAX_TIME)

    def backward_all(self) -> StoreIterator:
        return self.backward_find_sessions_range(None, None, 0, MAX_TIME)

    def find_ended_sessions(self, latest_session_end: int) -> StoreIterator:
        """Every live session of every key with `end <= latest_session_end`, ordered by
        end, then key, then start: the sessions a clock has closed (not in API.md; what
        emitting final results needs, read from the order by end, not a scan of all)."""
        if not self._open:
            raise self._closed()
        latest = check_time(latest_session_end, "latest_session_end")
        return self._iterator(self._read_ended(latest))

    def sessions_of_keys(self, requests: Sequence[tuple[bytes, int, int]]) -> list[dict[Window, bytes]]:
        """For each `(key, earliest_session_end, latest_session_start)`, what `find_sessions`
        gives, as `{(start, end): value}`: the reads of merging a micro-batch, in one call a
        store may answer in one pass (not in API.md)."""
        return [
            {(window[1], window[2]): value for window, value in self.find_sessions(key, earliest, latest)}
            for key, earliest, latest in check_items(requests, "requests", REQUEST_FIELDS, checked_request)
        ]

    def take_ended_sessions(self, latest_session_end: int) -> list[tuple[SessionWindow, bytes]]:
        """Remove and return what `find_ended_sessions` gives (what closing sessions does;
        a store may remove them as it reads them; not in API.md)."""
        ended = list(self.find_ended_sessions(latest_session_end))
        self.write_sessions([(*window, None) for window, _ in ended])
        return ended

    @abstractmethod
    def _read_ended(self, latest_end: int) -> Sessions:
        """Live sessions with `end <= latest_end`, ordered by end, key, start."""

    def _check_read_key(self, key: Any) -> bytes:
        if not self._open:
            raise self._closed()
        return check_key(key)

    def _find_range(
        self, key_from: Any, key_to: Any, earliest_end: Any, latest_start: Any, reverse: bool
    ) -> StoreIterator:
        if not self._open:
            raise self._closed()
        key_from = check_bound(key_from, "key_from")
        key_to = check_bound(key_to, "key_to")
        method = "backward_find_sessions_range" if reverse else "find_sessions_range"
        return self._find(key_from, key_to, earliest_end, latest_start, reverse, method)

    def _find(
        self,
        key_from: bytes | None,
        key_to: bytes | None,
        earliest_end: Any,
        latest_start: Any,
        reverse: bool,
        method: str,
    ) -> StoreIterator:
        earliest_end = check_time(earliest_end, "earliest_session_end")
        latest_start = check_time(latest_start, "latest_session_start")
        live_from = self._expired_up_to() + 1
        if key_range_is_empty(key_from, key_to, method) or live_from > MAX_TIME:  # nothing live
            return StoreIterator(iter(()))
        return self._iterator(
            self._read(key_from, key_to, max(earliest_end, live_from), latest_start, reverse)
        )

    def typed(self, key_serde: Any, value_serde: Any) -> TypedSessionStore:
        """A view that encodes keys and values with the given serdes."""
        return TypedSessionStore(self, key_serde, value_serde)
