"""Argument checks shared by every layer.

Messages name the parameter and the value given, as API.md requires. The checks are
written for the hot path: the common case (a `bytes` key, an `int` time) costs one
`type(...) is` test.
"""

from __future__ import annotations

import datetime
import operator
import os
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

T = TypeVar("T")
MAX_TIME = 2**63 - 1


def describe(value: Any) -> str:
    """`type: repr` of a value for error messages (long reprs shortened)."""
    text = repr(value)
    if len(text) > 80:
        text = text[:77] + "..."
    return f"{type(value).__name__}: {text}"


def check_key(key: Any, name: str = "key") -> bytes:
    """Return `key` if it is bytes; `None` and other types raise `TypeError`."""
    if type(key) is bytes:
        return key
    if key is None:
        raise TypeError(f"{name} cannot be None")
    if isinstance(key, bytes):
        return bytes(key)
    raise TypeError(f"{name} must be bytes, got {describe(key)}")


def check_bound(key: Any, name: str) -> bytes | None:
    """A range bound: bytes or `None` (open end)."""
    if key is None or type(key) is bytes:
        return key
    if isinstance(key, bytes):
        return bytes(key)
    raise TypeError(f"{name} must be bytes or None, got {describe(key)}")


def check_value(value: Any, name: str = "value") -> bytes | None:
    """A store value: bytes, or `None` (meaning delete)."""
    if value is None or type(value) is bytes:
        return value
    if isinstance(value, bytes):
        return bytes(value)
    raise TypeError(f"{name} must be bytes or None, got {describe(value)}")


def check_iterable(value: Any, name: str, items: str) -> Any:
    """`value` if it can be iterated over as a collection of `items` (not text or bytes)."""
    if isinstance(value, (bytes, str)) or not hasattr(value, "__iter__"):
        raise TypeError(f"{name} must be an iterable of {items}, got {describe(value)}")
    return value


def iter_checked(items: Any, name: str, fields: tuple[str, ...], check: Callable[..., T]) -> Iterator[T]:
    """`check(*item)` of every item of a bulk operation, in order; an item that is not a
    tuple of `fields`, or that `check` refuses, raises naming `name[index]` and the value."""
    width = len(fields)
    shape = f"({', '.join(fields)}) tuple"
    for index, item in enumerate(check_iterable(items, name, f"{shape}s")):
        if type(item) is not tuple or len(item) != width:
            try:
                parts = tuple(item)
            except TypeError:
                parts = ()
            if len(parts) != width:
                raise TypeError(f"{name}[{index}] must be a {shape}, got {describe(item)}")
            item = parts
        try:
            yield check(*item)
        except (TypeError, ValueError) as e:
            raise (ValueError if isinstance(e, ValueError) else TypeError)(f"{name}[{index}]: {e}") from None


def check_items(items: Any, name: str, fields: tuple[str, ...], check: Callable[..., T]) -> list[T]:
    """Every item of a bulk write checked (see `iter_checked`) before any is written. A
    list is checked by one comprehension first; only one that fails goes through
    `iter_checked`, whose error names the item (the checks are pure: the same one fails)."""
    if type(items) is list:
        try:
            return [check(*item) for item in items]
        except (TypeError, ValueError):
            pass
    return list(iter_checked(items, name, fields, check))


def check_pair(key: Any, value: Any) -> tuple[bytes, bytes | None]:
    """A key and a value to write (fast when they are well typed)."""
    if type(key) is not bytes:
        key = check_key(key)
    if value is not None and type(value) is not bytes:
        value = check_value(value)
    return key, value


_KEY_TYPES = frozenset({bytes})
_VALUE_TYPES = frozenset({bytes, type(None)})


def keys_are_bytes(keys: Any) -> bool:
    """Whether every key is bytes (one C-level pass)."""
    return set(map(type, keys)) <= _KEY_TYPES


def columns_are_bytes(keys: Any, values: Any) -> bool:
    """Whether every key is bytes and every value bytes or None (one C-level pass each)."""
    return set(map(type, keys)) <= _KEY_TYPES and set(map(type, values)) <= _VALUE_TYPES


def check_pairs(pairs: Any) -> list[tuple[bytes, bytes | None]]:
    """The `(key, value)` pairs of a key-value `put_all`, every one checked first (a list
    of well-typed 2-tuples is recognised by C-level passes, without a Python call per pair)."""
    if (
        type(pairs) is list
        and set(map(type, pairs)) <= _TUPLE
        and set(map(len, pairs)) <= _TWO
        and columns_are_bytes(map(_first, pairs), map(_second, pairs))
    ):
        return list(pairs)
    return check_items(pairs, "pairs", ("key", "value"), check_pair)


_TUPLE, _TWO = frozenset({tuple}), frozenset({2})
_first, _second = operator.itemgetter(0), operator.itemgetter(1)


def check_time(value: Any, name: str) -> int:
    """A timestamp in milliseconds: a non-negative int (bool and float are rejected)."""
    if type(value) is not int:
        if isinstance(value, bool) or value is None:
            raise TypeError(f"{name} must be an int number of milliseconds, got {describe(value)}")
        try:
            value = operator.index(value)
        except TypeError:
            raise TypeError(
                f"{name} must be an int number of milliseconds, got {describe(value)}"
            ) from None
    if value < 0 or value > MAX_TIME:
        raise ValueError(f"{name} must be between 0 and {MAX_TIME} milliseconds, got {value}")
    return value


def check_window_put(key: Any, value: Any, window_start: Any) -> tuple[bytes, bytes | None, int]:
    """The arguments of a window store's `put`, checked (fast when they are well typed)."""
    if type(key) is not bytes:
        key = check_key(key)
    if value is not None and type(value) is not bytes:
        value = check_value(value)
    if type(window_start) is not int or window_start < 0 or window_start > MAX_TIME:
        window_start = check_time(window_start, "window_start")
    return key, value, window_start


def check_window_get(key: Any, window_start: Any) -> tuple[bytes, int]:
    """The arguments of a window store's `get`, checked (fast when they are well typed)."""
    if type(key) is not bytes:
        key = check_key(key)
    if type(window_start) is not int or window_start < 0 or window_start > MAX_TIME:
        window_start = check_time(window_start, "window_start")
    return key, window_start


def check_time_range(time_from: Any, time_to: Any) -> tuple[int, int]:
    """Both bounds of an inclusive time range; `time_from > time_to` is a `ValueError`."""
    time_from = check_time(time_from, "time_from")
    time_to = check_time(time_to, "time_to")
    if time_from > time_to:
        raise ValueError(
            f"time_from must not be greater than time_to, got time_from={time_from}, time_to={time_to}"
        )
    return time_from, time_to


def check_window_records(records: Any) -> list[tuple[bytes, bytes | None, int]]:
    """The `(key, value, window_start)` records of a window `put_all`, every one checked first."""
    return check_items(records, "records", ("key", "value", "window_start"), check_window_put)


_INT_TYPES = frozenset({int})


def times_are_valid(times: Any) -> bool:
    """Whether a list holds only `int` times in [0, MAX_TIME] (C-level passes, no Python
    call per item; `bool` and other types are not taken)."""
    return type(times) is list and (
        not times or (set(map(type, times)) <= _INT_TYPES and min(times) >= 0 and max(times) <= MAX_TIME)
    )


def check_window_write_columns(keys: Any, values: Any, window_starts: Any) -> tuple[list, list, list[int]]:
    """The three columns of a window `put_columns` (keys, values, window starts), every
    record checked before any is written: lists of well-typed items pass by C-level
    passes; anything else is checked item by item, naming the column and the index."""
    columns = []
    for column, name in ((keys, "keys"), (values, "values"), (window_starts, "window_starts")):
        if not hasattr(column, "__len__") or isinstance(column, (bytes, str)):
            raise TypeError(f"{name} must be a list, got {describe(column)}")
        columns.append(column if type(column) is list else list(column))
    keys, values, window_starts = columns
    if not len(keys) == len(values) == len(window_starts):
        raise ValueError(
            f"keys, values and window_starts must have the same length, got {len(keys)}, {len(values)} "
            f"and {len(window_starts)}"
        )
    if not columns_are_bytes(keys, values):
        keys = [check_key(key, f"keys[{i}]") for i, key in enumerate(keys)]
        values = [check_value(value, f"values[{i}]") for i, value in enumerate(values)]
    if not times_are_valid(window_starts):
        window_starts = [check_time(start, f"window_starts[{i}]") for i, start in enumerate(window_starts)]
    return keys, values, window_starts


def check_window_columns(keys: Any, window_starts: Any) -> list[tuple[bytes, int]]:
    """The keys and window starts of a window `get_all` (two sequences of equal length), checked."""
    if not hasattr(keys, "__len__") or isinstance(keys, (bytes, str)):
        raise TypeError(f"keys must be a list of bytes, got {describe(keys)}")
    if not hasattr(window_starts, "__len__") or isinstance(window_starts, (bytes, str)):
        raise TypeError(f"window_starts must be a list of int, got {describe(window_starts)}")
    if len(keys) != len(window_starts):
        raise ValueError(
            f"keys and window_starts must have the same length, got {len(keys)} and {len(window_starts)}"
        )
    return [check_window_get(k, s) for k, s in zip(keys, window_starts)]


def to_millis(duration: Any, name: str) -> int:
    """A duration given as int milliseconds or `datetime.timedelta`, as int milliseconds.

    The sign is kept: callers decide what a negative duration means for them.
    """
    if isinstance(duration, datetime.timedelta):
        return duration // datetime.timedelta(milliseconds=1)
    if type(duration) is int:
        return duration
    if isinstance(duration, bool) or duration is None:
        raise TypeError(f"{name} must be int milliseconds or a timedelta, got {describe(duration)}")
    try:
        return operator.index(duration)
    except TypeError:
        raise TypeError(
            f"{name} must be int milliseconds or a timedelta, got {describe(duration)}"
        ) from None


def check_name(name: Any) -> str:
    """A store name: a non-empty str."""
    if name is None:
        raise TypeError("name cannot be None")
    if not isinstance(name, str):
        raise TypeError(f"name must be a str, got {describe(name)}")
    if not name:
        raise ValueError("name must not be empty, got ''")
    return name


def check_path(path: Any, name: str = "path") -> str:
    """A local filesystem path: a non-empty str or `os.PathLike` without NUL characters."""
    if path is None:
        raise TypeError(f"{name} cannot be None")
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"{name} must be a str or os.PathLike, got {describe(path)}")
    path = os.fspath(path)
    if not isinstance(path, str):
        raise TypeError(f"{name} must be a str path, got {describe(path)}")
    if not path or "\x00" in path:
        raise ValueError(f"{name} must be a non-empty path without NUL characters, got {path!r}")
    return path


def check_int(value: Any, name: str, minimum: int | None = None, maximum: int | None = None) -> int:
    """An int parameter (not bool), optionally with a lower and an upper limit."""
    if type(value) is not int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"{name} must be an int, got {describe(value)}")
        value = int(value)
    if minimum is not None and value < minimum:
        raise ValueError(f"{name} must be at least {minimum}, got {value}")
    if maximum is not None and value > maximum:
        raise ValueError(f"{name} must be at most {maximum}, got {value}")
    return value


def check_bool(value: Any, name: str) -> bool:
    """A flag: True or False (not 'no', 0 or None, which read as something else)."""
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be True or False, got {describe(value)}")
    return value


def check_instance(value: Any, kind: type, name: str, optional: bool = True) -> Any:
    """`value` if it is a `kind` (or None when `optional`), else a TypeError naming `name`."""
    if (value is None and optional) or isinstance(value, kind):
        return value
    raise TypeError(f"{name} must be a {kind.__name__}{' or None' if optional else ''}, got {describe(value)}")


def check_seconds(value: Any, name: str) -> float:
    """A non-negative duration in seconds (int or float, not bool)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a number of seconds, got {describe(value)}")
    if not value >= 0:
        raise ValueError(f"{name} must be at least 0 seconds, got {value!r}")
    return float(value)
