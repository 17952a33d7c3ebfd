"""Making a plan from values: decide, then pack; a lease's plan, and a plan of steps in a lease.

The same inputs always give the same plan, which is how ``submit`` recognises a stale one.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

import attrs

from servatus.config import (
    Profile,
)
from servatus.continuation import (
    Continuation,
    Link,
    chain_warnings,
    dropped_rest,
    limits_for,
)
from servatus.engine.packing import pack_chains, packing_warnings, salt_hash, salted_allocation_id
from servatus.engine.plan import (
    NO_WORK,
    Allocation,
    Decision,
    Hold,
    LeaseHold,
    Plan,
    Request,
    decide,
    measured_run_time,
    work_from_report,
)
from servatus.engine.plan_checks import hold_problem
from servatus.engine.status_values import Execution, Report
from servatus.engine.work import TaskWork, Work
from servatus.errors import ConfigurationError

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
    salted = salt_hash(f"{campaign_id}:{revision}:{salt}:within {within}")
    allocations = tuple(
        Allocation(salted_allocation_id(salted, 0, (key,)), (key,)) for key in decision.selected
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


def make_lease_plan(
    *, campaign_id: str, revision: int, profile: Profile, hold: LeaseHold, probe: bool, now: float
) -> Plan:
    """The plan of a lease: ``hold.links`` allocations of ``hold.slots`` slots each, one after
    the other when there are several, each for the profile's whole time limit; raises
    :class:`ConfigurationError` for a lease the profile cannot hold."""
    problem = hold_problem(profile, hold)
    if problem is not None:
        raise ConfigurationError(problem)
    salted = salt_hash(f"{campaign_id}:{revision}")
    lease = (f"lease {hold.slots}",)
    allocations: list[Allocation] = []
    for position in range(1, hold.links + 1):
        chained = hold.links > 1
        allocations.append(
            Allocation(
                allocation_id=salted_allocation_id(
                    salted, 0, lease, link=position if chained else None
                ),
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
    decision, allocations, chains = pack_chains(decision, profile, request, salt=salt)
    chained: tuple[str, ...] = ()
    if continuation is not None and limits is not None:
        spent = [key for key, hold in decision.held if hold is Hold.SPENT]
        rests = [(key, measured_run_time(work.get(key, NO_WORK))) for key in spent]
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
