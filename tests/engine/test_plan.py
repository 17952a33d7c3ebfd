"""Planning decisions over values: holds, strict retries, packing, deferral and totals."""

from __future__ import annotations

import pytest

from servatus.config import Profile, Resources, Target
from servatus.engine.packing import allocation_id, pack
from servatus.engine.plan import Hold, Request, TaskWork, decide, format_totals, totals
from servatus.engine.status_values import Execution
from servatus.errors import PlanRefused

KEYS = ("a", "b", "c", "d", "e")


def target(**overrides: object) -> Target:
    values: dict[str, object] = {
        "slurm_bin": "/usr/bin",
        "work_root": "/w",
        "log_root": "/l",
        "partitions": ("debug",),
        "max_tasks_per_allocation": 4,
        "max_cpus_per_allocation": 64,
        "max_memory_mib_per_allocation": 262144,
        "max_time_limit": 2 * 86400,
        "gpu_gres": "gpu:a100",
        "max_gpus_per_allocation": 4,
    }
    values.update(overrides)
    return Target(**values)  # type: ignore[arg-type]


A100 = Resources(cpus=16, memory_mib=65536, time_limit=12 * 3600, gpus=1)


def accepted(execution: Execution, *, listed: bool = False) -> TaskWork:
    return TaskWork(execution=execution, accepted=True, listed=listed)


def test_first_plan_selects_everything_in_roster_order() -> None:
    decision = decide(KEYS, {}, Request())
    assert decision.selected == KEYS
    assert decision.held == ()


def test_holds_for_each_reason() -> None:
    work = {
        "a": accepted(Execution.RUNNING),
        "b": TaskWork(unresolved=True),
        "c": accepted(Execution.FAILED),
        "e": TaskWork(listed=True),  # recorded not submitted, yet Slurm lists a job for it
    }
    decision = decide(KEYS, work, Request(), valid={"d"})
    assert decision.selected == ()
    assert dict(decision.held) == {
        "a": Hold.SUBMITTED,
        "b": Hold.UNRESOLVED,
        "c": Hold.SUBMITTED,
        "d": Hold.VALID,
        "e": Hold.ACTIVE,
    }


def test_retry_failed_takes_failed_and_stopped_never_lost() -> None:
    work = {
        "a": accepted(Execution.FAILED),
        "b": accepted(Execution.STOPPED),
        "c": accepted(Execution.LOST),
        "d": accepted(Execution.FAILED, listed=True),
        "e": accepted(Execution.SUCCEEDED),
    }
    decision = decide(KEYS, work, Request(retry_failed=True))
    assert decision.selected == ("a", "b")
    assert dict(decision.held) == {"c": Hold.SUBMITTED, "d": Hold.ACTIVE, "e": Hold.SUBMITTED}


def test_retry_is_strict_and_names_every_bad_key() -> None:
    work = {
        "a": accepted(Execution.LOST),
        "b": accepted(Execution.RUNNING, listed=True),
        "c": TaskWork(unresolved=True),
    }
    with pytest.raises(PlanRefused) as refused:
        decide(KEYS, work, Request(retry=("a", "b", "c", "d", "e", "zz")), valid={"d"})
    message = str(refused.value)
    assert "zz: unknown Task" in message
    assert "b: Slurm still lists" in message
    assert "c: has an unresolved submission" in message
    assert "d: the probe reports a valid result" in message
    assert "e: was never accepted" in message
    assert "a:" not in message


def test_retry_names_a_lost_task() -> None:
    decision = decide(KEYS, {"a": accepted(Execution.LOST)}, Request(retry=("a",)), valid=set())
    assert decision.selected[0] == "a"


def test_only_restricts_and_refuses_unknown_keys() -> None:
    decision = decide(KEYS, {}, Request(only=("b", "d")))
    assert decision.selected == ("b", "d")
    assert {key for key, hold in decision.held if hold is Hold.NOT_REQUESTED} == {"a", "c", "e"}
    with pytest.raises(PlanRefused, match="nope: unknown Task"):
        decide(KEYS, {}, Request(only=("nope",)))


def test_only_restricts_retries_too() -> None:
    lost = {"a": accepted(Execution.LOST), "b": accepted(Execution.LOST)}
    request = Request(retry=("a", "b"), only=("a", "c"))
    with pytest.raises(PlanRefused, match="b: not among --only") as refused:
        decide(KEYS, lost, request, valid=set())
    assert "a:" not in str(refused.value)
    decision = decide(KEYS, lost, Request(retry=("a",), only=("a", "c")), valid=set())
    assert decision.selected == ("a", "c")


def test_packing_by_capacity_and_limit_and_deferral() -> None:
    profile = Profile("a100", target(max_allocations_per_submit=2), A100)
    decision = decide(KEYS, {}, Request())
    packed, allocations = pack(decision, profile, Request(), salt="s")
    assert [a.task_keys for a in allocations] == [("a", "b", "c", "d"), ("e",)]
    assert packed.deferred == ()
    packed, allocations = pack(decision, profile, Request(tasks_per_allocation=2), salt="s")
    assert [a.task_keys for a in allocations] == [("a", "b"), ("c", "d")]
    assert packed.deferred == ("e",)
    assert packed.selected == ("a", "b", "c", "d")


def test_allocation_ids_are_reproducible_and_distinct() -> None:
    first = allocation_id("campaign:1", 0, ["a", "b"])
    assert first == allocation_id("campaign:1", 0, ["a", "b"])
    assert len(first) == 24 and int(first, 16) >= 0
    assert first != allocation_id("campaign:2", 0, ["a", "b"])
    assert first != allocation_id("campaign:1", 1, ["a", "b"])
    assert first != allocation_id("campaign:1", 0, ["ab"])


def test_totals_match_the_spec_examples() -> None:
    profile = Profile("a100", target(), A100)
    _, allocations = pack(decide(("x", "y"), {}, Request()), profile, Request(), salt="s")
    assert format_totals(totals(A100, allocations)) == (
        "requests at most 384.0 CPU-hours, 24.0 GPU-hours, 1536.0 GiB-hours"
    )
    chain = Resources(cpus=32, memory_mib=64000, time_limit=72 * 3600, gpus=1)
    one = pack(decide(("x",), {}, Request()), Profile("c", target(), chain), Request(), salt="s")
    assert format_totals(totals(chain, one[1])) == (
        "requests at most 2304.0 CPU-hours, 72.0 GPU-hours, 4500.0 GiB-hours"
    )
    cpu = Resources(cpus=2, memory_mib=16384, time_limit=4 * 3600)
    assert format_totals(totals(cpu, one[1])) == "requests at most 8.0 CPU-hours, 64.0 GiB-hours"
