"""What window stores return: a time `Window` and a key together with its window."""

from __future__ import annotations

from collections.abc import Iterator
from itertools import repeat
from typing import Any, NamedTuple

from spark_statestore.validation import MAX_TIME


class Window(NamedTuple):
    """A time window: `start` inclusive, `end` = start + window size (clamped to 2**63-1)."""

    start: int
    end: int


class WindowColumns(NamedTuple):
    """Window records as three columns of equal length, in the store's read order (window
    start, then key): what `WindowStore.put_columns` takes, in the same order."""

    keys: list
    values: list
    window_starts: list[int]


class Windowed(NamedTuple):
    """A key together with the window its value belongs to."""

    key: Any
    window: Window


def window_of(start: int, size: int) -> Window:
    end = start + size
    return Window(start, end if end <= MAX_TIME else MAX_TIME)


def records_of(columns: WindowColumns, size: int) -> Iterator[tuple[Windowed, Any]]:
    """`(Windowed, value)` of every record of `columns` (windows of `size`), built at C
    level: one `Window` per distinct start, no Python step per record."""
    keys, values, starts = columns
    windows = {start: window_of(start, size) for start in set(starts)}
    windowed = map(tuple.__new__, repeat(Windowed), zip(keys, map(windows.__getitem__, starts)))
    return zip(windowed, values)


def columns_of_records(records: list[tuple[Windowed, Any]]) -> WindowColumns:
    """`(Windowed, value)` records as `WindowColumns`."""
    keys = [w.key for w, _ in records]
    return WindowColumns(keys, [v for _, v in records], [w.window.start for w, _ in records])
