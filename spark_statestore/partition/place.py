"""`PartitionPlace`: where one partition's state lives, as one value.

Opening a partition reads it in steps (lock the local copy, load a version with
`Recovery`, take a snapshot when one is due, open the stores); every step needs the same
facts about the partition's place, and takes them from this value instead of each being
handed its own copy of them.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from spark_statestore.checkpoint.filesystem import DurableDir
from spark_statestore.partition.layout import Layout
from spark_statestore.partition.local import LocalPartitionDir


@dataclass(frozen=True)
class PartitionPlace:
    """One partition's state: the checkpoint `location` (as given: it names the state in
    messages), the `partition`, the stores' `layout`, the `durable` directory (its
    filesystem and root) and the `local` directory of its copy (paths and lock)."""

    location: str
    partition: int
    layout: Layout
    durable: DurableDir
    local: LocalPartitionDir

    def with_local(self, local: LocalPartitionDir) -> PartitionPlace:
        """The same place with `local` (another handle on the same directory, e.g. a kept copy's)."""
        return replace(self, local=local)
