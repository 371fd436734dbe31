"""Isolation levels for readers of transactional stores (KIP-892)."""

from __future__ import annotations

import enum
from typing import Any


class IsolationLevel(enum.Enum):
    """What a read-only view sees.

    READ_COMMITTED: only committed data, also while the writer has pending writes.
    READ_UNCOMMITTED: the writer's pending writes too (use it from the writing thread).
    """

    READ_COMMITTED = "READ_COMMITTED"
    READ_UNCOMMITTED = "READ_UNCOMMITTED"

    @classmethod
    def parse(cls, value: Any, name: str = "isolation") -> "IsolationLevel":
        """An `IsolationLevel` from itself or its name (case-insensitive)."""
        if isinstance(value, cls):
            return value
        if isinstance(value, str):
            try:
                return cls[value.strip().upper()]
            except KeyError:
                pass
        raise ValueError(
            f"{name} must be READ_COMMITTED or READ_UNCOMMITTED, got {value!r}"
        )
