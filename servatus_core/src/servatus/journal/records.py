"""The journal's records and the campaign state they fold into: frozen values, no I/O.

Adding a record type means: define a frozen attrs class, register it with :func:`record`, and
register how it changes the state with :func:`servatus.journal.folding.folds`."""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable
from typing import Any, NamedTuple, TypeVar

import attrs

from servatus.errors import (
    CorruptState,
    ServatusError,
)
from servatus.evidence import Observation, SlotEnd
from servatus.tasks import Roster, Task, as_roster

R = TypeVar("R")


# -- records ------------------------------------------------------------------------------------

RECORD_TYPES: dict[str, type[Any]] = {}
"""Every record type by its ``type`` tag; :func:`record` fills it."""

RECORD_TAGS: dict[type[Any], str] = {}


def record(tag: str) -> Callable[[type[R]], type[R]]:
    """Register a frozen attrs class as the journal record type ``tag`` (the extension point)."""

    def register(cls: type[R]) -> type[R]:
        if tag in RECORD_TYPES or "type" in attrs.fields_dict(cls):  # type: ignore[arg-type]
            raise ValueError(f"record type {tag!r} is already registered or has a 'type' field")
        RECORD_TYPES[tag] = cls
        RECORD_TAGS[cls] = tag
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


# -- stored Task rows ---------------------------------------------------------------------------

TASK_COLUMNS = ("key", "args", "stdin", "env")
"""A record stores its Tasks as these columns (stdin base64, ``""`` and ``{}`` when empty); a
stored Task is its row, a tuple of the four values, until a :class:`Roster` builds it. A row is
read by column name (:data:`COLUMN_KEY` and the others), so a new column changes no reader."""

COLUMN_KEY, COLUMN_ARGS, COLUMN_STDIN, COLUMN_ENV = map(
    TASK_COLUMNS.index, ("key", "args", "stdin", "env")
)


def stored_row(task: Task) -> tuple[str, list[str], str, dict[str, str]]:
    stdin = base64.b64encode(task.stdin).decode("ascii") if task.stdin else ""
    return task.key, list(task.args), stdin, task.env.to_dict()


def task_fields(row: tuple[Any, ...]) -> dict[str, Any]:
    """A stored row as the fields of its Task, by name; raises TypeError for a misshapen one."""
    key, args, stdin, env = row[COLUMN_KEY], row[COLUMN_ARGS], row[COLUMN_STDIN], row[COLUMN_ENV]
    if type(args) is not list or type(stdin) is not str or type(env) is not dict:
        raise TypeError(f"Task {key!r:.80}: args must be an array, stdin a string, env an object")
    data = binascii.a2b_base64(stdin, strict_mode=True) if stdin else b""
    return {"key": key, "args": tuple(args), "stdin": data, "env": env}


def build_task(row: tuple[Any, ...]) -> Task:
    """A stored Task row as its Task, checked (:func:`decode` proved its record free of NUL and
    lone surrogates); a bad one is :class:`~servatus.errors.CorruptState`."""
    try:
        return Task.stored(**task_fields(row))
    except (TypeError, ValueError, ServatusError) as exc:
        raise CorruptState(f"a stored Task is invalid: {exc}") from None


def stored_args(row: tuple[Any, ...]) -> tuple[str, ...]:
    """A stored Task row's args, which :func:`_structure_stored_roster` checked when the record
    was read (planning reads them for every Task it selects)."""
    return tuple(row[COLUMN_ARGS])


def stored_size(row: tuple[Any, ...]) -> int:
    """:func:`~servatus.tasks.content_size` of a stored Task row (stdin's length from its base64,
    rounded up), without building the Task."""
    args, stdin, env = row[COLUMN_ARGS], row[COLUMN_STDIN], row[COLUMN_ENV]
    return (
        -(-len(stdin) * 3 // 4)
        + sum(map(len, args))
        + sum(map(len, env))
        + sum(map(len, env.values()))
    )


def stored_roster(keys: tuple[str, ...], items: list[Any]) -> Roster:
    """A roster of ``items``, each a Task or a stored row (:func:`decode` checked it), under
    ``keys``: a row is built into its Task when first used."""
    return Roster(keys, items, build_task, stored_args, stored_size)
