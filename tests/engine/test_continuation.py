"""Budget and link arithmetic: the spec's examples literally, every boundary, and properties."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from servatus import continuation
from servatus.config import MAX_DURATION, Profile, Resources, Target, parse_duration
from servatus.continuation import (
    MAX_LINKS,
    Chain,
    Continuation,
    Eligibility,
    Extends,
    Limits,
    Link,
    chain,
    chain_warnings,
    eligibility,
    format_continuation,
    format_planned,
    has_room,
    limits_for,
    link_slots,
    links,
    stops_short,
)
from servatus.engine import status_values as status
from servatus.engine.plan import Allocation, format_totals, resource_hours, totals
from servatus.engine.status_values import Execution
from servatus.errors import ConfigurationError

HOUR, MINUTE = 3600, 60
L40S = Limits(time_limit=16 * HOUR, max_time_limit=3 * 86400, signal_before_end=10 * MINUTE)
SPEC = Resources(cpus=32, memory_mib=64000, time_limit=16 * HOUR, gpus=1, signal_before_end=600)


def d(text: str) -> int:
    return parse_duration(text)


def under_l40s(
    execution: Execution,
    continuation: Continuation,
    *,
    run_time: int,
    valid: bool = False,
    retried: bool = False,
) -> Eligibility:
    """``eligibility`` under the L40S limits every test here plans against."""
    return eligibility(
        execution,
        valid=valid,
        run_time=run_time,
        continuation=continuation,
        limits=L40S,
        retried=retried,
    )


def limits_of(chain_: Chain) -> list[int]:
    return [link.time_limit for link in chain_.links]


def profile(resources: Resources, *, max_time_limit: int = 3 * 86400) -> Profile:
    target = Target(
        slurm_bin="/usr/bin",
        work_root="/w",
        log_root="/l",
        partitions=("gpu",),
        max_tasks_per_allocation=4,
        max_cpus_per_allocation=128,
        max_memory_mib_per_allocation=262144,
        max_time_limit=max_time_limit,
        gpu_gres="gpu",
        max_gpus_per_allocation=4,
    )
    return Profile("l40s", target, resources)


# The spec's examples ------------------------------------------------------------------------


def test_the_spec_budget_example_plans_five_links_and_its_totals() -> None:
    budget = Continuation(budget="3-00:00:00")
    planned = chain([("az-small", 0)], budget, limits_for(budget, profile(SPEC)))
    assert format_continuation(budget) == "continuation: lifetime budget 3-00:00:00 per Task"
    assert format_planned(planned.tasks[0]) == "run time 00:00:00, budget left 3-00:00:00, 5 links"
    assert limits_of(planned) == [d("16:00:00")] * 4 + [d("08:00:00")]
    assert [link.label for link in planned.links] == [f"link {i}/5" for i in range(1, 6)]
    assert planned.links[-1].last and not planned.links[0].last
    assert format_totals(resource_hours(SPEC, link_slots([planned]))) == (
        "requests at most 2304.0 CPU-hours, 72.0 GPU-hours, 4500.0 GiB-hours"
    )
    assert chain_warnings([planned], L40S) == ()


def test_the_spec_extension_example_plans_one_link_of_whole_minutes() -> None:
    budget = Continuation(budget="1-12:00:00")
    run_time = d("1-00:00:41")
    assert (
        under_l40s(Execution.SUCCEEDED, budget, run_time=run_time, retried=True)
        is Eligibility.EXTENDS_SUCCEEDED
    )
    planned = chain([("az-small", run_time)], budget, L40S)
    assert format_planned(planned.tasks[0], Eligibility.EXTENDS_SUCCEEDED.extends) == (
        "run time 1-00:00:41, budget left 11:59:19, 1 link, extends SUCCEEDED"
    )
    assert planned.links == (Link(1, 1, d("11:59:00")),)


def test_yield_exit_is_the_status_projections_own() -> None:
    assert continuation.YIELD_EXIT is status.YIELD_EXIT
    assert continuation.YIELD_EXIT == 75
    assert MAX_LINKS == 32


# Values -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("given_", "seconds"),
    [
        ("3-00:00:00", 3 * 86400),
        ("72:00:00", 72 * HOUR),
        ("0:00:01", MINUTE),  # rounded up, never down
        ("1-12:00:01", d("1-12:01:00")),
        ("11:59:00", d("11:59:00")),
        (90, 2 * MINUTE),
        (MINUTE, MINUTE),
        # the longest a campaign records, reached by rounding up
        ("795364-07:31:01", MAX_DURATION),
        (MAX_DURATION - 59, MAX_DURATION),
    ],
)
def test_a_budget_is_rounded_up_to_whole_minutes(given_: str | int, seconds: int) -> None:
    assert Continuation(budget=given_).budget == seconds


@pytest.mark.parametrize(
    "bad",
    [
        "0:00:00",
        "0-00:00:00",
        0,
        -60,
        -1,
        True,
        1.5,
        "\uff13-00:00:00",  # a fullwidth digit
        "\u0663:00:00",  # an Arabic-Indic digit
        "1-24:00:00",
        "-1:00:00",
        "3 days",
        "",
        " 1:00:00",
    ],
)
def test_a_bad_budget_is_refused(bad: object) -> None:
    with pytest.raises(ConfigurationError, match="invalid budget"):
        Continuation(budget=bad)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "huge", ["795364-07:32:01", MAX_DURATION + 1, "9223372036854775-00:00:00", 2**80 * MINUTE]
)
def test_a_budget_longer_than_a_campaign_records_is_refused(huge: str | int) -> None:
    """A chain's intents record its budget before their sbatch, and a read refuses one of 2**36
    s or more: planned, it would be submitted and then lock the campaign (CorruptState)."""
    with pytest.raises(ConfigurationError, match=r"longer than a campaign records \(at most "):
        Continuation(budget=huge)


@pytest.mark.parametrize("good", [1, 2, 31, 32])
def test_max_links_takes_one_to_thirty_two(good: int) -> None:
    assert Continuation(max_links=good).max_links == good


@pytest.mark.parametrize("bad", [0, 33, -1, True, "4", 4.0])
def test_max_links_outside_one_to_thirty_two_is_refused(bad: object) -> None:
    with pytest.raises(ConfigurationError, match="--max-links"):
        Continuation(max_links=bad)  # type: ignore[arg-type]


def test_a_continuation_asks_for_something() -> None:
    with pytest.raises(ConfigurationError, match="budget, --max-links, or both"):
        Continuation()


def test_a_budget_needs_signal_before_end_naming_the_profile_key() -> None:
    silent = profile(Resources(cpus=32, memory_mib=64000, time_limit=16 * HOUR))
    with pytest.raises(
        ConfigurationError, match=r"profile 'l40s': --budget needs resources\.signal_before_end"
    ):
        limits_for(Continuation(budget="3-00:00:00"), silent)
    with pytest.raises(ConfigurationError, match=r"resources\.signal_before_end"):
        links(0, Continuation(budget="3-00:00:00"), Limits.of(silent))
    # --max-links alone plans full links; a step can still hand on by exiting 75.
    assert len(links(0, Continuation(max_links=3), limits_for(Continuation(max_links=3), silent)))


@pytest.mark.parametrize(
    ("position", "of", "time_limit"),
    [(0, 1, 60), (2, 1, 60), (1, 33, 60), (1, 1, 0), (1, 1, 90), (1, 1, -60)],
)
def test_a_link_is_a_position_in_a_chain_with_whole_minutes(
    position: int, of: int, time_limit: int
) -> None:
    with pytest.raises(ValueError, match="link"):
        Link(position, of, time_limit)


@pytest.mark.parametrize(
    ("time_limit", "max_time_limit", "lead"),
    [(90, 3600, None), (0, 3600, None), (7200, 3600, None), (3600, 3600, 3600), (3600, 3600, 0)],
)
def test_limits_hold_what_a_loaded_profile_holds(
    time_limit: int, max_time_limit: int, lead: int | None
) -> None:
    with pytest.raises(ValueError):
        Limits(time_limit, max_time_limit, lead)


# Boundaries of the link arithmetic ------------------------------------------------------------


def rest_of(rest: int) -> list[int]:
    """Link limits for a budget of two full links and ``rest`` seconds more."""
    budget = Continuation(budget=2 * L40S.time_limit + rest)
    return [link.time_limit for link in links(0, budget, L40S)]


def test_a_rest_of_exactly_a_minute_over_signal_before_end_is_dropped_with_a_warning() -> None:
    lead = L40S.signal_before_end
    assert lead is not None
    assert rest_of(lead + MINUTE) == [16 * HOUR] * 2
    budget = Continuation(budget=2 * L40S.time_limit + lead + MINUTE)
    planned = chain([("a", 0)], budget, L40S)
    assert planned.tasks[0].dropped == lead + MINUTE
    assert chain_warnings([planned], L40S) == (
        "a: the last 00:11:00 of the budget is too short for a link, which must be more than a "
        "minute longer than signal_before_end (00:10:00); it is not planned",
    )


def test_a_rest_a_minute_under_and_exactly_at_signal_before_end_is_dropped() -> None:
    lead = L40S.signal_before_end
    assert lead is not None
    assert rest_of(lead) == [16 * HOUR] * 2
    assert rest_of(lead - MINUTE) == [16 * HOUR] * 2
    assert rest_of(MINUTE) == [16 * HOUR] * 2


def test_a_rest_two_minutes_over_signal_before_end_is_a_link() -> None:
    lead = L40S.signal_before_end
    assert lead is not None
    assert rest_of(lead + 2 * MINUTE) == [16 * HOUR] * 2 + [lead + 2 * MINUTE]


def test_a_rest_is_rounded_down_to_whole_minutes_before_the_drop_rule() -> None:
    lead = L40S.signal_before_end
    assert lead is not None
    # 12:59 over signal_before_end rounds down to 12:00 (kept); 1:59 over to 1:00 (dropped).
    run_time = 1  # the budget is whole minutes; a run time makes the budget left uneven
    budget = Continuation(budget=2 * L40S.time_limit + lead + 13 * MINUTE)
    assert [x.time_limit for x in links(run_time, budget, L40S)][-1] == lead + 12 * MINUTE
    budget = Continuation(budget=2 * L40S.time_limit + lead + 2 * MINUTE)
    assert [x.time_limit for x in links(run_time, budget, L40S)] == [16 * HOUR] * 2


def test_a_rest_under_a_minute_is_lost_to_rounding_without_a_warning() -> None:
    budget = Continuation(budget=2 * L40S.time_limit)
    planned = chain([("a", 59)], budget, L40S)  # 31:59:01 left: one full link and 15:59:00
    assert limits_of(planned) == [16 * HOUR, d("15:59:00")]
    planned = chain([("a", 0)], Continuation(budget=L40S.time_limit + MINUTE), L40S)
    assert limits_of(planned) == [16 * HOUR]
    assert planned.tasks[0].dropped == MINUTE  # a whole minute over a full link is a rest
    assert not has_room(L40S.time_limit * 2 - 59, Continuation(budget=2 * L40S.time_limit), L40S)


@pytest.mark.parametrize("over", [0, 1, 3600, 10**9])
def test_a_budget_equal_to_or_below_the_run_time_has_no_room(over: int) -> None:
    budget = Continuation(budget="1-00:00:00")
    run_time = d("1-00:00:00") + over
    assert links(run_time, budget, L40S) == ()
    assert not has_room(run_time, budget, L40S)
    with pytest.raises(ValueError, match="hold it SPENT"):
        chain([("a", run_time)], budget, L40S)


def test_one_link_exactly_fills_a_budget_of_one_time_limit() -> None:
    assert links(0, Continuation(budget="16:00:00"), L40S) == (Link(1, 1, 16 * HOUR),)
    assert links(MINUTE, Continuation(budget="16:00:00"), L40S) == (Link(1, 1, d("15:59:00")),)


def test_max_links_one_plans_one_link_full_or_the_rest() -> None:
    assert links(0, Continuation(budget="3-00:00:00", max_links=1), L40S) == (
        Link(1, 1, 16 * HOUR),
    )
    assert links(0, Continuation(budget="5:00:00", max_links=1), L40S) == (Link(1, 1, 5 * HOUR),)
    assert links(0, Continuation(max_links=1), L40S) == (Link(1, 1, 16 * HOUR),)


def test_max_links_caps_the_chain_before_its_rest() -> None:
    capped = links(0, Continuation(budget="3-00:00:00", max_links=4), L40S)
    assert [x.time_limit for x in capped] == [16 * HOUR] * 4
    assert [x.label for x in capped][-1] == "link 4/4"
    assert len(links(0, Continuation(budget="3-00:00:00", max_links=5), L40S)) == 5


def test_max_links_alone_plans_k_full_links_whatever_the_run_time() -> None:
    for k in (1, 7, 32):
        alone = Continuation(max_links=k)
        for run_time in (0, 10**7):
            assert links(run_time, alone, L40S) == tuple(
                Link(i, k, 16 * HOUR) for i in range(1, k + 1)
            )
    planned = chain([("a", 0), ("b", 99)], Continuation(max_links=3), L40S)
    assert [task.budget_left for task in planned.tasks] == [None, None]
    assert format_planned(planned.tasks[1]) == "run time 00:01:39, 3 links"
    assert format_continuation(Continuation(max_links=3)) == "continuation: 3 links per Task"
    assert format_continuation(Continuation(max_links=1)) == "continuation: 1 link per Task"
    assert format_continuation(Continuation(budget=HOUR, max_links=1)) == (
        "continuation: lifetime budget 01:00:00 per Task, at most 1 link"
    )
    assert not planned.uneven
    assert chain_warnings([planned], L40S) == ()


def test_a_budget_beyond_thirty_two_links_plans_thirty_two_and_warns() -> None:
    budget = Continuation(budget="30-00:00:00")  # 45 links of 16 hours
    planned = chain([("a", 0)], budget, L40S)
    assert limits_of(planned) == [16 * HOUR] * MAX_LINKS
    assert planned.tasks[0].capped
    assert chain_warnings([planned], L40S) == (
        "a: the budget left needs more than 32 links; each chain stops after 32, and planning "
        "the same budget again (--retry-failed, or --retry KEY) continues it",
    )
    exactly = chain([("a", 0)], Continuation(budget=MAX_LINKS * 16 * HOUR), L40S)
    assert len(exactly.links) == MAX_LINKS and not exactly.tasks[0].capped
    asked = chain([("a", 0)], Continuation(budget="30-00:00:00", max_links=32), L40S)
    assert len(asked.links) == MAX_LINKS and not asked.tasks[0].capped


def test_a_time_limit_equal_to_max_time_limit_is_a_full_link() -> None:
    limits = Limits(time_limit=2 * HOUR, max_time_limit=2 * HOUR, signal_before_end=60)
    assert [x.time_limit for x in links(0, Continuation(budget="5:00:00"), limits)] == [
        2 * HOUR,
        2 * HOUR,
        HOUR,
    ]


def test_short_links_with_a_short_signal_as_the_cluster_tests_use() -> None:
    limits = Limits(time_limit=2 * MINUTE, max_time_limit=HOUR, signal_before_end=30)
    assert [x.time_limit for x in links(0, Continuation(budget="0:06:00"), limits)] == [120] * 3
    # a 1-minute rest is not more than a minute longer than a 30 s signal: dropped
    assert [x.time_limit for x in links(0, Continuation(budget="0:05:00"), limits)] == [120] * 2


# Packed chains --------------------------------------------------------------------------------


def test_packed_tasks_share_a_chain_sized_for_the_neediest_each_with_its_own_budget() -> None:
    budget = Continuation(budget="3-00:00:00")
    planned = chain([("late", d("20:00:00")), ("new", 0), ("mid", d("1-00:00:00"))], budget, L40S)
    assert limits_of(planned) == [16 * HOUR] * 4 + [8 * HOUR]
    assert [(t.key, t.budget_left, t.links) for t in planned.tasks] == [
        ("late", d("2-04:00:00"), 4),
        ("new", d("3-00:00:00"), 5),
        ("mid", d("2-00:00:00"), 3),
    ]
    assert planned.uneven
    assert format_planned(planned.tasks[0]) == (
        "run time 20:00:00, budget left 2-04:00:00, 4 links"
    )
    assert chain_warnings([planned], L40S) == (
        "1 packed chain holds (late+new+mid) Tasks with different run times: each chain is "
        "sized for its Task with the most budget left, and every Task stops at its own budget",
    )
    assert link_slots([planned]) == {16 * HOUR: 12, 8 * HOUR: 3}
    assert format_totals(resource_hours(SPEC, link_slots([planned]))) == (
        "requests at most 6912.0 CPU-hours, 216.0 GPU-hours, 13500.0 GiB-hours"
    )


def test_packed_tasks_with_equal_run_times_do_not_warn() -> None:
    planned = chain([("a", 5), ("b", 5)], Continuation(budget="3-00:00:00"), L40S)
    assert not planned.uneven
    assert chain_warnings([planned], L40S) == ()


def test_warnings_gather_the_same_kind_over_many_chains() -> None:
    lead = L40S.signal_before_end
    assert lead is not None
    budget = Continuation(budget=L40S.time_limit + lead)
    chains = [chain([(f"t{i}", 0)], budget, L40S) for i in range(8)]
    assert chain_warnings(chains, L40S) == (
        "8 Tasks (t0, t1, t2, t3, t4 and 3 more): the last 00:10:00 of the budget is too short "
        "for a link, which must be more than a minute longer than signal_before_end (00:10:00); "
        "it is not planned",
    )


def test_uneven_chains_are_named_in_one_line() -> None:
    budget = Continuation(budget="3-00:00:00")
    chains = [chain([(f"a{i}", 0), (f"b{i}", i + 1)], budget, L40S) for i in range(2)]
    assert chain_warnings(chains, L40S) == (
        "2 packed chains hold (a0+b0, a1+b1) Tasks with different run times: each chain is "
        "sized for its Task with the most budget left, and every Task stops at its own budget",
    )


def test_a_chain_needs_a_task() -> None:
    with pytest.raises(ValueError, match="at least one Task"):
        chain([], Continuation(max_links=2), L40S)


# Eligibility ----------------------------------------------------------------------------------

ROOM, NONE = d("1-00:00:00"), d("3-00:00:00")
"""Run times that leave room under a 3-day budget, and none."""


@pytest.mark.parametrize(
    ("execution", "valid", "run_time", "retried", "expected"),
    [
        # --retry KEY --budget D: the only way to extend
        (Execution.SUCCEEDED, False, ROOM, True, Eligibility.EXTENDS_SUCCEEDED),
        (Execution.SUCCEEDED, False, NONE, True, Eligibility.SPENT),
        (Execution.SUCCEEDED, True, ROOM, True, Eligibility.EXTENDS_VALID),
        (Execution.FAILED, True, ROOM, True, Eligibility.EXTENDS_VALID),
        (Execution.STOPPED, True, NONE, True, Eligibility.SPENT),
        (Execution.FAILED, False, ROOM, True, Eligibility.USUAL),
        (Execution.FAILED, False, NONE, True, Eligibility.SPENT),
        (Execution.LOST, False, ROOM, True, Eligibility.USUAL),
        (Execution.LOST, False, NONE, True, Eligibility.SPENT),
        # a valid result Servatus never ran (appended with its result made elsewhere)
        (Execution.NOT_SUBMITTED, True, 0, True, Eligibility.EXTENDS_VALID),
        # still running or listed, or never accepted: planning's own refusal decides
        (Execution.RUNNING, False, NONE, True, Eligibility.USUAL),
        (Execution.RUNNING, True, ROOM, True, Eligibility.USUAL),
        (Execution.NOT_SUBMITTED, False, ROOM, True, Eligibility.USUAL),
        (Execution.UNRESOLVED, False, NONE, True, Eligibility.USUAL),
        # --retry-failed --budget D, or a plain plan: FAILED/STOPPED with room, the rest SPENT
        (Execution.FAILED, False, ROOM, False, Eligibility.USUAL),
        (Execution.STOPPED, False, ROOM, False, Eligibility.USUAL),
        (Execution.FAILED, False, NONE, False, Eligibility.SPENT),
        (Execution.STOPPED, False, NONE, False, Eligibility.SPENT),
        (Execution.SUCCEEDED, False, NONE, False, Eligibility.SPENT),  # the same budget again
        (Execution.SUCCEEDED, False, ROOM, False, Eligibility.USUAL),  # held SUBMITTED
        (Execution.LOST, False, NONE, False, Eligibility.SPENT),
        (Execution.NOT_SUBMITTED, False, 0, False, Eligibility.USUAL),
        (Execution.SUCCEEDED, True, NONE, False, Eligibility.USUAL),  # held VALID
        (Execution.QUEUED, False, NONE, False, Eligibility.USUAL),
        (Execution.ENDING, False, NONE, False, Eligibility.USUAL),
        (Execution.ACCEPTED, False, NONE, False, Eligibility.USUAL),
    ],
)
def test_eligibility_under_a_budget(
    execution: Execution, valid: bool, run_time: int, retried: bool, expected: Eligibility
) -> None:
    got = under_l40s(
        execution,
        Continuation(budget="3-00:00:00"),
        run_time=run_time,
        valid=valid,
        retried=retried,
    )
    assert got is expected


def test_eligibility_counts_a_rest_too_short_for_a_link_as_no_room() -> None:
    budget = Continuation(budget="1-12:00:00")
    for run_time, expected in (
        (d("1-11:49:00"), Eligibility.SPENT),  # 11:00 left: not more than a minute over 10:00
        (d("1-11:48:00"), Eligibility.EXTENDS_SUCCEEDED),  # 12:00 left
    ):
        assert under_l40s(Execution.SUCCEEDED, budget, run_time=run_time, retried=True) is expected


def test_eligibility_without_a_budget_changes_nothing() -> None:
    for execution in Execution:
        for valid in (False, True):
            for retried in (False, True):
                got = under_l40s(
                    execution,
                    Continuation(max_links=4),
                    run_time=10**9,
                    valid=valid,
                    retried=retried,
                )
                assert got is Eligibility.USUAL


def test_a_never_run_task_whose_budget_is_too_short_for_a_link_is_spent() -> None:
    assert (
        under_l40s(Execution.NOT_SUBMITTED, Continuation(budget="0:11:00"), run_time=0)
        is Eligibility.SPENT
    )


def test_only_extensions_name_what_they_extend() -> None:
    assert Eligibility.EXTENDS_SUCCEEDED.extends is Extends.SUCCEEDED
    assert Eligibility.EXTENDS_VALID.extends is Extends.VALID
    assert Eligibility.USUAL.extends is None
    assert Eligibility.SPENT.extends is None


# Totals ---------------------------------------------------------------------------------------


@given(
    slots=st.integers(0, 100_000),
    cpus=st.integers(1, 256),
    memory=st.integers(1, 2**21),
    gpus=st.integers(0, 8),
    minutes=st.integers(1, 14 * 24 * 60),
)
def test_plan_totals_are_unchanged_by_the_shared_helper(
    slots: int, cpus: int, memory: int, gpus: int, minutes: int
) -> None:
    """Bit for bit what plan.totals computed before it called resource_hours."""
    resources = Resources(cpus=cpus, memory_mib=memory, time_limit=minutes * 60, gpus=gpus)
    hours = resources.time_limit / 3600
    got = totals(resources, [Allocation("0" * 24, ("k",) * slots)])
    assert got.cpu_hours == slots * cpus * hours
    assert got.gpu_hours == slots * gpus * hours
    assert got.memory_gib_hours == slots * memory / 1024 * hours


# Properties -----------------------------------------------------------------------------------


@st.composite
def situations(draw: st.DrawFn) -> tuple[int, Continuation, Limits]:
    minutes = draw(st.integers(1, 3 * 24 * 60))
    full = minutes * 60
    most = draw(st.integers(full, 7 * 86400).map(lambda s: s - s % 60))
    lead = draw(st.none() | st.integers(1, min(full - 1, 65535))) if full > 1 else None
    budget = draw(st.none() | st.integers(1, 40 * 86400)) if lead is not None else None
    k = draw(st.none() | st.integers(1, MAX_LINKS)) if budget is not None else None
    if budget is None and k is None:
        k = draw(st.integers(1, MAX_LINKS))
    run_time = draw(st.integers(0, 45 * 86400))
    return run_time, Continuation(budget=budget, max_links=k), Limits(full, most, lead)


@given(situations())
def test_links_keep_every_bound(situation: tuple[int, Continuation, Limits]) -> None:
    run_time, asked, limits = situation
    planned = links(run_time, asked, limits)
    assert planned == links(run_time, asked, limits)  # deterministic
    assert len(planned) <= (asked.max_links or MAX_LINKS)
    assert all(link.time_limit <= limits.max_time_limit for link in planned)
    assert all(link.time_limit <= limits.time_limit for link in planned)
    assert all(link.time_limit == limits.time_limit for link in planned[:-1])
    assert all(link.time_limit % 60 == 0 and link.time_limit > 0 for link in planned)
    assert [(x.position, x.of) for x in planned] == [
        (i, len(planned)) for i in range(1, 1 + len(planned))
    ]
    assert has_room(run_time, asked, limits) == bool(planned)
    if asked.budget is None:
        assert len(planned) == asked.max_links
        return
    left = asked.budget - run_time
    spent = sum(link.time_limit for link in planned)
    assert spent <= max(left, 0)
    if planned and planned[-1].time_limit < limits.time_limit:
        assert limits.signal_before_end is not None
        assert planned[-1].time_limit - limits.signal_before_end > 60  # a usable last link
    if left > 0 and len(planned) < (asked.max_links or MAX_LINKS):
        # nothing is lost but the seconds under a minute and a rest too short for a link
        assert left - spent < 60 + (limits.signal_before_end or 0) + 60


@given(situations())
def test_links_stop_short_exactly_when_the_budget_after_them_has_room(
    situation: tuple[int, Continuation, Limits],
) -> None:
    run_time, asked, limits = situation
    planned = links(run_time, asked, limits)
    short = stops_short(run_time, asked, limits)
    if asked.budget is None:
        assert not short  # no budget to stop short of
        return
    after = run_time + sum(link.time_limit for link in planned)
    assert short == (bool(planned) and has_room(after, asked, limits))
    if short:
        assert len(planned) == (asked.max_links or MAX_LINKS)


@given(situations(), st.lists(st.integers(0, 45 * 86400), min_size=1, max_size=4))
def test_a_packed_chain_covers_each_task_and_is_its_neediests(
    situation: tuple[int, Continuation, Limits], run_times: list[int]
) -> None:
    _, asked, limits = situation
    roomy = [t for t in run_times if has_room(t, asked, limits)]
    if not roomy:
        return
    planned = chain([(f"k{i}", t) for i, t in enumerate(roomy)], asked, limits)
    assert planned.links == links(min(roomy), asked, limits)
    for task, run_time in zip(planned.tasks, roomy, strict=True):
        own = links(run_time, asked, limits)
        assert task.links == len(own) <= len(planned.links)
        # the chain's first links hold at least the Task's own
        held = planned.links[: task.links]
        assert all(a.time_limit >= b.time_limit for a, b in zip(held, own, strict=True))
    assert sum(link_slots([planned]).values()) == len(planned.links) * len(roomy)
