"""Planning: the plan of a campaign's Tasks from one observation, checked as ``submit`` would
check it, and the plan of steps into a lease link with each step's order rendered."""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

import attrs

from servatus.config import Profile, Resources, Target, profile_problems, target_from_identity
from servatus.continuation import Continuation
from servatus.engine.plan import Plan, Request, consults, work_from_report
from servatus.engine.planning import make_plan, make_step_plan
from servatus.engine.status_inputs import submissions
from servatus.engine.status_values import Outcome, Report
from servatus.engine.work import Work
from servatus.errors import ConfigurationError
from servatus.evidence import Evidence
from servatus.journal import records
from servatus.lease import current_link, lease_links, no_current_link
from servatus.operations.context import Context, Probe
from servatus.operations.observation import observe
from servatus.operations.submission import (
    script_may_exceed,
    script_problem,
    script_room,
    step_orders,
)
from servatus.tasks import Task

if TYPE_CHECKING:
    from servatus.launcher import Launcher

_SHOWN_PROBLEMS = 5
"""How many script problems a refusal names."""


def usable(profile: Profile) -> None:
    """A Profile built or changed in Python (``attrs.evolve``) is held to SERVATUS.toml's rules
    before anything is planned with it: one Task over a ceiling is refused in one line, not
    packed into nothing or submitted past the cluster's limits."""
    problems = profile_problems(profile)
    if problems:
        raise ConfigurationError(f"profile {profile.name!r}: {'; '.join(problems)}")


def launcher_of(context: Context, profile: Profile) -> Launcher:
    """The profile's launcher, the profile held to SERVATUS.toml's rules: both refused
    before Slurm is read."""
    usable(profile)
    return context.hooks.launcher(profile.target.launcher)


def valid_keys(probe: Probe | None, tasks: Iterable[Task]) -> frozenset[str]:
    """The keys of ``tasks`` the probe reports valid (none without a probe)."""
    if probe is None:
        return frozenset()
    return frozenset(probe(tuple(tasks)))


def check_launches(
    state: records.CampaignState, target: Target, launcher: Launcher, keys: Sequence[str]
) -> None:
    """Refuse a plan whose launcher would refuse any of its Tasks' args, naming every such
    Task; a sweep repeats its args, so each distinct argv is checked once."""
    problems = []
    checked: set[tuple[str, ...]] = set()
    for key in keys:
        args = state.tasks.args(key)
        if args in checked:
            continue
        try:
            launcher.check(target, args)
        except ConfigurationError as exc:
            problems.append(f"{key}: {exc}")
        else:
            checked.add(args)
    if problems:
        raise ConfigurationError("; ".join(problems))


def plan_tasks(
    context: Context,
    state: records.CampaignState,
    profile: Profile,
    request: Request,
    continuation: Continuation | None = None,
) -> tuple[Plan, records.Settled]:
    """The plan of ``state``'s Tasks, checked, and what its listings showed settled; Slurm is
    read only when the request consults it."""
    launcher = launcher_of(context, profile)
    consult = consults(request, continuation, resolved=bool(state.resolutions))
    report, change, _ = observe(context, state, offline=not consult)
    made = decide(
        context, state, profile, request, continuation, work_from_report(report), report.warnings
    )
    check(context, state, profile, made, launcher)
    return made, change


def decide(
    context: Context,
    state: records.CampaignState,
    profile: Profile,
    request: Request,
    continuation: Continuation | None,
    work: Mapping[str, Work],
    warnings: Sequence[str],
    keys: Sequence[str] | None = None,
) -> Plan:
    """The plan of ``state``'s Tasks (or of ``keys``, the whole roster's order, when
    ``state`` holds only some of them: the status cache's) given their earlier ``work``."""
    return make_plan(
        campaign_id=state.campaign_id,
        revision=state.revision,
        keys=state.tasks.keys if keys is None else keys,
        profile=profile,
        request=request,
        work=work,
        warnings=warnings,
        valid=valid_keys(context.probe, state.tasks),
        probe=context.probe is not None,
        now=time.time(),
        continuation=continuation,
    )


def check(
    context: Context,
    state: records.CampaignState,
    profile: Profile,
    made: Plan,
    launcher: Launcher,
) -> None:
    """Refuse a plan whose launcher or batch scripts ``submit`` would refuse; ``state``
    holds (at least) the selected Tasks."""
    check_launches(state, profile.target, launcher, made.decision.selected)
    _check_scripts(context, state, profile, made, launcher)


def _check_scripts(
    context: Context,
    state: records.CampaignState,
    profile: Profile,
    made: Plan,
    launcher: Launcher,
) -> None:
    """Refuse a plan whose batch script ``submit`` would refuse, in its Tasks' terms; only
    the allocations whose content could reach ``max_script_bytes`` are rendered."""
    roster, index, registry = state.tasks, state.tasks.by_key(), context.hooks
    problems: list[str] = []
    size, target = roster.size, profile.target
    room = script_room(registry, profile, launcher) if made.allocations else None
    for allocation in made.allocations:
        if allocation.after is not None:  # a chain's later links hold its first's Tasks
            continue
        if not script_may_exceed(target, list(map(size, allocation.task_keys)), room):
            continue
        problem = script_problem(registry, profile, allocation, index, launcher)
        if problem is not None:
            problems.append(problem)
            if len(problems) == _SHOWN_PROBLEMS:
                problems.append("(further allocations not checked)")
                break
    if problems:
        raise ConfigurationError("; ".join(problems))


@attrs.frozen
class Steps:
    """A plan of steps into a lease link, with what submitting it needs: what the reading
    settled, the link's intent and job, and each step's order."""

    plan: Plan
    change: records.Settled
    link: records.Intent
    job: int
    orders: dict[str, str]
    running: bool = False
    """Whether the reading listed the link's job as running: only a running lease's batch shell
    can be woken (Slurm refuses to signal a pending job, and ``scancel`` retries for seconds)."""


def plan_steps(
    context: Context,
    state: records.CampaignState,
    lease_id: str,
    request: Request,
    budget: int | None,
) -> Steps:
    """A plan of steps into the current link of the lease ``lease_id`` names, from one
    Slurm reading, with each step's order rendered (an order ``submit`` could not send is
    refused here)."""
    links = lease_links(state.intents, lease_id)
    recorded = submissions(state)
    jobs = {item.allocation_id: item.job for item in recorded if item.job is not None}
    identity = state.target_identities()[links[0].target]
    report, change, evidence = observe(context, state, offline=False)
    reading = evidence.get(identity, Evidence(None, None))
    current = current_link([(i.allocation_id, jobs.get(i.allocation_id)) for i in links], reading)
    if current is None:
        pending = {item.allocation_id for item in recorded if item.outcome is Outcome.PENDING}
        if any(intent.allocation_id in pending for intent in links):
            raise ConfigurationError(
                f"lease {lease_id}: its submission is unresolved; run servatus reconcile "
                "first, then start steps in it"
            )
        raise ConfigurationError(no_current_link(lease_id))
    link = next(intent for intent in links if intent.allocation_id == current)
    running = any(
        entry.job == jobs[current] and entry.state == "RUNNING" for entry in reading.queue or ()
    )
    return _steps_into(
        context, state, link, jobs[current], report, change, request, budget, running
    )


def guess_steps(
    context: Context,
    state: records.CampaignState,
    lease_id: str,
    request: Request,
    budget: int | None,
) -> Steps | None:
    """The plan :func:`plan_steps` would make, made from the journal alone, or None where a
    reading could change it: ``start`` then offers it in one round trip, guarded by what it
    assumed of Slurm (:class:`~servatus.lease.Guard`), and reads only when the guard fails.

    It assumes that the lease's current link is its first link with a job that has not
    settled, which the guard checks (queued or running, no ``limit`` marker): an earlier link
    settled has ended. And it is made only for Tasks no job ever took (new ones, or ones whose
    every submission was never sent): their projection reads no evidence, so it is the one a
    reading would give, and a guard that fails, recording the steps unsent, leaves each as
    ``status`` showed it (``NOT_SUBMITTED``)."""
    links = lease_links(state.intents, lease_id)
    recorded = submissions(state)
    by_id = {item.allocation_id: item for item in recorded}
    open_links = [
        intent
        for intent in links
        if (item := by_id.get(intent.allocation_id)) is not None
        and item.job is not None
        and item.settled is None
    ]
    if not open_links or request.only is None:
        return None
    wanted = set(request.only)
    for item in recorded:
        if item.outcome is not Outcome.NOT_SUBMITTED and wanted.intersection(item.task_keys):
            return None
    link = open_links[0]
    job = by_id[link.allocation_id].job
    assert job is not None
    report, change, _ = observe(context, state, offline=True)
    return _steps_into(context, state, link, job, report, change, request, budget, False)


def _steps_into(
    context: Context,
    state: records.CampaignState,
    link: records.Intent,
    job: int,
    report: Report,
    change: records.Settled,
    request: Request,
    budget: int | None,
    running: bool,
) -> Steps:
    """The plan of the request's Tasks as steps into lease ``link`` (job ``job``) from
    ``report``, each step's order rendered."""
    terms = link.lease
    assert terms is not None
    target = target_from_identity(state.target_identities()[link.target])
    profile = Profile(
        terms.profile,
        target,
        Resources(
            cpus=terms.cpus,
            memory_mib=terms.memory_mib,
            time_limit=link.time_limit,
            gpus=terms.gpus,
            signal_before_end=terms.signal_before_end,
        ),
    )
    steps = {intent.allocation_id for intent in state.intents if intent.within is not None}
    stepped = {task.key for task in report.tasks if task.allocation_id in steps}
    made = make_step_plan(
        campaign_id=state.campaign_id,
        revision=state.revision,
        salt=str(len(state.intents)),
        within=link.allocation_id,
        keys=state.tasks.keys,
        profile=profile,
        request=request,
        report=report,
        stepped=stepped,
        valid=valid_keys(context.probe, state.tasks),
        probe=context.probe is not None,
        now=time.time(),
        budget=budget,
    )
    launcher = context.hooks.launcher(target.launcher)
    check_launches(state, target, launcher, made.decision.selected)
    measured = {task.key: task.run_time.total for task in report.tasks if task.run_time}
    orders = step_orders(
        context.hooks,
        profile,
        link.allocation_id,
        made.allocations,
        state.tasks.by_key(),
        launcher,
        run_times={**measured, **made.decision.spent},
        budget=budget,
    )
    return Steps(made, change, link, job, orders, running)
