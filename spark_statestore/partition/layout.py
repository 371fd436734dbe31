"""`Layout`: what a partition's state was built with, kept with every version.

The stores (kind, window parameters, serde identities) and the number of partitions the
query's state is split into. It is recorded in the partition's database (so snapshots
carry it), in every changelog header, and in the query-level file `statestore/_layout`
that the driver writes before any task runs (and that readers of the state use). Opening
the state with a layout that contradicts a recorded one is refused, naming what differs:
a store read back with another kind, window size or serde would be garbage. Adding a
store is allowed (it starts empty), and so is a record store's value schema gaining a
version (the recorded versions must stay its first ones: see `serde/evolution.py`).
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Sequence

import pyarrow.fs as pafs

from spark_statestore.checkpoint.filesystem import DurableDir, resolve_location
from spark_statestore.checkpoint.names import QUERY_LAYOUT, statestore_dir
from spark_statestore.errors import CorruptStateError, StateStoreError
from spark_statestore.partition.generations import Generation, check_history, check_partitions
from spark_statestore.stores.spec import StoreSpec


class LayoutMismatchError(StateStoreError, ValueError):
    """The state was built with other stores or another partition count."""


@dataclass(frozen=True)
class Layout:
    """The stores of a partition and the partition count (None: not fixed by the caller);
    the query's layout also keeps the generations a rescale made (`generations.py`)."""

    stores: tuple[StoreSpec, ...]
    partitions: int | None = None
    generations: tuple[Generation, ...] = ()

    @staticmethod
    def of(stores: Sequence[StoreSpec], partitions: int | None = None) -> "Layout":
        if isinstance(stores, (str, bytes)) or not isinstance(stores, Sequence):
            raise TypeError(f"stores must be a list of StoreSpec, got {type(stores).__name__}: {stores!r:.100}")
        for index, spec in enumerate(stores):
            if not isinstance(spec, StoreSpec):
                raise TypeError(
                    f"stores[{index}] must be a StoreSpec (StoreSpec.key_value/window), got "
                    f"{type(spec).__name__}: {spec!r:.100}"
                )
        names = [s.name for s in stores]
        if len(set(names)) != len(names):
            raise ValueError(f"stores must have distinct names, got {names}")
        if partitions is not None:
            partitions = check_partitions(partitions)
        return Layout(tuple(stores), partitions)

    @property
    def names(self) -> list[str]:
        return [s.name for s in self.stores]

    @property
    def history(self) -> tuple[Generation, ...]:
        """Every generation, oldest first (one, generation 0, until a rescale)."""
        return self.generations or (Generation(0, self.partitions, -1),)

    @property
    def generation(self) -> Generation:
        """The generation the query writes now."""
        return self.history[-1]

    def as_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"partitions": self.partitions, "stores": {s.name: s.as_dict() for s in self.stores}}
        if self.generations:
            data["generations"] = [g.as_dict() for g in self.generations]
        return data

    def to_json(self) -> str:
        return json.dumps(self.as_dict(), sort_keys=True)

    @staticmethod
    def from_dict(data: Any, where: str) -> "Layout":
        """The layout recorded as `data` in `where` (a durable file or database): every field
        checked; anything else is `CorruptStateError` naming `where` and what is wrong."""
        try:
            if not isinstance(data, dict) or not isinstance(data.get("stores"), dict):
                raise TypeError("it must be an object with a 'stores' object")
            stores = tuple(StoreSpec.from_dict(name, spec) for name, spec in data["stores"].items())
            partitions = data.get("partitions")
            if partitions is not None:
                if type(partitions) is not int:
                    raise TypeError(f"partitions must be recorded as an int, got {partitions!r}")
                partitions = check_partitions(partitions)
            generations = data.get("generations", [])
            if not isinstance(generations, list):
                raise TypeError(f"generations must be a list, got {generations!r:.100}")
            history = check_history([Generation.from_dict(g) for g in generations])
            if history and history[-1].partitions != partitions:
                raise ValueError(f"the newest generation has {history[-1].partitions} partitions, not {partitions}")
            return Layout(Layout.of(stores, partitions).stores, partitions, history)
        except (TypeError, ValueError) as e:
            raise CorruptStateError(f"{where} holds an unreadable layout {str(data)[:200]}: {e}") from None

    @staticmethod
    def from_json(text: str, where: str) -> "Layout":
        try:
            data = json.loads(text)
        except (ValueError, RecursionError) as e:  # RecursionError: nested too deep to be a layout
            raise CorruptStateError(f"{where} holds an unreadable layout: {e}") from None
        return Layout.from_dict(data, where)

    def check_against(self, recorded: "Layout", location: str, where: str) -> None:
        """Refuse to use state recorded with `recorded` under this layout."""
        if self.partitions is not None and recorded.partitions is not None and recorded.partitions != self.partitions:
            raise LayoutMismatchError(partition_count_message(location, recorded.partitions, self.partitions))
        theirs = {s.name: s for s in recorded.stores}
        for spec in self.stores:
            old = theirs.get(spec.name)
            if old is None:
                continue
            if _declared(old) != _declared(spec):
                raise LayoutMismatchError(
                    f"store {spec.name!r} of the state in {location} was created as {_declared(old)} ({where}); "
                    f"it cannot be opened as {_declared(spec)}{_key_change(old, spec)}: keep the declaration, "
                    f"or start from a new checkpoint location"
                )
            if spec.value_schemas[: len(old.value_schemas)] != old.value_schemas:
                raise LayoutMismatchError(
                    f"store {spec.name!r} of the state in {location} has value schema versions {list(old.value_schemas)} "
                    f"({where}); this query declares {list(spec.value_schemas)}, which do not follow them: "
                    f"a schema changes only when a query is built on the driver"
                )

    def merged_with(self, recorded: "Layout | None") -> "Layout":
        """This layout plus stores only the recorded one has (their data stays)."""
        if recorded is None:
            return self
        mine = set(self.names)
        extra = tuple(s for s in recorded.stores if s.name not in mine)
        partitions = self.partitions if self.partitions is not None else recorded.partitions
        return Layout(self.stores + extra, partitions, recorded.generations)


def _declared(spec: StoreSpec) -> dict[str, Any]:
    """What must stay the same for a store (its value schema versions may grow)."""
    return {k: v for k, v in spec.as_dict().items() if k != "value_schemas"}


def _key_change(old: StoreSpec, new: StoreSpec) -> str:
    if old.key_serde == new.key_serde:
        return ""
    return f" (its keys were written with serde {old.key_serde!r}, not {new.key_serde!r}: keys never change shape)"


def partition_count_message(location: str, recorded: int, wanted: int) -> str:
    return (
        f"the state in {location} is split into {recorded} partitions, but this query uses {wanted}: "
        f"keep {recorded}, or move the stopped query's state to {wanted} partitions first "
        f"(python -m spark_statestore rescale CHECKPOINT {wanted})"
    )


def _query_dir(location: str, filesystem: pafs.FileSystem | None) -> DurableDir:
    fs, root = resolve_location(location, filesystem)
    return DurableDir(fs, statestore_dir(root))


def read_query_layout(location: str, filesystem: pafs.FileSystem | None = None) -> Layout | None:
    """The layout recorded for the state under `location` (None if none is)."""
    durable = _query_dir(location, filesystem)
    try:
        raw = durable.read_bytes(QUERY_LAYOUT)
    except FileNotFoundError:
        return None
    except OSError as e:  # a directory, say, where the file should be
        raise CorruptStateError(f"{durable.uri(QUERY_LAYOUT)} cannot be read as a layout: {e}") from None
    return Layout.from_json(raw.decode("utf-8", "replace"), durable.uri(QUERY_LAYOUT))


_RUN_LAYOUTS_KEPT = 64  # (location, run) entries a process keeps
_run_layouts: OrderedDict[tuple[str, str], Layout] = OrderedDict()
_run_layouts_lock = threading.Lock()


def query_layout_of_run(location: str, run: str | None, filesystem: pafs.FileSystem | None = None) -> Layout | None:
    """The layout recorded for the state under `location`, read once per query run `run`
    in this process (None, or a `filesystem` given: read on every call). Only `rescale`
    replaces the file once the query ran, and a rescale runs while the query is stopped
    (`rescale.check_stopped`): the run that read it ends before, the next one is another
    run and reads it anew. Saves a HEAD and a GET per batch and partition on an object
    store. No file is not kept (a driver records it before the query's first batch)."""
    if run is None or filesystem is not None:
        return read_query_layout(location, filesystem)
    key = (location, run)
    with _run_layouts_lock:
        if key in _run_layouts:
            _run_layouts.move_to_end(key)
            return _run_layouts[key]
    layout = read_query_layout(location)
    if layout is None:
        return None
    with _run_layouts_lock:
        _run_layouts[key] = layout
        while len(_run_layouts) > _RUN_LAYOUTS_KEPT:
            _run_layouts.popitem(last=False)
    return layout


def current_generation(
    location: str, partition: int, filesystem: pafs.FileSystem | None = None, run: str | None = None
) -> int:
    """The generation a writer of `partition` uses now (0 before any rescale); a partition
    the generation does not have is refused, naming the counts. `run`: the query's run
    (`query_layout_of_run`)."""
    layout = query_layout_of_run(location, run, filesystem)
    if layout is None or not layout.generations:
        return 0
    generation = layout.generation
    if generation.partitions is not None and partition >= generation.partitions:
        raise LayoutMismatchError(
            f"the state in {location} was rescaled to {generation.partitions} partitions, but partition "
            f"{partition} is being opened: the query must run on {generation.partitions} partitions now"
        )
    return generation.number


def publish_query_layout(location: str, layout: Layout, filesystem: pafs.FileSystem | None = None) -> None:
    """Replace the query's layout file with `layout` (one atomic publish: a rescale's switch)."""
    _query_dir(location, filesystem).publish_bytes(QUERY_LAYOUT, layout.to_json().encode("utf-8"))


def record_query_layout(location: str, layout: Layout, filesystem: pafs.FileSystem | None = None) -> Layout:
    """On the driver, before any task runs: check `layout` against the one recorded for the
    state under `location` and record it (with any stores added); returns what is recorded."""
    recorded = read_query_layout(location, filesystem)
    durable = _query_dir(location, filesystem)
    if recorded is not None:
        layout.check_against(recorded, location, durable.uri(QUERY_LAYOUT))
    merged = layout.merged_with(recorded)
    if recorded is None or merged.to_json() != recorded.to_json():
        durable.publish_bytes(QUERY_LAYOUT, merged.to_json().encode("utf-8"))
    return merged
