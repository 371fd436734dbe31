"""Processors for the Spark tests (shipped to the workers by value, not by import)."""

from __future__ import annotations

import os
import shutil
import signal
import sys
from typing import Any

from pyspark import cloudpickle

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples"))
import windowed_counts  # noqa: E402

cloudpickle.register_pickle_by_value(windowed_counts)
cloudpickle.register_pickle_by_value(sys.modules[__name__])


class FaultyCounts(windowed_counts.WindowedCounts):
    """WindowedCounts that fails on purpose in the first attempt of chosen batches:
    `raise_in` raises from the user code, `kill_in` kills the Python worker with SIGKILL in
    the middle of the batch, `wipe_local_in` deletes every partition's local state at the
    start of the batch (as if a new executor took the partition over)."""

    def __init__(self, checkpoint_location: str, *, raise_in=(), kill_in=(), wipe_local_in=(), **kwargs: Any) -> None:
        self.raise_in = set(raise_in)
        self.kill_in = set(kill_in)
        self.wipe_local_in = set(wipe_local_in)
        self.keys_seen = 0
        super().__init__(checkpoint_location, **kwargs)

    def init(self, handle: Any) -> None:
        from spark_statestore.spark.task import current_task

        task = current_task()
        if task is not None and task.batch_id in self.wipe_local_in and task.attempt == 0:
            from spark_statestore.checkpoint.local import LocalPartitionDir

            local = LocalPartitionDir(self.settings.resolve_local_dir(), self._config.checkpoint_location, task.partition)
            shutil.rmtree(local.root, ignore_errors=True)
        super().init(handle)

    def process_rows(self, key: Any, rows: Any, timer_values: Any) -> Any:
        result = super().process_rows(key, rows, timer_values)
        self.keys_seen += 1
        first_attempt = self._state is not None and self._state.task.attempt == 0
        if first_attempt and self.batch_id in self.raise_in:
            raise RuntimeError(f"injected failure in batch {self.batch_id}")
        if first_attempt and self.batch_id in self.kill_in and self.keys_seen >= 2:
            os.kill(os.getpid(), signal.SIGKILL)  # state was written for some keys already
        return result
