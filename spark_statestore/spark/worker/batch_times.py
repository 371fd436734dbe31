"""A micro-batch's times, as Spark fixed them before the batch ran: its timestamp and
its watermark, from the query's offset log (`<checkpointLocation>/offsets/<batchId>`).

Spark writes a batch's offset-log entry before the batch runs and reuses it for every
attempt and every re-run after a restart, so these are the same for every attempt of a
batch, in every adapter (the TWS handle's `getCurrentProcessingTimeInMs` is this
timestamp too; `applyInPandasWithState` and `mapInArrow` tasks have no other stable
source). The entry is `v1`, then a JSON line with `batchTimestampMs` and
`batchWatermarkMs`, then the sources' offsets.
"""

from __future__ import annotations

import json
from typing import NamedTuple

from spark_statestore.checkpoint.filesystem import DurableDir, resolve_location
from spark_statestore.errors import StateStoreError


class BatchTimes(NamedTuple):
    timestamp: int  # ms: the processing-time clock of TTL stores
    watermark: int  # ms: the event-time clock of TTL stores and watermark-clocked window stores


def batch_times(checkpoint_location: str, batch_id: int) -> BatchTimes:
    """The times of batch `batch_id` from the query's offset log (`StateStoreError`
    naming the file when it is missing or not in Spark's format)."""
    fs, root = resolve_location(checkpoint_location)
    offsets = DurableDir(fs, f"{root}/offsets")
    where = offsets.uri(str(batch_id))
    try:
        lines = offsets.read_bytes(str(batch_id)).decode("utf-8").split("\n")
        metadata = json.loads(lines[1])
        times = BatchTimes(int(metadata["batchTimestampMs"]), int(metadata.get("batchWatermarkMs", 0)))
    except FileNotFoundError:
        raise StateStoreError(
            f"TTL stores and window stores on the watermark clock need the batch's times, but "
            f"Spark's offset log has no {where}: is "
            f"{checkpoint_location!r} the query's checkpointLocation?"
        ) from None
    except (ValueError, IndexError, KeyError, TypeError) as e:
        raise StateStoreError(f"Spark's offset log entry {where} is not in the format known here: {e!r}") from None
    return times
