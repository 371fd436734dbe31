"""What `python -m spark_statestore read` writes: a store's records at a committed batch,
or its changes over a range of batches, as CSV or JSON lines on a text stream.

Values are decoded with the serde they were written with; bytes (and pickled values,
whose unpickling would run code) are written as hex."""

from __future__ import annotations

import csv
import json
from typing import Any, Callable, Iterator, TextIO

from spark_statestore.partition.reading import StateLocation, VersionReader, changes, uncommitted_version
from spark_statestore.serde import serde_for
from spark_statestore.serde.schemas import schemas_as_of
from spark_statestore.stores.spec import StoreSpec

FORMATS = ("csv", "json")


def text_decoder(identity: str, schemas: tuple[str, ...] = ()) -> Callable[[bytes | None], Any]:
    """How stored bytes of a serde become a value CSV and JSON can hold (record values:
    dicts of the newest of `schemas`)."""
    if identity in ("bytes", "pickle"):
        return lambda raw: None if raw is None else raw.hex()
    if identity == "json":
        return lambda raw: None if raw is None else raw.decode("utf-8")
    serde = serde_for(identity, schemas)
    if identity.startswith("tuple("):
        return lambda raw: None if raw is None else [v.hex() if isinstance(v, bytes) else v for v in serde.decode(raw)]
    return lambda raw: None if raw is None else serde.decode(raw)


def records(
    state: StateLocation, spec: StoreSpec, batch: int, partitions: list[int], uncommitted: bool = False
) -> Iterator[dict]:
    """The store's records as of `batch` (with `uncommitted`: the prepared batch after it)."""
    key = text_decoder(spec.key_serde)
    value = text_decoder(spec.value_serde, schemas_as_of(spec.value_schemas, batch))
    committed = state.committed_batch()
    state = state.at_batch(batch)
    kind = spec.store_kind
    for partition in partitions:
        version = uncommitted_version(state, partition, batch) if uncommitted else batch
        with VersionReader(state, partition, version, committed) as reader:
            for record in reader.records(spec):
                row = {"partition": partition, "key": key(record[0]), "value": value(record[1])}
                yield {**row, **kind.row_values(spec, record[2:])}


def change_rows(state: StateLocation, spec: StoreSpec, start: int, end: int, partitions: list[int]) -> Iterator[dict]:
    """The store's changes in batches `start`..`end`, partition by partition; record values
    in the shape of the batch that wrote them (a migration inside the range changes it: the
    values before it are never carried through it, which needs the writer's `migrate`)."""
    key = text_decoder(spec.key_serde)
    kind = spec.store_kind
    decoders: dict[tuple[str, ...], Callable[[bytes | None], Any]] = {}

    def value(batch: int, raw: bytes | None) -> Any:
        schemas = schemas_as_of(spec.value_schemas, batch)
        if schemas not in decoders:
            decoders[schemas] = text_decoder(spec.value_serde, schemas)
        return decoders[schemas](raw)

    for partition in partitions:
        for change in changes(state, partition, spec, start, end):  # in the generation that ran `start`
            row = {
                "batch_id": change.batch_id,
                "partition": partition,
                "change": change.change,
                "key": key(change.key),
                "value": value(change.batch_id, change.value),
            }
            yield {**row, **kind.row_values(spec, change.parts, change.change == "expire")}


def write(rows: Iterator[dict], out: TextIO, fmt: str, columns: list[str]) -> int:
    """Write `rows` as CSV (a header line first) or JSON lines; returns how many."""
    count = 0
    if fmt == "csv":
        writer = csv.DictWriter(out, fieldnames=columns)
        writer.writeheader()
        for row in rows:
            writer.writerow({k: json.dumps(v) if isinstance(v, list) else v for k, v in row.items()})
            count += 1
    else:
        for row in rows:
            out.write(json.dumps(row, ensure_ascii=False) + "\n")
            count += 1
    return count


def columns_of(spec: StoreSpec, with_changes: bool) -> list[str]:
    base = ["batch_id", "partition", "change", "key", "value"] if with_changes else ["partition", "key", "value"]
    return base + [name for name, _ in spec.store_kind.reader_columns]
