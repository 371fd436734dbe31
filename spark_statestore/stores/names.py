"""Store names, which double as RocksDB column-family names, and the reserved ones."""

from __future__ import annotations

from typing import Any

from spark_statestore.validation import check_name

DEFAULT_COLUMN_FAMILY = "default"
META_COLUMN_FAMILY = "__meta__"
RESERVED_PREFIX = "__"  # column families the stores keep for themselves (metadata, staging)


def check_store_name(name: Any) -> str:
    """Store names double as column-family names: non-empty text without NUL characters;
    names starting with `__` and `default` are reserved."""
    name = check_name(name)
    if "\x00" in name:
        raise ValueError(f"name must not contain NUL characters, got {name!r}")
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError(f"name must be valid Unicode text, got {name!r}") from None
    if name.startswith(RESERVED_PREFIX) or name == DEFAULT_COLUMN_FAMILY:
        raise ValueError(
            f"name {name!r} is reserved (names starting with '__' and 'default' are used internally)"
        )
    return name
