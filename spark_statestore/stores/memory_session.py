"""In-memory session store (Kafka Streams' `InMemorySessionStore` semantics, API.md).

Layout: a `SortedMap` from key to a `SortedMap` from `(end, start)` to value, so one
key's sessions are walked by end, then start, and a key range walks keys in order; and a
`SortedMap` of `(end, key, start)`, the sessions by end time, from which expiry pops
exactly the expired sessions (work proportional to what is freed, never a scan).

Reads are live walks (`SortedMap.iter_keys`): changes made while a read is open (a merge
removing the sessions it found) never break it, and a session is yielded only if it is
present and live at the moment it is yielded.
"""

from __future__ import annotations

from spark_statestore.stores.session_api import Sessions, SessionSpec, SessionStore
from spark_statestore.stores.session_layout import SessionWindow
from spark_statestore.stores.sorted_map import SortedMap


class InMemorySessionStore(SessionStore):
    """See module docstring."""

    persistent = False

    def __init__(self, name: str, spec: SessionSpec) -> None:
        super().__init__(name, spec)
        self._keys = SortedMap(eager=True)
        self._by_end = SortedMap(eager=True)

    def _advance(self, time: int) -> None:
        self._stream_time = time
        self._expire()

    def _expire(self) -> None:
        limit = self._expired_up_to()
        by_end = self._by_end.sorted_keys()
        while by_end and by_end[0][0] <= limit:
            end, key, start = self._by_end.pop_first()[0]
            self._drop(key, start, end)

    def _drop(self, key: bytes, start: int, end: int) -> None:
        sessions = self._keys.get(key)
        if sessions is not None:
            sessions.pop((end, start))
            if not sessions:
                self._keys.pop(key)

    def _put_live(self, key: bytes, start: int, end: int, value: bytes | None) -> None:
        if value is None:
            if self._by_end.pop((end, key, start), False) is not False:
                self._drop(key, start, end)
            return
        sessions = self._keys.get(key)
        if sessions is None:
            sessions = SortedMap(eager=True)
            self._keys.set(key, sessions)
        sessions.set((end, start), value)
        self._by_end.set((end, key, start), None)

    def _get_live(self, key: bytes, start: int, end: int) -> bytes | None:
        sessions = self._keys.get(key)
        return None if sessions is None else sessions.get((end, start))

    def _read(
        self,
        key_from: bytes | None,
        key_to: bytes | None,
        earliest_end: int,
        latest_start: int,
        reverse: bool,
    ) -> Sessions:
        new = tuple.__new__
        keys = self._keys
        if key_from is not None and key_from == key_to:
            walk = iter((key_from,))
        else:
            walk = keys.iter_keys(key_from, key_to, reverse=reverse)
        for key in walk:
            sessions = keys.get(key)
            if sessions is None:
                continue
            get = sessions.get
            for end, start in sessions.iter_keys((earliest_end, -1), None, reverse=reverse):
                if start > latest_start or end <= self._expired_up_to():
                    continue
                value = get((end, start))
                if value is not None:
                    yield new(SessionWindow, (key, start, end)), value

    def _read_ended(self, latest_end: int) -> Sessions:
        new = tuple.__new__
        keys = self._keys
        for end, key, start in self._by_end.iter_keys(None, (latest_end + 1,)):
            sessions = keys.get(key)
            value = None if sessions is None else sessions.get((end, start))
            if value is not None and end > self._expired_up_to():
                yield new(SessionWindow, (key, start, end)), value

    def close(self) -> None:
        super().close()
        self._keys.clear()
        self._by_end.clear()
