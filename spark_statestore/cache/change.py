"""What a cache flush forwards downstream."""

from __future__ import annotations

from typing import NamedTuple


class Change(NamedTuple):
    """The latest value of one key at a flush (`new_value` None = deleted), with the value
    the store held before the flush when the cache sends old values (else None)."""

    key: bytes
    new_value: bytes | None
    old_value: bytes | None
    window_start: int | None = None
