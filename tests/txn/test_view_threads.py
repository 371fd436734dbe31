"""A READ_UNCOMMITTED view reads the writer's transaction buffer, which the writer
changes without a lock: it may be read only on the thread that created it. Before, a
read from another thread went ahead unlocked and could see the buffer mid-change."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from spark_statestore import Stores
from spark_statestore.errors import StateStoreError


def _in_another_thread(read: Callable[[], Any]) -> BaseException | None:
    """What `read()` raised on a thread named "reader" (None if nothing)."""
    raised: list[BaseException | None] = [None]

    def run() -> None:
        try:
            read()
        except BaseException as error:  # noqa: BLE001 - handed back to the test
            raised[0] = error

    thread = threading.Thread(target=run, name="reader")
    thread.start()
    thread.join()
    return raised[0]


def _refused(error: BaseException | None, store: str) -> None:
    assert isinstance(error, StateStoreError), error
    message = str(error)
    assert f"READ_UNCOMMITTED view of store {store!r}" in message
    assert "'reader'" in message and repr(threading.current_thread().name) in message


def test_an_uncommitted_key_value_view_refuses_reads_from_another_thread(tmp_path):
    store = Stores.persistent_key_value_store("kv", tmp_path / "kv")
    store.put(b"a", b"1")
    store.commit()
    store.put(b"b", b"pending")
    view = store.read_only("READ_UNCOMMITTED")
    held = view.all()
    assert next(held) == (b"a", b"1")
    not_started = view.range(b"a", None)
    for read in (
        lambda: view.get(b"a"),
        lambda: view.get_all([b"a", b"b"]),
        lambda: list(view.all()),
        lambda: list(view.prefix_scan(b"a")),
        lambda: view.approximate_num_entries(),
        lambda: next(held),  # an iterator opened on the writer's thread
        lambda: next(not_started),
    ):
        _refused(_in_another_thread(read), "kv")
    assert view.get(b"b") == b"pending"  # the writer's thread reads on
    assert list(view.all()) == [(b"a", b"1"), (b"b", b"pending")]
    assert list(held) == []  # the refusal ended the iterator it was drawn from
    committed = store.read_only("READ_COMMITTED")
    assert _in_another_thread(lambda: list(committed.all())) is None
    store.close()


def test_an_uncommitted_window_view_refuses_reads_from_another_thread(tmp_path):
    store = Stores.persistent_window_store("w", tmp_path / "w", 1000, 10)
    store.put(b"a", b"1", 0)
    store.commit()
    store.put(b"a", b"2", 10)
    view = store.read_only("READ_UNCOMMITTED")
    for read in (
        lambda: view.get(b"a", 0),
        lambda: list(view.fetch(b"a", 0, 100)),
        lambda: list(view.fetch_range(b"a", b"b", 0, 100)),
        lambda: view.fetch_all_columns(0, 100),
        lambda: view.observed_stream_time,
    ):
        _refused(_in_another_thread(read), "w")
    assert list(view.fetch(b"a", 0, 100)) == [(0, b"1"), (10, b"2")]
    store.close()
