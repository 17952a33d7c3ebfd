"""The fold: how each record changes the campaign state (:func:`fold`, :func:`apply`); pure."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from servatus.errors import (
    TaskConflict,
)
from servatus.ids import target_key
from servatus.journal.records import (
    RECORD_TAGS,
    Appended,
    CampaignState,
    Created,
    Horizon,
    Intent,
    Receipt,
    Resolved,
    Sealed,
    Settled,
    Settlement,
    Snapshot,
    TargetSeen,
    stored_roster,
)
from servatus.tasks import Roster

R = TypeVar("R")


# -- the fold -----------------------------------------------------------------------------------


class Rejected(TaskConflict):
    """A record that cannot apply to the state it follows."""


class Fold:
    """A mutable builder for :class:`CampaignState`, so folding k records costs O(their size).

    ``apply`` checks a record before changing anything: a rejected record leaves the fold as it was.
    """

    def __init__(self, state: CampaignState | None = None) -> None:
        self.started = state is not None
        self.campaign_id = ""
        self.created_at = 0.0
        self.sealed = False
        self.task_keys: list[str] = []
        self.tasks: list[Any] = []  # Tasks, or stored rows a Roster builds when used
        self.keys: set[str] = set()
        self.intents: dict[str, Intent] = {}
        self.receipts: dict[str, Receipt] = {}
        self.resolutions: dict[str, Resolved] = {}
        self.targets: dict[str, TargetSeen] = {}
        self.settlements: dict[str, Settlement] = {}
        self.horizons: dict[tuple[str, int], Horizon] = {}
        self.revision = 0
        if state is not None:
            self._load(state)

    def _load(self, state: CampaignState) -> None:
        self.campaign_id = state.campaign_id
        self.created_at = state.created_at
        self.sealed = state.sealed
        self.task_keys = list(state.tasks.keys)
        self.tasks = list(state.tasks.stored())
        self.keys = set(self.task_keys)
        if len(self.keys) != len(self.tasks):
            raise Rejected("two Tasks share a key")
        self.intents = {intent.allocation_id: intent for intent in state.intents}
        self.receipts = {receipt.allocation_id: receipt for receipt in state.receipts}
        self.resolutions = {item.allocation_id: item for item in state.resolutions}
        self.targets = {}
        for item in state.targets:
            self.add_target(item)
        named = {intent.target for intent in self.intents.values()}
        if not named <= self.targets.keys():
            unknown = sorted(named - self.targets.keys())
            raise Rejected(f"intents name unrecorded targets: {unknown}")
        self.settlements = {}
        self.add_settlements(state.settlements)
        self.horizons = {}
        for horizon in state.horizons:
            where = (horizon.target, horizon.intents)
            if horizon.target not in self.targets or where in self.horizons:
                raise Rejected(f"a horizon of an unrecorded target, or twice: {horizon}")
            if horizon.intents > len(self.intents):
                raise Rejected(f"a horizon beyond the intents of target {horizon.target}")
            self.horizons[where] = horizon
        self.revision = state.revision

    def apply(self, change: object) -> None:
        """Apply one record, or raise :class:`Rejected` and change nothing."""
        rule = _FOLDS.get(type(change))
        if rule is None:
            raise Rejected(f"no fold rule for {type(change).__name__}")
        if not self.started and not isinstance(change, Created | Snapshot):
            raise Rejected(f"a campaign cannot start with a {RECORD_TAGS[type(change)]} record")
        if self.started and isinstance(change, Created | Snapshot):
            raise Rejected(f"a {RECORD_TAGS[type(change)]} record can only come first")
        rule(self, change)
        self.started = True
        if not isinstance(change, Snapshot | Settled):
            self.revision += 1

    def add_tasks(self, tasks: Roster) -> None:
        batch: set[str] = set()
        for key in tasks.keys:
            if key in self.keys or key in batch:
                raise Rejected(f"Task key {key} already exists")
            batch.add(key)
        self.task_keys.extend(tasks.keys)
        self.tasks.extend(tasks.stored())
        self.keys.update(batch)

    def add_target(self, target: TargetSeen) -> None:
        if target.key in self.targets:
            raise Rejected(f"target {target.key} is already recorded")
        if target.key != target_key(target.identity):
            raise Rejected(f"target {target.key} is not the key of its identity")
        self.targets[target.key] = target

    def add_settlements(self, settlements: Iterable[Settlement]) -> None:
        """Settle accepted allocations, each once, with one end per slot; check all, then add.

        Checked a pass per rule over the whole batch (a snapshot carries one per allocation);
        only a batch that fails is walked again to name its first bad allocation."""
        items = list(settlements)
        batch = {item.allocation_id: item for item in items}
        intents = self.intents
        fits = (
            len(batch) == len(items)
            and self.settlements.keys().isdisjoint(batch)
            and batch.keys() <= intents.keys()
            and [item.job for item in items] == list(map(self._accepted_job, batch))
            and [len(item.ends) for item in items]
            == [len(intents[allocation_id].task_keys) for allocation_id in batch]
            and all(item.handed[-1] < len(item.ends) for item in items if item.handed)
        )
        if not fits:
            self._refuse(items)
        self.settlements.update(batch)

    def _accepted_job(self, allocation_id: str) -> int | None:
        receipt = self.receipts.get(allocation_id)
        if receipt is not None:
            return receipt.job
        resolution = self.resolutions.get(allocation_id)
        return None if resolution is None else resolution.job

    def _refuse(self, items: list[Settlement]) -> None:
        """Raise :class:`Rejected` naming the first settlement of ``items`` that cannot apply."""
        seen: set[str] = set()
        for item in items:
            allocation_id = item.allocation_id
            intent = self.intents.get(allocation_id)
            if intent is None:
                raise Rejected(f"settlement of allocation {allocation_id} without an intent")
            job = self._accepted_job(allocation_id)
            if job is None:
                raise Rejected(f"settlement of allocation {allocation_id}, which is not accepted")
            if item.job != job:
                raise Rejected(f"settlement of allocation {allocation_id} names job {item.job}")
            if allocation_id in self.settlements or allocation_id in seen:
                raise Rejected(f"allocation {allocation_id} is already settled")
            if len(item.ends) != len(intent.task_keys):
                raise Rejected(f"settlement of allocation {allocation_id}: one end per slot")
            if item.handed and item.handed[-1] >= len(item.ends):
                raise Rejected(f"settlement of allocation {allocation_id} hands on no slot of it")
            seen.add(allocation_id)
        raise AssertionError("a refused batch names no bad settlement")

    def freeze(self) -> CampaignState:
        if not self.started:
            raise Rejected("the journal holds no campaign")
        return CampaignState(
            campaign_id=self.campaign_id,
            created_at=self.created_at,
            sealed=self.sealed,
            tasks=stored_roster(tuple(self.task_keys), list(self.tasks)),
            intents=tuple(self.intents.values()),
            receipts=tuple(self.receipts.values()),
            resolutions=tuple(self.resolutions.values()),
            revision=self.revision,
            targets=tuple(self.targets.values()),
            settlements=tuple(self.settlements.values()),
            horizons=tuple(self.horizons.values()),
        )


FoldRule = Callable[[Fold, Any], None]
_FOLDS: dict[type[Any], FoldRule] = {}


def folds(cls: type[R]) -> Callable[[Callable[[Fold, R], None]], Callable[[Fold, R], None]]:
    """Register how records of ``cls`` change the state; the rule raises :class:`Rejected`."""

    def register(rule: Callable[[Fold, R], None]) -> Callable[[Fold, R], None]:
        _FOLDS[cls] = rule
        return rule

    return register


@folds(Created)
def _created(into: Fold, change: Created) -> None:
    into.add_tasks(change.tasks)
    into.campaign_id = change.campaign_id
    into.created_at = change.created_at
    into.sealed = change.sealed


@folds(Snapshot)
def _snapshot(into: Fold, change: Snapshot) -> None:
    into._load(change.state)


@folds(Appended)
def _appended(into: Fold, change: Appended) -> None:
    if into.sealed:
        raise Rejected("the campaign is sealed; no Task can be appended")
    into.add_tasks(change.tasks)


@folds(Sealed)
def _sealed(into: Fold, change: Sealed) -> None:
    if into.sealed:
        raise Rejected("the campaign is already sealed")
    into.sealed = True


@folds(TargetSeen)
def _target(into: Fold, change: TargetSeen) -> None:
    into.add_target(change)


@folds(Intent)
def _intent(into: Fold, change: Intent) -> None:
    if change.allocation_id in into.intents:
        raise Rejected(f"allocation {change.allocation_id} already has an intent")
    if change.target not in into.targets:
        raise Rejected(f"intent {change.allocation_id} names an unrecorded target {change.target}")
    unknown = [key for key in change.task_keys if key not in into.keys]
    if unknown or not (change.task_keys or change.lease):
        raise Rejected(f"intent {change.allocation_id} names unknown Tasks: {unknown}")
    problem = _shape_problem(into, change)
    if problem is not None:
        raise Rejected(f"intent {change.allocation_id} {problem}")
    into.intents[change.allocation_id] = change


def _shape_problem(into: Fold, change: Intent) -> str | None:
    """Why a lease link, a step or a chain link's intent does not hold together, or None."""
    chain, lease, within = change.chain, change.lease, change.within
    if lease is not None and (change.task_keys or within is not None):
        return "is a lease link, which holds no Tasks"
    if lease is not None and change.resources is not None:
        return "is a lease link, whose slot is its lease terms"
    if chain is not None and len(chain.task_links) != len(change.task_keys):
        return "gives its chain's slots a different number of links"
    if change.budget is not None and (within is None or change.budget < 1):
        return "records a budget, which only a step has, of a second or more"
    if within is None:
        return None
    held = into.intents.get(within)
    if held is None or held.lease is None:
        return f"is a step within {within}, which is no recorded lease link"
    if len(change.task_keys) != 1 or chain is not None:
        return "is a step, which holds one Task and is no chain link"
    if change.resources is not None:
        return "is a step, whose slot is its lease's"
    if change.target != held.target or change.time_limit != held.time_limit:
        return "is a step, which goes where its lease went"
    return None


@folds(Receipt)
def _receipt(into: Fold, change: Receipt) -> None:
    if change.allocation_id not in into.intents:
        raise Rejected(f"receipt for allocation {change.allocation_id} without an intent")
    if change.allocation_id in into.receipts:
        raise Rejected(f"allocation {change.allocation_id} already has a receipt")
    into.receipts[change.allocation_id] = change


@folds(Resolved)
def _resolved(into: Fold, change: Resolved) -> None:
    if change.allocation_id not in into.intents:
        raise Rejected(f"resolution of allocation {change.allocation_id} without an intent")
    if change.allocation_id in into.resolutions:
        raise Rejected(f"allocation {change.allocation_id} is already resolved")
    into.resolutions[change.allocation_id] = change


@folds(Settled)
def _settled(into: Fold, change: Settled) -> None:
    listed = [item.target for item in change.listed]
    unknown = [key for key in listed if key not in into.targets]
    if unknown or len(set(listed)) != len(listed):
        raise Rejected(f"a settlement names unrecorded or repeated targets: {unknown or listed}")
    into.add_settlements(change.allocations)
    # The listing was read before this record, so before every intent folded after it; of two
    # such times for the same intents, the later is the tighter bound.
    for item in change.listed:
        where = (item.target, len(into.intents))
        earlier = into.horizons.get(where)
        if earlier is None or earlier.at < item.at:
            into.horizons[where] = Horizon(*where, item.at)


def fold(records: Iterable[object]) -> CampaignState:
    """The state a sequence of records describes; raises :class:`Rejected` if it describes none."""
    into = Fold()
    for change in records:
        into.apply(change)
    return into.freeze()


def apply(state: CampaignState, change: object) -> CampaignState:
    """The state after one more record (a pure step; O(state), so bulk folds use :class:`Fold`)."""
    into = Fold(state)
    into.apply(change)
    return into.freeze()
