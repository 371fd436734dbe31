"""Checking a declared record schema against the versions recorded with the state.

`evolved(serde, recorded, ...)` is what the driver does before a query starts: the same
schema keeps the recorded versions; a compatible change adds a version; any other change
is refused, naming the store, every incompatible field and both its types, unless the
serde declares `migrate=`: then the new version is a migration that takes effect in the
next batch (each partition's first batch from it rewrites its values, once).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from spark_statestore.serde.records import RecordSerde
from spark_statestore.serde.schemas import RecordSchema, incompatibilities


class SchemaEvolutionError(ValueError):
    """A declared record schema that values recorded under an older one cannot follow."""


def evolved(serde: RecordSerde, recorded: Sequence[str], store: str, next_batch: Callable[[], int]) -> RecordSerde:
    """`serde` with the recorded versions (see module docstring); `next_batch()` is the
    batch a migration takes effect in."""
    history = [RecordSchema.from_json(text) for text in recorded]
    if not history:
        return serde
    newest = history[-1]
    if newest.shape() == serde.schema.shape():
        return serde.with_history(history)
    problems = incompatibilities(newest, serde.schema)
    if (problems or serde.migrate is None) and _not_committed(newest, next_batch):
        raise SchemaEvolutionError(_unrun_migration(store, len(history), newest, serde.schema, problems))
    if not problems:
        return serde.with_history(history + [serde.schema])
    if serde.migrate is None:
        raise SchemaEvolutionError(
            f"store {store!r}: its values were written with schema version {len(history)} "
            f"({_describe(newest)}) and cannot be read as the declared schema ({_describe(serde.schema)}): "
            + "; ".join(problems)
            + ". Declare the way from the old value to the new one: Serdes.record(..., migrate=fn), where "
            "fn(old value as a dict) returns the new value; it runs once, in the next batch of each "
            "partition, as a version of the state of its own (or keep the schema, or start from a new "
            "checkpoint location)"
        )
    migration = RecordSchema(serde.schema.fields, next_batch())
    return serde.with_history(history + [migration])


def _not_committed(newest: RecordSchema, next_batch: Callable[[], int]) -> bool:
    """Whether `newest` is a migration whose batch has not committed yet."""
    return newest.migrated_since is not None and next_batch() <= newest.migrated_since


def _unrun_migration(
    store: str, version: int, newest: RecordSchema, declared: RecordSchema, problems: list[str]
) -> str:
    """Why a declared migration whose batch has not committed cannot be taken back, nor
    followed by another change the values written before it could not reach: no committed
    value was written with it, but its version is recorded with the state (the query's
    layout and each partition's copies of it, which only ever gain versions), and `migrate`
    is the only way from before it."""
    if problems:
        why = f"the declared schema ({_describe(declared)}) does not follow it: " + "; ".join(problems)
    else:
        why = (
            f"the declared schema ({_describe(declared)}) changes it without migrate=fn, the only way the "
            f"values written before the migration could reach it"
        )
    return (
        f"store {store!r}: schema version {version} ({_describe(newest)}) is a migration declared to take "
        f"effect in batch {newest.migrated_since}, which has not committed, so no committed value was "
        f"written with it; but the version is recorded with the state and cannot be withdrawn, and {why}. "
        "Declare the migration again (its schema with migrate=fn) and change the schema once it ran, or "
        "start from a new checkpoint location"
    )


def _describe(schema: RecordSchema) -> str:
    return ", ".join(f"{f.name} {f.type}{'' if f.nullable else ' not null'}" for f in schema.fields)
