"""Merging a micro-batch of records into sessions at once (`merge_batch`).

`merge_record` reads and writes the store once per record. A Spark micro-batch arrives as
columns; `merge_batch` groups them by key, reads each touched key's live sessions once (one
`sessions_of_keys` call: per key, `find_sessions` over the span of its record times widened
by the gap, where every session any of its records could join lies), replays the records in order against that list
in Python, and writes only the net changes (a session merged several times in the batch is
put once; one merged away is removed once). The resulting state equals `merge_record` on
each record in turn, liveness included: under `Clock.RECORDS` the stream time each record
would have seen is replayed, and the store is advanced to the batch's stream time before
the writes, which go to the store in one `write_sessions`. (The count of dropped sessions is
not replayed.)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import reduce
from typing import Any

from spark_statestore.stores.session_layout import SessionWindow, Window, by_end
from spark_statestore.stores.spec import Clock
from spark_statestore.validation import MAX_TIME, check_time


def merge_batch(
    store: Any,
    keys: Sequence[Any],
    times: Sequence[int],
    values: Sequence[Any],
    gap: int,
    merge: Callable[[Any, Any], Any],
) -> list[tuple[SessionWindow, Any]]:
    """Merge records `(keys[i], times[i], values[i])`, in order, into their sessions within
    `gap` (as `merge_record` on each); returns the sessions put, with their values."""
    if not len(keys) == len(times) == len(values):
        raise ValueError(
            f"keys, times and values must have one length, got {len(keys)}, {len(times)} and {len(values)}"
        )
    times = [check_time(t, "times") for t in times]
    seen, final = _stream_times(store, times)
    by_key: dict[Any, list[int]] = {}
    for i, key in enumerate(keys):
        by_key.setdefault(key, []).append(i)
    retention = store.retention_period
    requests = []
    for key, rows in by_key.items():  # every session any of the key's records could join
        key_times = [times[i] for i in rows]
        requests.append((key, max(min(key_times) - gap, 0), min(max(key_times) + gap, MAX_TIME)))
    found = store.sessions_of_keys(requests)  # at the stream time the batch starts from
    changes = []
    for (key, rows), initial in zip(by_key.items(), found):
        current = dict(initial)
        for i in rows:
            merge_into(current, times[i], values[i], gap, merge, seen[i] - retention)
        changes.append((key, initial, current))
    if final > store.observed_stream_time:
        store.advance_stream_time(final)
    live_after = final - retention
    writes: list[tuple[Any, int, int, Any]] = []
    written = []
    for key, initial, current in changes:
        for window in initial.keys() - current.keys():
            if window[1] > live_after:
                writes.append((key, *window, None))
        for window, value in current.items():
            if window[1] > live_after and (window not in initial or initial[window] != value):
                writes.append((key, *window, value))
                written.append((SessionWindow(key, *window), value))
    store.write_sessions(writes)
    return written


def _stream_times(store: Any, times: list[int]) -> tuple[list[int], int]:
    """The stream time before each record and after the last (`seen[i]`, `seen[i + 1]`)."""
    now = store.observed_stream_time
    seen = [now]
    advances = store.clock is Clock.RECORDS
    for t in times:
        if advances and t > now:
            now = t
        seen.append(now)
    return seen, now


def merge_into(
    sessions: dict[Window, Any],
    time: int,
    value: Any,
    gap: int,
    merge: Callable[[Any, Any], Any],
    expired_up_to: int = -1,
) -> tuple[Window, Any]:
    """Merge a record into one key's sessions held in `sessions` (`(start, end)`: value),
    in place: the sessions within `gap` of `time` are replaced by one spanning them and the
    record, its value theirs (earlier sessions first) and the record's combined by `merge`;
    returns that session and its value. Sessions ending at `expired_up_to` or before are
    not live (one put so is never seen again, as every later stream time is larger, so it
    is kept rather than dropped)."""
    lo, hi = time - gap, time + gap
    found = [w for w in sessions if w[1] >= lo and w[0] <= hi and w[1] > expired_up_to]
    if not found:  # the usual record: a session of its own
        sessions[(time, time)] = value
        return (time, time), value
    if len(found) > 1:
        found.sort(key=by_end)
    window = (min(time, min(w[0] for w in found)), max(time, max(w[1] for w in found)))
    merged = sessions[window] = reduce(merge, [sessions.pop(w) for w in found] + [value])
    return window, merged
