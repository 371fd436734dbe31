"""A session store seen through a key serde and a value serde (see `stores.typed`)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from spark_statestore.stores.iterators import StoreIterator
from spark_statestore.stores.session_layout import CHANGE_FIELDS, REQUEST_FIELDS, SessionWindow
from spark_statestore.stores.typed import _decoded, _TypedOnStreamTime
from spark_statestore.validation import check_items


class TypedSessionStore(_TypedOnStreamTime):
    """A `SessionStore` over typed keys and values: reads yield `(SessionWindow, value)`
    with the key decoded."""

    def __init__(self, store: Any, key_serde: Any, value_serde: Any) -> None:
        super().__init__(store, key_serde, value_serde)
        dk, dv, new = self._dk, self._dv, tuple.__new__

        def session(item: tuple[SessionWindow, bytes]) -> tuple[SessionWindow, Any]:
            window = item[0]
            return new(SessionWindow, (dk(window[0]), window[1], window[2])), dv(item[1])

        self._session = session

    def put(self, key: Any, start: int, end: int, value: Any) -> None:
        self.store.put(self._ek(key), start, end, self._ev(value))

    def remove(self, key: Any, start: int, end: int) -> None:
        self.store.remove(self._ek(key), start, end)

    def write_sessions(self, changes: Iterable[tuple[Any, int, int, Any]]) -> None:
        self.store.write_sessions(check_items(changes, "changes", CHANGE_FIELDS, self._encode_change))

    def _encode_change(self, key: Any, start: int, end: int, value: Any) -> tuple[bytes, int, int, Any]:
        return self._ek(key), start, end, self._ev(value)

    def sessions_of_keys(self, requests: Sequence[tuple[Any, int, int]]) -> list[dict[tuple[int, int], Any]]:
        found = self.store.sessions_of_keys(check_items(requests, "requests", REQUEST_FIELDS, self._encode_request))
        dv = self._dv
        return [{window: dv(value) for window, value in sessions.items()} for sessions in found]

    def _encode_request(self, key: Any, earliest: int, latest: int) -> tuple[bytes, int, int]:
        return self._ek(key), earliest, latest

    def fetch_session(self, key: Any, start: int, end: int) -> Any:
        return self._dv_or_none(self.store.fetch_session(self._ek(key), start, end))

    def find_sessions(self, key: Any, earliest_session_end: int, latest_session_start: int) -> StoreIterator:
        return self._read(self.store.find_sessions(self._ek(key), earliest_session_end, latest_session_start))

    def backward_find_sessions(
        self, key: Any, earliest_session_end: int, latest_session_start: int
    ) -> StoreIterator:
        inner = self.store.backward_find_sessions(self._ek(key), earliest_session_end, latest_session_start)
        return self._read(inner)

    def find_sessions_range(
        self, key_from: Any, key_to: Any, earliest_session_end: int, latest_session_start: int
    ) -> StoreIterator:
        inner = self.store.find_sessions_range(
            self._bound(key_from), self._bound(key_to), earliest_session_end, latest_session_start
        )
        return self._read(inner)

    def backward_find_sessions_range(
        self, key_from: Any, key_to: Any, earliest_session_end: int, latest_session_start: int
    ) -> StoreIterator:
        inner = self.store.backward_find_sessions_range(
            self._bound(key_from), self._bound(key_to), earliest_session_end, latest_session_start
        )
        return self._read(inner)

    def fetch(self, key: Any) -> StoreIterator:
        return self._read(self.store.fetch(self._ek(key)))

    def backward_fetch(self, key: Any) -> StoreIterator:
        return self._read(self.store.backward_fetch(self._ek(key)))

    def all(self) -> StoreIterator:
        return self._read(self.store.all())

    def backward_all(self) -> StoreIterator:
        return self._read(self.store.backward_all())

    def find_ended_sessions(self, latest_session_end: int) -> StoreIterator:
        return self._read(self.store.find_ended_sessions(latest_session_end))

    def take_ended_sessions(self, latest_session_end: int) -> list[tuple[SessionWindow, Any]]:
        return list(map(self._session, self.store.take_ended_sessions(latest_session_end)))

    def _read(self, inner: StoreIterator) -> StoreIterator:
        return _decoded(inner, self._session)
