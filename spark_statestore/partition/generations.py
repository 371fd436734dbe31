"""Generations: the partition counts a query's state has had, and where each one lives.

A rescale (`partition/rescale.py`) never rewrites a partition's directory: it builds the
state again under another partition count as a new *generation*, in directories of its
own, and switches to it by rewriting the query's layout file (`statestore/_layout`, one
atomic publish). The layout keeps every generation: its number, its partition count and
its `base`, the version it starts at. Generation 0 lives in `statestore/<partition>/`,
generation k in `statestore/_g<k>/<partition>/` (`names.partition_dir`).

Generation k holds versions from its `base` on (the base itself is the moved state, a
snapshot per partition) and serves the batches after it: batch `b` ran, and is read back
by time travel, in the newest generation whose base is below `b`; the versions up to a
rescale's base stay readable in the generation before it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from spark_statestore.checkpoint.names import GENERATION_PREFIX
from spark_statestore.validation import check_int

# The most partitions a state may have: far above any real query's count, and every count
# read from a durable file is held to it before it sizes anything (a crafted `_layout` or
# offset log entry saying 10**12 is refused, not iterated).
MAX_PARTITIONS = 10_000


def check_partitions(value: Any, name: str = "partitions") -> int:
    """A partition count: an int in 1..MAX_PARTITIONS (`TypeError`/`ValueError` naming it)."""
    value = check_int(value, name, 1)
    if value > MAX_PARTITIONS:
        raise ValueError(f"{name} must be at most {MAX_PARTITIONS}, got {value}")
    return value


@dataclass(frozen=True)
class Generation:
    """One partition count of the state (see module docstring)."""

    number: int
    partitions: int | None
    base: int  # -1 for generation 0: it starts from nothing

    def as_dict(self) -> dict[str, Any]:
        return {"generation": self.number, "partitions": self.partitions, "base": self.base}

    @staticmethod
    def from_dict(data: Any) -> "Generation":
        """A recorded generation; `TypeError`/`ValueError` saying what is wrong."""
        if not isinstance(data, dict) or set(data) != {"generation", "partitions", "base"}:
            raise TypeError(f"a generation must be an object with generation, partitions and base, got {data!r:.100}")
        for key in ("generation", "base"):
            if type(data[key]) is not int:
                raise TypeError(f"a generation's {key} must be an int, got {data[key]!r}")
        partitions = data["partitions"]
        if partitions is not None and type(partitions) is not int:
            raise TypeError(f"a generation's partitions must be an int, got {partitions!r}")
        return Generation(
            check_int(data["generation"], "generation", 0),
            None if partitions is None else check_partitions(partitions),
            check_int(data["base"], "base", -1),
        )


def check_history(generations: Sequence[Generation]) -> tuple[Generation, ...]:
    """Generations numbered 0, 1, ... with bases that never decrease (ValueError otherwise)."""
    for index, generation in enumerate(generations):
        if generation.number != index:
            raise ValueError(f"generations must be numbered 0, 1, ...: entry {index} is {generation.number}")
        if index and generation.base < generations[index - 1].base:
            raise ValueError(f"generation {index} starts at version {generation.base}, before the one before it")
    if generations and generations[0].base != -1:
        raise ValueError(f"generation 0 must start from nothing (base -1), got {generations[0].base}")
    return tuple(generations)


def serving(generations: Sequence[Generation], batch: int) -> Generation:
    """The generation batch `batch` ran in (and that time travel to it reads)."""
    found = generations[0]
    for generation in generations:
        if generation.base < batch:
            found = generation
    return found


def local_key(location: str, generation: int) -> str:
    """What a partition's local copy is keyed by: the location, and the generation after
    a rescale (a copy of an earlier generation is never taken for a later one)."""
    return location if generation == 0 else f"{location}#{GENERATION_PREFIX}{generation}"
