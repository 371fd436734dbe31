"""`StoreKind`: what makes a key-value store, a window store or another kind of store what
it is, in one object, and the registry of kinds by the name their specs record.

Every layer that treats kinds differently asks the store's kind instead of testing for
one: the spec (the kind's parameters and their durable form), rescaling and the readers
(its key schema: a stored key as the user key and the columns it carries beside it), the
transactional database (how a store of the kind opens on a keyspace, and its read-only
views), the record cache (its caching wrapper), typed access (its facade), the state
readers (the columns its records add, as Arrow types, and their values) and Spark's tasks
(its clock hook at the watermark). `build_store` (`spark_statestore.kinds`) composes the
layers of a store from its kind.

This module is the protocol and the registry only, so that every layer can look a kind
up. The kinds themselves name classes of the layers above the stores (transactional and
caching stores), so they live in `spark_statestore.kinds`, which registers them when the
package is imported. A new kind is a `StoreKind` subclass in a module of its own and one
`register(...)` line in `spark_statestore/kinds/__init__.py`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Iterator

from spark_statestore.stores.protocol import KindSpec, Store

if TYPE_CHECKING:  # Arrow is imported where columns are built: a store user needs no pandas
    import numpy as np
    import pyarrow as pa


class StoreKind:
    """One kind of store (see module docstring). Subclasses set the class attributes and
    override what their kind does differently; the defaults are a key-value store's."""

    name: str = ""  # the kind a spec records ("key_value", "window")
    params_key: str | None = None  # where the durable form keeps the parameters (None: it has none)
    store_type: type = object  # the interface every store of the kind implements
    reads: frozenset[str] = frozenset()  # the methods a read-only view offers
    takes_ttl: bool = False  # whether its specs may give a TTL
    # the columns its records carry beside key and value, for readers: (name, Arrow type);
    # plain Arrow, so that the Spark reader maps them to Spark types outside the store layer
    reader_columns: tuple[tuple[str, "pa.DataType"], ...] = ()

    # -- the spec -------------------------------------------------------------------------

    def params_from_dict(self, name: str, data: Any) -> Any:
        """The parameters of store `name` recorded as `data` (every field checked)."""
        return None

    def params_as_dict(self, params: Any) -> dict[str, Any]:
        """The durable form of the parameters (JSON-able)."""
        return {}

    def cacheable(self, params: Any) -> bool:
        """Whether a store with these parameters may sit behind the record cache."""
        return True

    def store_record(self, spec: KindSpec) -> dict[str, Any]:
        """What a RocksDB database records for the store's column family: what its bytes
        mean to the store code (a store reopened with another record is refused)."""
        return {"kind": self.name}

    def describe(self, recorded: dict[str, Any]) -> str:
        """A short description of a store from its durable form (`inspect`)."""
        return self.name

    def facts(self, spec: KindSpec) -> dict[str, Any]:
        """The kind's parameters as the metadata reader's columns show them."""
        return {}

    # -- the key schema -------------------------------------------------------------------

    def user_key(self, spec: KindSpec, raw: bytes) -> bytes | None:
        """The encoded user key of a stored key (None: the store's bookkeeping, which every
        partition of a rescale gets a copy of)."""
        return raw

    def data_end(self, spec: KindSpec) -> bytes | None:
        """Where the store's bookkeeping keys start (None: it keeps none among its data)."""
        return None

    def key_columns(self, spec: KindSpec, stored: "pa.Array") -> tuple["pa.Array", tuple["pa.Array", ...]]:
        """Stored data keys as user keys and the columns they carry (`reader_columns`' parts)."""
        return stored, ()

    def expiry_parts(self, spec: KindSpec, bounds: list[bytes]) -> tuple["pa.Array", ...] | None:
        """The parts of the expiries that range deletions from the first key up to each of
        `bounds` are (None: such deletions are no expiries of this kind)."""
        return None

    def live_keys(
        self, spec: KindSpec, store: Any, latest: Callable[[bytes, Any], Any]
    ) -> tuple[bytes | None, bytes | None] | None:
        """The stored keys `lo <= key < hi` of the records `store` serves, where `latest(key,
        default)` is a bookkeeping key's value after the changelogs not yet applied (None:
        the caller's key range, for a kind whose stored keys lead with the user key)."""
        return None

    # -- the layers -----------------------------------------------------------------------

    def in_memory(self, spec: KindSpec) -> Store:
        """A new in-memory store."""
        raise NotImplementedError(f"store kind {self.name!r} has no in-memory store")

    def on_keyspace(self, spec: KindSpec, keyspace: Any, database: Any, on_close: Any) -> Store:
        """The transactional store over `keyspace`, sharing `database`'s transaction."""
        raise NotImplementedError(f"store kind {self.name!r} has no transactional store")

    def view_store(self, spec: KindSpec, keyspace: Any) -> Store:
        """A store reading `keyspace` (a view's committed or uncommitted data)."""
        raise NotImplementedError(f"store kind {self.name!r} has no read-only view")

    def caching(
        self, store: Any, cache: Any, on_flush: Callable | None, send_old_values: bool, namespace: str | None
    ) -> Any:
        """`store` behind the record cache `cache` (a caching store of the same kind)."""
        raise NotImplementedError(f"store kind {self.name!r} has no caching store")

    def typed(self, store: Any, key_serde: Any, value_serde: Any) -> Any:
        """The typed facade of `store` (or of a read-only view of one)."""
        raise NotImplementedError(f"store kind {self.name!r} has no typed facade")

    # -- reading and writing through the store ----------------------------------------------

    def records(self, store: Any) -> Iterator[tuple[Any, ...]]:
        """Every live record as `(key, value, *parts)` (the parts of `reader_columns`' order)."""
        return store.all()

    def reader_values(
        self, spec: KindSpec, parts: tuple["pa.Array", ...], gone: "np.ndarray | None" = None
    ) -> list["pa.Array"]:
        """The `reader_columns` of rows whose key schema gave `parts`; `gone` marks the rows
        that are the kind's expiries (changes without a key), whose derived columns are null."""
        return []

    def row_values(self, spec: KindSpec, parts: tuple[Any, ...], gone: bool = False) -> dict[str, Any]:
        """`reader_values` of one row, as Python values by column name (the CLI's rows)."""
        return {}

    def migrate(self, store: Any, serde: Any) -> int:
        """Rewrite through `serde` the values of `store` (a bytes store) written before its
        schema's newest migration (see `stores/migration.py`); returns how many."""
        raise NotImplementedError(f"store kind {self.name!r} cannot migrate its values")

    # -- time -----------------------------------------------------------------------------

    def on_watermark(self, spec: KindSpec) -> bool:
        """Whether the store's stream time is on `Clock.WATERMARK`: moved to the batch's watermark (in Spark)."""
        return False

    def at_watermark(self, spec: KindSpec, store: Any, watermark: int) -> None:
        """A batch ends at `watermark`: what a store on the watermark clock does then."""

    def dropped_records(self, store: Any) -> int:
        """The records the store dropped as late so far."""
        return 0

    def __repr__(self) -> str:
        return f"<store kind {self.name!r}>"


KINDS: dict[str, StoreKind] = {}


def register(kind: StoreKind) -> StoreKind:
    """Add `kind` to the registry (the name it records must be new)."""
    if not kind.name or kind.name in KINDS:
        raise ValueError(f"a store kind needs a new name, got {kind.name!r} (known: {sorted(KINDS)})")
    KINDS[kind.name] = kind
    return kind


def kind_named(name: Any, store: str | None = None) -> StoreKind:
    """The kind recorded as `name`; ValueError naming the store and the known kinds if none."""
    try:
        return KINDS[name]
    except (KeyError, TypeError):
        known = ", ".join(map(repr, KINDS))
        where = f"store {store!r} has kind" if store is not None else "unknown store kind"
        raise ValueError(f"{where} {name!r}; known kinds: {known}") from None


def kind_of_store(store: Any) -> StoreKind | None:
    """The kind whose interface `store` implements (None: no kind's)."""
    for kind in KINDS.values():
        if isinstance(store, kind.store_type):
            return kind
    return None
