"""Submit and start: a reviewed plan sent under the campaign's lock, only if a rebuild from the
current state (and Slurm's view) gives the same plan and Slurm answers a ping; each allocation
or step then goes out with its intent first (:mod:`.submission`)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import attrs

from servatus.config import Target, target_identity
from servatus.continuation import limits_for, stops_short
from servatus.engine.plan import Hold, Plan, Request
from servatus.engine.plan_document import plan_to_document
from servatus.engine.planning import make_lease_plan
from servatus.errors import ConfigurationError, PlanRefused, StalePlan
from servatus.evidence import MarkerKind
from servatus.journal import records, store
from servatus.lease import Guard, orders_path
from servatus.operations.context import Context
from servatus.operations.planning import Steps, guess_steps, plan_steps, plan_tasks
from servatus.operations.submission import (
    BatchProgress,
    Progress,
    SubmittedAllocation,
    batch_scripts,
    command,
    lease_scripts,
    ping,
    submit_allocations,
    submit_steps,
)
from servatus.plugins import Hooks
from servatus.transport import Transport


@attrs.frozen
class Submitted:
    """What ``submit`` did: one receipt per accepted allocation, in submission order."""

    receipts: tuple[SubmittedAllocation, ...]
    """Each allocation Slurm accepted, with its job number; empty for a plan of nothing."""
    held: tuple[tuple[str, Hold], ...] = ()
    """The plan's held Tasks with their holds, in roster order: what ``Campaign.start``
    names when it starts nothing."""


def submit(
    context: Context,
    plan: Plan,
    progress: Progress | None,
    on_batch: BatchProgress | None = None,
) -> Submitted:
    """Under the campaign's lock: refuse a plan of another campaign or an older revision,
    ping Slurm, then send the plan by its kind (Tasks, a lease, steps into a lease);
    ``on_batch`` hears of each batch of Tasks' allocations as it goes out."""
    if plan.probe and context.probe is None:
        raise PlanRefused(
            "this plan was made with a result probe; submit it from a Campaign with the probe"
        )
    with store.writing(context.path) as writer:
        state = writer.state
        assert state is not None
        if plan.campaign_id != state.campaign_id:
            raise StalePlan("the plan was made for another campaign")
        if plan.revision != state.revision:
            raise StalePlan(
                f"the campaign changed since the plan was made (revision {plan.revision}, "
                f"now {state.revision}); plan again"
            )
        if not plan.allocations:
            return Submitted(receipts=(), held=plan.decision.held)
        pinging = plan.within is None  # steps: their plan's own reading proves Slurm answers
        with _answering(context, plan.profile.target, pinged=pinging) as transport:
            if plan.hold is not None:
                receipts = _submit_lease(context, writer, transport, state, plan, progress)
            elif plan.within is not None:
                receipts = _submit_steps(context, writer, transport, state, plan, progress)
            else:
                receipts = _submit_tasks(
                    context, writer, transport, state, plan, progress, on_batch
                )
    return Submitted(receipts=receipts, held=plan.decision.held)


@contextlib.contextmanager
def _answering(context: Context, target: Target, *, pinged: bool = True) -> Iterator[Transport]:
    """A transport to ``target``, once Slurm there answers a ping (unless ``pinged`` is false);
    closed however sending ends.

    Steps into a lease skip the ping: they are sent only from a plan that one Slurm reading
    (``squeue`` and the marker listing) made under the same lock, and that reading failing is
    :class:`~servatus.errors.Unavailable` before anything is recorded, as a failed ping is. The
    offer needs no ``sbatch`` of its own."""
    transport = context.connect(target)
    try:
        if pinged:
            ping(transport, target)
        yield transport
    finally:
        transport.close()


def _submit_tasks(
    context: Context,
    writer: store.Writer,
    transport: Transport,
    state: records.CampaignState,
    plan: Plan,
    progress: Progress | None,
    on_batch: BatchProgress | None,
) -> tuple[SubmittedAllocation, ...]:
    """A plan of Tasks, once a rebuild from this state and Slurm's view gives the same."""
    rebuilt, change = plan_tasks(
        context, state, plan.profile, plan.request, plan.decision.continuation
    )
    if not rebuilt.same_as(plan):
        raise StalePlan("the plan no longer matches the campaign and Slurm; plan again")
    _settle_reading(writer, change)  # the listing precedes the intents
    budget, spent = chain_arguments(plan)
    return submit_allocations(
        writer,
        transport,
        context.hooks,
        plan.profile,
        plan.allocations,
        state.tasks.by_key(),
        context.hooks.launcher(plan.profile.target.launcher),
        plan_digest=plan_to_document(plan)["digest"],
        target_identity=target_identity(plan.profile.target),
        progress=progress,
        budget=budget,
        spent=spent,
        short=_stopping_short(plan),
        on_batch=on_batch,
    )


def _submit_steps(
    context: Context,
    writer: store.Writer,
    transport: Transport,
    state: records.CampaignState,
    plan: Plan,
    progress: Progress | None,
) -> tuple[SubmittedAllocation, ...]:
    """Steps into a lease link, once a rebuild from this state and one Slurm reading gives
    the same plan (the same current link among them)."""
    assert plan.within is not None
    budget = None if plan.decision.continuation is None else plan.decision.continuation.budget
    steps = plan_steps(context, state, plan.within, plan.request, budget)
    if not steps.plan.same_as(plan):
        raise StalePlan("the plan no longer matches the campaign, the lease and Slurm; plan again")
    sent = _send_steps(writer, transport, steps, budget, progress)
    assert sent is not None  # only a guarded offer answers None
    return sent


def _submit_lease(
    context: Context,
    writer: store.Writer,
    transport: Transport,
    state: records.CampaignState,
    plan: Plan,
    progress: Progress | None,
) -> tuple[SubmittedAllocation, ...]:
    """A lease's links, in order, once the plan rebuilds the same from this state."""
    assert plan.hold is not None
    rebuilt = make_lease_plan(
        campaign_id=state.campaign_id,
        revision=state.revision,
        profile=plan.profile,
        hold=plan.hold,
        probe=plan.probe,
        now=plan.created_at,
    )
    if not rebuilt.same_as(plan):
        raise StalePlan("the plan no longer matches the campaign; plan again")
    return submit_allocations(
        writer,
        transport,
        context.hooks,
        plan.profile,
        plan.allocations,
        {},
        context.hooks.launcher(plan.profile.target.launcher),
        plan_digest=plan_to_document(plan)["digest"],
        target_identity=target_identity(plan.profile.target),
        progress=progress,
        lease=plan.hold.slots,
    )


def start_steps(
    context: Context,
    lease: str,
    request: Request,
    budget: int | None,
    progress: Progress | None,
) -> Submitted:
    """Plan the request's Tasks into the lease and send them, under one lock: no other start,
    cancel or Slurm reading can come between the plan and its sending, so nobody reviewed a
    plan that could go stale.

    Where the journal alone decides the plan (:func:`guess_steps`), it is offered at once,
    guarded by what it assumed of the lease link: one round trip. Only when the guard fails
    (the link ended, or had its pre-limit signal) are Slurm read and the steps planned again,
    as they always are where the journal cannot decide."""
    with store.writing(context.path) as writer:
        state = writer.state
        assert state is not None
        guess = guess_steps(context, state, lease, request, budget)
        if guess is not None and guess.plan.allocations:
            with _answering(context, guess.plan.profile.target, pinged=False) as transport:
                guard = _guard(context, guess)
                sent = _send_steps(writer, transport, guess, budget, progress, guard=guard)
            if sent is not None:
                return Submitted(receipts=sent, held=guess.plan.decision.held)
            state = writer.state  # the guard failed: its steps are recorded unsent
            assert state is not None
        steps = plan_steps(context, state, lease, request, budget)
        plan = steps.plan
        if not plan.allocations:
            _settle_reading(writer, steps.change)
            return Submitted(receipts=(), held=plan.decision.held)
        with _answering(context, plan.profile.target, pinged=False) as transport:
            receipts = _send_steps(writer, transport, steps, budget, progress)
    assert receipts is not None  # only a guarded offer answers None
    return Submitted(receipts=receipts, held=plan.decision.held)


def _settle_reading(writer: store.Writer, change: records.Settled) -> None:
    """Record what a Slurm reading under the lock settled, before anything is sent from it."""
    if change.allocations or change.listed:
        writer.settle(change)


def _send_steps(
    writer: store.Writer,
    transport: Transport,
    steps: Steps,
    budget: int | None,
    progress: Progress | None,
    *,
    guard: Guard | None = None,
) -> tuple[SubmittedAllocation, ...] | None:
    """Record what the plan's Slurm reading settled, then each step's intent and order; with
    a ``guard`` (a plan made from the journal alone) only if the link is as it assumed, and
    None when it was not. The guard decides the wake-up on the cluster, from the state it
    sees there."""
    _settle_reading(writer, steps.change)
    plan = steps.plan
    assert plan.within is not None
    return submit_steps(
        writer,
        transport,
        steps.link,
        steps.job,
        orders_path(plan.profile.target.log_root, plan.within),
        plan.allocations,
        steps.orders,
        plan_digest=plan_to_document(plan)["digest"],
        progress=progress,
        budget=budget,
        wake=command(plan.profile.target, "scancel") if steps.running or guard else None,
        guard=guard,
    )


def _guard(context: Context, steps: Steps) -> Guard:
    """What a plan of steps made from the journal alone assumed of its lease link."""
    target = steps.plan.profile.target
    link = steps.link.allocation_id
    marker = context.hooks.evidence_reader().marker_name(link, steps.job, MarkerKind.LIMIT)
    return Guard(
        squeue=command(target, "squeue"),
        name=f"servatus-{link}",
        limit=f"{target.log_root.rstrip('/')}/{marker}",
    )


def chain_arguments(plan: Plan) -> tuple[int | None, dict[str, int] | None]:
    """What a plan's chain scripts carry beyond its allocations: the lifetime budget (None
    for ``--max-links`` alone, or without a continuation) and each Task's run time so far."""
    continuation = plan.decision.continuation
    if continuation is None:
        return None, None
    return continuation.budget, plan.decision.spent


def _stopping_short(plan: Plan) -> frozenset[str]:
    """The plan's Tasks whose links end before their budget does (capped at K or 32 links):
    pure arithmetic over the plan, as planning did it."""
    continuation = plan.decision.continuation
    if continuation is None or continuation.budget is None:
        return frozenset()
    limits = limits_for(continuation, plan.profile)
    spent = plan.decision.spent
    return frozenset(
        key for key, seconds in spent.items() if stops_short(seconds, continuation, limits)
    )


def scripts(registry: Hooks, state: records.CampaignState, plan: Plan) -> list[str]:
    """The batch script of each allocation of ``plan`` (made for ``state``), exactly as
    :func:`submit` sends it (a lease's: each link's lease script)."""
    if plan.within is not None:
        raise ConfigurationError(
            "a plan of steps in a lease has no batch scripts: its steps are orders to the "
            "lease's own"
        )
    index = state.tasks.by_key()
    unknown = [key for a in plan.allocations for key in a.task_keys if key not in index]
    if plan.campaign_id != state.campaign_id or unknown:
        raise StalePlan("the plan is not of this campaign (or names Tasks it lacks); plan again")
    if plan.hold is not None:  # a lease's allocations name no Task
        return lease_scripts(registry, plan.profile, plan.allocations, plan.hold.slots)
    launcher = registry.launcher(plan.profile.target.launcher)
    budget, spent = chain_arguments(plan)
    return batch_scripts(
        registry, plan.profile, plan.allocations, index, launcher, budget=budget, spent=spent
    )
