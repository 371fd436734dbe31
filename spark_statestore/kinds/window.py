"""The window kind (KIP-428): values per (key, window start), with a retention period.

Its stored key is ``window_start (8 bytes, big-endian) | key`` (with duplicates retained:
``window_start | escape(key) | sequence``); keys from 0x80 on are the store's bookkeeping
(its stream time and duplicate sequence). A record is live while its window start is above
the observed stream time minus the retention period; the readers show each record's window
start and end (start + size). On the watermark clock a store's stream time moves only when
its owner says: in Spark, to the batch's watermark when the batch ends.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Iterator

from spark_statestore.cache.caching_window import CachingWindowStore
from spark_statestore.serde import unescape
from spark_statestore.stores.kinds import StoreKind
from spark_statestore.stores.memory_window import InMemoryWindowStore
from spark_statestore.stores.migration import migrate_windows
from spark_statestore.stores.persistent_window import STREAM_TIME_KEY, RocksDBWindowStore
from spark_statestore.stores.protocol import KindSpec
from spark_statestore.stores.spec import WINDOW, Clock, WindowSpec
from spark_statestore.stores.typed import TypedWindowStore
from spark_statestore.stores.window_api import WindowStore
from spark_statestore.stores.window_layout import ws_bytes
from spark_statestore.txn.stores import TransactionalWindowStore
from spark_statestore.validation import MAX_TIME

if TYPE_CHECKING:  # Arrow is imported where columns are built: a store user needs no pandas
    import numpy as np
    import pyarrow as pa

_DATA_KEYS_END = b"\x80"  # the store's bookkeeping keys start at 0xff
_UNCHANGED = object()


class FollowingWindowStore(RocksDBWindowStore):
    """A window store that reads the stream time from its keyspace on every use, so a
    view follows the writer's (or the committed) stream time."""

    @property
    def observed_stream_time(self) -> int:
        return self._persisted_stream_time()


class WindowKind(StoreKind):
    """Window stores (API.md `WindowStore`); their parameters are a `WindowSpec`."""

    name = WINDOW
    params_key = "window"
    store_type = WindowStore
    reader_columns = (("window_start", "int64"), ("window_end", "int64"))
    reads = frozenset(
        {
            "get",
            "get_all",
            "fetch",
            "backward_fetch",
            "fetch_range",
            "backward_fetch_range",
            "fetch_all",
            "backward_fetch_all",
            "fetch_range_columns",
            "fetch_range_chunks",
            "fetch_all_columns",
            "all",
            "backward_all",
            "observed_stream_time",
            "retention_period",
            "window_size",
            "retain_duplicates",
            "name",
            "persistent",
            "is_open",
        }
    )

    # -- the spec ---------------------------------------------------------------------------

    def params_from_dict(self, name: str, data: Any) -> WindowSpec:
        return WindowSpec.from_dict(name, data)

    def params_as_dict(self, params: WindowSpec) -> dict[str, Any]:
        return params.as_dict()

    def cacheable(self, params: WindowSpec) -> bool:
        return not params.retain_duplicates  # every put of a duplicate is its own entry

    def store_record(self, spec: KindSpec) -> dict[str, Any]:
        window = spec.params
        return {
            "kind": self.name,
            "retain_duplicates": window.retain_duplicates,
            "window_size": window.window_size,
            # a longer retention would bring back expired records not yet deleted
            "retention_period": window.retention_period,
        }

    def describe(self, recorded: dict[str, Any]) -> str:
        window = recorded["window"]
        return (
            f"window store (size {window['window_size']}, retention {window['retention_period']}, "
            f"clock {window['clock']}, duplicates {'kept' if window['retain_duplicates'] else 'replaced'})"
        )

    def facts(self, spec: KindSpec) -> dict[str, Any]:
        return {"window_size": spec.params.window_size, "retention_period": spec.params.retention_period}

    # -- the key schema ---------------------------------------------------------------------

    def user_key(self, spec: KindSpec, raw: bytes) -> bytes | None:
        if raw[:1] >= _DATA_KEYS_END:
            return None
        return unescape(raw, 8)[0] if spec.params.retain_duplicates else raw[8:]

    def data_end(self, spec: KindSpec) -> bytes | None:
        return _DATA_KEYS_END

    def key_columns(self, spec: KindSpec, stored: "pa.Array") -> tuple["pa.Array", tuple["pa.Array", ...]]:
        keys, starts = window_parts(stored, spec.params.retain_duplicates)
        return keys, (starts,)

    def expiry_parts(self, spec: KindSpec, bounds: list[bytes]) -> tuple["pa.Array", ...] | None:
        import pyarrow as pa

        return (pa.array([int.from_bytes(hi[:8], "big") for hi in bounds], pa.int64()),)

    def live_keys(
        self, spec: KindSpec, store: Any, latest: Callable[[bytes, Any], Any]
    ) -> tuple[bytes | None, bytes | None] | None:
        raw = latest(STREAM_TIME_KEY, _UNCHANGED)
        if raw is _UNCHANGED:
            stream_time = store.observed_stream_time
        else:
            stream_time = -1 if raw is None else int.from_bytes(raw, "big", signed=True)
        live_from = max(0, stream_time - spec.params.retention_period + 1)
        return ws_bytes(live_from), ws_bytes(MAX_TIME + 1)

    # -- the layers -------------------------------------------------------------------------

    def in_memory(self, spec: KindSpec) -> InMemoryWindowStore:
        return InMemoryWindowStore(spec.name, spec.params)

    def on_keyspace(self, spec: KindSpec, keyspace: Any, database: Any, on_close: Any) -> TransactionalWindowStore:
        return TransactionalWindowStore(spec.name, keyspace, database, spec.params, on_close)

    def view_store(self, spec: KindSpec, keyspace: Any) -> FollowingWindowStore:
        return FollowingWindowStore(spec.name, keyspace, spec.params)

    def caching(
        self, store: Any, cache: Any, on_flush: Callable | None, send_old_values: bool, namespace: str | None
    ) -> CachingWindowStore:
        return CachingWindowStore(store, cache, on_flush, send_old_values, namespace)

    def typed(self, store: Any, key_serde: Any, value_serde: Any) -> TypedWindowStore:
        return TypedWindowStore(store, key_serde, value_serde)

    # -- reading and writing through the store ------------------------------------------------

    def records(self, store: Any) -> Iterator[tuple[Any, ...]]:
        for windowed, value in store.all():
            yield windowed.key, value, windowed.window.start

    def reader_values(
        self, spec: KindSpec, parts: tuple["pa.Array", ...], gone: "np.ndarray | None" = None
    ) -> list["pa.Array"]:
        import pyarrow as pa

        (starts,) = parts
        return [starts, pa.array(starts.to_numpy() + spec.params.window_size, mask=gone)]

    def row_values(self, spec: KindSpec, parts: tuple[Any, ...], gone: bool = False) -> dict[str, Any]:
        (start,) = parts
        end = None if start is None or gone else start + spec.params.window_size
        return {"window_start": start, "window_end": end}

    def migrate(self, store: Any, serde: Any) -> int:
        return migrate_windows(store, serde)

    # -- time -------------------------------------------------------------------------------

    def on_watermark(self, spec: KindSpec) -> bool:
        return spec.params.clock is Clock.WATERMARK

    def at_watermark(self, spec: KindSpec, store: Any, watermark: int) -> None:
        if self.on_watermark(spec):
            store.advance_stream_time(watermark)

    def dropped_records(self, store: Any) -> int:
        return store.metrics.dropped_records_total


def window_parts(stored: "pa.Array", retain_duplicates: bool) -> tuple["pa.Array", "pa.Array"]:
    """The user keys and the window starts of stored window keys (`start | key`, or
    `start | escape(key) | sequence` with duplicates), as the window store reads them:
    the first 8 bytes of every key cut off in one numpy pass."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    keys = None
    if len(stored) and pc.min(pc.binary_length(stored)).as_py() < 8:  # only a crafted key is shorter
        keys = stored.to_pylist()
        starts = pa.array([int.from_bytes(k[:8], "big") for k in keys], pa.int64())
        rest = pa.array([k[8:] for k in keys], pa.binary())
    else:
        count = len(stored)
        offsets = np.frombuffer(stored.buffers()[1], np.int32, count + 1, stored.offset * 4)
        data = np.frombuffer(stored.buffers()[2] or b"", np.uint8)
        heads = offsets[:-1, None] + np.arange(8)
        starts = pa.array(np.ascontiguousarray(data[heads]).view(">u8").ravel().astype(np.int64))
        keep = np.ones(len(data), np.bool_)
        keep[heads] = False
        keep[: offsets[0]] = keep[offsets[-1] :] = False
        rest_offsets = (offsets - offsets[0] - 8 * np.arange(count + 1)).astype(np.int32)
        rest = pa.Array.from_buffers(
            pa.binary(), count, [None, pa.py_buffer(rest_offsets), pa.py_buffer(data[keep].tobytes())]
        )
    if retain_duplicates:
        return pa.array([unescape(k, 8)[0] for k in (keys or stored.to_pylist())], pa.binary()), starts
    return rest, starts
