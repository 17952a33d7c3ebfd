"""Scheduler evidence: what ``squeue`` lists and what run markers in ``log_root`` say.

An evidence reader (a plugin, ``servatus_evidence_reader``) names the two listing commands, runs
them as one remote command, and parses their output into these values; status projection in the
core reads only these values. Readers bound what they accept and drop rows that fail the identity
check instead of guessing.
"""

from __future__ import annotations

import enum
from collections.abc import Collection, Iterable, Mapping
from typing import TYPE_CHECKING, NamedTuple, Protocol

import attrs

from servatus.errors import ConfigurationError, Unavailable

if TYPE_CHECKING:
    from servatus.config import Target
    from servatus.transport import CommandResult, Transport


LOG_ROOT_MISSING = 66
"""The exit code of a marker listing whose ``log_root`` is not a directory (sysexits'
``EX_NOINPUT``): a purge removed it, or it was never made. Asking again cannot help, so it is a
configuration error, not unavailable evidence."""

MAX_JOB = 2**32 - 1
"""Slurm job numbers are unsigned 32-bit: a larger one in a listing or a record is not a job."""


class QueueEntry(NamedTuple):
    """One job ``squeue`` lists for the user: its number, name and Slurm state word (a named
    tuple, like :class:`Marker`: a listing holds one per job, and they are cheap to build)."""

    job: int
    name: str
    state: str


class MarkerKind(enum.Enum):
    """What a run marker records. ``START``: the batch script began, before any step.
    ``END``: one step returned, with its slot and exit code. ``STOP``: the job was interrupted.
    ``LIMIT``: the pre-limit signal arrived. ``HANDOFF``: a chain link handed a slot on.
    ``STEP_START``: a lease step really began. ``CLAIM``: the decision on a lease step's order,
    listed from its lease's orders directory and read by its size (ADR 0009). ``TAKEN``: the
    claim on a chain link's handoff of a slot, read by its size: more than 0 taken by the next
    link, 0 withheld by ``reconcile`` (ADR 0005)."""

    START = "start"
    END = "end"
    STOP = "stop"
    LIMIT = "limit"
    HANDOFF = "handoff"
    STEP_START = "step-start"
    CLAIM = "claim"
    TAKEN = "taken"


class Marker(NamedTuple):
    """One run marker: which allocation and job wrote it, what it says, and its mtime (the file
    server's clock, so spans between markers never mix clocks). ``size`` is a claim's file size,
    its verdict: 0 withdrawn (or withheld), more taken (None for every kind but the claims)."""

    allocation_id: str
    job: int
    kind: MarkerKind
    at: float
    slot: int | None = None
    exit_code: int | None = None
    size: int | None = None


class SlotEnd(NamedTuple):
    """A step's end marker: its exit code and mtime."""

    exit_code: int
    at: float


class Observation(NamedTuple):
    """What the markers of one allocation show, timed by the file server: its first start, last
    stop, first limit, each slot's end, and (a chain link's only) the slots it handed on to its
    next link, ascending. The raw evidence a settled allocation keeps.

    A lease step's (``step`` True) ``start`` is its own ``step-start`` marker, and ``claim`` its
    order's verdict: True taken, False withdrawn, None while no claim is seen (ADR 0009)."""

    start: float | None = None
    stop: float | None = None
    limit: float | None = None
    ends: tuple[SlotEnd | None, ...] = ()
    handed: tuple[int, ...] = ()
    step: bool = False
    claim: bool | None = None


_START, _END, _STOP, _LIMIT = MarkerKind.START, MarkerKind.END, MarkerKind.STOP, MarkerKind.LIMIT
_HANDOFF, _STEP_START, _CLAIM = MarkerKind.HANDOFF, MarkerKind.STEP_START, MarkerKind.CLAIM
_new = tuple.__new__
"""Builds a named tuple from its fields without the generated ``__new__`` (one per allocation)."""


class MarkerRecord:
    """One allocation's markers folded (what :func:`fold_markers` makes of a listing): first start,
    last stop, first limit, each slot's last end, and the slots handed on; a lease step's first
    ``step-start`` and its claim's verdict. Slot 0's end is kept apart from the other slots' dict
    because most allocations hold one Task: ``status.project`` reads one record per submission,
    in an order unrelated to the listing's, and each object it follows costs a cache miss."""

    __slots__ = (
        "claim",
        "conflict",
        "ends",
        "first",
        "handed",
        "limit",
        "start",
        "step_start",
        "stop",
    )

    def __init__(self) -> None:
        self.start: float | None = None
        self.stop: float | None = None
        self.limit: float | None = None
        self.first: SlotEnd | None = None
        self.ends: dict[int, SlotEnd] | None = None
        self.handed: set[int] | None = None
        self.step_start: float | None = None
        self.claim: bool | None = None
        self.conflict = False
        """Two end markers of one slot disagree: the highest exit code is kept, never a 0."""


def own_job(
    markers: Iterable[Marker], jobs: Mapping[str, int | None]
) -> tuple[list[Marker], list[Marker]]:
    """The markers that are evidence of the campaign's allocations, and the rest: a marker
    counts only under the job number Slurm accepted for its allocation (``jobs``: each
    allocation's accepted job, None while it is not known, when every job's markers count, so
    that ``reconcile`` can find it). Markers of allocations not in ``jobs`` are kept as they
    are (another campaign's; nobody reads them)."""
    kept: list[Marker] = []
    strays: list[Marker] = []
    keep, stray = kept.append, strays.append
    known = jobs.get
    for marker in markers:
        job = known(marker[0])
        if job is None or job == marker[1]:
            keep(marker)
        else:
            stray(marker)
    return kept, strays


def fold_markers(markers: Iterable[Marker]) -> dict[str, MarkerRecord]:
    """Fold a listing's markers by allocation id in one pass. A listing keeps an allocation's
    markers together, so a run of markers of one allocation costs one dict lookup."""
    folded: dict[str, MarkerRecord] = {}
    current: str | None = None
    record = MarkerRecord()
    for allocation_id, _, kind, at, slot, exit_code, size in markers:
        if allocation_id != current:
            current = allocation_id
            found = folded.get(allocation_id)
            if found is None:
                found = folded[allocation_id] = MarkerRecord()
            record = found
        if kind is _END:
            if slot is not None and exit_code is not None:
                if slot == 0:
                    prior = record.first
                    if prior is None or prior[0] == exit_code:
                        record.first = _new(SlotEnd, (exit_code, at))
                    else:
                        record.conflict = True
                        if exit_code > prior[0]:
                            record.first = _new(SlotEnd, (exit_code, at))
                else:
                    ends = record.ends
                    if ends is None:
                        ends = record.ends = {}
                    prior = ends.get(slot)
                    if prior is None or prior[0] == exit_code:
                        ends[slot] = _new(SlotEnd, (exit_code, at))
                    else:
                        record.conflict = True
                        if exit_code > prior[0]:
                            ends[slot] = _new(SlotEnd, (exit_code, at))
        elif kind is _START:
            earlier = record.start
            if earlier is None or at < earlier:
                record.start = at
        elif kind is _STOP:
            earlier = record.stop
            if earlier is None or at > earlier:
                record.stop = at
        elif kind is _LIMIT:
            earlier = record.limit
            if earlier is None or at < earlier:
                record.limit = at
        elif kind is _HANDOFF and slot is not None:
            handed = record.handed
            if handed is None:
                handed = record.handed = set()
            handed.add(slot)
        elif kind is _STEP_START:
            earlier = record.step_start
            if earlier is None or at < earlier:
                record.step_start = at
        elif kind is _CLAIM and size is not None:
            # One claim per order, made once: a second row (a stale listing) cannot differ, but
            # a taken reading wins so a run step never reads as withdrawn.
            record.claim = bool(size) or bool(record.claim)
    return folded


def plain_observation(record: MarkerRecord | None, slots: int) -> Observation:
    """A plain allocation's Observation: a handoff marker means nothing outside a chain."""
    if record is None:
        return _new(Observation, (None, None, None, (None,) * slots, (), False, None))
    ends = record.ends
    found: tuple[SlotEnd | None, ...]
    if slots == 1:
        found = (record.first,)
    elif slots == 0:
        found = ()
    elif ends is None:
        found = (record.first, *(None,) * (slots - 1))
    else:
        found = (record.first, *map(ends.get, range(1, slots)))
    return _new(Observation, (record.start, record.stop, record.limit, found, (), False, None))


def step_observation(record: MarkerRecord | None) -> Observation:
    """A lease step's Observation: its own ``step-start`` is its start (the lease's ``start``
    is not the step's), its slot 0 end, stop and limit, and its claim's verdict."""
    if record is None:
        return _new(Observation, (None, None, None, (None,), (), True, None))
    return _new(
        Observation,
        (record.step_start, record.stop, record.limit, (record.first,), (), True, record.claim),
    )


def link_observation(record: MarkerRecord | None, slots: int) -> Observation:
    """A chain link's Observation: a plain one, with the slots it handed on."""
    observation = plain_observation(record, slots)
    if record is None or not record.handed:
        return observation
    handed = tuple(sorted(slot for slot in record.handed if 0 <= slot < slots))
    return observation._replace(handed=handed)


def observe(
    allocation_id: str, slots: int, markers: Iterable[Marker], *, link: bool = False
) -> Observation:
    """Fold one allocation's markers into an Observation (first start, last stop, first limit,
    each slot's end; with ``link``, as a chain link, the slots it handed on)."""
    record = fold_markers(markers).get(allocation_id)
    return link_observation(record, slots) if link else plain_observation(record, slots)


@attrs.frozen
class MarkerQuery:
    """Which markers a command needs: those of ``ids`` (every marker whose name carries one of
    them). ``since``, on the file server's clock, is a time every one of those markers is newer
    than, where the campaign has one. The reader lists by name where the ids fit on a command
    line, else by mtime after ``since``, else everything; the core ignores markers it did not ask
    for, so each choice gives the same answer (``docs/development/adr/0004-settlement.md``).

    ``leases`` are the lease links whose orders directories the same listing also reads, for
    their steps' claims: those with an unsettled step (ADR 0009)."""

    ids: frozenset[str]
    since: float | None = None
    leases: frozenset[str] = frozenset()

    @classmethod
    def of(
        cls, ids: Collection[str], since: float | None = None, leases: Collection[str] = ()
    ) -> MarkerQuery:
        return cls(frozenset(ids), since, frozenset(leases))


def renamers(mode: int, owner: int, me: int) -> str | None:
    """Who besides the user can rename or replace entries in a directory of ``mode`` owned by
    uid ``owner``, for user ``me``: those who can write it without the sticky bit (``its
    group``, ``others``, ``group and others``), or, in a sticky one, an owner other than the
    user and root (``uid N``); None where nobody else can (ADR 0012)."""
    if mode & 0o022 and not mode & 0o1000:
        if mode & 0o022 == 0o022:
            return "group and others"
        return "its group" if mode & 0o020 else "others"
    if mode & 0o022 and owner not in (me, 0):
        return f"uid {owner}"
    return None


def renamed_warning(log_root: str, mode: int, who: str) -> str:
    """The line ``status`` adds while ``log_root`` lets ``who`` rename the user's markers."""
    return (
        f"{log_root} lets {who} rename files in it (mode {mode:04o}): a run marker renamed "
        "there would read as another outcome, and status cannot tell; servatus doctor says how "
        "to close it"
    )


class EvidenceReader(Protocol):
    """Names the two listing commands for a Target, runs them in one, and parses what they
    print."""

    def queue_command(self, target: Target) -> list[str]:
        """The ``squeue`` argv that lists this user's jobs on ``target``."""
        ...

    def parse_queue(self, result: CommandResult) -> list[QueueEntry]:
        """The jobs that listing printed; a row not of the expected form is dropped."""
        ...

    def run_listings(
        self, transport: Transport, target: Target, query: MarkerQuery | None = None
    ) -> tuple[CommandResult, CommandResult | None]:
        """Run both listings on ``transport`` in one remote command, the queue first and the
        clock listing (:meth:`marker_command` with ``clock``) after it, and give back what each
        would have returned run alone; the second is None when the queue listing failed, as it
        is not run then. This is what makes ``status`` one round trip per Target. Nothing the
        commands print (a file name, a job name) can end one's output early or start the other's.
        A reader without this method is asked the two commands in turn.

        :param transport: The Target's transport, for the one command.
        :param target: The Target whose Slurm and ``log_root`` are read.
        :param query: The markers needed, as for :meth:`marker_command`.
        """
        ...

    def marker_command(
        self, target: Target, query: MarkerQuery | None = None, *, clock: bool = True
    ) -> list[str]:
        """The one remote command that lists the run markers of ``log_root``: every marker
        (``query`` None), or at least those the query asks for. With ``clock`` it also reads the
        file server's clock first, by creating and removing a fresh file (a write: ``doctor``
        lists without it). The clock never makes the listing fail. It exits
        ``LOG_ROOT_MISSING`` when ``log_root`` is not a directory."""
        ...

    def parse_markers(self, result: CommandResult) -> list[Marker]:
        """The run markers a marker listing printed; a row not of the expected form is dropped."""
        ...

    def parse_foreign(self, result: CommandResult) -> list[tuple[str, int]]:
        """The files under a marker's name that another user owns, each with that user's uid:
        never evidence (only the user's own files are), named in a warning instead."""
        ...

    def parse_clock(self, result: CommandResult) -> float | None:
        """The file server's time that a ``clock`` listing printed, in UNIX seconds; None
        when it printed none (``log_root`` not writable from here)."""
        ...

    def log_path(self, target: Target, allocation_id: str, job: int, slot: int | None) -> str:
        """Where the allocation's log (``slot`` None) or a step's log is on the target."""
        ...

    def marker_name(
        self,
        allocation_id: str,
        job: int,
        kind: MarkerKind,
        *,
        slot: int | None = None,
        exit_code: int | None = None,
    ) -> str:
        """The file name of one marker, as the batch script writes it and :meth:`parse_markers`
        reads it back: what :class:`servatus.testing.FakeScheduler` writes in a script's place.

        :param allocation_id: The allocation (or lease step) the marker is of.
        :param job: The Slurm job number the marker was written under.
        :param kind: Which event the marker records.
        :param slot: The Task's slot in the allocation, for the markers a slot writes.
        :param exit_code: The exit code an end marker records.
        """
        ...


@attrs.frozen
class Evidence:
    """One Target's two listings: ``None`` where a listing was not fetched (``--offline``).

    ``clock`` is the file server's time when the markers were listed, on the clock that stamps
    marker mtimes, read in the same command as the listing, before the listing: "now" for a
    running Task's run time, so no span mixes two clocks. ``None`` where no listing read it
    (``--offline``, or a ``log_root`` this user cannot write): run time then falls back to the
    caller's ``now``.
    """

    queue: tuple[QueueEntry, ...] | None
    markers: tuple[Marker, ...] | None
    clock: float | None = None
    foreign: tuple[tuple[str, int], ...] = ()
    """Files under a marker's name owned by another user (name, uid): ignored, and warned of."""
    renamed: str | None = None
    """A warning that others can rename entries in ``log_root`` (:func:`renamed_warning`), as
    the listing found its mode and owner; None where nobody else can, or it was not read."""


def fetch_queue(transport: Transport, reader: EvidenceReader, target: Target) -> list[QueueEntry]:
    """One ``squeue`` call; a nonzero exit is Slurm not answering, not an empty queue."""
    return _queue(reader, transport.run(reader.queue_command(target)))


def fetch_markers(
    transport: Transport,
    reader: EvidenceReader,
    target: Target,
    query: MarkerQuery | None = None,
) -> tuple[list[Marker], float | None, list[tuple[str, int]]]:
    """One listing of ``log_root``: the user's own markers, the file server's clock (None where
    it could not be read), and files of other users under marker names. An unreadable
    log_root is unavailable evidence, an unwritable one is not."""
    markers, clock, foreign, _ = _markers(
        reader, target, transport.run(reader.marker_command(target, query))
    )
    return markers, clock, foreign


def _queue(reader: EvidenceReader, result: CommandResult) -> list[QueueEntry]:
    if result.returncode != 0:
        raise Unavailable(f"squeue failed (exit {result.returncode}): {_first_line(result.stderr)}")
    return reader.parse_queue(result)


def _renamed(reader: EvidenceReader, target: Target, result: CommandResult) -> str | None:
    """The warning for a ``log_root`` others can rename entries in, from the listing's ``root``
    row (a reader without ``parse_root`` reads none)."""
    parse_root = getattr(reader, "parse_root", None)
    root = None if parse_root is None else parse_root(result)
    if root is None:
        return None
    mode, owner, me = root
    who = renamers(mode, owner, me)
    return None if who is None else renamed_warning(target.log_root, mode, who)


def _markers(
    reader: EvidenceReader, target: Target, result: CommandResult
) -> tuple[list[Marker], float | None, list[tuple[str, int]], str | None]:
    """What a marker listing says: the user's markers, the clock, others' files under marker
    names, and the :func:`_renamed` warning, read here so that every path of :func:`fetch`
    gives it."""
    if result.returncode == LOG_ROOT_MISSING:
        raise ConfigurationError(
            f"log_root {target.log_root} is not a directory on the cluster (purged, or never "
            "made): make it again (mkdir -p), then run the command again; markers that were in "
            "it are gone"
        )
    if result.returncode != 0:
        raise Unavailable(
            f"listing {target.log_root} failed (exit {result.returncode}): "
            f"{_first_line(result.stderr)}"
        )
    return (
        reader.parse_markers(result),
        reader.parse_clock(result),
        reader.parse_foreign(result),
        _renamed(reader, target, result),
    )


def fetch(
    transport: Transport,
    reader: EvidenceReader,
    target: Target,
    query: MarkerQuery | None = None,
) -> Evidence:
    """Both listings of one Target in one remote command, whatever the campaign size
    (:meth:`EvidenceReader.run_listings`; two for a reader without it, and only ``squeue``
    when the query asks for no markers).

    The queue is read first: a job that leaves the queue between the two listings then has all
    its markers visible, so it is never mistaken for lost.
    """
    if query is not None and not query.ids:  # no Task runs: no clock needed either
        return Evidence(queue=tuple(fetch_queue(transport, reader, target)), markers=())
    run_listings = getattr(reader, "run_listings", None)
    if run_listings is None:  # a reader of its own from before run_listings
        queue = fetch_queue(transport, reader, target)
        marker_result = transport.run(reader.marker_command(target, query))
    else:
        queue_result, marker_result = run_listings(transport, target, query)
        queue = _queue(reader, queue_result)
        if marker_result is None:
            raise Unavailable(f"the marker listing of {target.log_root} did not run")
    markers, clock, foreign, renamed = _markers(reader, target, marker_result)
    return Evidence(tuple(queue), tuple(markers), clock, tuple(foreign), renamed)


def _first_line(data: bytes) -> str:
    text = data.decode("utf-8", "replace").strip()
    return text.splitlines()[0][:200] if text else "no message"
