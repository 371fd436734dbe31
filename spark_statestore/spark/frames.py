"""Checking the pandas frames a processor receives, with errors that name the column."""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np
import pandas as pd

KINDS = ("string", "integer", "timestamp", "number")


def check_columns(frame: pd.DataFrame, required: Mapping[str, str], where: str = "input") -> None:
    """Every required column present, without nulls, of its kind (see `KINDS`)."""
    missing = [c for c in required if c not in frame.columns]
    if missing:
        raise ValueError(f"{where} is missing column(s) {missing}; it has {list(frame.columns)}")
    for column, kind in required.items():
        if kind not in KINDS:
            raise ValueError(f"unknown column kind {kind!r} for {column!r}; use one of {KINDS}")
        series = frame[column]
        nulls = int(series.isna().sum())
        if nulls:
            raise ValueError(f"{where} column {column!r} has {nulls} null value(s)")
        if not _of_kind(series, kind):
            raise TypeError(f"{where} column {column!r} must be {kind}, got dtype {series.dtype}")


def _of_kind(series: pd.Series, kind: str) -> bool:
    dtype = series.dtype
    if kind == "integer":
        if pd.api.types.is_float_dtype(dtype):
            # Arrow hands integer columns that hold nulls elsewhere in the batch over as
            # floats: whole numbers are still integers
            return bool(np.all(np.mod(series.to_numpy(), 1) == 0))
        return pd.api.types.is_integer_dtype(dtype)
    if kind == "number":
        return pd.api.types.is_numeric_dtype(dtype) and not pd.api.types.is_bool_dtype(dtype)
    if kind == "timestamp":
        return pd.api.types.is_datetime64_any_dtype(dtype)
    return pd.api.types.is_string_dtype(dtype) and all(isinstance(v, str) for v in series.head(100))


def epoch_millis(series: pd.Series) -> np.ndarray:
    """Event times as int64 epoch milliseconds, from epoch-ms integers or timestamps."""
    if pd.api.types.is_datetime64_any_dtype(series.dtype):
        values: Any = series.dt.tz_localize(None) if getattr(series.dt, "tz", None) else series
        return values.to_numpy("datetime64[ms]").astype(np.int64)
    return series.to_numpy(np.int64)
