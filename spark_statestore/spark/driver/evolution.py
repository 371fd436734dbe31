"""On the driver, before a query starts: a record store's declared schema against the
versions recorded with its state (`serde/evolution.py`), so that tasks get serdes that
know every version and a change old values cannot follow is refused before any task runs."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from spark_statestore.partition.layout import read_query_layout
from spark_statestore.partition.reading import StateLocation
from spark_statestore.serde import RecordSerde
from spark_statestore.serde.evolution import evolved
from spark_statestore.spark.declarations import Declaration


def evolve_declarations(declarations: Sequence[Declaration], location: str) -> tuple[Declaration, ...]:
    """The declarations, each record serde given the recorded versions (and a new one when
    its schema changed compatibly or with `migrate=`)."""
    recorded = read_query_layout(location)
    if recorded is None:
        return tuple(declarations)
    specs = {spec.name: spec for spec in recorded.stores}
    out = []
    for declaration in declarations:
        spec = specs.get(declaration.name)
        serde = declaration.value_serde
        if isinstance(serde, RecordSerde) and spec is not None and spec.value_serde == serde.identity:
            serde = evolved(serde, spec.value_schemas, declaration.name, lambda: _next_batch(location))
            declaration = dataclasses.replace(declaration, value_serde=serde)
        out.append(declaration)
    return tuple(out)


def _next_batch(location: str) -> int:
    """The batch a restarted query runs first: the one after the newest committed batch."""
    committed = StateLocation(location, None).committed_batch()  # type: ignore[arg-type]
    return 0 if committed is None else committed + 1
