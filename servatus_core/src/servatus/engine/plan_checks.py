"""What must hold together in a plan: a lease's, steps in a lease, and chains of links. Reading a
saved plan refuses one that does not (:func:`servatus.engine.plan_document.plan_from_document`).
"""

from __future__ import annotations

from servatus.config import (
    Profile,
    capacity,
)
from servatus.continuation import (
    MAX_LINKS,
)
from servatus.engine.plan import Allocation, Decision, LeaseHold, Plan
from servatus.ids import ALLOCATION_ID


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
