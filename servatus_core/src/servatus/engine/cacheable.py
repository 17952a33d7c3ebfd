"""Which Tasks and allocations a status cache may hold (ADR 0010): the wholly settled components."""

from __future__ import annotations

from servatus.journal import records


def partition(state: records.CampaignState) -> tuple[frozenset[str], frozenset[str]]:
    """The Tasks a cache may hold and their allocations: the components (Tasks and allocations
    joined by a slot, a chain's ``after`` or a step's ``within``) whose every allocation is
    settled, less Tasks never submitted, and less a chain whose later links were never recorded:
    whether it was cut short is ``status``'s warning to give, every time
    (:func:`~servatus.engine.chain_cuts.cut_chain_warnings`)."""
    keys = state.tasks.keys
    index = {key: position for position, key in enumerate(keys)}
    intents = state.intents
    allocations = {intent.allocation_id: len(keys) + j for j, intent in enumerate(intents)}
    parent = list(range(len(keys) + len(intents)))

    def root(node: int) -> int:
        while parent[node] != node:
            parent[node] = parent[parent[node]]
            node = parent[node]
        return node

    def join(one: int, other: int) -> None:
        one, other = root(one), root(other)
        if one != other:
            parent[one] = other

    submitted = bytearray(len(keys))
    unknown: list[int] = []
    followed = {intent.chain.after for intent in intents if intent.chain is not None}
    for j, intent in enumerate(intents):
        node = len(keys) + j
        for key in intent.task_keys:
            join(node, index[key])
            submitted[index[key]] = 1
        for joined in (intent.chain.after if intent.chain else "", intent.within or ""):
            if joined in allocations:
                join(node, allocations[joined])
            elif joined:
                unknown.append(node)  # a link after no recorded allocation: never cached
        chain = intent.chain
        if (
            chain is not None
            and chain.position < chain.of
            and intent.lease is None
            and intent.allocation_id not in followed
        ):
            unknown.append(node)  # its chain stops before its last link: never cached
    settled = {item.allocation_id for item in state.settlements}
    live = {root(len(keys) + j) for j, i in enumerate(intents) if i.allocation_id not in settled}
    live.update(map(root, unknown))
    tasks = frozenset(
        key
        for position, key in enumerate(keys)
        if submitted[position] and root(position) not in live
    )
    held = frozenset(
        intent.allocation_id for j, intent in enumerate(intents) if root(len(keys) + j) not in live
    )
    return tasks, held
