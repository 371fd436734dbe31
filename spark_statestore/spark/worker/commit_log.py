"""A task's check that its operator's checkpoint location is the query's: Spark writes
batch N-1 into the query's commit log (`<checkpointLocation>/commits/N-1`) before any
task of batch N runs, so a batch above 0 whose previous batch is missing from the commit
log under the operator's location means the operator was built with another path than
the query's `checkpointLocation` (its state would live where no reader and no restart
looks)."""

from __future__ import annotations

from spark_statestore.checkpoint.filesystem import DurableDir, resolve_location
from spark_statestore.checkpoint.names import commit_name, commits_dir
from spark_statestore.errors import StateStoreError


class CheckpointMismatchError(StateStoreError):
    """The operator's checkpoint location is not the query's `checkpointLocation`."""


def check_previous_batch_committed(location: str, batch_id: int, query_id: str | None) -> None:
    """Raise `CheckpointMismatchError` when batch `batch_id - 1` is not in the commit log
    under `location` (one existence check; nothing to check for batch 0)."""
    if batch_id <= 0:
        return
    fs, root = resolve_location(location)
    commits = DurableDir(fs, commits_dir(root))
    name = commit_name(batch_id - 1)
    if commits.exists(name):
        return
    query = f"query {query_id}" if query_id else "the query"
    raise CheckpointMismatchError(
        f"{query} runs batch {batch_id}, but the commit log under this operator's checkpoint location "
        f"{location} has no batch {batch_id - 1} ({commits.uri(name)} is missing): the operator was built "
        f"with another path than the query's checkpointLocation. Build it with the same path as "
        f"writeStream.option('checkpointLocation', ...), or its state lives where no restart or reader looks"
    )
