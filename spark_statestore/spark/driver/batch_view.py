"""The frame `metrics.recent()` returns: every column of the batch summaries, printed as a
compact table of the columns a reader looks at first (a batch summary has about 30
columns, and pandas prints only the first and last of so many: batch id and a reason).

The frame is a pandas DataFrame in every other way; what is computed from it (a column, a
selection, `set_index`) is a plain DataFrame. `frame.to_string()` prints every column.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

# what `print(metrics.recent())` shows, in this order, as the columns exist
SHOWN = (
    "batch_id", "partitions", "rows_written", "changelog_bytes", "uncommitted_bytes_peak", "spills",
    "cache_hits", "cache_misses", "rows_dropped_by_watermark", "open_seconds", "prepare_seconds",
    "early_triggers", "admission_limit",
)
# shorter headers, so that the table fits a terminal's width
HEADERS = {
    "batch_id": "batch", "rows_written": "rows", "changelog_bytes": "changelog_B",
    "uncommitted_bytes_peak": "uncommitted_peak_B", "cache_hits": "cache_hits", "cache_misses": "misses",
    "rows_dropped_by_watermark": "late_rows", "open_seconds": "open_s", "prepare_seconds": "prepare_s",
    "early_triggers": "early", "admission_limit": "admit_limit",
}


class BatchFrame(pd.DataFrame):
    """A frame of batch summaries whose printed form is compact (module docstring)."""

    @property
    def _constructor(self) -> type:
        return pd.DataFrame

    def compact(self) -> pd.DataFrame:
        """The shown columns under their short headers."""
        shown = [name for name in SHOWN if name in self.columns]
        return pd.DataFrame(self)[shown].rename(columns=HEADERS)

    def __repr__(self) -> str:
        if self.empty:
            return "no committed batches yet"
        hidden = len(self.columns) - len(self.compact().columns)
        table = self.compact().to_string(index=False, float_format=lambda v: f"{v:.3f}")
        return f"{table}\n({len(self)} batches; {hidden} more columns: .columns lists them, .to_string() prints all)"

    def _repr_html_(self) -> str:
        return self.compact().to_html(index=False, float_format=lambda v: f"{v:.3f}")


def batch_frame(summaries: list[dict[str, Any]]) -> BatchFrame:
    """`summaries` (one dict per batch) as a `BatchFrame`."""
    return BatchFrame(pd.DataFrame(summaries))
