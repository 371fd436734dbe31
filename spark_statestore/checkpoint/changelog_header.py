"""`ChangelogHeader`: the JSON header at the start of every changelog file.

It says which partition and version the changelog produces, the version (and its
identity) it builds on, the stores its records name (a record gives the index of its
store in `stores`), and the layout the state was built with (as `Layout.as_dict()`,
checked by the partition layer before anything is applied). It is part of what a
changelog's id hashes, so it is written the same way every time: sorted keys.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from spark_statestore.errors import CorruptStateError


@dataclass(frozen=True)
class ChangelogHeader:
    """The header of a changelog (see module docstring). `partition` and `layout` are kept as
    the file holds them (the reader compares them with what it expects)."""

    partition: Any
    version: int
    base_version: int
    base_id: int  # the id of the version it builds on (0: the empty state)
    stores: tuple[str, ...]
    layout: Any = None

    def to_json(self) -> bytes:
        fields = {
            "partition": self.partition,
            "version": self.version,
            "base_version": self.base_version,
            "base_id": self.base_id,
            "stores": list(self.stores),
            "layout": self.layout,
        }
        return json.dumps(fields, sort_keys=True).encode("utf-8")

    @staticmethod
    def parse(raw: bytes, where: str) -> ChangelogHeader:
        """The header `raw` of the changelog `where`, every field checked; anything else is
        `CorruptStateError` naming `where` and the field."""
        data = _load(raw, where)
        if not isinstance(data, dict):
            raise CorruptStateError(f"{where} has a header that is not an object")
        stores = data.get("stores")
        if not isinstance(stores, list) or not all(isinstance(n, str) for n in stores):
            raise CorruptStateError(f"{where} names no stores in its header")
        for key in ("version", "base_version", "base_id"):
            if type(data.get(key)) is not int:
                raise CorruptStateError(f"{where} has no valid {key} in its header")
        return ChangelogHeader(
            data.get("partition"),
            data["version"],
            data["base_version"],
            data["base_id"],
            tuple(stores),
            data.get("layout"),
        )


def parse_base_id(raw: bytes, where: str) -> int:
    """The `base_id` of the header `raw` alone (the other fields not checked: to choose a
    file, which is verified as a whole before it is applied)."""
    data = _load(raw, where)
    if not isinstance(data, dict) or type(data.get("base_id")) is not int:
        raise CorruptStateError(f"{where} has no valid base_id in its header")
    return data["base_id"]


def _load(raw: bytes, where: str) -> Any:
    try:
        return json.loads(raw)
    except ValueError as e:
        raise CorruptStateError(f"{where} has an unreadable header: {e}") from e
