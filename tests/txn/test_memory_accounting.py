"""The memory budgets count at least what CPython allocates for buffered records (traced
with tracemalloc, deterministic in one process, plus the allocator's rounding), for
distinct key and value objects of several sizes, as real records are: the transaction
buffer against its uncommitted limit, the record cache against its size. What RSS adds
beyond that (fragmentation under churn, fixed costs) is measured by benchmarks/memory.py."""

from __future__ import annotations

import os
import sys
import tracemalloc

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spark_statestore import ThreadCache, TransactionalDatabase
from spark_statestore.stores.sizes import bytes_cost
from spark_statestore.txn.budget import ENTRY_COST


def _traced(fill) -> int:
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        fill()
        return tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("value_len", [0, 1, 16, 100, 479, 480, 1000, 4096])
def test_a_bytes_object_costs_at_least_what_it_takes(value_len):
    assert bytes_cost(value_len) >= sys.getsizeof(b"x" * value_len)
    assert bytes_cost(value_len) % 16 == 0 or bytes_cost(value_len) > 512


@pytest.mark.parametrize("value_len", [1, 16, 100, 1000])
def test_the_transaction_buffer_counts_what_its_records_take(tmp_path, value_len):
    db = TransactionalDatabase(str(tmp_path / "db"), uncommitted_max_bytes=-1)
    kv = db.key_value_store("kv")
    records = 20_000

    def fill() -> None:
        for i in range(records):
            kv.put(os.urandom(16), os.urandom(value_len))

    traced = _traced(fill)
    # tracemalloc counts requested sizes; pymalloc hands out 16-byte steps (objects of up to 512 bytes)
    rounding = sum(-size % 16 for size in (sys.getsizeof(b"k" * 16), sys.getsizeof(b"v" * value_len)) if size <= 512)
    estimated = db.budget.memory  # uncommitted bytes: key and value bytes plus ENTRY_COST a record
    assert kv.keyspace.entries == records and estimated == kv.keyspace.memory_bytes + records * ENTRY_COST
    assert estimated >= traced + records * rounding, (estimated / records, traced / records + rounding)
    db.close()


@pytest.mark.parametrize("value_len", [8, 100, 1000])
def test_the_record_cache_counts_what_its_entries_take(value_len):
    cache = ThreadCache(1 << 40)
    named = cache.named_cache("store")
    records = 20_000

    def fill() -> None:
        for i in range(records):
            named.put(b"%08d" % i, os.urandom(value_len), True)

    traced = _traced(fill)
    assert cache.size_bytes >= traced, (cache.size_bytes / records, traced / records)


@settings(max_examples=40, deadline=None)
@given(
    limit=st.integers(256, 64 * 1024),
    writes=st.lists(st.tuples(st.integers(0, 300), st.integers(0, 2000), st.booleans()), min_size=1, max_size=300),
)
def test_a_batch_that_spills_always_signals_the_crossing(tmp_path_factory, limit, writes):
    """Spilling and the early trigger's signal count the same uncommitted quantity: a
    batch that spilled crossed the limit, so its watcher was told, with a total above it
    (and one that was told has a peak above the limit)."""
    db = TransactionalDatabase(str(tmp_path_factory.mktemp("spill") / "db"), uncommitted_max_bytes=limit)
    told: list[int] = []
    db.budget.watch(limit, told.append)
    kv = db.key_value_store("kv")
    for key_len, value_len, delete in writes:
        key = b"k" * key_len + len(told).to_bytes(2, "big")
        kv.put(key, None if delete else b"v" * value_len)
    spilled = db.metrics.spills > 0
    if spilled:
        assert len(told) == 1 and told[0] > limit, (db.metrics.spills, told)
    if told:
        assert db.uncommitted_bytes_peak > limit
    db.close()
