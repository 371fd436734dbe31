"""On the driver, before tasks run: the state's partition count against Spark's own.

For `transformWithStateInPandas` and `applyInPandasWithState` the state's partitions are
Spark's state partitions (`spark.sql.shuffle.partitions` as Spark's offset log keeps it),
so a partition count changed on one side only would send keys to partitions that do not
hold their state. Changing it takes both moves on a stopped query, in either order:
Spark's `spark._streamingCheckpointManager.repartition(checkpoint, n)` (pyspark 4.2+)
and `python -m spark_statestore rescale CHECKPOINT n`. Before 4.2 Spark cannot move its
own state, so these operators keep their partition count there; per-partition processing
(`partition_function`, whose partitions are the user's own `repartition(n, key)`) can
change it on every supported pyspark.
"""

from __future__ import annotations

from spark_statestore.partition.follow_spark import follow_spark_batches, spark_partition_mismatch
from spark_statestore.partition.layout import LayoutMismatchError
from spark_statestore.spark import compat

SPARK_PARTITIONED = ("transformWithStateInPandas", "applyInPandasWithState")


def check_partition_count(checkpoint_location: str, operator: str) -> None:
    """Follow Spark's own repartition batch if it ran after a rescale, then refuse a state
    whose partition count differs from Spark's, saying which move is missing."""
    if operator not in SPARK_PARTITIONED:
        return
    follow_spark_batches(checkpoint_location)
    mismatch = spark_partition_mismatch(checkpoint_location)
    if mismatch is None:
        return
    spark, ours = mismatch
    if not compat.FACTS.offline_repartition:
        how = (
            f"pyspark {compat.VERSION} cannot move Spark's own state of {operator} "
            f"({compat.minors_with('offline_repartition')} can): rescale the state back to {spark}"
        )
    else:
        how = (
            f"move the other side too while the query is stopped: "
            f"spark._streamingCheckpointManager.repartition({checkpoint_location!r}, {ours}) or "
            f"python -m spark_statestore rescale {checkpoint_location} {spark}"
        )
        if operator == "transformWithStateInPandas":
            how += (
                " (Spark's repartition fails for a processor that declares no Spark state variable, as a "
                "StoreProcessor: rescale the state back then)"
            )
    raise LayoutMismatchError(
        f"Spark's checkpoint at {checkpoint_location} runs {operator} on {spark} partitions, but the "
        f"spark_statestore state there has {ours}: {how}"
    )
