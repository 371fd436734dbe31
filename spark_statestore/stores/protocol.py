"""`Store`: the protocol every store, typed facade and read-only view satisfies, and
`KindSpec`: what a store kind reads of a store's spec. Both are structural, so that the
modules that only hand stores and specs on import no implementation."""

from __future__ import annotations

from typing import Any, Protocol


class Store(Protocol):
    """What every store, typed facade and read-only view offers (API.md): the protocol the
    layers hand stores on by (`build_store`, `PartitionState.store`, `TaskState.store`)."""

    @property
    def name(self) -> str: ...

    @property
    def is_open(self) -> bool: ...

    def close(self) -> None: ...


class KindSpec(Protocol):
    """What a `StoreKind` reads of a `StoreSpec`: the store's name, its kind's parameters
    and its TTL (None: none)."""

    @property
    def name(self) -> str: ...

    @property
    def params(self) -> Any: ...

    @property
    def ttl(self) -> Any: ...
