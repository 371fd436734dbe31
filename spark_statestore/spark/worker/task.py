"""What a Spark task knows about itself (from its TaskContext)."""

from __future__ import annotations

from dataclasses import dataclass

from spark_statestore.spark import compat


@dataclass(frozen=True)
class TaskInfo:
    """The micro-batch, partition and attempt a task runs."""

    batch_id: int
    partition: int
    attempt: int
    task_attempt_id: int
    query_id: str | None
    stage_id: int
    run_id: str | None = None  # the query's run (a restart starts another)


def current_task() -> TaskInfo | None:
    """The running streaming task, or None outside one (the driver's pre-init call)."""
    from pyspark import TaskContext

    context = TaskContext.get()
    if context is None:
        return None
    batch = context.getLocalProperty(compat.BATCH_ID_PROPERTY)
    if batch is None:
        raise RuntimeError(
            f"spark_statestore state is only available in streaming queries: this task has no "
            f"{compat.BATCH_ID_PROPERTY} (was the DataFrame read with spark.read instead of spark.readStream? "
            f"Or is the operator run by a foreachBatch function of a Spark Connect session, which runs the "
            f"batch's DataFrame outside the query? Write to another sink there)"
        )
    return TaskInfo(
        batch_id=int(batch),
        partition=context.partitionId(),
        attempt=context.attemptNumber(),
        task_attempt_id=context.taskAttemptId(),
        query_id=context.getLocalProperty(compat.QUERY_ID_PROPERTY),
        stage_id=context.stageId(),
        run_id=context.getLocalProperty(compat.RUN_ID_PROPERTY),
    )
