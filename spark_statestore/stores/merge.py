"""Merging key-ordered streams where one source overrides another (a write buffer over
committed data, a cache over its store)."""

from __future__ import annotations

from typing import Any, Iterator

Entry = tuple[Any, Any]


def merge_sorted(primary: Iterator[Entry], secondary: Iterator[Entry], reverse: bool) -> Iterator[Entry]:
    """Merge two streams ordered by key (descending if `reverse`); on equal keys the
    primary entry wins and the secondary one is skipped."""
    p = next(primary, None)
    s = next(secondary, None)
    while p is not None and s is not None:
        pk = p[0]
        sk = s[0]
        if pk == sk:
            yield p
            p = next(primary, None)
            s = next(secondary, None)
        elif (pk < sk) != reverse:
            yield p
            p = next(primary, None)
        else:
            yield s
            s = next(secondary, None)
    if p is not None:
        yield p
        yield from primary
    elif s is not None:
        yield s
        yield from secondary


def without_tombstones(entries: Iterator[Entry]) -> Iterator[Entry]:
    """Drop entries whose value is `None` (deletions that only hide older entries)."""
    for entry in entries:
        if entry[1] is not None:
            yield entry
