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
