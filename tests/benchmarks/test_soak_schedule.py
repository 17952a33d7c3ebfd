"""``benchmarks/soak/schedule.py``: the fault plan is a function of its seed and rates alone."""

from __future__ import annotations

import itertools
import json

import pytest
from soak.schedule import (
    CLOCKS,
    DEFAULT_RATES,
    FIELD_HOLDS,
    HOLD_RANGE,
    RESTARTED,
    FaultKind,
    FaultPlan,
    field_rates,
    plan_faults,
)

pytestmark = pytest.mark.slow  # the soak's own checks: once, in the trials, not per Python


NODES = ("node1", "node2")


def test_same_seed_same_plan_and_another_seed_another() -> None:
    first = plan_faults(34, 1800, nodes=NODES)
    again = plan_faults(34, 1800, nodes=NODES)
    other = plan_faults(35, 1800, nodes=NODES)
    assert first == again
    assert json.dumps(first.to_json()) == json.dumps(again.to_json())
    assert first.faults != other.faults
    assert len(first.faults) > 15  # 56 an hour at the default rates: about 28 in 30 minutes


def test_the_plan_round_trips_through_json() -> None:
    plan = plan_faults(5, 600, nodes=NODES)
    assert FaultPlan.from_json(json.loads(json.dumps(plan.to_json()))) == plan
    with pytest.raises(ValueError, match=r"not a servatus\.soak\.faults/1"):
        FaultPlan.from_json({"schema": "other"})


def test_a_kind_keeps_its_events_when_another_kind_changes() -> None:
    full = plan_faults(9, 3600, nodes=NODES)
    fewer = dict(DEFAULT_RATES, **{})
    fewer[FaultKind.STEP_CLOCK] = 0.0
    fewer[FaultKind.KILL_CLIENT] = 100.0
    changed = plan_faults(9, 3600, rates=fewer, nodes=NODES)
    for kind in (FaultKind.KILL_SLURMCTLD, FaultKind.KILL_SLURMD, FaultKind.FILL_LOG_ROOT):
        assert [f for f in full.faults if f.kind is kind] == [
            f for f in changed.faults if f.kind is kind
        ]
    assert not [f for f in changed.faults if f.kind is FaultKind.STEP_CLOCK]
    assert changed.by_kind()["kill-client"] > full.by_kind()["kill-client"]


def test_events_are_ordered_bounded_and_well_formed() -> None:
    plan = plan_faults(11, 1800, nodes=NODES, quiet_tail=120)
    times = [f.at for f in plan.faults]
    assert times == sorted(times)
    assert all(0 <= t < 1800 - 120 for t in times)
    assert set(plan.by_kind()) == {kind.value for kind in FaultKind}
    for fault in plan.faults:
        low, high = HOLD_RANGE[fault.kind]
        assert low <= fault.hold <= high
        assert (fault.node in NODES) == (fault.kind is FaultKind.KILL_SLURMD)
        assert (fault.step != 0) == (fault.kind in CLOCKS)
    for kind in RESTARTED | {FaultKind.FILL_LOG_ROOT}:
        mine = [f for f in plan.faults if f.kind is kind]
        for before, after in itertools.pairwise(mine):
            assert after.at >= before.at + before.hold, (kind, before, after)


def test_bad_input_is_refused() -> None:
    with pytest.raises(ValueError, match="positive"):
        plan_faults(1, 0)
    with pytest.raises(ValueError, match="negative"):
        plan_faults(1, 60, rates={FaultKind.STEP_CLOCK: -1.0})
    with pytest.raises(ValueError, match="node"):
        plan_faults(1, 60, nodes=())


def test_the_field_rates_plan_hundreds_of_each_kind_with_short_outages() -> None:
    kinds = [kind for kind in FaultKind if kind is not FaultKind.STEP_CLOCK]
    rates = field_rates(200, 1800, quiet_tail=60, kinds=kinds)
    assert set(rates) == set(kinds)
    short = field_rates(34, 300, quiet_tail=60, kinds=kinds)  # the CI lane's five minutes
    for seed in range(300):
        counts = plan_faults(seed, 300, rates=short, quiet_tail=60, holds=FIELD_HOLDS).by_kind()
        assert all(counts[kind.value] >= 34 for kind in kinds), (seed, counts)
    for seed in range(5):
        plan = plan_faults(
            seed, 1800, rates=rates, nodes=("n1", "n2", "n3"), quiet_tail=60, holds=FIELD_HOLDS
        )
        counts = plan.by_kind()
        assert all(counts[kind.value] >= 200 for kind in kinds), counts
        assert all(FIELD_HOLDS[f.kind][0] <= f.hold <= FIELD_HOLDS[f.kind][1] for f in plan.faults)
        struck = {f.node for f in plan.faults if f.kind is FaultKind.KILL_SLURMD}
        assert struck == {"n1", "n2", "n3"}
    with pytest.raises(ValueError, match="do not fit"):
        field_rates(1000, 1800, kinds=[FaultKind.FILL_LOG_ROOT])
    with pytest.raises(ValueError, match="positive"):
        field_rates(10, 60, quiet_tail=60)
