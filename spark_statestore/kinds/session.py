"""The session kind (Kafka Streams' `SessionStore`, API.md): values per session
`(key, start, end)`, with a retention period.

Its stored keys (`stores/session_layout.py`): sessions ``0x01 | escape(key) | end |
start``, their index by end ``0x02 | end | escape(key) | start`` (bookkeeping that goes
with its key's partition in a rescale) and the stream time under 0xff. The durable state
of a version holds live sessions only (expiry deletes them in the transaction that moves
the stream time), so the readers show the stored sessions, with `session_start` and
`session_end` columns. On the watermark clock (`Clock.WATERMARK`) the stream time moves to
the batch's watermark when the batch ends.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Iterator

from spark_statestore.cache.caching_session import CachingSessionStore
from spark_statestore.stores.kinds import StoreKind
from spark_statestore.stores.memory_session import InMemorySessionStore
from spark_statestore.stores.persistent_session import RocksDBSessionStore
from spark_statestore.stores.persistent_window import STREAM_TIME_KEY
from spark_statestore.stores.protocol import KindSpec
from spark_statestore.stores.session_api import SessionSpec, SessionStore
from spark_statestore.stores.session_layout import BY_END, SESSIONS, session_of, session_of_index
from spark_statestore.stores.session_typed import TypedSessionStore
from spark_statestore.stores.spec import Clock
from spark_statestore.txn.session_store import TransactionalSessionStore

if TYPE_CHECKING:
    import numpy as np
    import pyarrow as pa

SESSION = "session"


class FollowingSessionStore(RocksDBSessionStore):
    """A session store that reads the stream time from its keyspace on every use, so a
    view follows the writer's (or the committed) stream time."""

    @property
    def observed_stream_time(self) -> int:
        raw = self._ks.get(STREAM_TIME_KEY)
        return -1 if raw is None else int.from_bytes(raw, "big", signed=True)


class SessionKind(StoreKind):
    """Session stores; their parameters are a `SessionSpec`."""

    name = SESSION
    params_key = "session"
    store_type = SessionStore
    reader_columns = (("session_start", "int64"), ("session_end", "int64"))
    reads = frozenset(
        {
            "fetch_session",
            "find_sessions",
            "backward_find_sessions",
            "find_sessions_range",
            "backward_find_sessions_range",
            "find_ended_sessions",
            "sessions_of_keys",
            "fetch",
            "backward_fetch",
            "all",
            "backward_all",
            "observed_stream_time",
            "retention_period",
            "name",
            "persistent",
            "is_open",
        }
    )

    # -- the spec ---------------------------------------------------------------------------

    def params_from_dict(self, name: str, data: Any) -> SessionSpec:
        return SessionSpec.from_dict(name, data)

    def params_as_dict(self, params: SessionSpec) -> dict[str, Any]:
        return params.as_dict()

    def store_record(self, spec: KindSpec) -> dict[str, Any]:
        # a longer retention would bring back expired sessions not yet deleted
        return {"kind": self.name, "retention_period": spec.params.retention_period}

    def describe(self, recorded: dict[str, Any]) -> str:
        session = recorded["session"]
        return f"session store (retention {session['retention_period']}, clock {session['clock']})"

    def facts(self, spec: KindSpec) -> dict[str, Any]:
        return {"retention_period": spec.params.retention_period}

    # -- the key schema ---------------------------------------------------------------------

    def user_key(self, spec: KindSpec, raw: bytes) -> bytes | None:
        if raw[:1] == SESSIONS:
            return session_of(raw).key
        return session_of_index(raw).key if raw[:1] == BY_END else None

    def data_end(self, spec: KindSpec) -> bytes | None:
        return BY_END

    def key_columns(self, spec: KindSpec, stored: "pa.Array") -> tuple["pa.Array", tuple["pa.Array", ...]]:
        import pyarrow as pa

        sessions = [session_of(raw) for raw in stored.to_pylist()]
        keys = pa.array([s.key for s in sessions], pa.binary())
        starts = pa.array([s.start for s in sessions], pa.int64())
        return keys, (starts, pa.array([s.end for s in sessions], pa.int64()))

    def live_keys(
        self, spec: KindSpec, store: Any, latest: Callable[[bytes, Any], Any]
    ) -> tuple[bytes | None, bytes | None] | None:
        return SESSIONS, BY_END  # the stored sessions are the live ones (module docstring)

    # -- the layers -------------------------------------------------------------------------

    def in_memory(self, spec: KindSpec) -> InMemorySessionStore:
        return InMemorySessionStore(spec.name, spec.params)

    def on_keyspace(
        self, spec: KindSpec, keyspace: Any, database: Any, on_close: Any
    ) -> TransactionalSessionStore:
        return TransactionalSessionStore(spec.name, keyspace, database, spec.params, on_close)

    def view_store(self, spec: KindSpec, keyspace: Any) -> FollowingSessionStore:
        return FollowingSessionStore(spec.name, keyspace, spec.params)

    def caching(
        self, store: Any, cache: Any, on_flush: Callable | None, send_old_values: bool, namespace: str | None
    ) -> CachingSessionStore:
        return CachingSessionStore(store, cache, on_flush, send_old_values, namespace)

    def typed(self, store: Any, key_serde: Any, value_serde: Any) -> TypedSessionStore:
        return TypedSessionStore(store, key_serde, value_serde)

    # -- reading and writing through the store ------------------------------------------------

    def records(self, store: Any) -> Iterator[tuple[Any, ...]]:
        for window, value in store.all():
            yield window.key, value, window.start, window.end

    def reader_values(
        self, spec: KindSpec, parts: tuple["pa.Array", ...], gone: "np.ndarray | None" = None
    ) -> list["pa.Array"]:
        return list(parts)

    def row_values(self, spec: KindSpec, parts: tuple[Any, ...], gone: bool = False) -> dict[str, Any]:
        start, end = parts
        return {"session_start": start, "session_end": end}

    def migrate(self, store: Any, serde: Any) -> int:
        stale = [(w, v) for w, v in store.all() if serde.written_before_migration(v)]
        new = serde.encode_many(serde.decode_many([v for _, v in stale]))
        for (window, _), value in zip(stale, new):
            store.put(window.key, window.start, window.end, value)
        return len(stale)

    # -- time -------------------------------------------------------------------------------

    def on_watermark(self, spec: KindSpec) -> bool:
        return spec.params.clock is Clock.WATERMARK

    def at_watermark(self, spec: KindSpec, store: Any, watermark: int) -> None:
        if self.on_watermark(spec):
            store.advance_stream_time(watermark)

    def dropped_records(self, store: Any) -> int:
        return store.metrics.dropped_records_total
