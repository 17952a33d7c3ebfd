"""Planning: which Tasks to run now, which are held and why, and how they pack into allocations.

Everything here is a pure function over values. The campaign gathers what planning needs (the
roster, each Task's projected work, the probe's answer) and this module decides; the same inputs
always give the same plan, which is how ``submit`` recognises a stale or altered plan.
"""

from __future__ import annotations

import enum
import functools
import hashlib
import hmac
import json
import math
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from typing import Any, Literal, Protocol

import attrs
import cattrs
from cattrs.gen import make_dict_structure_fn_from_attrs, make_dict_unstructure_fn, override
from cattrs.preconf.json import make_converter
from cattrs.v import format_exception

from servatus.config import (
    Profile,
    Resources,
    Target,
    capacity,
    profile_from_document,
    profile_to_document,
)
from servatus.continuation import (
    MAX_LINKS,
    Chain,
    Continuation,
    Eligibility,
    Extension,
    Limits,
    Link,
    chain,
    chain_warnings,
    dropped_rest,
    eligibility,
    limits_for,
)
from servatus.engine.status import Execution, Report, RunTime, StopReason, TaskLink
from servatus.errors import ConfigurationError, PlanRefused, StalePlan
from servatus.ids import ALLOCATION_ID, ALLOCATION_ID_HEX
from servatus.strict import strict_scalars


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


@attrs.frozen
class TaskWork:
    """What planning knows of one Task's earlier work.

    ``execution`` is the projected state of its current work (``NOT_SUBMITTED`` when it has none);
    ``listed`` is whether Slurm still lists any of its jobs, known only when Slurm was consulted;
    ``run_time`` is how long it ran, summed over its allocations (None when not measured).
    """

    execution: Execution = Execution.NOT_SUBMITTED
    accepted: bool = False
    unresolved: bool = False
    listed: bool = False
    run_time: RunTime | None = None
    detail: StopReason | None = None
    link: TaskLink | None = None


class Work(Protocol):
    """What planning reads of one Task's earlier work: a :class:`TaskWork`, or the
    :class:`~servatus.status.TaskStatus` a status projection already built for it."""

    @property
    def execution(self) -> Execution: ...

    @property
    def accepted(self) -> bool: ...

    @property
    def unresolved(self) -> bool: ...

    @property
    def listed(self) -> bool: ...

    @property
    def run_time(self) -> RunTime | None: ...

    @property
    def detail(self) -> StopReason | None: ...

    @property
    def link(self) -> TaskLink | None: ...


_NO_WORK = TaskWork()


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


def selectable_unasked(work: Work) -> bool:
    """Whether a plan may select a Task with this work that ``--retry`` does not name: it was
    never accepted, or ``--retry-failed`` takes it (the status cache keeps only these Tasks'
    content for planning, ADR 0010)."""
    return not work.accepted or work.execution in _RETRYABLE


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
        state = work.get(key, _NO_WORK)
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
        spent={key: _run_time(work.get(key, _NO_WORK)) for key in selected},
        extensions=tuple(extensions),
    )


def _run_time(state: Work) -> int:
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
        run_time=_run_time(state),
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
    if request.retry_failed and state.execution in _RETRYABLE:
        # A failed or cancelled job that Slurm still lists is not over yet: wait for the purge.
        return Hold.ACTIVE if state.listed else None
    return Hold.SUBMITTED


_RETRYABLE = (Execution.FAILED, Execution.STOPPED, Execution.ENDING)


def per_allocation(target: Target, resources: Resources, limit: int | None) -> int:
    """How many Tasks one allocation takes: the profile's capacity, lowered by a packing limit."""
    fits = capacity(target, resources)
    return min(fits, limit) if limit else fits


def pack(
    decision: Decision,
    profile: Profile,
    request: Request,
    *,
    salt: str,
) -> tuple[Decision, tuple[Allocation, ...]]:
    """Pack the selected Tasks into allocations in roster order, deferring what exceeds
    ``max_allocations_per_submit``. ``salt`` (the campaign's identity and state version) makes
    allocation ids unique per campaign state yet reproducible when the plan is rebuilt.

    Under the decision's continuation each packed allocation becomes a chain of links, sized for
    its neediest Task (:func:`servatus.continuation.chain`)."""
    decision, allocations, _ = _pack(decision, profile, request, salt=salt)
    return decision, allocations


def _pack(
    decision: Decision, profile: Profile, request: Request, *, salt: str
) -> tuple[Decision, tuple[Allocation, ...], tuple[Chain, ...]]:
    size = per_allocation(profile.target, profile.resources, request.tasks_per_allocation)
    chunks = [decision.selected[i : i + size] for i in range(0, len(decision.selected), size)]
    cap = profile.target.max_allocations_per_submit
    salted = _salted(salt)  # hashed once, copied for each of up to 100,000 allocations
    continuation = decision.continuation
    if continuation is None:
        kept, rest = (chunks, []) if cap is None else (chunks[:cap], chunks[cap:])
        allocations = tuple(
            Allocation(_allocation_id(salted, index, keys), tuple(keys))
            for index, keys in enumerate(kept)
        )
        planned: tuple[Chain, ...] = ()
    else:
        limits = limits_for(continuation, profile)
        every = [_chain(keys, decision.spent, continuation, limits) for keys in chunks]
        count = _within(every, cap)
        kept, rest, planned = chunks[:count], chunks[count:], tuple(every[:count])
        allocations = tuple(
            link
            for index, (keys, each) in enumerate(zip(kept, planned, strict=True))
            for link in _links(salted, index, tuple(keys), each)
        )
    deferred = tuple(key for keys in rest for key in keys)
    selected = tuple(key for keys in kept for key in keys)
    if continuation is not None and deferred:
        chosen = set(selected)
        decision = attrs.evolve(
            decision,
            spent={key: seconds for key, seconds in decision.spent.items() if key in chosen},
            extensions=tuple(e for e in decision.extensions if e.key in chosen),
        )
    return attrs.evolve(decision, selected=selected, deferred=deferred), allocations, planned


def _chain(
    keys: Sequence[str], spent: Mapping[str, int], continuation: Continuation, limits: Limits
) -> Chain:
    """The chain of one packed allocation; chains of the same run times share their links
    (a sweep's first plan: every one), so 10,000 chains build their links once."""
    run_times = tuple(spent[key] for key in keys)
    made = _chain_of(run_times, continuation, limits)
    tasks = tuple(attrs.evolve(task, key=key) for task, key in zip(made.tasks, keys, strict=True))
    return attrs.evolve(made, tasks=tasks)


@functools.lru_cache(maxsize=256)
def _chain_of(run_times: tuple[int, ...], continuation: Continuation, limits: Limits) -> Chain:
    return chain(
        [(str(slot), seconds) for slot, seconds in enumerate(run_times)], continuation, limits
    )


def _within(chains: Sequence[Chain], cap: int | None) -> int:
    """How many of the chains, in order, one submit takes: each link is an allocation of its
    own, and a chain is never split across submits (its later links depend on its earlier
    ones), so the first chain that would go over ``max_allocations_per_submit`` is deferred
    whole, with every chain after it. A chain longer than the cap could never be submitted."""
    if cap is None:
        return len(chains)
    used = 0
    for count, each in enumerate(chains):
        if len(each.links) > cap:
            raise ConfigurationError(
                f"a chain of {len(each.links)} links is more than max_allocations_per_submit "
                f"({cap}) allows in one submit, and a chain is never split; plan fewer links "
                "(--max-links, a smaller --budget) or raise the cap"
            )
        used += len(each.links)
        if used > cap:
            return count
    return len(chains)


def _links(
    salted: hashlib._Hash, index: int, keys: tuple[str, ...], planned: Chain
) -> Iterator[Allocation]:
    """The chain's links as allocations: each its own id, ``after`` the one before. The ids
    share the chain's index and keys, hashed once for all its links."""
    task_links = tuple(task.links for task in planned.tasks)
    chained = _keyed(salted, index, keys)
    after: str | None = None
    for link in planned.links:
        digest = chained.copy()
        digest.update(f"link {link.position}\0".encode())
        allocation_id = digest.hexdigest()[:ALLOCATION_ID_HEX]
        yield Allocation(allocation_id, keys, link=link, after=after, task_links=task_links)
        after = allocation_id


def allocation_id(salt: str, index: int, keys: Iterable[str], *, link: int | None = None) -> str:
    """A reproducible allocation id: the same campaign state and packing give the same id; each
    ``link`` of a chain has its own."""
    return _allocation_id(_salted(salt), index, keys, link=link)


def _salted(salt: str) -> hashlib._Hash:
    return hashlib.sha256(f"{salt}\0".encode())


def _allocation_id(
    salted: hashlib._Hash, index: int, keys: Iterable[str], *, link: int | None = None
) -> str:
    digest = _keyed(salted, index, keys)
    if link is not None:  # a plain allocation's id is as it always was
        digest.update(f"link {link}\0".encode())
    return digest.hexdigest()[:ALLOCATION_ID_HEX]


def _keyed(salted: hashlib._Hash, index: int, keys: Iterable[str]) -> hashlib._Hash:
    digest = salted.copy()
    digest.update(f"{index}\0".encode())
    digest.update("".join([key + "\0" for key in keys]).encode())
    return digest


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


PLAN_SCHEMA: Literal["servatus.plan/5"] = "servatus.plan/5"
"""Version 5 adds the ``seal`` (ADR 0011); its body is version 4's."""

UNSEALED_SCHEMAS = frozenset({"servatus.plan/4"})
"""Saved plans of earlier releases: sealed by nothing but a digest anyone can compute, so they
are refused with a word to save the plan again."""


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


class _Unusable(ValueError):
    """A problem a hook words itself; ``located`` ones get the plan's name in front."""

    def __init__(self, message: str, *, located: bool = False) -> None:
        super().__init__(message)
        self.located = located


_HOLDS = tuple[tuple[str, Hold], ...]
_AS_LISTS: dict[Any, Any] = {
    tuple[str, ...]: list[str],
    tuple[str, ...] | None: list[str] | None,
    tuple[int, ...]: list[int],
    tuple[Allocation, ...]: list[Allocation],
    tuple[Extension, ...]: list[Extension],
}
"""The value types' tuples, read as the lists a document holds."""

_SHOWN: dict[Any, Any] = {
    tuple[str, ...]: list,
    tuple[str, ...] | None: list[str] | None,
    tuple[int, ...]: list,
    tuple[Allocation, ...]: list,
    tuple[Extension, ...]: list,
    _HOLDS: list,
}
"""How messages name those tuples: as the document's lists (``expected list``)."""


class _NotMapping(TypeError):
    """An object's place in the document holds something else (said "expected a mapping")."""


def _every_field_required(kind: type[Any], converter: cattrs.Converter, *omit: str) -> Any:
    """A structure hook for ``kind`` that requires every field but ``omit``: a document stores
    them all, so one that lacks a field was not written by servatus, whatever defaults the value
    type has."""
    attrs.resolve_types(kind)
    fields = [field.evolve(default=attrs.NOTHING) for field in attrs.fields(kind)]
    overrides: dict[str, Any] = {name: override(omit=True) for name in omit}
    structure = make_dict_structure_fn_from_attrs(fields, kind, converter, **overrides)

    def mapping(value: Any, _: Any) -> Any:
        if type(value) is not dict:
            raise _NotMapping(f"not an object: {value!r:.40}")
        return structure(value, kind)

    return mapping


_CHAIN_FIELDS = ("link", "after", "task_links")
"""What a chain link's allocation document holds beyond a plain allocation's."""


def _plan_converter() -> cattrs.Converter:
    """One converter for the saved plan: the value types themselves, every field required,
    unknown keys and loose scalars refused."""
    converter = strict_scalars(make_converter(forbid_extra_keys=True))
    for kind, stored in _AS_LISTS.items():
        converter.register_structure_hook_func(_exactly(kind), _read_as(converter, stored))
    converter.register_structure_hook_func(_exactly(_HOLDS), _structure_holds(converter))
    converter.register_unstructure_hook_func(
        _exactly(_HOLDS), lambda held: [[key, hold.value] for key, hold in held]
    )
    converter.register_unstructure_hook_func(  # 100,000 of them: built here, not one by one
        _exactly(tuple[Allocation, ...]),
        lambda allocations: [_allocation_document(a) for a in allocations],
    )
    converter.register_structure_hook(Profile, _structure_profile(converter))
    converter.register_unstructure_hook(Profile, profile_to_document)
    converter.register_structure_hook(Request, _every_field_required(Request, converter))
    converter.register_structure_hook(Allocation, _structure_allocation(converter))
    for kind in (Continuation, Link):
        converter.register_structure_hook(kind, _constructed(kind, converter))
    converter.register_structure_hook(Extension, _every_field_required(Extension, converter))
    converter.register_structure_hook(Decision, _every_field_required(Decision, converter))
    converter.register_structure_hook(LeaseHold, _every_field_required(LeaseHold, converter))
    converter.register_structure_hook(Plan, _structure_plan(converter))
    converter.register_unstructure_hook(
        Plan,
        make_dict_unstructure_fn(
            Plan,
            converter,
            warnings=override(omit=True),
            hold=override(omit_if_default=True),
            within=override(omit_if_default=True),
        ),
    )
    return converter


_LEASE_FIELDS = ("hold", "within")
"""What a lease's plan (``hold``) or a plan of steps in a lease (``within``) holds beyond a plan
of Tasks; a document holds at most one of them."""


def _structure_plan(converter: cattrs.Converter) -> Any:
    """A plan of Tasks without ``hold`` or ``within`` (so every plan saved before leases reads,
    and saves back, as it was), a lease's plan with ``hold``, a plan of steps with ``within``."""
    shapes = {
        name: _every_field_required(Plan, converter, "warnings", *set(_LEASE_FIELDS) - {name})
        for name in _LEASE_FIELDS
    }
    tasks = _every_field_required(Plan, converter, "warnings", *_LEASE_FIELDS)

    def structure(value: Any, _: Any) -> Plan:
        named = [name for name in _LEASE_FIELDS if type(value) is dict and name in value]
        if len(named) > 1:
            raise _Unusable("a plan holds a lease or steps in one, not both")
        plan: Plan = (shapes[named[0]] if named else tasks)(value, Plan)
        return plan

    return structure


def _allocation_document(allocation: Allocation) -> dict[str, Any]:
    """A plain allocation's document is what every ``servatus.plan`` document held since version
    4 (so a plan saved before chains reads back to the same body); a chain link's holds its
    place in its chain too."""
    document: dict[str, Any] = {
        "allocation_id": allocation.allocation_id,
        "task_keys": list(allocation.task_keys),
    }
    link = allocation.link
    if link is not None:
        document["link"] = {"position": link.position, "of": link.of, "time_limit": link.time_limit}
        document["after"] = allocation.after
        document["task_links"] = list(allocation.task_links)
    return document


def _structure_allocation(converter: cattrs.Converter) -> Any:
    """A plain allocation without the chain fields, a chain link with all of them (a document
    holding some of them lacks the others: required)."""
    plain = _every_field_required(Allocation, converter, *_CHAIN_FIELDS)
    linked = _every_field_required(Allocation, converter)

    def structure(value: Any, _: Any) -> Allocation:
        chained = type(value) is dict and any(name in value for name in _CHAIN_FIELDS)
        allocation: Allocation = (linked if chained else plain)(value, Allocation)
        if chained and allocation.link is None:
            raise _Unusable(f"allocation {allocation.allocation_id} has chain fields but no link")
        return allocation

    return structure


def _constructed(kind: type[Any], converter: cattrs.Converter) -> Any:
    """A value whose own checks (a budget longer than zero, a link's place in its chain) refuse
    it: their words, as the problem."""
    fields = _every_field_required(kind, converter)

    def structure(value: Any, _: Any) -> Any:
        try:
            return fields(value, kind)
        except cattrs.ClassValidationError as exc:
            # Its fields' problems are located (noted) by cattrs; the constructor's are not.
            own = [e for e in exc.exceptions if not getattr(e, "__notes__", None)]
            if len(own) == 1 and isinstance(own[0], ConfigurationError | ValueError):
                raise _Unusable(str(own[0])) from None
            raise

    return structure


def _exactly(kind: Any) -> Callable[[Any], bool]:
    return lambda other: bool(other == kind)


def _read_as(converter: cattrs.Converter, stored: Any) -> Callable[[Any, Any], Any]:
    def structure(value: Any, _: Any) -> Any:
        items = converter.structure(value, stored)
        return None if items is None else tuple(items)

    return structure


def _structure_holds(converter: cattrs.Converter) -> Any:
    def structure(value: Any, _: Any) -> tuple[tuple[str, Hold], ...]:
        pairs = converter.structure(value, list[tuple[str, str]])
        try:
            return tuple((key, Hold(hold)) for key, hold in pairs)
        except ValueError as exc:
            raise _Unusable(str(exc)) from None

    return structure


def _structure_profile(converter: cattrs.Converter) -> Any:
    def structure(value: Any, _: Any) -> Profile:
        try:
            return profile_from_document(converter.structure(value, dict[str, Any]))
        except ConfigurationError as exc:
            raise _Unusable(str(exc), located=True) from None

    return structure


_converter = _plan_converter()


def plan_to_document(plan: Plan) -> dict[str, Any]:
    """The ``servatus.plan/5`` document of a plan, with the ``digest`` of everything else in it
    (the plan's identity, recorded with each intent), unsealed: :func:`seal_document` seals it
    for saving."""
    document: dict[str, Any] = {"schema": PLAN_SCHEMA, **_converter.unstructure(plan)}
    document["digest"] = _digest(document)
    return document


def seal_document(document: Mapping[str, Any], key: bytes) -> dict[str, Any]:
    """``document`` with its ``seal``: an HMAC-SHA256, under the campaign's plan key
    (``servatus.journal.store.plan_key``), of everything else in it. Only who can read the key (the
    campaign's owner) can make a seal that :func:`plan_from_document` accepts.

    :param document: A plan document, without a seal.
    :param key: The campaign's plan key.
    """
    return {**document, "seal": _seal(document, key)}


def plan_from_document(data: Any, *, where: str, key: bytes | None = None) -> Plan:
    """Read a plan document back; a document altered by even one byte is
    :class:`~servatus.errors.StalePlan`. With ``key``, its ``seal`` is checked as
    ``check_seal`` does; without, it is not: use that only for a document you made or
    trust (``Campaign.read_plan`` reads a saved plan to submit). ``where`` names the document in
    messages.

    :param data: The parsed JSON document.
    :param where: What to call the document in an error (its file name, say).
    :param key: The campaign's plan key, to check the seal with; None checks none.
    """
    if key is not None:
        check_seal(data, where=where, key=key)
    _check_schema(data, where)
    _check_digest(data, where)
    body = {name: value for name, value in data.items() if name not in _ENVELOPE}
    try:
        plan: Plan = _converter.structure(body, Plan)
    except cattrs.BaseValidationError as exc:
        raise StalePlan(f"{where}: not a usable plan ({_problems(exc, where)})") from None
    malformed = [
        a.allocation_id for a in plan.allocations if not ALLOCATION_ID.fullmatch(a.allocation_id)
    ]
    if malformed:
        raise StalePlan(f"{where}: not a usable plan (allocation id {malformed[0]!r})")
    problem = lease_problem(plan) or chain_problem(plan)
    if problem is not None:
        raise StalePlan(f"{where}: not a usable plan ({problem})")
    # Every link of a chain holds the same Tasks: each counts once, in the chain's first link.
    packed = [key for a in plan.allocations if a.after is None for key in a.task_keys]
    selected = set(plan.decision.selected)
    if len(packed) != len(selected) or selected.symmetric_difference(packed):
        raise StalePlan(f"{where}: not a usable plan (its allocations differ from its selection)")
    decision = plan.decision
    measured = selected if decision.continuation is not None else set()
    if set(decision.spent) != measured:  # each selected Task's run time, under a continuation
        raise StalePlan(f"{where}: not a usable plan (its spent differs from its selection)")
    extended = {extension.key for extension in decision.extensions}
    if extended - measured or len(extended) != len(decision.extensions):
        raise StalePlan(f"{where}: not a usable plan (its extensions are not of its selection)")
    return plan


def check_seal(data: Any, *, where: str, key: bytes | None) -> None:
    """Refuse (:class:`~servatus.errors.StalePlan`) a document that is not a saved plan sealed
    with ``key``, the plan key of the campaign it is submitted to (None: that campaign has
    sealed no plan yet, so none is its)."""
    _check_schema(data, where)
    _check_digest(data, where)  # an edit by hand reads as one, before the seal is asked
    seal = data.get("seal")
    if key is None or not isinstance(seal, str) or not hmac.compare_digest(seal, _seal(data, key)):
        raise StalePlan(
            f"{where}: its seal is not this campaign's (the plan was saved for another "
            "campaign, or altered); plan again"
        )


def _check_digest(data: dict[str, Any], where: str) -> None:
    if data.get("digest") != _digest(data):
        raise StalePlan(f"{where}: the plan was altered after it was saved; plan again")


def _check_schema(data: Any, where: str) -> None:
    schema = data.get("schema") if isinstance(data, dict) else None
    if schema in UNSEALED_SCHEMAS:
        raise StalePlan(
            f"{where}: a {schema} plan, saved by an earlier release without a seal, is not "
            "submitted; save it again with plan --output"
        )
    if schema != PLAN_SCHEMA:
        raise StalePlan(f"{where}: not a {PLAN_SCHEMA} document")


def lease_problem(plan: Plan) -> str | None:
    """What does not hold together in a lease's plan, or None: it plans no Tasks and no
    continuation, its ``links`` allocations hold nothing, its slots fit the profile, and its
    profile has the ``signal_before_end`` a lease requires. A plan of Tasks has no empty
    allocation."""
    hold = plan.hold
    if plan.within is not None:
        if not ALLOCATION_ID.fullmatch(plan.within):
            return f"it plans steps within {plan.within!r}, which is no allocation id"
        if any(len(a.task_keys) != 1 or a.link is not None for a in plan.allocations):
            return "a step in a lease holds exactly one Task and is no chain link"
        return None
    if hold is None:
        if any(not allocation.task_keys for allocation in plan.allocations):
            return "an allocation of Tasks holds none"
        return None
    problem = hold_problem(plan.profile, hold)
    if problem is not None:
        return problem
    if plan.decision != Decision(selected=(), held=()):
        return "a lease plans no Tasks"
    if len(plan.allocations) != hold.links:
        return f"a lease of {hold.links} links has {len(plan.allocations)} allocations"
    if any(allocation.task_keys for allocation in plan.allocations):
        return "a lease's allocations hold no Tasks"
    return None


def hold_problem(profile: Profile, hold: LeaseHold) -> str | None:
    """Why ``profile`` cannot hold this lease, or None: ``capacity`` and every ceiling apply to
    its slots as to an allocation of that many Tasks."""
    if hold.slots < 1 or not 1 <= hold.links <= MAX_LINKS:
        return f"a lease holds at least 1 slot in 1 to {MAX_LINKS} links"
    if profile.resources.signal_before_end is None:
        return (
            f"profile {profile.name} has no signal_before_end; a lease needs it to tell its "
            "steps it is ending"
        )
    fits = capacity(profile.target, profile.resources)
    if hold.slots > fits:
        return (
            f"--hold {hold.slots}: profile {profile.name} fits at most {fits} "
            f"{'slot' if fits == 1 else 'slots'} in one allocation"
        )
    return None


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


def make_lease_plan(
    *, campaign_id: str, revision: int, profile: Profile, hold: LeaseHold, probe: bool, now: float
) -> Plan:
    """The plan of a lease: ``hold.links`` allocations of ``hold.slots`` slots each, one after
    the other when there are several, each for the profile's whole time limit; raises
    :class:`ConfigurationError` for a lease the profile cannot hold."""
    problem = hold_problem(profile, hold)
    if problem is not None:
        raise ConfigurationError(problem)
    salted = _salted(f"{campaign_id}:{revision}")
    lease = (f"lease {hold.slots}",)
    allocations: list[Allocation] = []
    for position in range(1, hold.links + 1):
        chained = hold.links > 1
        allocations.append(
            Allocation(
                allocation_id=_allocation_id(salted, 0, lease, link=position if chained else None),
                task_keys=(),
                link=Link(position, hold.links, profile.resources.time_limit) if chained else None,
                after=allocations[-1].allocation_id if allocations else None,
            )
        )
    return Plan(
        campaign_id=campaign_id,
        revision=revision,
        profile=profile,
        request=Request(),
        probe=probe,
        decision=Decision(selected=(), held=()),
        allocations=tuple(allocations),
        created_at=now,
        hold=hold,
    )


_STEP_WORK = frozenset({Execution.QUEUED, Execution.RUNNING, Execution.ENDING})
"""What a step does while its Task is held ``ACTIVE``: waiting in its lease, or running."""


def _step_work(work: Work) -> TaskWork:
    """A step's work as planning reads it: still going only while it waits or runs, not for as
    long as Slurm lists its lease, so a Task whose step ended can be started again at once."""
    return TaskWork(
        execution=work.execution,
        accepted=work.accepted,
        unresolved=work.unresolved,
        listed=work.listed and work.execution in _STEP_WORK,
        run_time=work.run_time,
        detail=work.detail,
        link=work.link,
    )


def _ongoing(work: Work | None) -> bool:
    return work is not None and work.execution in _STEP_WORK


def make_step_plan(
    *,
    campaign_id: str,
    revision: int,
    salt: str,
    within: str,
    keys: Sequence[str],
    profile: Profile,
    request: Request,
    report: Report,
    stepped: Collection[str],
    valid: Collection[str],
    probe: bool,
    now: float,
    budget: int | None = None,
) -> Plan:
    """The selected Tasks as one-slot steps into lease link ``within`` (``plan --lease``),
    reproducible for the same inputs. ``profile`` is the lease's, rebuilt from its intent;
    ``stepped`` the keys whose current work is a step, which hold ``ACTIVE`` only while the
    step waits or runs; ``salt`` (the campaign's state, including how many intents it
    recorded) makes each step's id new for every submission. A ``budget`` holds ``SPENT`` as
    for a chain, and becomes each step's ``SERVATUS_BUDGET``."""
    continuation = None if budget is None else Continuation(budget=budget)
    limits = None if continuation is None else limits_for(continuation, profile)
    work = {
        key: _step_work(item) if key in stepped else item
        for key, item in work_from_report(report).items()
    }
    decision = decide(keys, work, request, valid=valid, continuation=continuation, limits=limits)
    held = tuple(
        (key, Hold.ACTIVE if hold is Hold.SUBMITTED and _ongoing(work.get(key)) else hold)
        for key, hold in decision.held
    )
    salted = _salted(f"{campaign_id}:{revision}:{salt}:within {within}")
    allocations = tuple(
        Allocation(_allocation_id(salted, 0, (key,)), (key,)) for key in decision.selected
    )
    return Plan(
        campaign_id=campaign_id,
        revision=revision,
        profile=profile,
        request=request,
        probe=probe,
        decision=attrs.evolve(decision, held=held),
        allocations=allocations,
        created_at=now,
        warnings=report.warnings,
        within=within,
    )


def chain_problem(plan: Plan) -> str | None:
    """What does not hold together in the plan's chains, or None: every allocation of a plan
    with a continuation is a chain link and none of one without; a chain's links come in order
    (positions 1 to K), each after the one before, with the same Tasks in the same slots and
    the same ``task_links``, each 1 to K; no link is longer than the profile's time limit; a
    budget comes with the profile's ``signal_before_end``, as planning requires."""
    continuation = plan.decision.continuation
    # Steps in a lease carry a budget (SERVATUS_BUDGET, SPENT) but run in the lease's link.
    chained = (continuation is not None and plan.within is None) or (
        plan.hold is not None and plan.hold.links > 1
    )
    resources = plan.profile.resources
    budgeted = continuation is not None and continuation.budget is not None
    if budgeted and resources.signal_before_end is None:
        return "its continuation has a budget, but its profile no signal_before_end"
    full = resources.time_limit
    previous: Allocation | None = None
    for allocation in plan.allocations:
        link, name = allocation.link, f"allocation {allocation.allocation_id}"
        if link is None:
            if chained:
                return f"{name} is no chain link, but the plan has a continuation"
            continue
        if not chained:
            return f"{name} is a chain link, but the plan has no continuation"
        if link.time_limit > full:
            return f"{name}: its link is longer than the profile's time_limit"
        if len(allocation.task_links) != len(allocation.task_keys) or not all(
            1 <= count <= link.of for count in allocation.task_links
        ):
            return f"{name}: task_links do not give each slot 1 to {link.of} links"
        if link.position == 1:
            if previous is not None and previous.link is not None and not previous.link.last:
                return f"{name} starts a chain before the one before it ended"
            if allocation.after is not None:
                return f"{name} is the first link of its chain, yet comes after another"
        elif (
            previous is None
            or previous.link is None
            or previous.link.position != link.position - 1
            or previous.link.of != link.of
            or allocation.after != previous.allocation_id
            or previous.task_keys != allocation.task_keys
            or previous.task_links != allocation.task_links
        ):
            return f"{name} ({link.label}) does not follow the link before it in its chain"
        previous = allocation
    if previous is not None and previous.link is not None and not previous.link.last:
        return f"allocation {previous.allocation_id} ends the plan before its chain ends"
    return None


def _problems(exc: cattrs.BaseValidationError, where: str) -> str:
    """What is wrong, in cattrs' words (a tuple named as the list the document holds), or in a
    hook's own when that is the only problem."""
    leaves = list(_leaves(exc))
    if len(leaves) == 1 and isinstance(leaves[0], _Unusable):
        return f"{where}: {leaves[0]}" if leaves[0].located else str(leaves[0])

    def describe(problem: BaseException, kind: Any) -> str:
        if isinstance(problem, _NotMapping):
            return "expected a mapping"
        return format_exception(problem, _SHOWN.get(kind, kind))

    return "; ".join(cattrs.transform_error(exc, format_exception=describe))


def _leaves(exc: BaseException) -> Iterator[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            yield from _leaves(inner)
    else:
        yield exc


_ENVELOPE = ("schema", "digest", "seal")
"""The names of a plan document that are not the plan's (the rest must all be)."""


def _canonical(document: Mapping[str, Any], *leaving: str) -> bytes:
    body = {key: value for key, value in document.items() if key not in leaving}
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return text.encode("ascii")


def _digest(document: Mapping[str, Any]) -> str:
    """The plan's identity: the SHA-256 of everything in its document but the digest and seal."""
    return hashlib.sha256(_canonical(document, "digest", "seal")).hexdigest()


def _seal(document: Mapping[str, Any], key: bytes) -> str:
    """The HMAC-SHA256 under ``key`` of everything in the document but the seal."""
    return hmac.new(key, _canonical(document, "seal"), hashlib.sha256).hexdigest()


def work_from_report(report: Report) -> dict[str, Work]:
    """What planning needs of each Task: its status in the projection."""
    return {task.key: task for task in report.tasks}


def make_plan(
    *,
    campaign_id: str,
    revision: int,
    keys: Sequence[str],
    profile: Profile,
    request: Request,
    work: Mapping[str, Work],
    warnings: Sequence[str],
    valid: Collection[str],
    probe: bool,
    now: float,
    continuation: Continuation | None = None,
) -> Plan:
    """Decide and pack: the whole plan from values, reproducible for the same inputs. ``work``
    is each Task's earlier work (a Task missing has none), ``warnings`` the projection's. Under
    a ``continuation``, each allocation is a chain of links; a budget needs the profile's
    ``signal_before_end`` (:class:`ConfigurationError`)."""
    limits = None if continuation is None else limits_for(continuation, profile)
    decision = decide(keys, work, request, valid=valid, continuation=continuation, limits=limits)
    salt = f"{campaign_id}:{revision}"
    decision, allocations, chains = _pack(decision, profile, request, salt=salt)
    chained: tuple[str, ...] = ()
    if continuation is not None and limits is not None:
        spent = [key for key, hold in decision.held if hold is Hold.SPENT]
        rests = [(key, _run_time(work.get(key, _NO_WORK))) for key in spent]
        dropped = [(key, dropped_rest(ran, continuation, limits)) for key, ran in rests]
        chained = chain_warnings(chains, limits, [(key, rest) for key, rest in dropped if rest])
    return Plan(
        campaign_id=campaign_id,
        revision=revision,
        profile=profile,
        request=request,
        probe=probe,
        decision=decision,
        allocations=allocations,
        created_at=now,
        warnings=(*packing_warnings(profile, request), *chained, *warnings),
    )


def packing_warnings(profile: Profile, request: Request) -> tuple[str, ...]:
    """What the plan packs differently from what was asked: a packing limit above the profile's
    capacity is lowered to the capacity."""
    asked = request.tasks_per_allocation
    fits = capacity(profile.target, profile.resources)
    if asked is None or asked <= fits:
        return ()
    return (
        f"{asked} Tasks per allocation were asked, but profile {profile.name} fits "
        f"{fits}; each allocation holds at most {fits}",
    )
