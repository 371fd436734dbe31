"""The store kinds, registered in the store layer's registry (`stores/kinds.py`), and
`build_store`, which composes a store's layers from its kind.

A new kind: a `StoreKind` subclass in a module of its own (its stores in `stores/`, its
caching store in `cache/`) and one `register(...)` line below.
"""

from spark_statestore.kinds.build import StoreLayers, build_layers, build_store, typed_layer
from spark_statestore.kinds.key_value import KeyValueKind
from spark_statestore.kinds.session import SessionKind
from spark_statestore.kinds.window import WindowKind
from spark_statestore.stores.kinds import KINDS, StoreKind, kind_named, register

register(KeyValueKind())
register(WindowKind())
register(SessionKind())

__all__ = ["KINDS", "StoreKind", "StoreLayers", "build_layers", "build_store", "kind_named", "typed_layer"]
