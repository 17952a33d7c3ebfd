"""Planning: which Tasks to run now, which are held and why, and how they pack into allocations.

Everything here is a pure function over values. The campaign gathers what planning needs (the
roster, each Task's projected work, the probe's answer) and this module decides; the same inputs
always give the same plan, which is how ``submit`` recognises a stale or altered plan.
"""

from __future__ import annotations

import enum
import hashlib
import json
import math
from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Any, Literal, Protocol

import attrs
import cattrs
from cattrs.preconf.json import make_converter

from servatus.config import (
    Profile,
    Resources,
    Target,
    capacity,
    profile_from_document,
    profile_to_document,
)
from servatus.errors import ConfigurationError, PlanRefused, StalePlan
from servatus.script import ALLOCATION_ID, ALLOCATION_ID_HEX
from servatus.status import Execution, Report
from servatus.store import strict_scalars


class Hold(enum.Enum):
    """Why an eligible-looking Task is not selected."""

    VALID = "VALID"
    SUBMITTED = "SUBMITTED"
    ACTIVE = "ACTIVE"
    UNRESOLVED = "UNRESOLVED"
    SPENT = "SPENT"
    NOT_REQUESTED = "NOT_REQUESTED"


@attrs.frozen
class TaskWork:
    """What planning knows of one Task's earlier work.

    ``execution`` is the projected state of its current work (``NOT_SUBMITTED`` when it has none);
    ``listed`` is whether Slurm still lists any of its jobs, known only when Slurm was consulted.
    """

    execution: Execution = Execution.NOT_SUBMITTED
    accepted: bool = False
    unresolved: bool = False
    listed: bool = False


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


_NO_WORK = TaskWork()


@attrs.frozen
class Request:
    """What the user asked for: ``--retry``, ``--retry-failed``, ``--only``, packing limits."""

    retry: tuple[str, ...] = ()
    retry_failed: bool = False
    only: tuple[str, ...] | None = None
    tasks_per_allocation: int | None = None

    @property
    def consults_slurm(self) -> bool:
        """Retries need Slurm's view (failed? still listed?); a first plan never does."""
        return bool(self.retry) or self.retry_failed


@attrs.frozen
class Decision:
    """What the user reviews: selected Tasks in roster order, held ones with their reason, and
    those deferred beyond ``max_allocations_per_submit``."""

    selected: tuple[str, ...]
    held: tuple[tuple[str, Hold], ...]
    deferred: tuple[str, ...] = ()


@attrs.frozen
class Allocation:
    """One planned single-node allocation: its id and the Tasks of its slots, in slot order."""

    allocation_id: str
    task_keys: tuple[str, ...]


@attrs.frozen
class Totals:
    """The most a plan can use, with every allocation run to its time limit."""

    cpu_hours: float
    gpu_hours: float
    memory_gib_hours: float


def decide(
    keys: Sequence[str],
    work: Mapping[str, Work],
    request: Request,
    *,
    valid: Collection[str] = frozenset(),
) -> Decision:
    """Select or hold every Task of the roster; refuse the whole plan for bad ``--retry`` keys.

    A first plan selects every Task that never had accepted or unresolved work. ``--retry`` is
    strict (unknown, valid, never accepted, unresolved or still listed refuses, naming every bad
    key); ``--retry-failed`` takes current ``FAILED`` or ``STOPPED`` work, never ``LOST``.
    """
    known = set(keys)
    problems = [f"{key}: unknown Task" for key in request.retry if key not in known]
    if request.only is not None:
        problems += [f"{key}: unknown Task (--only)" for key in request.only if key not in known]
    retry = set(request.retry)
    only = None if request.only is None else set(request.only)
    selected: list[str] = []
    held: list[tuple[str, Hold]] = []
    for key in keys:
        state = work.get(key, _NO_WORK)
        if key in retry:
            outside = only is not None and key not in only  # --only restricts every selection
            reason = "not among --only" if outside else _retry_refusal(state, is_valid=key in valid)
            if reason:
                problems.append(f"{key}: {reason}")
            else:
                selected.append(key)
            continue
        hold = _hold(state, request, is_valid=key in valid)
        if hold is None and only is not None and key not in only:
            hold = Hold.NOT_REQUESTED
        if hold is None:
            selected.append(key)
        else:
            held.append((key, hold))
    if problems:
        raise PlanRefused("; ".join(problems))
    return Decision(selected=tuple(selected), held=tuple(held))


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
    allocation ids unique per campaign state yet reproducible when the plan is rebuilt."""
    size = per_allocation(profile.target, profile.resources, request.tasks_per_allocation)
    chunks = [decision.selected[i : i + size] for i in range(0, len(decision.selected), size)]
    cap = profile.target.max_allocations_per_submit
    kept, rest = (chunks, []) if cap is None else (chunks[:cap], chunks[cap:])
    salted = _salted(salt)  # hashed once, copied for each of up to 100,000 allocations
    allocations = tuple(
        Allocation(_allocation_id(salted, index, keys), tuple(keys))
        for index, keys in enumerate(kept)
    )
    deferred = tuple(key for keys in rest for key in keys)
    selected = tuple(key for keys in kept for key in keys)
    return attrs.evolve(decision, selected=selected, deferred=deferred), allocations


def allocation_id(salt: str, index: int, keys: Iterable[str]) -> str:
    """A reproducible allocation id: the same campaign state and packing give the same id."""
    return _allocation_id(_salted(salt), index, keys)


def _salted(salt: str) -> hashlib._Hash:
    return hashlib.sha256(f"{salt}\0".encode())


def _allocation_id(salted: hashlib._Hash, index: int, keys: Iterable[str]) -> str:
    digest = salted.copy()
    digest.update(f"{index}\0".encode())
    digest.update("".join([key + "\0" for key in keys]).encode())
    return digest.hexdigest()[:ALLOCATION_ID_HEX]


def totals(resources: Resources, allocations: Iterable[Allocation]) -> Totals:
    """CPU-, GPU- and GiB-hours requested at most: every slot held for the whole time limit."""
    slots = sum(len(allocation.task_keys) for allocation in allocations)
    hours = resources.time_limit / 3600
    return Totals(
        cpu_hours=slots * resources.cpus * hours,
        gpu_hours=slots * resources.gpus * hours,
        memory_gib_hours=slots * resources.memory_mib / 1024 * hours,
    )


def format_totals(value: Totals) -> str:
    """The plan's closing line, GPU-hours only when the plan asks for GPUs."""
    parts = [f"{_hours(value.cpu_hours)} CPU-hours"]
    if value.gpu_hours:
        parts.append(f"{_hours(value.gpu_hours)} GPU-hours")
    parts.append(f"{_hours(value.memory_gib_hours)} GiB-hours")
    return "requests at most " + ", ".join(parts)


def _hours(value: float) -> str:
    return f"{math.floor(value * 10 + 0.5) / 10:.1f}"


PLAN_SCHEMA: Literal["servatus.plan/4"] = "servatus.plan/4"


@attrs.frozen
class Plan:
    """A reviewed plan: everything ``submit`` needs to rebuild it and to notice any change.

    ``campaign_id`` and ``revision`` pin the campaign state it was made from; the allocation ids
    derive from them, so an unchanged campaign rebuilds the identical plan.
    """

    campaign_id: str
    revision: int
    profile: Profile
    request: Request
    probe: bool
    decision: Decision
    allocations: tuple[Allocation, ...]
    created_at: float
    warnings: tuple[str, ...] = ()

    @property
    def totals(self) -> Totals:
        return totals(self.profile.resources, self.allocations)

    @property
    def extensions(self) -> tuple[str, ...]:
        """Tasks this plan extends past an earlier success (budgeted continuation)."""
        return ()

    def same_as(self, other: Plan) -> bool:
        """Whether ``other`` plans exactly the same work (creation time and warnings aside)."""
        fields = ("campaign_id", "revision", "profile", "request", "probe", "decision")
        same = all(getattr(self, name) == getattr(other, name) for name in fields)
        return same and self.allocations == other.allocations


@attrs.frozen
class _DecisionDocument:
    selected: list[str]
    held: list[tuple[str, str]]
    deferred: list[str]
    continuation: dict[str, Any] | None = None
    spent: dict[str, int] = attrs.Factory(dict)
    extensions: list[str] = attrs.Factory(list)


@attrs.frozen
class _AllocationDocument:
    allocation_id: str
    task_keys: list[str]


@attrs.frozen
class _RequestDocument:
    retry: list[str]
    retry_failed: bool
    only: list[str] | None
    tasks_per_allocation: int | None


@attrs.frozen
class _PlanDocument:
    schema: Literal["servatus.plan/4"]
    campaign_id: str
    revision: int
    created_at: float
    probe: bool
    profile: dict[str, Any]
    request: _RequestDocument
    decision: _DecisionDocument
    allocations: list[_AllocationDocument]
    digest: str


_converter = strict_scalars(make_converter(forbid_extra_keys=True))


def plan_to_document(plan: Plan) -> dict[str, Any]:
    """The saved ``servatus.plan/4`` document, sealed by a digest of everything else in it."""
    body = _PlanDocument(
        schema=PLAN_SCHEMA,
        campaign_id=plan.campaign_id,
        revision=plan.revision,
        created_at=plan.created_at,
        probe=plan.probe,
        profile=profile_to_document(plan.profile),
        request=_RequestDocument(
            retry=list(plan.request.retry),
            retry_failed=plan.request.retry_failed,
            only=None if plan.request.only is None else list(plan.request.only),
            tasks_per_allocation=plan.request.tasks_per_allocation,
        ),
        decision=_DecisionDocument(
            selected=list(plan.decision.selected),
            held=[(key, hold.value) for key, hold in plan.decision.held],
            deferred=list(plan.decision.deferred),
        ),
        allocations=[],
        digest="",
    )
    document: dict[str, Any] = _converter.unstructure(body)
    document["allocations"] = [  # 100,000 of them: built here, not as values to unstructure
        {"allocation_id": a.allocation_id, "task_keys": list(a.task_keys)} for a in plan.allocations
    ]
    document["digest"] = _digest(document)
    return document


def plan_from_document(data: Any, *, where: str) -> Plan:
    """Read a saved plan back; a document altered by even one byte is :class:`StalePlan`."""
    if not isinstance(data, dict) or data.get("schema") != PLAN_SCHEMA:
        raise StalePlan(f"{where}: not a {PLAN_SCHEMA} document")
    if data.get("digest") != _digest(data):
        raise StalePlan(f"{where}: the plan was altered after it was saved; plan again")
    try:
        body = _converter.structure(data, _PlanDocument)
        profile = profile_from_document(body.profile, where=f"{where}: profile")
        holds = tuple((key, Hold(value)) for key, value in body.decision.held)
    except (cattrs.BaseValidationError, ValueError, ConfigurationError) as exc:
        problems = (
            "; ".join(cattrs.transform_error(exc))
            if isinstance(exc, cattrs.BaseValidationError)
            else str(exc)
        )
        raise StalePlan(f"{where}: not a usable plan ({problems})") from None
    malformed = [
        a.allocation_id for a in body.allocations if not ALLOCATION_ID.fullmatch(a.allocation_id)
    ]
    if malformed:
        raise StalePlan(f"{where}: not a usable plan (allocation id {malformed[0]!r})")
    packed = [key for a in body.allocations for key in a.task_keys]
    selected = set(body.decision.selected)
    if len(packed) != len(selected) or selected.symmetric_difference(packed):
        raise StalePlan(f"{where}: not a usable plan (its allocations differ from its selection)")
    request = body.request
    return Plan(
        campaign_id=body.campaign_id,
        revision=body.revision,
        profile=profile,
        request=Request(
            retry=tuple(request.retry),
            retry_failed=request.retry_failed,
            only=None if request.only is None else tuple(request.only),
            tasks_per_allocation=request.tasks_per_allocation,
        ),
        probe=body.probe,
        decision=Decision(
            selected=tuple(body.decision.selected),
            held=holds,
            deferred=tuple(body.decision.deferred),
        ),
        allocations=tuple(
            Allocation(a.allocation_id, tuple(a.task_keys)) for a in body.allocations
        ),
        created_at=body.created_at,
    )


def _digest(document: Mapping[str, Any]) -> str:
    body = {key: value for key, value in document.items() if key != "digest"}
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(canonical.encode("ascii")).hexdigest()


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
    report: Report,
    valid: Collection[str],
    probe: bool,
    now: float,
) -> Plan:
    """Decide and pack: the whole plan from values, reproducible for the same inputs."""
    decision = decide(keys, work_from_report(report), request, valid=valid)
    decision, allocations = pack(decision, profile, request, salt=f"{campaign_id}:{revision}")
    return Plan(
        campaign_id=campaign_id,
        revision=revision,
        profile=profile,
        request=request,
        probe=probe,
        decision=decision,
        allocations=allocations,
        created_at=now,
        warnings=(*packing_warnings(profile, request), *report.warnings),
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
