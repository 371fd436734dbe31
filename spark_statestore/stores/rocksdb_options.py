"""How RocksDB databases are configured: their options, and `RocksMemory`, the memory
budget several databases can share."""

from __future__ import annotations

import rocksdict

from spark_statestore.validation import check_int


class RocksMemory:
    """One memory budget for the RocksDB databases that share it: an LRU block cache of
    `total_bytes` (data, index and filter blocks) to which a write buffer manager charges
    the memtables, so RocksDB's memory stays near `total_bytes` however many databases and
    column families use it. Memtables may take up to half of it before they are flushed."""

    def __init__(self, total_bytes: int) -> None:
        self.total_bytes = check_int(total_bytes, "total_bytes", 1 << 20)
        self.cache = rocksdict.Cache(self.total_bytes)
        self.write_buffers = rocksdict.WriteBufferManager.new_write_buffer_manager_with_cache(
            self.total_bytes // 2, False, self.cache
        )

    @property
    def write_buffer_bytes(self) -> int:
        """A column family's memtable size under this budget."""
        return max(1 << 20, self.total_bytes // 8)

    def apply(self, opts: rocksdict.Options) -> None:
        table = table_options()
        table.set_block_cache(self.cache)
        table.set_cache_index_and_filter_blocks(True)
        table.set_pin_l0_filter_and_index_blocks_in_cache(False)
        opts.set_block_based_table_factory(table)
        opts.set_write_buffer_manager(self.write_buffers)

    def usage(self) -> int:
        """Bytes RocksDB holds now under this budget (blocks and memtables)."""
        return self.cache.get_usage()

    def __repr__(self) -> str:
        return f"RocksMemory(total_bytes={self.total_bytes}, usage={self.usage()})"


# A point read skips every SST file whose filter rules its key out: with state larger than
# the memtables, random gets ran 1.45x as fast with filters (benchmarks/README.md, "peers");
# the filters cost about 1.25 bytes per key in each file (and in the block cache).
BLOOM_BITS_PER_KEY = 10

# The memtable a commit's sorted batch is inserted into costs more per entry the larger it
# is (a deeper skiplist, fewer of its nodes in the CPU caches): 0.60 us per entry with
# 32 MiB, 0.31 us with 4 MiB, the flushes running on RocksDB's background threads.
DEFAULT_WRITE_BUFFER_BYTES = 8 << 20


def table_options() -> rocksdict.BlockBasedOptions:
    """The SST files' options: full bloom filters of `BLOOM_BITS_PER_KEY`."""
    table = rocksdict.BlockBasedOptions()
    table.set_bloom_filter(BLOOM_BITS_PER_KEY, False)
    return table


def rocksdb_options(write_buffer_bytes: int, memory: RocksMemory | None) -> rocksdict.Options:
    """Options of a raw-mode database and of its column families (atomic flush, bounded
    logs and open files, bloom filters; memtables and blocks under `memory` when given)."""
    opts = rocksdict.Options(raw_mode=True)
    opts.create_if_missing(True)
    opts.create_missing_column_families(True)
    opts.set_atomic_flush(True)
    opts.set_keep_log_file_num(2)
    opts.set_max_log_file_size(1 << 20)
    opts.set_max_background_jobs(2)
    opts.set_write_buffer_size(write_buffer_bytes)
    opts.set_db_write_buffer_size(2 * write_buffer_bytes)
    # open table files on demand: opening the database must not cost more as it grows
    opts.set_max_open_files(512)
    # open reads the table files' footers in the calling thread: RocksDB's default starts
    # 16 threads per column family at every open, which cost more than the reads
    opts.set_max_file_opening_threads(1)
    if memory is not None:
        memory.apply(opts)
    else:
        opts.set_block_based_table_factory(table_options())
    return opts

