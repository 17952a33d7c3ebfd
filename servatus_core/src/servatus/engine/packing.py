"""How a decision's selected Tasks pack into allocations (under a continuation, chains of links),
with ids reproducible for the same campaign state.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Iterable, Iterator, Mapping, Sequence

import attrs

from servatus.config import (
    Profile,
    Resources,
    Target,
    capacity,
)
from servatus.continuation import (
    Chain,
    Continuation,
    Limits,
    chain,
    limits_for,
)
from servatus.engine.plan import Allocation, Decision, Request
from servatus.errors import ConfigurationError
from servatus.ids import ALLOCATION_ID_HEX


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
    decision, allocations, _ = pack_chains(decision, profile, request, salt=salt)
    return decision, allocations


def pack_chains(
    decision: Decision, profile: Profile, request: Request, *, salt: str
) -> tuple[Decision, tuple[Allocation, ...], tuple[Chain, ...]]:
    """:func:`pack`, with the chain of each kept allocation: what the plan's warnings read."""
    size = per_allocation(profile.target, profile.resources, request.tasks_per_allocation)
    chunks = [decision.selected[i : i + size] for i in range(0, len(decision.selected), size)]
    cap = profile.target.max_allocations_per_submit
    salted = salt_hash(salt)  # hashed once, copied for each of up to 100,000 allocations
    continuation = decision.continuation
    if continuation is None:
        kept, rest = (chunks, []) if cap is None else (chunks[:cap], chunks[cap:])
        allocations = tuple(
            Allocation(salted_allocation_id(salted, index, keys), tuple(keys))
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
    return salted_allocation_id(salt_hash(salt), index, keys, link=link)


def salt_hash(salt: str) -> hashlib._Hash:
    """The hash every id of one campaign state starts from, copied for each allocation."""
    return hashlib.sha256(f"{salt}\0".encode())


def salted_allocation_id(
    salted: hashlib._Hash, index: int, keys: Iterable[str], *, link: int | None = None
) -> str:
    """:func:`allocation_id` from the campaign state's :func:`salt_hash`."""
    digest = _keyed(salted, index, keys)
    if link is not None:  # a plain allocation's id is as it always was
        digest.update(f"link {link}\0".encode())
    return digest.hexdigest()[:ALLOCATION_ID_HEX]


def _keyed(salted: hashlib._Hash, index: int, keys: Iterable[str]) -> hashlib._Hash:
    digest = salted.copy()
    digest.update(f"{index}\0".encode())
    digest.update("".join([key + "\0" for key in keys]).encode())
    return digest


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
