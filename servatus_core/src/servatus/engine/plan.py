"""The plan's values and the decision: which Tasks a plan runs now, and which are held and why.

Everything here is a pure function over values. The campaign gathers what planning needs (the
roster, each Task's projected work, the probe's answer) and this module decides; the same inputs
always give the same plan, which is how ``submit`` recognises a stale or altered plan. Packing is
:mod:`servatus.engine.packing`, the saved document :mod:`servatus.engine.plan_document`.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Collection, Iterable, Mapping, Sequence

import attrs

from servatus.config import (
    Profile,
    Resources,
)
from servatus.continuation import (
    Continuation,
    Eligibility,
    Extension,
    Limits,
    Link,
    eligibility,
)
from servatus.engine.status_values import Execution, Report, StopReason
from servatus.engine.work import RETRYABLE, TaskWork, Work
from servatus.errors import ConfigurationError, PlanRefused


class Hold(enum.Enum):
    """Why an eligible-looking Task is not selected."""

    VALID = "VALID"
    """The result probe reports the Task's result valid."""
    SUBMITTED = "SUBMITTED"
    """The Task has accepted work and the plan does not ask to run it again."""
    ACTIVE = "ACTIVE"
    """Slurm still lists earlier work of the Task (queued, running, or ended and not yet
    forgotten), a job of a submission recorded as never sent included."""
    UNRESOLVED = "UNRESOLVED"
    """An intent of the Task has no recorded outcome: ``reconcile`` decides it."""
    SPENT = "SPENT"
    """Under a budget, the Task's measured run time leaves no room for another link."""
    NOT_REQUESTED = "NOT_REQUESTED"
    """``only`` (``--only``) leaves the Task out."""


NO_WORK = TaskWork()
"""The work of a Task that has none."""


@attrs.frozen
class Request:
    """What the user asked for: ``--retry``, ``--retry-failed``, ``--only``, packing limits."""

    retry: tuple[str, ...] = ()
    """Keys to run again (``--retry``)."""
    retry_failed: bool = False
    """Run again every Task whose latest work failed or stopped (``--retry-failed``)."""
    only: tuple[str, ...] | None = None
    """The only keys to consider (``--only``); None considers every Task."""
    tasks_per_allocation: int | None = None
    """At most this many Tasks in one allocation (``--tasks-per-allocation``)."""

    @property
    def consults_slurm(self) -> bool:
        """Retries need Slurm's view (failed? still listed?); a first plan never does."""
        return bool(self.retry) or self.retry_failed


def make_request(
    retry: Iterable[str] = (),
    *,
    retry_failed: bool = False,
    only: Iterable[str] | None = None,
    tasks_per_allocation: int | None = None,
) -> Request:
    """The request of ``plan``'s options, repeated keys once each."""
    if tasks_per_allocation is not None and tasks_per_allocation < 1:
        raise ConfigurationError("--tasks-per-allocation must be at least 1")
    return Request(
        retry=tuple(dict.fromkeys(retry)),
        retry_failed=retry_failed,
        only=None if only is None else tuple(dict.fromkeys(only)),
        tasks_per_allocation=tasks_per_allocation,
    )


def consults(request: Request, continuation: Continuation | None, *, resolved: bool) -> bool:
    """Whether a plan reads Slurm: for a retry, for a budget (spent by measured run time, which
    only the listings give), and once ``reconcile`` has resolved a submission (a job recorded as
    never sent may be listed after all). A campaign with no submission asks nothing."""
    budgeted = continuation is not None and continuation.budget is not None
    return request.consults_slurm or resolved or budgeted


@attrs.frozen
class Decision:
    """What the user reviews: selected Tasks in roster order, held ones with their reason, and
    those deferred beyond ``max_allocations_per_submit``.

    Under a ``continuation`` (``--budget``, ``--max-links``), ``spent`` holds each selected
    Task's measured run time in seconds (what its budget has already paid for, and its steps'
    ``SERVATUS_RUN_TIME``), and ``extensions`` the selected Tasks that run again past a success
    or a valid result.
    """

    selected: tuple[str, ...]
    """The keys the plan runs, in roster order."""
    held: tuple[tuple[str, Hold], ...]
    """Each held key with its reason, in roster order (``dict(decision.held)`` looks one up)."""
    deferred: tuple[str, ...] = ()
    """Keys left for a later plan: their allocations were past ``max_allocations_per_submit``."""
    continuation: Continuation | None = None
    """The budget and link count asked for, if any."""
    spent: dict[str, int] = attrs.field(factory=dict)
    """Under a continuation, each selected key's measured run time in seconds."""
    extensions: tuple[Extension, ...] = ()
    """Selected Tasks run again past a success or a valid result."""


@attrs.frozen
class Allocation:
    """One planned single-node allocation: its id and the Tasks of its slots, in slot order.

    A chain link also carries its ``link`` (position, count, time limit), ``after``, the id of
    the previous link of its chain (None for link 1), and ``task_links``, each slot's own number
    of links (``SERVATUS_LINKS``: fewer than the chain's for a packed Task with less budget left).
    Every link of a chain holds the same Tasks in the same slots.
    """

    allocation_id: str
    """Its id: the job is named ``servatus-<allocation_id>``."""
    task_keys: tuple[str, ...]
    """The Task of each slot, slot 0 first (empty for a lease)."""
    link: Link | None = None
    """Its place in a chain (None for a plain allocation)."""
    after: str | None = None
    """The id of the chain's previous link (None for link 1 or a plain allocation)."""
    task_links: tuple[int, ...] = ()
    """In a chain, each slot's own number of links (``SERVATUS_LINKS``)."""

    def time_limit(self, resources: Resources) -> int:
        """The allocation's time limit: its link's, or the profile's for a plain allocation."""
        return resources.time_limit if self.link is None else self.link.time_limit


def earlier_links(allocations: Iterable[Allocation]) -> dict[str, tuple[str, ...]]:
    """Each chain link's earlier links, oldest first, by allocation id (links come in order)."""
    earlier: dict[str, tuple[str, ...]] = {}
    for allocation in allocations:
        if allocation.after is not None:
            earlier[allocation.allocation_id] = (
                *earlier.get(allocation.after, ()),
                allocation.after,
            )
    return earlier


def later_links(allocations: Iterable[Allocation]) -> dict[str, tuple[str, ...]]:
    """Each chain link's later links, in chain order, by allocation id: what a link that hands
    nothing on removes (ADR 0005)."""
    following: dict[str, str] = {}
    for allocation in allocations:
        if allocation.after is not None:
            following[allocation.after] = allocation.allocation_id
    later: dict[str, tuple[str, ...]] = {}
    for allocation in allocations:
        if allocation.link is None:
            continue
        chain = []
        step = following.get(allocation.allocation_id)
        while step is not None:
            chain.append(step)
            step = following.get(step)
        later[allocation.allocation_id] = tuple(chain)
    return later


@attrs.frozen
class Totals:
    """The most a plan can use, with every allocation run to its time limit."""

    cpu_hours: float
    """CPUs times hours."""
    gpu_hours: float
    """GPU units (of ``gpu_gres``) times hours."""
    memory_gib_hours: float
    """GiB of memory times hours."""


def decide(
    keys: Sequence[str],
    work: Mapping[str, Work],
    request: Request,
    *,
    valid: Collection[str] = frozenset(),
    continuation: Continuation | None = None,
    limits: Limits | None = None,
) -> Decision:
    """Select or hold every Task of the roster; refuse the whole plan for bad ``--retry`` keys.

    A first plan selects every Task that never had accepted or unresolved work. ``--retry`` is
    strict (unknown, valid, never accepted, unresolved or still listed refuses, naming every bad
    key); ``--retry-failed`` takes current ``FAILED`` or ``STOPPED`` work, never ``LOST``.

    Under a ``continuation`` with a budget (``limits`` its profile's), a Task whose measured run
    time leaves no room for one more link is held ``SPENT``, and ``--retry KEY`` extends a
    ``SUCCEEDED`` or ``VALID`` Task with room (:func:`servatus.continuation.eligibility`).
    """
    if continuation is not None and limits is None:
        raise ValueError("a continuation is decided under its profile's limits")
    known = set(keys)
    problems = [f"{key}: unknown Task" for key in request.retry if key not in known]
    if request.only is not None:
        problems += [f"{key}: unknown Task (--only)" for key in request.only if key not in known]
    retry = set(request.retry)
    only = None if request.only is None else set(request.only)
    budgeted = continuation is not None and continuation.budget is not None
    selected: list[str] = []
    held: list[tuple[str, Hold]] = []
    extensions: list[Extension] = []
    for key in keys:
        state = work.get(key, NO_WORK)
        if key in retry:
            outside = only is not None and key not in only  # --only restricts every selection
            if budgeted and not outside and not (state.unresolved or state.listed):
                assert continuation is not None and limits is not None
                budget = _eligibility(state, key in valid, continuation, limits, retried=True)
                if budget is Eligibility.SPENT:
                    held.append((key, Hold.SPENT))
                    continue
                if budget.extends is not None:
                    selected.append(key)
                    extensions.append(Extension(key, budget.extends))
                    continue
            reason = "not among --only" if outside else _retry_refusal(state, is_valid=key in valid)
            if reason:
                problems.append(f"{key}: {reason}")
            else:
                selected.append(key)
            continue
        hold = _hold(state, request, is_valid=key in valid)
        if budgeted and hold is not Hold.UNRESOLVED and hold is not Hold.ACTIVE:
            assert continuation is not None and limits is not None
            spent = _eligibility(state, key in valid, continuation, limits, retried=False)
            if spent is Eligibility.SPENT:
                hold = Hold.SPENT
        if hold is None and only is not None and key not in only:
            hold = Hold.NOT_REQUESTED
        if hold is None:
            selected.append(key)
        else:
            held.append((key, hold))
    if problems:
        raise PlanRefused("; ".join(problems))
    if continuation is None:
        return Decision(selected=tuple(selected), held=tuple(held))
    return Decision(
        selected=tuple(selected),
        held=tuple(held),
        continuation=continuation,
        spent={key: measured_run_time(work.get(key, NO_WORK)) for key in selected},
        extensions=tuple(extensions),
    )


def measured_run_time(state: Work) -> int:
    """The Task's measured run time in seconds: a LOST run counts its whole limit, as the
    projection does. Unmeasured (an offline projection) counts nothing: planning under a budget,
    and every retry, consults Slurm, and any other plan selects only Tasks never accepted."""
    measured = state.run_time
    return 0 if measured is None else measured.total


def _eligibility(
    state: Work, is_valid: bool, continuation: Continuation, limits: Limits, *, retried: bool
) -> Eligibility:
    return eligibility(
        state.execution,
        valid=is_valid,
        run_time=measured_run_time(state),
        continuation=continuation,
        limits=limits,
        retried=retried,
        spent_under=_spent_under(state),
    )


def _spent_under(state: Work) -> int:
    """The budget a Task's chain spent, by the application's own word: its current work is a
    link of a chain planned under that budget, and it ended ``SUCCEEDED`` or ``STOPPED (budget
    spent)``. 0 when it did not, or outside a budgeted chain."""
    link = state.link
    if link is None:
        return 0
    if state.execution is Execution.SUCCEEDED or state.detail is StopReason.BUDGET_SPENT:
        return link.budget
    return 0


def _retry_refusal(state: Work, *, is_valid: bool) -> str | None:
    if state.unresolved:
        return "has an unresolved submission; run servatus reconcile"
    if is_valid:
        return "the probe reports a valid result"
    if not state.accepted:
        return "was never accepted by Slurm; plan it without --retry"
    if state.listed:
        return "Slurm still lists its earlier work; wait or cancel"
    return None


def _hold(state: Work, request: Request, *, is_valid: bool) -> Hold | None:
    if state.unresolved:
        return Hold.UNRESOLVED
    if is_valid:
        return Hold.VALID
    if not state.accepted:
        # A submission recorded as not sent that Slurm lists after all (a late sbatch).
        return Hold.ACTIVE if state.listed else None
    if request.retry_failed and state.execution in RETRYABLE:
        # A failed or cancelled job that Slurm still lists is not over yet: wait for the purge.
        return Hold.ACTIVE if state.listed else None
    return Hold.SUBMITTED


def totals(
    resources: Resources, allocations: Iterable[Allocation], *, slots: int | None = None
) -> Totals:
    """CPU-, GPU- and GiB-hours requested at most: every slot held for its allocation's whole
    time limit, each chain link at its own (every link holds all of its chain's slots). A lease
    holds ``slots`` in each of its allocations, which plan no Tasks."""
    held: dict[int, int] = {}
    full = resources.time_limit
    for allocation in allocations:
        limit = full if allocation.link is None else allocation.link.time_limit
        count = len(allocation.task_keys) if slots is None else slots
        held[limit] = held.get(limit, 0) + count
    slots_by_limit = held
    return resource_hours(resources, slots_by_limit)


def resource_hours(resources: Resources, slots: Mapping[int, int]) -> Totals:
    """CPU-, GPU- and GiB-hours of ``slots`` (how many slots are held, by time limit in seconds)
    of ``resources`` each: a chain's links (``servatus.continuation.link_slots``) have limits of
    their own."""
    cpu = gpu = memory = 0.0
    for limit, count in sorted(slots.items()):
        hours = limit / 3600
        cpu += count * resources.cpus * hours
        gpu += count * resources.gpus * hours
        memory += count * resources.memory_mib / 1024 * hours
    return Totals(cpu_hours=cpu, gpu_hours=gpu, memory_gib_hours=memory)


def format_totals(value: Totals) -> str:
    """The plan's closing line, GPU-hours only when the plan asks for GPUs."""
    parts = [f"{_hours(value.cpu_hours)} CPU-hours"]
    if value.gpu_hours:
        parts.append(f"{_hours(value.gpu_hours)} GPU-hours")
    parts.append(f"{_hours(value.memory_gib_hours)} GiB-hours")
    return "requests at most " + ", ".join(parts)


def _hours(value: float) -> str:
    return f"{math.floor(value * 10 + 0.5) / 10:.1f}"


@attrs.frozen
class LeaseHold:
    """What ``--hold N [--max-links K]`` asked for (ADR 0009): ``slots`` copies of the profile's
    per-Task resources, held by each of ``links`` lease allocations in turn."""

    slots: int
    """How many Tasks' worth of resources each lease allocation holds."""
    links: int = 1
    """How many lease allocations run one after the other."""


@attrs.frozen
class Plan:
    """A reviewed plan: everything ``submit`` needs to rebuild it and to notice any change.

    ``campaign_id`` and ``revision`` pin the campaign state it was made from; the allocation ids
    derive from them, so an unchanged campaign rebuilds the identical plan.
    """

    campaign_id: str
    """The campaign it was made for."""
    revision: int
    """The campaign's revision it was made from: any later change makes it stale."""
    profile: Profile
    """The profile it runs under (for steps in a lease, the lease's slot)."""
    request: Request
    """What was asked: retries, ``only``, packing."""
    probe: bool
    """Whether it was made with a result probe (then only a Campaign with one submits it)."""
    decision: Decision
    """Which Tasks are selected, held (and why) and deferred."""
    allocations: tuple[Allocation, ...]
    """What ``submit`` sends, in order (a chain's links one after another)."""
    created_at: float
    """When it was made, in UNIX seconds."""
    warnings: tuple[str, ...] = ()
    """What the CLI prints as ``servatus: warning: ...`` before the plan."""
    hold: LeaseHold | None = None
    """For a lease (:meth:`~servatus.Campaign.hold`): what it holds."""
    within: str | None = None
    """For steps in a lease (``plan(lease=...)``): the lease link they start in."""

    @property
    def totals(self) -> Totals:
        """What the plan requests at most; steps use slots their lease already holds."""
        if self.within is not None:
            return Totals(cpu_hours=0.0, gpu_hours=0.0, memory_gib_hours=0.0)
        slots = None if self.hold is None else self.hold.slots
        return totals(self.profile.resources, self.allocations, slots=slots)

    @property
    def extensions(self) -> tuple[Extension, ...]:
        """The Tasks this plan runs again past a success or a valid result (``--retry KEY
        --budget D``), in roster order."""
        return self.decision.extensions

    def same_as(self, other: Plan) -> bool:
        """Whether ``other`` plans exactly the same work (creation time and warnings aside)."""
        fields = (
            "campaign_id", "revision", "profile", "request", "probe", "decision", "hold", "within"
        )  # fmt: skip
        same = all(getattr(self, name) == getattr(other, name) for name in fields)
        return same and self.allocations == other.allocations


def shape_indexes(plan: Plan) -> dict[tuple[int, int], int]:
    """Each distinct allocation shape of ``plan``, (Tasks, time limit in seconds), with the
    index of its first allocation: what ``validate`` test-submits once each. A lease is an
    allocation of as many Tasks as it holds slots; a chain's shorter last link is a shape of its
    own."""
    shapes: dict[tuple[int, int], int] = {}
    for index, allocation in enumerate(plan.allocations):
        tasks = len(allocation.task_keys) if plan.hold is None else plan.hold.slots
        shapes.setdefault((tasks, allocation.time_limit(plan.profile.resources)), index)
    return shapes


def work_from_report(report: Report) -> dict[str, Work]:
    """What planning needs of each Task: its status in the projection."""
    return {task.key: task for task in report.tasks}
