"""`MemoryBudget` against a plain model of what it promises: the total and its peak over
any sequence of charges (growing, shrinking, unchanged), spills at the limit or asked for, the watcher
called once per transaction when the total first passes its threshold, and `reset`."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from spark_statestore.txn.budget import ENTRY_COST, MemoryBudget

steps = st.lists(
    st.one_of(
        st.tuples(st.just("charge"), st.integers(-400, 400), st.integers(-1, 2)),
        st.tuples(st.just("watch"), st.integers(-1, 3000), st.booleans()),
        st.tuples(st.just("reset"), st.just(0), st.just(0)),
        st.tuples(st.just("spill"), st.just(0), st.just(0)),  # as the database's own `spill()`
    ),
    max_size=60,
)


@settings(max_examples=300, deadline=None)
@given(limit=st.one_of(st.just(math.inf), st.integers(0, 2000)), steps=steps)
def test_the_budget_keeps_total_peak_spills_and_the_watcher_as_a_model_does(limit, steps):
    fired: list[int] = []
    spills = [0]

    def spill() -> None:  # what the database's hook does: every buffered byte to disk
        spills[0] += 1
        budget.spilled_to_disk(budget.memory, 0)

    budget = MemoryBudget(limit, spill)
    memory = spilled = peak = 0
    threshold, watching, armed = math.inf, False, False
    model_fired: list[int] = []
    model_spills = 0
    for op, a, b in steps:
        if op == "charge":
            budget.charge(a, b)
            memory += a + b * ENTRY_COST
            peak = max(peak, memory + spilled)
            if armed and memory + spilled > threshold:
                model_fired.append(memory + spilled)
                armed = False
            if memory > limit:
                model_spills += 1
                spilled += memory
                memory = 0
        elif op == "watch":
            budget.watch(a, fired.append if b else None)
            watching = b and a >= 0
            threshold = a if watching else math.inf
            armed = watching
        elif op == "spill":
            spill()
            model_spills += 1
            spilled += memory
            memory = 0
        else:
            budget.reset()
            memory = spilled = peak = 0
            armed = watching
        assert (budget.memory, budget.spilled, budget.total) == (memory, spilled, memory + spilled)
        assert budget.peak == peak
        assert fired == model_fired
        assert spills[0] == model_spills


def test_the_peak_stays_after_the_total_falls_and_a_spill_keeps_the_total():
    budget = MemoryBudget(1000, lambda: budget.spilled_to_disk(budget.memory, 0))
    budget.charge(600, 1)  # 600 + ENTRY_COST
    budget.charge(-500)
    assert budget.peak == 600 + ENTRY_COST and budget.total == 100 + ENTRY_COST
    budget.charge(900)  # past the limit: spilled, the total unchanged
    assert budget.memory == 0 and budget.spilled == budget.total == 1000 + ENTRY_COST
    assert budget.peak == 1000 + ENTRY_COST
    budget.reset()
    assert (budget.total, budget.peak) == (0, 0)
