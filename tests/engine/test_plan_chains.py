"""Planning under a continuation: chains of links from the planner, the SPENT hold and
extensions, the spec's example output literally, and properties over every budget and packing."""

from __future__ import annotations

import json

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from servatus.cli import json_text
from servatus.cli.render import plan_lines
from servatus.config import MAX_SIGNAL_BEFORE_END, Profile, Resources, Target, parse_duration
from servatus.continuation import (
    MAX_LINKS,
    Continuation,
    Extends,
    Extension,
    Limits,
    Link,
    has_room,
)
from servatus.continuation import links as continuation_links
from servatus.engine.packing import allocation_id, pack
from servatus.engine.plan import Allocation, Hold, Plan, Request, TaskWork, decide
from servatus.engine.plan_checks import chain_problem
from servatus.engine.plan_document import plan_from_document, plan_to_document
from servatus.engine.planning import make_plan
from servatus.engine.status_values import Execution, RunTime, StopReason, TaskLink
from servatus.errors import ConfigurationError, PlanRefused

HOUR, MINUTE = 3600, 60
SPEC = Resources(cpus=32, memory_mib=64000, time_limit=16 * HOUR, gpus=1, signal_before_end=600)
L40S = Limits(time_limit=16 * HOUR, max_time_limit=3 * 86400, signal_before_end=10 * MINUTE)


def d(text: str) -> int:
    return parse_duration(text)


def profile(
    resources: Resources = SPEC, *, cap: int | None = None, per_allocation: int = 4
) -> Profile:
    target = Target(
        slurm_bin="/usr/bin",
        work_root="/w",
        log_root="/l",
        partitions=("gpu",),
        max_tasks_per_allocation=per_allocation,
        max_cpus_per_allocation=128,
        max_memory_mib_per_allocation=262144,
        max_time_limit=3 * 86400,
        gpu_gres="gpu",
        max_gpus_per_allocation=4,
        max_allocations_per_submit=cap,
    )
    return Profile("l40s", target, resources)


def ran(execution: Execution, seconds: int, *, listed: bool = False) -> TaskWork:
    return TaskWork(execution=execution, accepted=True, listed=listed, run_time=RunTime(seconds))


def planned(
    keys: tuple[str, ...] = ("az-small",),
    continuation: Continuation | None = None,
    *,
    on: Profile | None = None,
    request: Request | None = None,
    work: dict[str, TaskWork] | None = None,
    valid: frozenset[str] = frozenset(),
) -> Plan:
    """A plan from values alone, as the campaign makes it (campaign id and clock fixed)."""
    return make_plan(
        campaign_id="0123456789abcdef0123456789abcdef",
        revision=7,
        keys=keys,
        profile=on or profile(),
        request=request or Request(),
        work=work or {},
        warnings=(),
        valid=valid,
        probe=False,
        now=1_800_000_000.0,
        continuation=continuation,
    )


def test_a_budget_reads_each_tasks_run_time_from_the_projection() -> None:
    plan = planned(
        ("a", "b"),
        Continuation(budget="16:00:00"),
        work={"a": ran(Execution.FAILED, 16 * HOUR), "b": ran(Execution.FAILED, 0)},
        request=Request(retry_failed=True),
    )
    assert plan.decision.selected == ("b",) and plan.decision.held == (("a", Hold.SPENT),)


# The spec's example, literally -----------------------------------------------------------------

SPEC_EXAMPLE = [
    "profile l40s (direct launcher)",
    "continuation: lifetime budget 3-00:00:00 per Task",
    "  az-small  run time 00:00:00, budget left 3-00:00:00, 5 links",
    "selected: 1 Task in 5 allocations",
    "  {0}  1 Task, 32 CPUs, 64000 MiB, 1 GPUs, 16:00:00, link 1/5",
    "  {1}  1 Task, 32 CPUs, 64000 MiB, 1 GPUs, 16:00:00, link 2/5",
    "  {2}  1 Task, 32 CPUs, 64000 MiB, 1 GPUs, 16:00:00, link 3/5",
    "  {3}  1 Task, 32 CPUs, 64000 MiB, 1 GPUs, 16:00:00, link 4/5",
    "  {4}  1 Task, 32 CPUs, 64000 MiB, 1 GPUs, 08:00:00, link 5/5",
    "    az-small",
    "requests at most 2304.0 CPU-hours, 72.0 GPU-hours, 4500.0 GiB-hours",
]


def test_the_spec_budget_example_prints_as_the_spec_shows() -> None:
    plan = planned(continuation=Continuation(budget="3-00:00:00"))
    ids = [allocation.allocation_id for allocation in plan.allocations]
    assert plan_lines(plan) == [line.format(*ids) for line in SPEC_EXAMPLE]
    assert len(set(ids)) == 5
    assert [a.link for a in plan.allocations] == [
        *(Link(i, 5, 16 * HOUR) for i in range(1, 5)),
        Link(5, 5, 8 * HOUR),
    ]
    assert [a.after for a in plan.allocations] == [None, *ids[:-1]]
    assert {a.task_links for a in plan.allocations} == {(5,)}
    assert plan.decision.spent == {"az-small": 0} and plan.extensions == ()
    assert plan.warnings == ()


def test_the_spec_extension_example_line() -> None:
    plan = planned(
        continuation=Continuation(budget="1-12:00:00"),
        request=Request(retry=("az-small",)),
        work={"az-small": ran(Execution.SUCCEEDED, d("1-00:00:41"))},
    )
    assert plan_lines(plan)[2] == (
        "  az-small  run time 1-00:00:41, budget left 11:59:19, 1 link, extends SUCCEEDED"
    )
    assert plan.extensions == (Extension("az-small", Extends.SUCCEEDED),)
    assert [a.link for a in plan.allocations] == [Link(1, 1, d("11:59:00"))]
    assert plan.decision.spent == {"az-small": d("1-00:00:41")}


def test_plain_plans_are_unchanged() -> None:
    plan = planned(("a", "b"))
    assert plan.decision.continuation is None and plan.decision.spent == {}
    assert all(a.link is None and a.after is None for a in plan.allocations)
    assert "continuation" not in " ".join(plan_lines(plan))


def test_max_links_alone_plans_k_full_links_and_says_so() -> None:
    plan = planned(("a",), Continuation(max_links=3))
    assert [a.link for a in plan.allocations] == [Link(i, 3, 16 * HOUR) for i in (1, 2, 3)]
    assert plan_lines(plan)[1:3] == [
        "continuation: 3 links per Task",
        "  a  run time 00:00:00, 3 links",
    ]


def test_a_budget_needs_signal_before_end() -> None:
    bare = profile(attrs.evolve(SPEC, signal_before_end=None))
    with pytest.raises(ConfigurationError, match="signal_before_end"):
        planned(continuation=Continuation(budget="3-00:00:00"), on=bare)
    assert len(planned(continuation=Continuation(max_links=2), on=bare).allocations) == 2


# SPENT, extensions and --retry-failed under a budget ------------------------------------------

BUDGET = Continuation(budget="16:00:00")


def test_planning_the_same_budget_again_selects_nothing() -> None:
    work = {"a": ran(Execution.SUCCEEDED, 16 * HOUR), "b": ran(Execution.STOPPED, 16 * HOUR)}
    for request in (Request(), Request(retry_failed=True), Request(retry=("a", "b"))):
        decision = decide(("a", "b"), work, request, continuation=BUDGET, limits=L40S)
        assert decision.selected == () and dict(decision.held) == {"a": Hold.SPENT, "b": Hold.SPENT}


def test_retry_with_a_budget_extends_succeeded_and_valid_tasks_with_room() -> None:
    work = {"a": ran(Execution.SUCCEEDED, HOUR), "b": ran(Execution.SUCCEEDED, HOUR)}
    decision = decide(
        ("a", "b"), work, Request(retry=("a", "b")), valid={"b"}, continuation=BUDGET, limits=L40S
    )
    assert decision.selected == ("a", "b")
    assert decision.extensions == (
        Extension("a", Extends.SUCCEEDED),
        Extension("b", Extends.VALID),
    )
    assert decision.spent == {"a": HOUR, "b": HOUR}


def test_retry_with_a_budget_extends_a_valid_task_servatus_never_ran() -> None:
    """The spec takes a Task whose probe reports VALID with room under D, whatever made it:
    not refused as "valid", which is what --budget is there to overcome."""
    decision = decide(
        ("b",), {}, Request(retry=("b",)), valid={"b"}, continuation=BUDGET, limits=L40S
    )
    assert decision.selected == ("b",)
    assert decision.extensions == (Extension("b", Extends.VALID),)
    assert decision.spent == {"b": 0}


def test_without_a_budget_a_valid_task_is_refused_as_before() -> None:
    work = {"b": ran(Execution.SUCCEEDED, HOUR)}
    with pytest.raises(PlanRefused, match="b: the probe reports a valid result"):
        decide(("b",), work, Request(retry=("b",)), valid={"b"})
    with pytest.raises(PlanRefused, match="b: the probe reports a valid result"):
        decide(
            ("b",), work, Request(retry=("b",)), valid={"b"},
            continuation=Continuation(max_links=2), limits=L40S,
        )  # fmt: skip


def test_retry_with_a_budget_keeps_its_other_refusals() -> None:
    work = {
        "a": TaskWork(unresolved=True),
        "b": ran(Execution.SUCCEEDED, 0, listed=True),
        "c": TaskWork(),
    }
    with pytest.raises(PlanRefused) as refused:
        decide(("a", "b", "c"), work, Request(retry=("a", "b", "c")), continuation=BUDGET,
               limits=L40S)  # fmt: skip
    assert str(refused.value) == (
        "a: has an unresolved submission; run servatus reconcile; "
        "b: Slurm still lists its earlier work; wait or cancel; "
        "c: was never accepted by Slurm; plan it without --retry"
    )


def test_retry_failed_with_a_budget_takes_failed_and_stopped_with_room() -> None:
    work = {
        "a": ran(Execution.FAILED, HOUR),
        "b": ran(Execution.STOPPED, 15 * HOUR + 55 * MINUTE),  # 5 minutes left: under the lead
        "c": ran(Execution.LOST, HOUR),
        "d": ran(Execution.SUCCEEDED, HOUR),
        "e": ran(Execution.FAILED, HOUR, listed=True),
    }
    decision = decide(
        tuple(work), work, Request(retry_failed=True), continuation=BUDGET, limits=L40S
    )
    assert decision.selected == ("a",)
    assert dict(decision.held) == {
        "b": Hold.SPENT,
        "c": Hold.SUBMITTED,
        "d": Hold.SUBMITTED,
        "e": Hold.ACTIVE,
    }


def test_a_first_plan_with_a_budget_too_short_for_a_link_holds_every_task_spent() -> None:
    decision = decide(("a",), {}, Request(), continuation=Continuation(budget="00:10:00"),
                      limits=L40S)  # fmt: skip
    assert decision.held == (("a", Hold.SPENT),)


# Packing chains ---------------------------------------------------------------------------------


def test_packed_tasks_share_a_chain_sized_for_the_neediest_with_a_warning() -> None:
    work = {"a": ran(Execution.FAILED, 0), "b": ran(Execution.FAILED, 20 * HOUR)}
    plan = planned(
        ("a", "b"), Continuation(budget="2-00:00:00"), work=work,
        request=Request(retry_failed=True),
    )  # fmt: skip
    assert len(plan.allocations) == 3 and {a.task_links for a in plan.allocations} == {(3, 2)}
    assert plan_lines(plan)[1:4] == [
        "continuation: lifetime budget 2-00:00:00 per Task",
        "  a  run time 00:00:00, budget left 2-00:00:00, 3 links",
        "  b  run time 20:00:00, budget left 1-04:00:00, 2 links",
    ]
    (warning,) = plan.warnings
    assert warning.startswith("1 packed chain holds (a+b) Tasks with different run times")


def test_a_chain_is_never_split_across_submits() -> None:
    keys = tuple(f"k{i}" for i in range(4))
    on = profile(cap=7, per_allocation=1)
    plan = planned(keys, Continuation(max_links=3), on=on)
    assert len(plan.allocations) == 6  # two chains of three; a third would make nine
    assert plan.decision.selected == ("k0", "k1") and plan.decision.deferred == ("k2", "k3")
    assert plan.decision.spent == {"k0": 0, "k1": 0}
    with pytest.raises(ConfigurationError, match="a chain of 3 links is more than"):
        planned(keys, Continuation(max_links=3), on=profile(cap=2, per_allocation=1))


def test_every_link_counts_in_the_totals_at_its_own_limit() -> None:
    plan = planned(("a", "b"), Continuation(budget="20:00:00"), on=profile(per_allocation=2))
    # two slots, links of 16:00:00 and 04:00:00: 40 slot-hours
    assert plan.totals.cpu_hours == 32 * 40 and plan.totals.gpu_hours == 40


def test_pack_keeps_its_two_values() -> None:
    decision = decide(("a",), {}, Request(), continuation=BUDGET, limits=L40S)
    packed, allocations = pack(decision, profile(), Request(), salt="s")
    assert packed.selected == ("a",) and [a.link for a in allocations] == [Link(1, 1, 16 * HOUR)]


# The saved document -----------------------------------------------------------------------------


def test_a_chain_plan_saves_every_field_and_reads_back_the_same() -> None:
    plan = planned(continuation=Continuation(budget="3-00:00:00", max_links=6))
    document = json.loads(json_text(plan_to_document(plan)))
    assert document["decision"]["continuation"] == {"budget": 3 * 86400, "max_links": 6}
    assert document["decision"]["spent"] == {"az-small": 0}
    assert document["decision"]["extensions"] == []
    first, second = document["allocations"][:2]
    assert first == {
        "allocation_id": plan.allocations[0].allocation_id,
        "task_keys": ["az-small"],
        "link": {"position": 1, "of": 5, "time_limit": 16 * HOUR},
        "after": None,
        "task_links": [5],
    }
    assert second["after"] == first["allocation_id"]
    back = plan_from_document(document, where="P")
    assert back.same_as(plan) and back.allocations == plan.allocations


def test_an_extension_saves_and_reads_back() -> None:
    plan = planned(
        continuation=Continuation(budget="1-12:00:00"),
        request=Request(retry=("az-small",)),
        work={"az-small": ran(Execution.SUCCEEDED, d("1-00:00:41"))},
    )
    document = json.loads(json_text(plan_to_document(plan)))
    assert document["decision"]["extensions"] == [{"key": "az-small", "extends": "SUCCEEDED"}]
    assert plan_from_document(document, where="P").extensions == plan.extensions


# Properties -------------------------------------------------------------------------------------

minutes = st.integers(min_value=2, max_value=24 * 60)


@st.composite
def chain_plans(draw: st.DrawFn) -> tuple[Plan, Continuation, dict[str, int]]:
    full = draw(minutes) * MINUTE
    most = min(full // MINUTE - 1, MAX_SIGNAL_BEFORE_END // MINUTE)  # Slurm's 16-bit --signal
    lead = draw(st.integers(min_value=1, max_value=most)) * MINUTE
    resources = Resources(cpus=1, memory_mib=100, time_limit=full, signal_before_end=lead)
    budget = draw(st.none() | st.integers(min_value=1, max_value=40 * 86400))
    max_links = draw(st.none() | st.integers(min_value=1, max_value=MAX_LINKS))
    if budget is None and max_links is None:
        max_links = 1
    continuation = Continuation(budget=budget, max_links=max_links)
    count = draw(st.integers(min_value=1, max_value=9))
    keys = tuple(f"k{i}" for i in range(count))
    run_times = {key: draw(st.integers(min_value=0, max_value=40 * 86400)) for key in keys}
    work = {key: ran(Execution.FAILED, seconds) for key, seconds in run_times.items()}
    on = profile(resources, cap=draw(st.none() | st.integers(1, 200)), per_allocation=3)
    per = draw(st.none() | st.integers(min_value=1, max_value=3))
    request = Request(retry_failed=True, tasks_per_allocation=per)
    try:
        plan = planned(keys, continuation, on=on, request=request, work=work)
    except ConfigurationError as exc:  # a chain longer than the cap: refused, saying so
        assert "is more than max_allocations_per_submit" in str(exc)
        plan = planned(keys, continuation, on=attrs.evolve(on, target=attrs.evolve(
            on.target, max_allocations_per_submit=None)), request=request, work=work)  # fmt: skip
    return plan, continuation, run_times


@settings(max_examples=300, deadline=None)
@given(chain_plans())
def test_chains_never_exceed_a_budget_a_limit_or_k(
    drawn: tuple[Plan, Continuation, dict[str, int]],
) -> None:
    plan, continuation, run_times = drawn
    resources, target = plan.profile.resources, plan.profile.target
    limits = Limits.of(plan.profile)
    assert chain_problem(plan) is None
    most = continuation.max_links or MAX_LINKS
    chains: list[list[Allocation]] = []
    for allocation in plan.allocations:
        assert allocation.link is not None
        if allocation.link.position == 1:
            chains.append([])
        chains[-1].append(allocation)
        assert allocation.link.time_limit <= resources.time_limit <= target.max_time_limit
    for links in chains:
        assert len(links) <= most
        keys = links[0].task_keys
        # Each Task's own links fit its own budget; the chain is its neediest Task's.
        own = [continuation_links(run_times[key], continuation, limits) for key in keys]
        assert list(links[0].task_links) == [len(mine) for mine in own]
        assert max(map(len, own)) == len(links)
        if continuation.budget is not None:
            neediest = continuation.budget - min(run_times[key] for key in keys)
            assert sum(link.time_limit(resources) for link in links) <= neediest
            for key, mine in zip(keys, own, strict=True):
                assert sum(link.time_limit for link in mine) <= continuation.budget - run_times[key]
    for key, hold in plan.decision.held:
        assert hold is Hold.SPENT and not has_room(run_times[key], continuation, limits)
    for key in (*plan.decision.selected, *plan.decision.deferred):
        assert has_room(run_times[key], continuation, limits)
    cap = target.max_allocations_per_submit
    assert cap is None or len(plan.allocations) <= cap
    ids = [allocation.allocation_id for allocation in plan.allocations]
    assert len(set(ids)) == len(ids)
    assert set(plan.decision.spent) == set(plan.decision.selected)


@settings(max_examples=100, deadline=None)
@given(chain_plans())
def test_the_same_inputs_give_the_same_plan_and_it_reads_back(
    drawn: tuple[Plan, Continuation, dict[str, int]],
) -> None:
    plan, continuation, run_times = drawn
    work = {key: ran(Execution.FAILED, seconds) for key, seconds in run_times.items()}
    same = planned(tuple(run_times), continuation, on=plan.profile, request=plan.request, work=work)
    assert same == plan
    document = json.loads(json_text(plan_to_document(plan)))
    assert plan_from_document(document, where="P").same_as(plan)


def test_each_link_id_is_the_one_allocation_id_gives_it() -> None:
    plan = planned(("a", "b"), Continuation(max_links=3), on=profile(per_allocation=1))
    salt = "0123456789abcdef0123456789abcdef:7"
    assert [a.allocation_id for a in plan.allocations] == [
        allocation_id(salt, index, (key,), link=link)
        for index, key in enumerate(("a", "b"))
        for link in (1, 2, 3)
    ]
    assert allocation_id(salt, 0, ("a",)) not in {a.allocation_id for a in plan.allocations}


def spent_chain(execution: Execution, detail: StopReason | None, budget: int) -> TaskWork:
    """A Task whose 5-link chain under ``budget`` ended on its last link, 50 minutes short of
    the budget by measurement (each link gave up its last 10 minutes after the signal)."""
    return TaskWork(
        execution=execution,
        accepted=True,
        run_time=RunTime(budget - 50 * MINUTE),
        detail=detail,
        link=TaskLink(5, 5, budget),
    )


def test_the_same_budget_again_holds_a_chain_that_spent_it_spent_whatever_it_measured() -> None:
    budget = d("3-00:00:00")
    same, larger = Continuation(budget=budget), Continuation(budget=budget + 12 * HOUR)
    succeeded = {"a": spent_chain(Execution.SUCCEEDED, None, budget)}
    decision = decide(("a",), succeeded, Request(retry=("a",)), continuation=same, limits=L40S)
    assert decision.held == (("a", Hold.SPENT),)
    decision = decide(("a",), succeeded, Request(retry=("a",)), continuation=larger, limits=L40S)
    assert decision.extensions == (Extension("a", Extends.SUCCEEDED),)
    spent = {"a": spent_chain(Execution.STOPPED, StopReason.BUDGET_SPENT, budget)}
    decision = decide(("a",), spent, Request(retry_failed=True), continuation=same, limits=L40S)
    assert decision.held == (("a", Hold.SPENT),)
    decision = decide(("a",), spent, Request(retry_failed=True), continuation=larger, limits=L40S)
    assert decision.selected == ("a",)
    # Stopped at the limit with the budget left unsaid: measured room decides, as before.
    limit = {"a": spent_chain(Execution.STOPPED, StopReason.TIME_LIMIT, budget)}
    decision = decide(("a",), limit, Request(retry_failed=True), continuation=same, limits=L40S)
    assert decision.selected == ("a",)
