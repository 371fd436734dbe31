"""`spark_statestore.murmur3` against Spark's own `hash()` and `pmod(hash(...), n)` on
many random values of every type a grouping key can have."""

from __future__ import annotations

import random

import numpy as np
import pytest

from spark_statestore import murmur3
from spark_statestore.murmur3 import Int32

pytestmark = pytest.mark.versioned


def _strings(rng: random.Random, count: int) -> list[str]:
    alphabet = "abcXYZ019 -_é漢字\U0001f600"
    return [
        "".join(rng.choice(alphabet) for _ in range(rng.randrange(0, 23))) for _ in range(count)
    ]


def _values(seed: int = 7, count: int = 400) -> dict[str, list]:
    rng = random.Random(seed)
    edges64 = [0, 1, -1, 2**63 - 1, -(2**63), 2**32, -(2**32), 2**31, -(2**31) - 1]
    edges32 = [0, 1, -1, 2**31 - 1, -(2**31)]
    return {
        "s": _strings(rng, count - 2) + ["", "abcd"],
        "l": edges64 + [rng.randrange(-(2**63), 2**63) for _ in range(count - len(edges64))],
        "i": edges32 + [rng.randrange(-(2**31), 2**31) for _ in range(count - len(edges32))],
        "b": [bytes(rng.randrange(256) for _ in range(rng.randrange(0, 13))) for _ in range(count)],
        "d": [0.0, -0.0, 1.5, -2.25, float("inf"), float("nan")] + [rng.uniform(-1e9, 1e9) for _ in range(count - 6)],
        "z": [rng.random() < 0.5 for _ in range(count)],
    }


@pytest.fixture(scope="module")
def spark_hashes(spark):
    """Spark's hash of each column, of all columns together, and pmod of those by 7."""
    from pyspark.sql import functions as F

    values = _values()
    rows = list(zip(*values.values()))
    # a null in some rows: Spark leaves the seed unchanged there
    rows = [(None if k % 11 == 0 else s, *rest) for k, (s, *rest) in enumerate(rows)]
    frame = spark.createDataFrame(rows, "s string, l bigint, i int, b binary, d double, z boolean")
    exprs = [F.hash(F.col(c)).alias(f"h_{c}") for c in "slibdz"]
    exprs += [F.hash("s", "l", "i", "b", "d", "z").alias("h_all"), F.expr("pmod(hash(s, l), 7)").alias("p_sl")]
    return rows, frame.select(*exprs).collect()


def test_each_type_matches_spark(spark_hashes):
    rows, hashes = spark_hashes
    for (s, l, i, b, d, z), h in zip(rows, hashes):
        assert murmur3.spark_hash([s]) == h["h_s"], s
        assert murmur3.spark_hash([l]) == h["h_l"], l
        assert murmur3.spark_hash([Int32(i)]) == h["h_i"], i
        assert murmur3.spark_hash([b]) == h["h_b"], b
        assert murmur3.spark_hash([d]) == h["h_d"], d
        assert murmur3.spark_hash([z]) == h["h_z"], z


def test_several_columns_and_pmod_match_spark(spark_hashes):
    rows, hashes = spark_hashes
    for (s, l, i, b, d, z), h in zip(rows, hashes):
        assert murmur3.spark_hash([s, l, Int32(i), b, d, z]) == h["h_all"]
        assert murmur3.partition_of([s, l], 7) == h["p_sl"]


def test_vectorised_matches_scalar():
    values = _values(seed=3, count=2000)
    longs = np.array(values["l"], dtype=np.int64)
    ints = np.array(values["i"], dtype=np.int32)
    assert murmur3.hash_longs(longs).tolist() == [murmur3.hash_long(v) for v in values["l"]]
    assert murmur3.hash_ints(ints).tolist() == [murmur3.hash_int(v) for v in values["i"]]
    seeds = murmur3.hash_longs(longs)  # chained columns: the first column's hash seeds the second
    chained = murmur3.hash_ints(ints, seeds)
    assert chained.tolist() == [murmur3.spark_hash([a, Int32(b)]) for a, b in zip(values["l"], values["i"])]
    assert murmur3.pmod_array(chained, 5).tolist() == [h % 5 for h in chained.tolist()]


def test_bad_values_are_refused_by_name():
    with pytest.raises(TypeError, match="grouping key value must be .*list"):
        murmur3.spark_hash([[1]])
    with pytest.raises(ValueError, match="signed 64-bit"):
        murmur3.spark_hash([2**63])
    with pytest.raises(ValueError, match="signed 32-bit"):
        murmur3.spark_hash([Int32(2**31)])
