"""Merging records into sessions: the logic a user would otherwise write over a store.

`merge_record` puts one record into its key's sessions: the sessions within `gap` of the
record's time (`end >= time - gap` and `start <= time + gap`, inclusive, as in Kafka
Streams and Spark SQL's `session_window`) are removed and one session spanning them and
the record is put, its value their values and the record's combined with `merge`.
`close_sessions` takes the sessions a clock (Spark's watermark) has closed out of the
store: no record that is not late can join them any more.

Times follow Spark's `session_window`: a session of records from `start` to `end` is the
window [start, end + gap); it is closed once `end + gap <= watermark`, and a record at
`time` is late when `time + gap <= watermark` (its own session would be closed at once).
In Spark that watermark is the one late input is dropped by, the previous batch's (a
watermark-clocked store's `observed_stream_time`), and this batch's closes sessions: so
Spark SQL's `session_window` keeps a late event that joins a session still open.
These work on any session store, bytes or typed.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from spark_statestore.stores.session_batch import merge_batch, merge_into
from spark_statestore.stores.session_layout import SessionWindow
from spark_statestore.validation import MAX_TIME, check_int, check_time, to_millis


def check_gap(gap: Any) -> int:
    """A session gap: int milliseconds or `timedelta`, at least 1 ms."""
    return check_int(to_millis(gap, "gap"), "gap", 1, MAX_TIME)


def merge_record(
    store: Any, key: Any, time: int, value: Any, gap: int, merge: Callable[[Any, Any], Any]
) -> tuple[SessionWindow, Any]:
    """Merge a record at `time` whose own aggregate is `value` into `key`'s sessions
    within `gap`; returns the merged session and its value (see module docstring).
    `merge(a, b)` combines two aggregates, earlier sessions first."""
    time = check_time(time, "time")
    (found,) = store.sessions_of_keys([(key, max(time - gap, 0), min(time + gap, MAX_TIME))])
    if not found:  # the usual record: a session of its own
        store.put(key, time, time, value)
        return SessionWindow(key, time, time), value
    sessions = dict(found)
    window, merged = merge_into(sessions, time, value, gap, merge)
    store.write_sessions([(key, *w, None) for w in found.keys() - sessions.keys()] + [(key, *window, merged)])
    return SessionWindow(key, *window), merged


def is_late(time: int, gap: int, watermark: int) -> bool:
    """Whether a record at `time` comes too late to join or start a session."""
    return time + gap <= watermark


def close_sessions(store: Any, watermark: int, gap: int) -> list[tuple[SessionWindow, Any]]:
    """Remove and return the sessions `watermark` closed (`end + gap <= watermark`),
    ordered by end, then key, then start."""
    if watermark - gap < 0:
        return []
    return store.take_ended_sessions(watermark - gap)


class GapSessions:
    """A session store with its gap: `merge`, `close` and `is_late` as above, and every
    method of the store itself (what a Spark `Session` declaration hands a processor)."""

    def __init__(self, store: Any, gap: int) -> None:
        self.store = store
        self.gap = check_gap(gap)

    def merge(
        self, key: Any, time: int, value: Any, merge: Callable[[Any, Any], Any]
    ) -> tuple[SessionWindow, Any]:
        """`merge_record` with this store's gap."""
        return merge_record(self.store, key, time, value, self.gap, merge)

    def merge_batch(
        self, keys: Sequence[Any], times: Sequence[int], values: Sequence[Any], merge: Callable[[Any, Any], Any]
    ) -> list[tuple[SessionWindow, Any]]:
        """`session_batch.merge_batch` with this store's gap: a micro-batch's records in
        order, each key's sessions read once and only the net changes written."""
        return merge_batch(self.store, keys, times, values, self.gap, merge)

    def close_sessions(self, watermark: int) -> list[tuple[SessionWindow, Any]]:
        """`close_sessions` with this store's gap (`close()` is the store's own)."""
        return close_sessions(self.store, watermark, self.gap)

    def is_late(self, time: int, watermark: int) -> bool:
        """`is_late` with this store's gap (`watermark`: the previous batch's in Spark, this
        store's `observed_stream_time` on the watermark clock)."""
        return is_late(time, self.gap, watermark)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)

    def __repr__(self) -> str:
        return f"<{self.store!r} gap={self.gap}>"
