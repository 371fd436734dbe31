"""The time-first key layout shared by the RocksDB window store and the window cache.

A window record's key is ``window_start (8 bytes, big-endian) | key part``, so byte order
is (window start, key). `skip_scan` and `skip_scan_backward` find one key's records over a
range of window starts with one seek per window start that exists in the range, given a
`first(key)` (the first entry at or after `key`, below the range's end) or a
`last(lo, hi)` primitive over the keys.
"""

from __future__ import annotations

from operator import add
from typing import Callable, Iterator

Seek = Callable[..., "tuple[bytes, bytes | None] | None"]


def ws_bytes(t: int) -> bytes:
    """A window start as 8 big-endian bytes (2**63, one past the largest time, still fits)."""
    return t.to_bytes(8, "big")


def stored_keys(keys: list[bytes], starts: list[int]) -> list[bytes]:
    """`window_start | key` of every record, with no Python call per record: one prefix
    per distinct window start."""
    prefixes = {start: ws_bytes(start) for start in set(starts)}
    return list(map(add, map(prefixes.__getitem__, starts), keys))


def start_of(stored: bytes) -> int:
    return int.from_bytes(stored[:8], "big")


def skip_scan(
    first: Seek, part: bytes, lo: int, hi: int, prefix_match: bool
) -> Iterator[tuple[int, bytes, bytes | None]]:
    """Forward: `(window_start, stored_key, value)` of the first entry whose key part is
    `part` (or starts with it, if `prefix_match`) in each window start of [lo, hi];
    `first(key)` finds nothing at or after the end of window start `hi`."""
    t = lo
    while t <= hi:
        found = first(ws_bytes(t) + part)
        if found is None:
            return
        stored, value = found
        w = start_of(stored)
        rest = stored[8:]
        if rest.startswith(part) if prefix_match else rest == part:
            yield w, stored, value
            t = w + 1
        elif w > t and rest < part:
            t = w  # landed on the first entry of a later window: look for the key there
        else:
            t = w + 1  # the key has no entry in window w


def skip_scan_backward(
    last: Seek, part: bytes, part_end: bytes, lo: int, hi: int, prefix_match: bool
) -> Iterator[tuple[int, bytes, bytes | None]]:
    """Backward: like `skip_scan` from `hi` down to `lo`, taking the last matching entry of
    each window start; `part_end` bounds every key part that matches from above."""
    floor = ws_bytes(lo)
    t = hi
    while t >= lo:
        found = last(floor, ws_bytes(t) + part_end)
        if found is None:
            return
        stored, value = found
        w = start_of(stored)
        rest = stored[8:]
        if rest.startswith(part) if prefix_match else rest == part:
            yield w, stored, value
            t = w - 1
        elif w < t and rest >= part_end:
            t = w  # landed on the last entry of an earlier window: look for the key there
        else:
            t = w - 1
