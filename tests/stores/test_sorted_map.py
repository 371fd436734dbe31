"""`SortedMap`: live ordered walks across changes, and when the sorted index exists."""

from __future__ import annotations

import random

import pytest

from spark_statestore.stores.sorted_map import SortedMap


@pytest.mark.parametrize("eager", [False, True])
def test_a_live_walk_follows_clears_and_inserts(eager):
    m = SortedMap(eager=eager)
    for k in (1, 3, 5):
        m.set(k, str(k))
    walk = m.iter_keys()
    assert next(walk) == 1
    m.clear()
    for k in (2, 4, 6):
        m.set(k, str(k))
    assert list(walk) == [2, 4, 6]  # only keys present, and ahead of the last one handed out


def test_clear_drops_the_index_of_a_lazy_map_only():
    lazy, eager = SortedMap(), SortedMap(eager=True)
    for m in (lazy, eager):
        m.set(b"b", 1)
        m.set(b"a", 2)
        assert list(m.sorted_keys()) == [b"a", b"b"]
        m.clear()
        m.set(b"c", 3)
    assert lazy.index is None  # inserts after a clear pay no ordering until the next walk
    assert list(eager.index) == [b"c"]
    assert list(lazy.iter_keys()) == [b"c"] and list(eager.iter_keys()) == [b"c"]


def test_walks_match_a_sorted_model_under_random_changes():
    rng = random.Random(7)
    m, model = SortedMap(), {}
    for step in range(3000):
        r = rng.random()
        key = rng.randrange(200)
        if r < 0.5:
            m.set(key, step)
            model[key] = step
        elif r < 0.8:
            m.pop(key)
            model.pop(key, None)
        elif r < 0.82:
            m.clear()
            model.clear()
        else:
            lo, hi = sorted(rng.sample(range(220), 2))
            assert list(m.iter_items(lo, hi)) == [(k, model[k]) for k in sorted(model) if lo <= k <= hi]


def test_ordered_keys_are_sorted_once_while_the_keys_stay_the_same():
    """Without an index, `ordered_keys` sorts once and gives the same list again until a
    key comes or goes (an overwrite keeps it); every answer is the keys in order."""
    from spark_statestore.stores.sorted_map import SortedMap

    m = SortedMap()
    for key in (b"c", b"a", b"b"):
        m.set(key, 1)
    first = m.ordered_keys()
    assert first == [b"a", b"b", b"c"]
    m.set(b"a", 2)  # an overwrite: the same keys
    m.data[b"b"] = 3
    assert m.ordered_keys() is first
    m.set(b"0", 1)
    assert m.ordered_keys() == [b"0", b"a", b"b", b"c"]
    m.pop(b"b")
    assert m.ordered_keys() == [b"0", b"a", b"c"]
    m.set_many([(b"d", 1), (b"a", 5)], [b"d"])
    assert m.ordered_keys() == [b"0", b"a", b"c", b"d"]
    m.clear()
    assert m.ordered_keys() == []
    m.set(b"z", 1)
    assert m.ordered_keys() == [b"z"]
    list(m.iter_keys())  # an ordered walk builds the index: from then on it answers
    m.set(b"y", 1)
    assert m.ordered_keys() == [b"y", b"z"]


@pytest.mark.parametrize("seed", range(6))
def test_live_walks_hold_their_promises_under_changes(seed):
    """Walks of random ranges and directions, consumed a few keys at a time while keys
    come and go and the map is cleared (after which the index is built again): keys come
    in order, each present when handed out, and every key of the range that was
    present from the walk's start to its end is handed out."""
    rng = random.Random(seed)
    m, model = SortedMap(), {}
    for step in range(1500):
        r = rng.random()
        if r < 0.03:
            m.clear()
            model.clear()
        elif r < 0.2:
            for _ in range(rng.randrange(1, 30)):
                key = rng.randrange(300)
                m.set(key, step)
                model[key] = step
        elif r < 0.3:
            for key in rng.sample(range(300), 10):
                m.pop(key)
                model.pop(key, None)
        else:
            lo = rng.choice([None, rng.randrange(300)])
            hi = rng.choice([None, rng.randrange(300)])
            lo_in, hi_in, reverse = rng.random() < 0.5, rng.random() < 0.5, rng.random() < 0.5
            inside = lambda k: (lo is None or k > lo or (lo_in and k == lo)) and (  # noqa: E731
                hi is None or k < hi or (hi_in and k == hi)
            )
            if rng.random() < 0.3:
                assert m.has_key_in(lo, hi) == any(
                    (lo is None or k >= lo) and (hi is None or k < hi) for k in model
                )
            walk = m.iter_items(lo, hi, lo_in, hi_in, reverse)
            throughout = {k for k in model if inside(k)}
            got = []
            while True:
                batch = [item for _, item in zip(range(rng.randrange(1, 6)), walk)]
                for key, value in batch:
                    assert key in model and model[key] == value and inside(key)
                got += [key for key, _ in batch]
                if not batch:
                    break
                for _ in range(rng.randrange(3)):
                    key = rng.randrange(300)
                    if rng.random() < 0.5:
                        m.set(key, -step)
                        model[key] = -step
                    else:
                        m.pop(key)
                        model.pop(key, None)
                        throughout.discard(key)
            assert got == sorted(got, reverse=reverse) and len(set(got)) == len(got)
            assert throughout <= set(got), sorted(throughout - set(got))
