"""Dataclass values of one record store across three schema versions (a compatible change,
then an incompatible one), shared by the schema tests and the reader's."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class TotalV1:
    total: int
    label: str


@dataclass
class TotalV2:
    total: float
    seen: int = 0
    note: str | None = None


@dataclass
class TotalV3:
    total: str
