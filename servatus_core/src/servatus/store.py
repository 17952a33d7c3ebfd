"""The durable campaign store: an append-only journal of checksummed records in STATE.

Layout (``docs/development/adr/0001-campaign-store.md`` gives the reasons)::

    STATE/              0700, owned by the user
    STATE/journal       0600: the line "servatus.campaign/4", then one frame per record
    STATE/lock          0600: writers hold a non-blocking flock on it
    STATE/journal.tmp   a compaction or creation in progress; removed by the next writer

A frame is ``R<length> <crc32(payload)> <crc32(the 18 bytes before)>\\n<payload>\\n`` with
8-digit hexadecimal fields; the payload is one JSON record tagged by ``type``. One record is one
atomic change, however many Tasks it carries. A frame cut short at the end of the file (a writer
died mid-append) is a torn tail: readers ignore it and the next writer truncates it. Any other
damage, a failed checksum anywhere included, is :class:`~servatus.errors.CorruptState`.

The campaign's state is a fold over its records (:func:`fold`). Adding a record type means:
define a frozen attrs class, register it with :func:`record`, and register how it changes the
state with :func:`folds`. Compaction rewrites the journal as one :class:`Snapshot` record and
atomically replaces it, so the record count a reader must fold stays bounded.
"""

from __future__ import annotations

import base64
import binascii
import fcntl
import itertools
import json
import math
import operator
import os
import re
import secrets
import stat
import time
import uuid
import warnings
import zlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from collections.abc import Set as AbstractSet
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any, NamedTuple, TypeVar

import attrs
import cattrs
from cattrs.gen import make_dict_unstructure_fn, override
from cattrs.preconf.json import make_converter

from servatus.errors import (
    Busy,
    ConfigurationError,
    CorruptState,
    ServatusError,
    StateWarning,
    TaskConflict,
    Unavailable,
    UnsafeFilesystem,
    from_os_error,
    input_problem,
)
from servatus.evidence import MAX_JOB, Observation, SlotEnd
from servatus.files import checked_path, path_word, read_all, write_all
from servatus.ids import ALLOCATION_ID, target_key
from servatus.strict import RECORDED_BELOW, strict_scalars
from servatus.tasks import Roster, Task, as_roster, bulk, every_match, fields_valid

SCHEMA = "servatus.campaign/4"
"""The journal's version tag, its first line. A future version upgrades older records as dicts.

Versions 1 to 3 existed only before 0.14.1 was released and are refused as unknown versions:
version 1 repeated the Target's canonical JSON in every intent, version 2 stored a snapshot's
intents, receipts and resolutions as one object each instead of as columns, version 3 its
Tasks."""

MAGIC = SCHEMA.encode("ascii") + b"\n"
JOURNAL = "journal"
LOCK = "lock"
TEMPORARY = "journal.tmp"
PLAN_KEY = "plan-key"
"""The campaign's secret that seals its saved plans (ADR 0011): 32 random bytes, owner-only."""
PLAN_KEY_BYTES = 32
_PLAN_KEY_DRAFT = "plan-key."
DIRECTORY_MODE = 0o700
FILE_MODE = 0o600

COMPACT_RECORDS = 1024
"""Compact once this many records follow the first one and they are 1/16 of its size or more."""

COMPACT_RECORDS_CAP = 65536
"""Compact at this many records following the first one, whatever their size."""

_HEADER = re.compile(rb"R([0-9a-f]{8}) ([0-9a-f]{8}) ([0-9a-f]{8})\n")
_HEADER_PREFIX = re.compile(
    rb"R[0-9a-f]{0,8}|R[0-9a-f]{8} [0-9a-f]{0,8}|R[0-9a-f]{8} [0-9a-f]{8} [0-9a-f]{0,8}"
)
HEADER_SIZE = 28
R = TypeVar("R")


# -- records ------------------------------------------------------------------------------------

RECORD_TYPES: dict[str, type[Any]] = {}
"""Every record type by its ``type`` tag; :func:`record` fills it."""

_TAGS: dict[type[Any], str] = {}


def record(tag: str) -> Callable[[type[R]], type[R]]:
    """Register a frozen attrs class as the journal record type ``tag`` (the extension point)."""

    def register(cls: type[R]) -> type[R]:
        if tag in RECORD_TYPES or "type" in attrs.fields_dict(cls):  # type: ignore[arg-type]
            raise ValueError(f"record type {tag!r} is already registered or has a 'type' field")
        RECORD_TYPES[tag] = cls
        _TAGS[cls] = tag
        return cls

    return register


@record("created")
@attrs.frozen
class Created:
    """The first record of a campaign: its identity, its first Tasks, and whether it is sealed."""

    campaign_id: str
    created_at: float
    sealed: bool
    tasks: Roster = attrs.field(converter=as_roster)


@record("appended")
@attrs.frozen
class Appended:
    """Tasks appended in one change; their keys are new to the campaign."""

    tasks: Roster = attrs.field(converter=as_roster)


@record("sealed")
@attrs.frozen
class Sealed:
    """Authoring ended; no Task is ever added again."""


@record("target")
@attrs.frozen
class TargetSeen:
    """A Target submitted to: its identity (canonical JSON) under ``key`` (:func:`target_key`).

    Recorded once per campaign, before the first intent naming it, so an intent stays small.
    """

    key: str
    identity: str


class ChainLink(NamedTuple):
    """An intent's place in a chain of links (budgeted continuation).

    ``position`` of ``of`` links; ``after`` is the allocation id of the previous link ("" for
    link 1); ``task_links`` holds each slot's own number of links; ``budget`` is the lifetime
    budget in seconds, 0 for ``--max-links`` alone. ``short`` holds the slots, ascending, whose
    links end before their budget does (capped at K or 32): the journal stores it only when it
    is not empty, so a chain link recorded before it existed reads as stopping short nowhere.
    """

    position: int
    of: int
    after: str
    task_links: tuple[int, ...]
    budget: int
    short: tuple[int, ...] = ()

    def links_of(self, slot: int) -> int:
        """The slot's own number of links (``SERVATUS_LINKS``)."""
        return self.task_links[slot] if slot < len(self.task_links) else self.of

    def spends(self, slot: int) -> bool:
        """Whether this link is the last of the slot's budget: the Task's own last link, and
        its links did not stop short of the budget. A 75 here says the budget is spent."""
        return self.links_of(slot) <= self.position and slot not in self.short


class LeaseTerms(NamedTuple):
    """What a lease link holds (ADR 0009): ``slots`` copies of one slot of profile ``profile``'s
    per-Task resources. Recorded with the lease's intent, so ``plan --lease`` needs no profile:
    each step gets exactly this slot, and ``signal_before_end`` (seconds) is how long a stopped
    step gets between ``SIGUSR1`` and ``SIGTERM``."""

    profile: str
    slots: int
    cpus: int
    memory_mib: int
    gpus: int
    signal_before_end: int


class TaskResources(NamedTuple):
    """What one Task of a plain or chained allocation asked for: the profile's per-Task
    ``cpus``, ``memory_mib`` and ``gpus`` when it was submitted, so a report can count the
    CPU-, GPU- and GiB-hours it requested and used long after the profile changed."""

    cpus: int
    memory_mib: int
    gpus: int


@record("intent")
@attrs.frozen
class Intent:
    """Written before an ``sbatch``: the allocation about to be submitted and where.

    ``target`` is the key of a :class:`TargetSeen` recorded before: the Target it goes to, so
    evidence is read from the original target. ``time_limit`` (seconds) bounds the run time of a
    LOST run. ``chain`` places a chain link in its chain; None for a plain allocation.

    A lease link (``lease`` set) holds no Tasks; a lease's links form a chain whose
    ``task_links`` are empty. A step (``within`` set, the lease link's allocation id) holds one
    Task, goes to its lease's target with its lease's time limit, and is accepted with its
    lease's job. ``resources`` is each Task's slot of a plain or chained allocation (None for
    a lease link and a step, whose slot is the lease's terms, and in a journal written before
    it was recorded). ``budget`` is a step's lifetime budget in seconds (``start --budget``, its
    ``SERVATUS_BUDGET``), None without one and for anything but a step: a chain link's is in its
    ``chain``.
    """

    allocation_id: str
    task_keys: tuple[str, ...]
    plan_digest: str
    created_at: float
    target: str
    time_limit: int = 0
    chain: ChainLink | None = None
    lease: LeaseTerms | None = None
    within: str | None = None
    resources: TaskResources | None = None
    budget: int | None = None


@record("receipt")
@attrs.frozen
class Receipt:
    """Slurm accepted the intent's allocation as ``job``."""

    allocation_id: str
    job: int


@record("resolved")
@attrs.frozen
class Resolved:
    """An intent without a receipt, decided: accepted as ``job``, or never submitted (None)."""

    allocation_id: str
    job: int | None


@attrs.frozen
class Settlement:
    """One accepted allocation whose outcome is final, with the evidence it was judged from: its
    job and the :class:`~servatus.evidence.Observation` its markers gave (``ends`` one per slot,
    ``handed`` the slots a chain link handed on, ascending; ``claim`` a lease step's verdict on
    its order, True taken, False withdrawn, None when none was seen). Every command answers for
    it from this, never from its markers again."""

    allocation_id: str
    job: int
    start: float | None
    stop: float | None
    limit: float | None
    ends: tuple[SlotEnd | None, ...]
    handed: tuple[int, ...] = ()
    claim: bool | None = None

    @property
    def observation(self) -> Observation:
        """The Observation kept (``step`` is the intent's to say: a Settlement does not know)."""
        return Observation(
            self.start, self.stop, self.limit, self.ends, self.handed, False, self.claim
        )


@attrs.frozen
class Listed:
    """A marker listing of a Target (by key) was read no earlier than ``at``, a time on its file
    server's clock."""

    target: str
    at: float


@attrs.frozen
class Horizon:
    """``at``, on the file server of ``target``, is before every marker of the intents from the
    ``intents``-th on (0-based): their jobs were submitted after a listing that saw ``at``."""

    target: str
    intents: int
    at: float


@record("settled")
@attrs.frozen
class Settled:
    """Allocations settled by one command, and the listings that command read.

    Settling changes nothing a plan decided on, so it does not count as a revision: a plan
    saved before it still submits."""

    allocations: tuple[Settlement, ...]
    listed: tuple[Listed, ...] = ()


@attrs.frozen
class CampaignState:
    """Everything the journal says, as one value. ``revision`` counts the changes ever committed
    that a plan depends on (settlements do not)."""

    campaign_id: str
    created_at: float
    sealed: bool
    tasks: Roster = attrs.field(converter=as_roster)
    intents: tuple[Intent, ...] = ()
    receipts: tuple[Receipt, ...] = ()
    resolutions: tuple[Resolved, ...] = ()
    revision: int = 0
    targets: tuple[TargetSeen, ...] = ()
    settlements: tuple[Settlement, ...] = ()
    horizons: tuple[Horizon, ...] = ()

    @property
    def appendable(self) -> bool:
        return not self.sealed

    def target_identities(self) -> dict[str, str]:
        """Each recorded Target's identity by its key (what an intent's ``target`` names)."""
        return {item.key: item.identity for item in self.targets}


@record("snapshot")
@attrs.frozen
class Snapshot:
    """The whole state, written by compaction as the only record of a fresh journal."""

    state: CampaignState


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
            raise Rejected(f"a campaign cannot start with a {_TAGS[type(change)]} record")
        if self.started and isinstance(change, Created | Snapshot):
            raise Rejected(f"a {_TAGS[type(change)]} record can only come first")
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


# -- encoding -----------------------------------------------------------------------------------

_TASK_COLUMNS = ("key", "args", "stdin", "env")
"""A record stores its Tasks as these columns (stdin base64, ``""`` and ``{}`` when empty); a
stored Task is its row, a tuple of the four values, until a :class:`Roster` builds it. A row is
read by column name (:data:`_KEY` and the others), so a new column changes no reader."""

_KEY, _ARGS, _STDIN, _ENV = map(_TASK_COLUMNS.index, ("key", "args", "stdin", "env"))


def _stored_row(task: Task) -> tuple[str, list[str], str, dict[str, str]]:
    stdin = base64.b64encode(task.stdin).decode("ascii") if task.stdin else ""
    return task.key, list(task.args), stdin, task.env.to_dict()


def _task_fields(row: tuple[Any, ...]) -> dict[str, Any]:
    """A stored row as the fields of its Task, by name; raises TypeError for a misshapen one."""
    key, args, stdin, env = row[_KEY], row[_ARGS], row[_STDIN], row[_ENV]
    if type(args) is not list or type(stdin) is not str or type(env) is not dict:
        raise TypeError(f"Task {key!r:.80}: args must be an array, stdin a string, env an object")
    data = binascii.a2b_base64(stdin, strict_mode=True) if stdin else b""
    return {"key": key, "args": tuple(args), "stdin": data, "env": env}


def _build_task(row: tuple[Any, ...]) -> Task:
    """A stored Task row as its Task, checked (:func:`decode` proved its record free of NUL and
    lone surrogates); a bad one is :class:`~servatus.errors.CorruptState`."""
    try:
        return Task.stored(**_task_fields(row))
    except (TypeError, ValueError, ServatusError) as exc:
        raise CorruptState(f"a stored Task is invalid: {exc}") from None


def _stored_args(row: tuple[Any, ...]) -> tuple[str, ...]:
    """A stored Task row's args, which :func:`_structure_stored_roster` checked when the record
    was read (planning reads them for every Task it selects)."""
    return tuple(row[_ARGS])


def _stored_size(row: tuple[Any, ...]) -> int:
    """:func:`~servatus.tasks.content_size` of a stored Task row (stdin's length from its base64,
    rounded up), without building the Task."""
    args, stdin, env = row[_ARGS], row[_STDIN], row[_ENV]
    return (
        -(-len(stdin) * 3 // 4)
        + sum(map(len, args))
        + sum(map(len, env))
        + sum(map(len, env.values()))
    )


def _unstructure_roster(roster: Roster) -> dict[str, list[Any]]:
    rows = [_stored_row(item) if type(item) is Task else item for item in roster.stored()]
    columns = list(zip(*rows, strict=True)) or [()] * len(_TASK_COLUMNS)
    return dict(zip(_TASK_COLUMNS, map(list, columns), strict=True))


def _structure_roster(value: Any, _: Any) -> Roster:
    """Tasks built now with every check, for a record whose text :func:`decode` could not prove
    free of NUL and lone surrogates."""
    rows = zip(*_columns(value, _TASK_COLUMNS, "Task columns"), strict=True)
    fields = map(_task_fields, rows)
    return as_roster([Task(**{**field, "env": field["env"] or None}) for field in fields])


def _structure_stored_roster(value: Any, _: Any) -> Roster:
    """Tasks left as rows: every field of every Task checked now, column by column (the text was
    checked for the whole record by :func:`decode`); each Task is built when used."""
    columns = _columns(value, _TASK_COLUMNS, "Task columns")
    keys, args, stdins, envs = columns[_KEY], columns[_ARGS], columns[_STDIN], columns[_ENV]
    rows = list(zip(*columns, strict=True))
    if not (fields_valid(keys, args, envs) and all(map(_is_base64, stdins))):
        for row in rows:  # the exact error: build each Task until one fails
            _build_task(row)
    return stored_roster(tuple(keys), rows)


def stored_roster(keys: tuple[str, ...], items: list[Any]) -> Roster:
    """A roster of ``items``, each a Task or a stored row (:func:`decode` checked it), under
    ``keys``: a row is built into its Task when first used."""
    return Roster(keys, items, _build_task, _stored_args, _stored_size)


def _columns(value: Any, names: Iterable[str], what: str) -> list[list[Any]]:
    """The arrays of a columns object with exactly the fields ``names``, all of one length."""
    names = tuple(names)
    if type(value) is not dict or value.keys() != set(names):
        raise TypeError(f"not {what}: {value!r:.80}")
    columns = [value[name] for name in names]
    lengths = {len(column) if type(column) is list else -1 for column in columns}
    if len(lengths) != 1 or -1 in lengths:
        raise TypeError(f"not {what}: arrays of one length expected")
    return columns


def _is_base64(text: Any) -> bool:
    try:
        binascii.a2b_base64(text, strict_mode=True)
    except (ValueError, TypeError):  # binascii.Error, or not ASCII, or not a string
        return False
    return True


def _is_tuple_of(kind: type[Any]) -> Callable[[Any], bool]:
    many = tuple[kind, ...]  # type: ignore[valid-type]
    return lambda other: bool(other == many)


# A snapshot holds one intent and one receipt per allocation: it stores each of these tuples as
# columns (one JSON array per field), which decode to a few long arrays instead of 100,000 small
# objects, and checks each column with one C-level pass instead of one call per record. A single
# record is checked as a one-row table by the same schema, as strictly as generated hooks would
# (exact keys, exact scalar types).

_NONE = type(None)
_COLUMN_TYPES: dict[str, frozenset[type[Any]]] = {
    "text": frozenset({str}),
    "allocation": frozenset({str}),
    "time": frozenset({int, float}),
    "seconds": frozenset({int}),
    "seconds or none": frozenset({int, _NONE}),
    "job": frozenset({int}),
    "job or none": frozenset({int, _NONE}),
    "keys": frozenset({list}),
    "time or none": frozenset({int, float, _NONE}),
    "ends": frozenset({list}),
    "chain or none": frozenset({list, _NONE}),
    "lease or none": frozenset({list, _NONE}),
    "resources or none": frozenset({list, _NONE}),
    "allocation or none": frozenset({str, _NONE}),
    "slots": frozenset({list}),
    "flag or none": frozenset({bool, _NONE}),
}
_COLUMNS: dict[type[Any], dict[str, str]] = {
    Intent: {
        "allocation_id": "allocation",
        "task_keys": "keys",
        "plan_digest": "text",
        "created_at": "time",
        "target": "text",
        "time_limit": "seconds",
        "chain": "chain or none",
        "lease": "lease or none",
        "within": "allocation or none",
        "resources": "resources or none",
        "budget": "seconds or none",
    },
    Receipt: {"allocation_id": "allocation", "job": "job"},
    Resolved: {"allocation_id": "allocation", "job": "job or none"},
    Settlement: {
        "allocation_id": "allocation",
        "job": "job",
        "start": "time or none",
        "stop": "time or none",
        "limit": "time or none",
        "ends": "ends",
        "handed": "slots",
        "claim": "flag or none",
    },
    Listed: {"target": "text", "at": "time"},
    Horizon: {"target": "text", "intents": "seconds", "at": "time"},
}


def _in_range(column: str, values: list[Any]) -> bool:
    """The checks beyond type, one C-level pass each: allocation ids are 24 lowercase hex digits,
    times are finite wall times, limits are not negative, job numbers are Slurm's."""
    if not values:
        return True
    if column == "allocation":
        return every_match(ALLOCATION_ID, values)
    if column == "allocation or none":
        return every_match(ALLOCATION_ID, [value for value in values if value is not None])
    if column == "time":
        return all(map(math.isfinite, values)) and min(values) >= 0 and max(values) < RECORDED_BELOW
    if column == "time or none":
        return _in_range("time", [value for value in values if value is not None])
    if column == "seconds":
        return bool(min(values) >= 0 and max(values) < RECORDED_BELOW)
    if column == "seconds or none":
        return _in_range("seconds", [value for value in values if value is not None])
    if column in {"job", "job or none"}:
        jobs = values if column == "job" else [value for value in values if value is not None]
        return not jobs or (min(jobs) >= 1 and max(jobs) <= MAX_JOB)
    return True


def _unstructure_columns(kind: type[Any]) -> Callable[[tuple[Any, ...]], dict[str, list[Any]]]:
    columns = _COLUMNS[kind]
    defaults = _defaults(kind)

    def unstructure(items: tuple[Any, ...]) -> dict[str, list[Any]]:
        document = {name: list(map(operator.attrgetter(name), items)) for name in columns}
        for name, default in defaults.items():  # a column of defaults reads back from nothing
            empty = default is None or default == ()
            if name in document and empty and document[name].count(default) == len(items):
                del document[name]
        for name, column in columns.items():
            if column == "keys" or (column == "slots" and name in document):
                document[name] = list(map(list, document[name]))
            elif column == "chain or none" and name in document:
                document[name] = [
                    None if link is None else _chain_row(link) for link in document[name]
                ]
            elif column in {"lease or none", "resources or none"} and name in document:
                document[name] = [
                    None if terms is None else list(terms) for terms in document[name]
                ]
            elif column == "ends":
                document[name] = [
                    [None if end is None else [end.exit_code, end.at] for end in ends]
                    for ends in document[name]
                ]
        return document

    return unstructure


class _ColumnProblem(TypeError):
    """What is wrong with one column (``a wrong type in job``), for its caller to put in its own
    words: a snapshot's columns and a single record report it differently."""


def _column(column: str, name: str, values: list[Any]) -> list[Any]:
    """One column of kind ``column`` checked and converted (times to floats, keys to tuples)."""
    if not set(map(type, values)) <= _COLUMN_TYPES[column]:
        raise _ColumnProblem(f"a wrong type in {name}")
    if not _in_range(column, values):
        raise _ColumnProblem(f"a value out of range in {name}")
    if column == "time":
        return list(map(float, values))
    if column == "time or none":
        return [None if value is None else float(value) for value in values]
    if column == "ends":
        return _slot_ends(name, values)
    if column == "chain or none":
        return [None if value is None else _chain_link(name, value) for value in values]
    if column == "lease or none":
        return [None if value is None else _lease_terms(name, value) for value in values]
    if column == "resources or none":
        return [None if value is None else _task_resources(name, value) for value in values]
    if column == "slots":
        return [_slots(name, value) for value in values]
    if column == "keys":
        try:
            "".join(itertools.chain.from_iterable(values))  # every key a string
        except TypeError:
            raise _ColumnProblem(f"a wrong type in {name}") from None
        return list(map(tuple, values))
    return values


_MAX_EXIT = 255
_MAX_LINKS = 32


def _chain_row(link: ChainLink) -> list[Any]:
    row = [link.position, link.of, link.after, list(link.task_links), link.budget]
    return [*row, list(link.short)] if link.short else row


def _chain_link(name: str, value: list[Any]) -> ChainLink:
    """``[position, of, after, [links per slot], budget]``, then ``[short slots]`` when any
    stops short, checked as strictly as a column."""
    if len(value) not in (5, 6) or not all(type(part) is list for part in value[3::2]):
        raise _ColumnProblem(f"a wrong type in {name}")
    position, of, after, task_links, budget, *rest = value
    short = rest[0] if rest else []
    numbers = {type(position), type(of), type(budget), *map(type, task_links), *map(type, short)}
    if not numbers <= {int} or type(after) is not str:
        raise _ColumnProblem(f"a wrong type in {name}")
    shaped = 1 <= position <= of <= _MAX_LINKS and (after == "") == (position == 1)
    if (
        not shaped
        or (after and not ALLOCATION_ID.fullmatch(after))
        or not all(1 <= links <= of for links in task_links)
        or not 0 <= budget < RECORDED_BELOW
        or (rest and not short)
        or short != sorted(set(short))
        or not all(0 <= slot < len(task_links) for slot in short)
    ):
        raise _ColumnProblem(f"a value out of range in {name}")
    return ChainLink(position, of, after, tuple(task_links), budget, tuple(short))


def _lease_terms(name: str, value: list[Any]) -> LeaseTerms:
    """``[profile, slots, cpus, memory MiB, gpus, signal_before_end]``, checked as a column."""
    if len(value) != 6 or type(value[0]) is not str:
        raise _ColumnProblem(f"a wrong type in {name}")
    if not set(map(type, value[1:])) <= {int}:
        raise _ColumnProblem(f"a wrong type in {name}")
    profile, slots, cpus, memory_mib, gpus, signal = value
    if not profile or min(slots, cpus, memory_mib, signal) < 1 or gpus < 0:
        raise _ColumnProblem(f"a value out of range in {name}")
    return LeaseTerms(profile, slots, cpus, memory_mib, gpus, signal)


def _task_resources(name: str, value: list[Any]) -> TaskResources:
    """``[cpus, memory MiB, gpus]``, checked as a column."""
    if len(value) != 3 or not set(map(type, value)) <= {int}:
        raise _ColumnProblem(f"a wrong type in {name}")
    cpus, memory_mib, gpus = value
    if min(cpus, memory_mib) < 1 or gpus < 0:
        raise _ColumnProblem(f"a value out of range in {name}")
    return TaskResources(cpus, memory_mib, gpus)


def _slots(name: str, value: list[Any]) -> tuple[int, ...]:
    """Slots ascending, each once: ``[0, 2]``."""
    if not set(map(type, value)) <= {int}:
        raise _ColumnProblem(f"a wrong type in {name}")
    if value and (value[0] < 0 or any(a >= b for a, b in itertools.pairwise(value))):
        raise _ColumnProblem(f"a value out of range in {name}")
    return tuple(value)


def _slot_ends(name: str, values: list[Any]) -> list[tuple[SlotEnd | None, ...]]:
    """A column of settlements' ends: per slot null, or ``[exit code, mtime]``. Checked a column
    at a time (a settled campaign holds one per allocation), then built."""
    try:
        present = [end for end in itertools.chain.from_iterable(values) if end is not None]
    except TypeError:
        raise _ColumnProblem(f"a wrong type in {name}") from None
    if not set(map(type, present)) <= {list} or not set(map(len, present)) <= {2}:
        raise _ColumnProblem(f"a wrong type in {name}")
    codes, times = [end[0] for end in present], [end[1] for end in present]
    kinds = set(map(type, times))
    if not set(map(type, codes)) <= {int} or not kinds <= {int, float}:
        raise _ColumnProblem(f"a wrong type in {name}")
    if (codes and (min(codes) < 0 or max(codes) > _MAX_EXIT)) or not _in_range("time", times):
        raise _ColumnProblem(f"a value out of range in {name}")
    if kinds <= {float}:
        return [tuple([end and _new_end(end) for end in ends]) for ends in values]
    return [tuple([end and _new_end((end[0], float(end[1]))) for end in ends]) for ends in values]


def _new_end(end: Any) -> SlotEnd:
    return tuple.__new__(SlotEnd, end)


def _defaults(kind: type[Any]) -> dict[str, Any]:
    """The fields of ``kind`` that have a default, with it: a record or a snapshot written
    before such a field existed lacks it, and reads as if it held the default."""
    return {
        field.name: field.default
        for field in attrs.fields(kind)
        if field.default is not attrs.NOTHING
    }


def _structure_columns(kind: type[R]) -> Callable[[Any, Any], tuple[R, ...]]:
    """A snapshot's columns of ``kind``; the column of a field with a default may be absent."""
    columns = _COLUMNS[kind]
    defaults = _defaults(kind)
    what = f"{_TAGS.get(kind, kind.__name__.lower())} columns"

    def structure(value: Any, _: Any) -> tuple[R, ...]:
        present = [name for name in columns if type(value) is not dict or name in value]
        if not columns.keys() - present <= defaults.keys():
            raise TypeError(f"not {what}: {value!r:.80}")
        arrays = dict(zip(present, _columns(value, present, what), strict=True))
        rows = len(arrays[present[0]]) if present else 0
        try:
            fields = [
                _column(column, name, arrays[name]) if name in arrays else [defaults[name]] * rows
                for name, column in columns.items()
            ]
        except _ColumnProblem as exc:
            raise TypeError(f"not {what}: {exc}") from None
        return tuple(map(kind, *fields))

    return structure


def _structure_record(kind: type[R]) -> Callable[[Any, Any], R]:
    """One intent, receipt or resolution, as the one row of its columns: a single record and a
    snapshot's columns are checked by one schema, :data:`_COLUMNS`. A field with a default (an
    intent's ``time_limit``) may be absent."""
    columns = _COLUMNS[kind]
    defaults = _defaults(kind)
    required = columns.keys() - defaults.keys()
    what = f"a valid {_TAGS.get(kind, kind.__name__.lower())} record"

    def structure(value: Any, _: Any) -> R:
        if type(value) is not dict or not required <= value.keys() <= columns.keys():
            raise TypeError(f"not {what}: {value!r:.80}")
        try:
            row = [
                _column(column, name, [value[name] if name in value else defaults[name]])[0]
                for name, column in columns.items()
            ]
        except _ColumnProblem as exc:
            raise TypeError(f"not {what} ({exc}): {value!r:.80}") from None
        return kind(*row)

    return structure


def _converter(roster: Callable[[Any, Any], Roster]) -> cattrs.Converter:
    converter = make_converter(forbid_extra_keys=True)
    converter.register_unstructure_hook(Roster, _unstructure_roster)
    converter.register_structure_hook(Roster, roster)
    converter.register_unstructure_hook(ChainLink, _chain_row)
    # An intent without a step's budget is written as before the budget was recorded, so a
    # campaign that never gave a step one stays readable by the versions before it.
    converter.register_unstructure_hook(
        Intent, make_dict_unstructure_fn(Intent, converter, budget=override(omit_if_default=True))
    )
    for kind in _COLUMNS:
        converter.register_structure_hook(kind, _structure_record(kind))
        converter.register_structure_hook_func(_is_tuple_of(kind), _structure_columns(kind))
        converter.register_unstructure_hook_func(_is_tuple_of(kind), _unstructure_columns(kind))
    return strict_scalars(converter)


_CONVERTER = _converter(_structure_roster)
_STORED = _converter(_structure_stored_roster)
"""For records without a ``\\u`` escape that could decode to a NUL or a lone surrogate."""

_UNSAFE_ESCAPE = re.compile(rb"\\u(?:0000|[dD][89abAB])")


def encode(change: object) -> bytes:
    """One record as its JSON payload, ``type`` first."""
    tag = _TAGS.get(type(change))
    if tag is None:
        raise TypeError(f"{type(change).__name__} is not a registered record type")
    with bulk():
        document = {"type": tag, **_CONVERTER.unstructure(change)}
    text = json.dumps(document, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    return text.encode("utf-8")


def decode(payload: bytes) -> object:
    """One JSON payload as its record; raises ValueError or TypeError when it is not one.

    Strict UTF-8 refuses encoded surrogates (``json.loads`` of bytes would let them pass); a
    payload with no escape that could decode to a NUL or a lone surrogate then holds only valid
    Task text, so its Tasks skip that check, the costliest part of reading a large campaign.
    """
    document = json.loads(payload.decode("utf-8"))
    if not isinstance(document, dict):
        raise TypeError("a record is a JSON object")
    tag = document.pop("type", None)
    cls = RECORD_TYPES.get(tag) if isinstance(tag, str) else None
    if cls is None:
        raise TypeError(f"unknown record type {tag!r}")
    try:
        converter = _CONVERTER if _UNSAFE_ESCAPE.search(payload) else _STORED
        return converter.structure(document, cls)
    except cattrs.BaseValidationError as exc:
        raise TypeError("; ".join(cattrs.transform_error(exc))) from None


def frame(payload: bytes) -> bytes:
    """Length-prefix and checksum one payload."""
    head = b"R%08x %08x" % (len(payload), zlib.crc32(payload))
    return head + b" %08x\n" % zlib.crc32(head) + payload + b"\n"


@attrs.frozen
class Scan:
    """What a journal holds: its record payloads, where the valid part ends, and its sizes."""

    payloads: tuple[bytes, ...]
    end: int
    first_size: int


def scan(data: bytes, name: str, start: int = 0) -> Scan:
    """Split a journal into payloads, verifying every frame; a cut-short last frame is torn.

    A valid journal never holds a raw NUL byte (JSON escapes it), so trailing NULs, which some
    filesystems leave after a crash, count as part of a torn tail. ``start``, a frame boundary
    found by an earlier scan, skips the frames before it (the status cache holds their fold).
    """
    if not data.startswith(MAGIC):
        version = data.split(b"\n", 1)[0][:40]
        if data.startswith(b"servatus.campaign/") and b"\n" in data:
            shown = version.decode("ascii", "replace")
            raise CorruptState(f"{name}: unknown campaign version {shown!r}")
        raise CorruptState(f"{name}: not a servatus campaign journal (or truncated)")
    limit = len(data.rstrip(b"\0")) if data.endswith(b"\0") else len(data)
    position = max(start, len(MAGIC))
    payloads: list[bytes] = []
    first_size = 0
    while position < limit:
        head = data[position : position + HEADER_SIZE]
        if len(head) < HEADER_SIZE or position + HEADER_SIZE > limit:
            if _HEADER_PREFIX.fullmatch(data[position:limit]):
                break
            raise CorruptState(f"{name}: damaged record header at byte {position}")
        match = _HEADER.fullmatch(head)
        if match is None or int(match[3], 16) != zlib.crc32(head[:18]):
            raise CorruptState(f"{name}: damaged record header at byte {position}")
        end = position + HEADER_SIZE + int(match[1], 16) + 1
        if end > limit:
            break
        payload = data[position + HEADER_SIZE : end - 1]
        if data[end - 1] != 0x0A or zlib.crc32(payload) != int(match[2], 16):
            raise CorruptState(f"{name}: the record at byte {position} fails its checksum")
        payloads.append(payload)
        if len(payloads) == 1:
            first_size = end - position
        position = end
    return Scan(tuple(payloads), position, first_size)


def load(data: bytes, name: str) -> tuple[Fold, Scan]:
    """Verify and fold a whole journal; every failure is CorruptState naming ``name``."""
    with bulk():
        return _load(data, name)


def _load(data: bytes, name: str) -> tuple[Fold, Scan]:
    found = scan(data, name)
    into = Fold()
    for index, payload in enumerate(found.payloads):
        try:
            change = decode(payload)
        except (ValueError, TypeError, RecursionError, ServatusError) as exc:
            problem = input_problem(exc)
            raise CorruptState(f"{name}: record {index + 1} is invalid: {problem}") from None
        try:
            into.apply(change)
        except Rejected as exc:
            raise CorruptState(f"{name}: record {index + 1} does not apply: {exc}") from None
    if not into.started:
        raise CorruptState(f"{name}: the journal holds no campaign")
    return into, found


# -- files --------------------------------------------------------------------------------------


def sync(fd: int) -> None:
    """Make a file's or directory's contents durable; on macOS only F_FULLFSYNC reaches the disk."""
    full = getattr(fcntl, "F_FULLFSYNC", None)
    if full is not None:
        try:
            fcntl.fcntl(fd, full)
        except OSError:
            os.fsync(fd)
        else:
            return
    os.fsync(fd)


def _check_owned(
    st: os.stat_result, name: str, kind: Callable[[int], bool], *, tightened: bool = False
) -> None:
    """Refuse what is not ours or what other users can write (they could change the record);
    warn of what they can only read. ``tightened``: the caller makes it owner-only now."""
    if not kind(st.st_mode):
        raise UnsafeFilesystem(f"{name}: has the wrong type")
    if st.st_uid != os.geteuid():
        raise UnsafeFilesystem(f"{name}: is owned by uid {st.st_uid}, not by you")
    mode = stat.S_IMODE(st.st_mode)
    wanted = DIRECTORY_MODE if stat.S_ISDIR(st.st_mode) else FILE_MODE
    if mode & 0o022:
        raise UnsafeFilesystem(
            f"{name}: other users can write it (mode {mode:04o}), so it is not used; if the "
            f"record is as you left it, make it owner-only: chmod {wanted:o} {path_word(name)}"
        )
    if mode & 0o077:
        done = (
            f"made it owner-only ({wanted:04o})"
            if tightened
            else f"make it owner-only: chmod {wanted:o} {path_word(name)}"
        )
        warnings.warn(
            StateWarning(f"{name}: other users can read it (mode {mode:04o}); {done}"),
            stacklevel=3,
        )


def _open_directory(path: Path) -> int:
    """STATE, opened, not yet judged: its mode is checked (and warned of, or tightened) only
    once it is known to hold a campaign, so a mistyped STATE (``.``, ``~``, a shared project
    directory) is left as it is and called no campaign."""
    try:
        return os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except FileNotFoundError:
        raise ConfigurationError(f"no campaign at {str(path)!r}") from None
    except OSError as exc:
        raise from_os_error(exc, f"cannot open campaign {str(path)!r}") from None


def _check_lock(directory: int, path: Path) -> None:
    """A lock others can write is refused on every read too: whoever can replace it can let a
    second writer in beside the one holding it. A campaign whose lock is missing is fine (the
    next writer makes it)."""
    try:
        st = os.stat(LOCK, dir_fd=directory, follow_symlinks=False)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise from_os_error(exc, f"cannot open {str(path / LOCK)!r}") from None
    _check_owned(st, str(path / LOCK), stat.S_ISREG)


def read(path: str | Path) -> CampaignState:
    """Read a campaign without the lock, up to its last complete record."""
    data, _, name = read_journal(path)
    into, _ = load(data, name)
    return into.freeze()


def read_journal(path: str | Path) -> tuple[bytes, tuple[int, ...], str]:
    """The journal's bytes, unverified, with the :func:`journal_version` they were read at (an
    older one if a writer appends meanwhile, which only costs that writer a fold) and the name
    errors give it; the campaign's ownership and lock are checked as :func:`read` does."""
    path = Path(checked_path(path, "campaign"))
    name = str(path / JOURNAL)
    directory = _open_directory(path)
    try:
        try:
            fd = os.open(JOURNAL, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=directory)
        except FileNotFoundError:
            raise ConfigurationError(f"no campaign at {str(path)!r}") from None
        except OSError as exc:
            raise from_os_error(exc, f"cannot open {name!r}") from None
        try:
            _check_owned(os.fstat(directory), str(path), stat.S_ISDIR)
            st = os.fstat(fd)
            _check_owned(st, name, stat.S_ISREG)
            _check_lock(directory, path)
        except BaseException:
            os.close(fd)
            raise
    finally:
        os.close(directory)
    try:
        data = read_all(fd)
    except OSError as exc:
        raise from_os_error(exc, f"cannot read {name!r}") from None
    finally:
        os.close(fd)
    return data, _version(st), name


def remainder(
    state: CampaignState, tasks: AbstractSet[str], allocations: AbstractSet[str]
) -> CampaignState:
    """``state`` without the Tasks ``tasks`` and the records of ``allocations`` (the status
    cache's live part, ADR 0010). A horizon keeps counting the intents kept before it, so the
    markers a listing asks for are those the whole state asks for; of horizons that come to count
    the same intents, the latest bounds them."""
    kept = [intent for intent in state.intents if intent.allocation_id not in allocations]
    before = [0]  # before[k]: intents kept among the first k
    for intent in state.intents:
        before.append(before[-1] + (intent.allocation_id not in allocations))
    horizons: dict[tuple[str, int], Horizon] = {}
    for horizon in state.horizons:
        where = (horizon.target, before[horizon.intents])
        earlier = horizons.get(where)
        if earlier is None or earlier.at < horizon.at:
            horizons[where] = Horizon(*where, horizon.at)
    stored = [
        (key, item)
        for key, item in zip(state.tasks.keys, state.tasks.stored(), strict=True)
        if key not in tasks
    ]
    return attrs.evolve(
        state,
        tasks=stored_roster(tuple(key for key, _ in stored), [item for _, item in stored]),
        intents=tuple(kept),
        receipts=tuple(item for item in state.receipts if item.allocation_id not in allocations),
        resolutions=tuple(
            item for item in state.resolutions if item.allocation_id not in allocations
        ),
        settlements=tuple(
            item for item in state.settlements if item.allocation_id not in allocations
        ),
        horizons=tuple(horizons.values()),
    )


def journal_version(path: str | Path) -> tuple[int, ...] | None:
    """Changes whenever the journal does (a record appended, a torn tail cut, a compaction renamed
    in), so an unchanged journal need not be read and folded again; None when it cannot be seen."""
    try:
        st = os.stat(Path(path) / JOURNAL, follow_symlinks=False)
    except (OSError, ValueError):  # ValueError: a NUL in the name, which read refuses
        return None
    return _version(st)


def _version(st: os.stat_result) -> tuple[int, ...]:
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


class Writer:
    """The one writer of a campaign: holds its lock, knows its state, appends records durably.

    Use :func:`writing`; ``state`` is None while the campaign does not exist yet.
    """

    def __init__(self, path: Path, directory: int, lock: int) -> None:
        self.path = path
        self.name = str(path / JOURNAL)
        self._directory = directory
        self._lock = lock
        self._journal = -1
        self._fold: Fold | None = None
        self._end = 0
        self._first_size = 0
        self._records = 0
        self._broken = False
        self._compaction_failed = False

    # -- opening

    def _open_journal(self, known: tuple[tuple[int, ...], CampaignState] | None = None) -> None:
        try:
            fd = os.open(JOURNAL, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=self._directory)
        except FileNotFoundError:
            return
        except OSError as exc:
            raise from_os_error(exc, f"cannot open {self.name!r}") from None
        self._journal = fd
        try:
            st = os.fstat(fd)
            _check_owned(st, self.name, stat.S_ISREG, tightened=True)
            version = _version(st)
            if stat.S_IMODE(st.st_mode) != FILE_MODE:
                os.fchmod(fd, FILE_MODE)
            data = read_all(fd)
        except OSError as exc:
            raise from_os_error(exc, f"cannot read {self.name!r}") from None
        if known is not None and known[0] == version:
            # Unchanged since the caller read it (journal_version): its frames are verified
            # again, but not decoded and folded a second time.
            found = scan(data, self.name)
            self._fold = Fold(known[1])
        else:
            self._fold, found = load(data, self.name)
        self._end = found.end
        self._first_size = found.first_size
        self._records = len(found.payloads)
        if len(data) > found.end:
            try:
                os.ftruncate(fd, found.end)
                sync(fd)
            except OSError as exc:
                what = f"cannot truncate the torn tail of {self.name!r}"
                raise from_os_error(exc, what) from None

    @property
    def state(self) -> CampaignState | None:
        return None if self._fold is None else self._fold.freeze()

    # -- changing

    def _usable(self) -> None:
        if self._broken:
            raise Unavailable(f"{self.name}: an earlier write failed; reopen the campaign")

    def initialize(self, first: Created) -> CampaignState:
        """Create the journal holding ``first``: written aside, synced, renamed in, dir synced."""
        self._usable()
        if self._fold is not None:
            raise TaskConflict(f"a campaign already exists at {str(self.path)!r}")
        into = Fold()
        into.apply(first)
        self._replace(frame(encode(first)))
        self._fold = into
        return into.freeze()

    def commit(self, change: object) -> CampaignState:
        """Append one record with one write and one fsync; compact when the journal has grown."""
        self.add(change)
        assert self._fold is not None
        return self._fold.freeze()

    def add(self, change: object) -> None:
        """:meth:`commit` without building the new state, which costs O(state): a loop of many
        records (one intent and one receipt per allocation) stays linear."""
        self._usable()
        if self._fold is None:
            raise ConfigurationError(f"no campaign at {str(self.path)!r}")
        data = frame(encode(change))
        try:
            self._fold.apply(change)
        except Rejected as exc:
            raise TaskConflict(str(exc)) from None
        self._append(data, 1)
        tail = self._end - len(MAGIC) - self._first_size
        due = self._records > COMPACT_RECORDS_CAP or (
            self._records > COMPACT_RECORDS and tail * 16 >= self._first_size
        )
        if due and not self._compaction_failed:
            # The record is durable already: a compaction that fails (no room for the new
            # journal, say) must not report it as failed. The next writer compacts.
            try:
                self.compact()
            except ServatusError:
                self._compaction_failed = True

    def add_all(self, changes: Sequence[object]) -> None:
        """Append several records with one write and one fsync, so that all are durable before
        anything that depends on them is done (a crash in the write keeps a prefix of them,
        each whole). A change the fold rejects refuses them all, and this writer then refuses
        further changes (its fold took the ones before it)."""
        self._usable()
        if self._fold is None:
            raise ConfigurationError(f"no campaign at {str(self.path)!r}")
        if not changes:
            return
        data = b"".join(frame(encode(change)) for change in changes)
        for change in changes:
            try:
                self._fold.apply(change)
            except Rejected as exc:
                self._broken = True
                raise TaskConflict(str(exc)) from None
        self._append(data, len(changes))

    def _append(self, data: bytes, records: int) -> None:
        """Write and sync framed records at the journal's end; on failure cut the journal back
        to where it ended, and refuse further changes (the fold already took them)."""
        try:
            write_all(self._journal, data, self._end)
            sync(self._journal)
        except OSError as exc:
            self._broken = True
            with suppress(OSError):
                os.ftruncate(self._journal, self._end)
            raise from_os_error(exc, f"cannot write {self.name!r}") from None
        self._end += len(data)
        self._records += records

    def settle(self, change: Settled) -> int:
        """Record ``change`` less what is settled already (another command may have recorded it
        since ``change`` was judged); nothing when nothing is left. Returns what was recorded."""
        self._usable()
        if self._fold is None:
            raise ConfigurationError(f"no campaign at {str(self.path)!r}")
        done = self._fold.settlements
        fresh = tuple(item for item in change.allocations if item.allocation_id not in done)
        if fresh or (change.listed and not change.allocations):
            self.add(Settled(fresh, change.listed))
        return len(fresh)

    def target(self, identity: str) -> str:
        """The key an intent names the Target ``identity`` by; the first time, a
        :class:`TargetSeen` is recorded (appended and synced) first."""
        self._usable()
        if self._fold is None:
            raise ConfigurationError(f"no campaign at {str(self.path)!r}")
        key = target_key(identity)
        known = self._fold.targets.get(key)
        if known is None:
            self.add(TargetSeen(key, identity))
        elif known.identity != identity:
            raise TaskConflict(f"two Targets share the key {key}")
        return key

    def compact(self) -> None:
        """Replace the journal with one holding a single Snapshot of the current state."""
        self._usable()
        if self._fold is None:
            raise ConfigurationError(f"no campaign at {str(self.path)!r}")
        self._replace(frame(encode(Snapshot(self._fold.freeze()))))

    def _replace(self, first_frame: bytes) -> None:
        data = MAGIC + first_frame
        flags = os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        try:
            fd = os.open(TEMPORARY, flags, FILE_MODE, dir_fd=self._directory)
        except OSError as exc:
            raise from_os_error(exc, f"cannot create {str(self.path / TEMPORARY)!r}") from None
        renamed = False
        try:
            os.fchmod(fd, FILE_MODE)
            write_all(fd, data, 0)
            sync(fd)
            os.rename(TEMPORARY, JOURNAL, src_dir_fd=self._directory, dst_dir_fd=self._directory)
            renamed = True
            sync(self._directory)
        except OSError as exc:
            # Before the rename the old journal is untouched and still ours to append to; after
            # it, whether the rename is durable is unknown, so nothing more may be appended.
            self._broken = renamed
            os.close(fd)
            if not renamed:
                with suppress(OSError):
                    os.unlink(TEMPORARY, dir_fd=self._directory)
            raise from_os_error(exc, f"cannot write {self.name!r}") from None
        if self._journal >= 0:
            os.close(self._journal)
        self._journal = fd
        self._end = len(data)
        self._first_size = len(first_frame)
        self._records = 1

    def close(self) -> None:
        if self._journal >= 0:
            os.close(self._journal)
            self._journal = -1
        os.close(self._lock)
        os.close(self._directory)


STATUS_CACHE = "status-cache."
"""How the names of the status cache's files start (``servatus.status_cache``): derived data
beside the journal, never read by anything that changes the campaign."""


def _ours(entries: set[str]) -> bool:
    return all(
        name in _OURS or name.startswith((STATUS_CACHE, _PLAN_KEY_DRAFT)) for name in entries
    )


_OURS = frozenset({JOURNAL, LOCK, TEMPORARY, PLAN_KEY})


def holds_campaign(directory: str) -> bool:
    """Whether ``directory`` is a campaign's STATE (its journal says so, or it holds only the
    store's own names, as while one is created): what else writes into it could replace the
    journal or the lock, so a user's output file never goes there."""
    try:
        entries = set(os.listdir(directory))
    except (OSError, ValueError):
        return False
    if entries and _ours(entries):
        return True
    if JOURNAL not in entries:
        return False
    try:
        fd = os.open(
            os.path.join(directory, JOURNAL),
            os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
        )
    except OSError:
        return False
    try:
        return os.read(fd, len(_CAMPAIGN_PREFIX)) == _CAMPAIGN_PREFIX
    except OSError:
        return False
    finally:
        os.close(fd)


_CAMPAIGN_PREFIX = SCHEMA.rsplit("/", 1)[0].encode("ascii") + b"/"
"""How every version's journal starts: ``servatus.campaign/``."""


def _make_directory(path: Path) -> None:
    """Create STATE owner-only, or adopt an existing directory that holds nothing but ours."""
    try:
        os.mkdir(path, DIRECTORY_MODE)
        parent = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            sync(parent)
        finally:
            os.close(parent)
    except FileExistsError:
        try:
            entries = set(os.listdir(path))
        except NotADirectoryError:
            raise ConfigurationError(f"{str(path)!r} exists and is not a directory") from None
        except OSError as exc:
            raise from_os_error(exc, f"cannot list {str(path)!r}") from None
        if not _ours(entries):
            raise ConfigurationError(
                f"{str(path)!r} exists and is not a campaign; choose a new or empty directory"
            ) from None
        if not entries:  # nothing recorded to protect yet: a user's empty directory (umask 002
            _make_private(path)  # makes it 0775) becomes owner-only instead of being refused
    except OSError as exc:
        raise from_os_error(exc, f"cannot create {str(path)!r}") from None


def _make_private(path: Path) -> None:
    """Make an empty directory of the user's owner-only (someone else's is refused later)."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)  # as _open_directory does
    try:
        if os.fstat(fd).st_uid == os.geteuid():
            os.fchmod(fd, DIRECTORY_MODE)
    finally:
        os.close(fd)


def _exists(name: str, directory: int) -> bool:
    try:
        os.stat(name, dir_fd=directory, follow_symlinks=False)
    except FileNotFoundError:
        return False
    return True


@contextmanager
def writing(
    path: str | Path,
    *,
    create: bool = False,
    known: tuple[tuple[int, ...] | None, CampaignState] | None = None,
    partial: bool = False,
) -> Iterator[Writer]:
    """Hold the campaign's lock for one change; raise ``Busy`` at once if another process has it.

    With ``create``, STATE is made (owner-only) when missing and ``state`` may be None. The lock
    also removes a leftover ``journal.tmp`` and truncates a torn tail before anything is written.
    ``known`` is a state read before with the :func:`journal_version` it was read at: if the
    journal is still at that version, the writer starts from it instead of folding it again.
    ``partial`` says ``known`` is only part of the state (the status cache's remainder): the
    writer never compacts, which would write that part as the whole.
    """
    path = Path(checked_path(path, "campaign"))
    if create:
        _make_directory(path)
    directory = _open_directory(path)
    try:
        if not create and not _exists(JOURNAL, directory):
            raise ConfigurationError(f"no campaign at {str(path)!r}")
        st = os.fstat(directory)
        _check_owned(st, str(path), stat.S_ISDIR, tightened=True)
        if stat.S_IMODE(st.st_mode) != DIRECTORY_MODE:
            os.fchmod(directory, DIRECTORY_MODE)
        flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
        lock = os.open(LOCK, flags, FILE_MODE, dir_fd=directory)
    except BaseException as exc:
        os.close(directory)
        if isinstance(exc, OSError):
            raise from_os_error(exc, f"cannot lock campaign {str(path)!r}") from None
        raise
    try:
        _check_owned(os.fstat(lock), str(path / LOCK), stat.S_ISREG, tightened=True)
        os.fchmod(lock, FILE_MODE)
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(lock)
        os.close(directory)
        raise Busy(
            f"campaign {str(path)!r} is busy: another servatus process is changing it"
        ) from None
    except BaseException as exc:
        os.close(lock)
        os.close(directory)
        if isinstance(exc, OSError):
            raise from_os_error(exc, f"cannot lock campaign {str(path)!r}") from None
        raise
    writer = Writer(path, directory, lock)
    writer._compaction_failed = partial
    try:
        with suppress(FileNotFoundError):
            os.unlink(TEMPORARY, dir_fd=directory)
        version, state = known if known is not None else (None, None)
        writer._open_journal(None if version is None or state is None else (version, state))
        if writer._fold is None and not create:
            raise ConfigurationError(f"no campaign at {str(path)!r}")
        yield writer
    except OSError as exc:
        raise from_os_error(exc, f"campaign {str(path)!r}") from None
    finally:
        writer.close()


def plan_key(path: str | Path, *, create: bool) -> bytes | None:
    """The secret that seals the campaign's saved plans (ADR 0011), or None when it has none and
    ``create`` is false. With ``create``, the first caller makes it: 32 random bytes written
    owner-only under a draft name, synced, then linked to ``plan-key`` (``link`` never replaces,
    so two planners at once agree on the first one linked). It is read as the journal is: the
    campaign must be ours and not writable by others, and the key a regular file of ours that
    nobody else can read or write, else :class:`UnsafeFilesystem` (whoever could read it could
    seal a plan of their own)."""
    path = Path(checked_path(path, "campaign"))
    name = str(path / PLAN_KEY)
    directory = _open_directory(path)
    try:
        if not _exists(JOURNAL, directory):
            raise ConfigurationError(f"no campaign at {str(path)!r}")
        _check_owned(os.fstat(directory), str(path), stat.S_ISDIR)
        try:
            fd = _open_key(directory)
        except FileNotFoundError:
            if not create:
                return None
            _make_key(directory)
            fd = _open_key(directory)
    except OSError as exc:
        raise from_os_error(exc, f"cannot open {name!r}") from None
    finally:
        os.close(directory)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise UnsafeFilesystem(f"{name}: has the wrong type")
        if st.st_uid != os.geteuid():
            raise UnsafeFilesystem(f"{name}: is owned by uid {st.st_uid}, not by you")
        if stat.S_IMODE(st.st_mode) & 0o077:
            raise UnsafeFilesystem(
                f"{name}: other users can read it (mode {stat.S_IMODE(st.st_mode):04o}), so "
                f"they could seal plans as you; remove it (rm {path_word(name)}) and save your "
                "plans again"
            )
        key = read_all(fd)
    except OSError as exc:
        raise from_os_error(exc, f"cannot read {name!r}") from None
    finally:
        os.close(fd)
    if len(key) != PLAN_KEY_BYTES:
        raise CorruptState(
            f"{name}: not a plan key ({len(key)} bytes, not {PLAN_KEY_BYTES}); remove it "
            f"(rm {path_word(name)}) and save your plans again"
        )
    return key


def _open_key(directory: int) -> int:
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    return os.open(PLAN_KEY, flags, dir_fd=directory)


def _make_key(directory: int) -> None:
    """Link a fresh key to ``plan-key`` unless another process linked one first."""
    draft = f"{_PLAN_KEY_DRAFT}{secrets.token_hex(8)}"
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(draft, flags, FILE_MODE, dir_fd=directory)
    try:
        try:
            os.fchmod(fd, FILE_MODE)
            write_all(fd, secrets.token_bytes(PLAN_KEY_BYTES), 0)
            sync(fd)
        finally:
            os.close(fd)
        with suppress(FileExistsError):
            os.link(draft, PLAN_KEY, src_dir_fd=directory, dst_dir_fd=directory)
    finally:
        os.unlink(draft, dir_fd=directory)
    sync(directory)


def new_campaign(tasks: tuple[Task, ...], *, sealed: bool) -> Created:
    """The first record of a new campaign, with a fresh identity and the current wall time."""
    return Created(uuid.uuid4().hex, time.time(), sealed, tasks)


def journal_size(path: str | Path) -> int:
    """Bytes in the journal now (for benchmarks and diagnostics)."""
    return (Path(path) / JOURNAL).stat().st_size


__all__ = [
    "COMPACT_RECORDS",
    "RECORD_TYPES",
    "SCHEMA",
    "Appended",
    "CampaignState",
    "Created",
    "Fold",
    "Horizon",
    "Intent",
    "Listed",
    "Receipt",
    "Rejected",
    "Resolved",
    "Sealed",
    "Settled",
    "Settlement",
    "Snapshot",
    "TargetSeen",
    "Writer",
    "apply",
    "decode",
    "encode",
    "fold",
    "folds",
    "frame",
    "holds_campaign",
    "read",
    "read_journal",
    "record",
    "remainder",
    "scan",
    "target_key",
    "writing",
]
