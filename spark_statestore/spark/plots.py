"""Pictures of the per-batch metrics (`processor.metrics.recent()`), with matplotlib.

    from spark_statestore.spark.plots import plot_metrics
    plot_metrics(processor.metrics.recent(100)).savefig("metrics.png")

The figure is a `matplotlib.figure.Figure` made without pyplot (no global state: it works
in scripts, notebooks and servers alike); in a notebook it shows as the cell's result.
"""

from __future__ import annotations

from typing import Any

from spark_statestore.spark.task_metrics import metric_name

BATCH, ROWS, PEAK, SPILLS = map(metric_name, ("batch_id", "rows_written", "uncommitted_bytes_peak", "spills"))
HITS, MISSES, OPEN, PREPARE = map(metric_name, ("cache_hits", "cache_misses", "open_seconds", "prepare_seconds"))
PANELS = (
    ("rows written to state", (ROWS,), "rows"),
    ("uncommitted bytes (peak per task) and spills", (PEAK, SPILLS), "bytes"),
    ("record cache hit ratio", ("cache_hit_ratio",), "hits / lookups"),
    ("state open and prepare (slowest task)", ("open_ms", "prepare_ms"), "ms"),
)


def metric_columns(frame: Any) -> Any:
    """`frame` with the derived columns the plots use (hit ratio, times in ms)."""
    out = frame.sort_values(BATCH).copy()
    lookups = out[HITS] + out[MISSES]
    out["cache_hit_ratio"] = (out[HITS] / lookups.where(lookups > 0)).fillna(0.0)
    out["open_ms"] = out[OPEN] * 1000
    out["prepare_ms"] = out[PREPARE] * 1000
    return out


def plot_metrics(frame: Any, title: str | None = None) -> Any:
    """A 2x2 figure of the per-batch metrics: rows written, uncommitted bytes peak and
    spills (early triggers marked), cache hit ratio, open and prepare times."""
    from matplotlib.figure import Figure

    if frame is None or len(frame) == 0:
        raise ValueError("plot_metrics needs at least one batch of metrics (metrics.recent() is empty)")
    data = metric_columns(frame)
    figure = Figure(figsize=(11, 6.5), layout="constrained")
    axes = figure.subplots(2, 2).ravel()
    batches = data[BATCH]
    for ax, (name, columns, unit) in zip(axes, PANELS, strict=True):
        for column in columns:
            if column == SPILLS:
                if not data[column].any():  # no empty axis: the title says there were none
                    name = "uncommitted bytes (peak per task); no spills"
                    continue
                twin = ax.twinx()
                twin.bar(batches, data[column], alpha=0.25, color="tab:red", label="spills")
                twin.set_ylabel("spills")
            else:
                ax.plot(batches, data[column], marker="o", label=column.replace("_", " "))
        if "early_triggers" in data and columns[0] == PEAK:
            early = data[data["early_triggers"] > 0]
            ax.scatter(early[BATCH], early[PEAK], marker="^", s=80, color="tab:green",
                       label="next batch started early", zorder=3)
        ax.set_title(name)
        ax.set_xlabel("batch")
        ax.set_ylabel(unit)
        ax.legend(loc="best", fontsize="small")  # where it covers the least data
    figure.suptitle(title or "spark_statestore per-batch metrics")
    return figure
