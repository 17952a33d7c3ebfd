"""Campaigns: an ordered roster of Tasks in a durable store, and how it is authored.

Authoring is create, ensure, append and seal. Each is one locked change of the store
(:mod:`servatus.journal.store`): the roster on disk is the old one or the new one, never a mix.
Keys are immutable: a Task under an existing key must be identical, so a launcher that builds
its Tasks deterministically can rerun ``ensure`` at will.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import shlex
import time
import warnings
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs
from cattrs.preconf.json import make_converter

from servatus.config import (
    Profile,
    Resources,
    Target,
    format_duration,
    profile_problems,
    target_from_identity,
    target_identity,
)
from servatus.continuation import Continuation, limits_for, stops_short
from servatus.engine.plan import (
    Hold,
    LeaseHold,
    Plan,
    Request,
    Work,
    consults,
    make_request,
    shape_indexes,
    work_from_report,
)
from servatus.engine.plan_document import (
    check_seal,
    plan_from_document,
    plan_to_document,
    seal_document,
)
from servatus.engine.planning import make_lease_plan, make_plan, make_step_plan
from servatus.engine.settlement import listed, queries, settle
from servatus.engine.status import (
    Execution,
    Outcome,
    Report,
    StopReason,
    Submission,
    cut_chain_warnings,
    project,
)
from servatus.engine.status_inputs import clock_warnings, gather, submissions
from servatus.errors import (
    Busy,
    ConfigurationError,
    PlanRefused,
    ServatusError,
    StalePlan,
    StateWarning,
    TaskConflict,
    Unavailable,
    UnsafeFilesystem,
    from_os_error,
)
from servatus.evidence import Evidence, MarkerQuery
from servatus.files import read_own
from servatus.journal import records, store
from servatus.lease import (
    Verdict,
    Withdrawal,
    current_link,
    lease_link_ids,
    lease_links,
    no_current_link,
    orders_path,
    steps_within,
    stop,
    withdraw,
    withdraw_orders,
)
from servatus.operations.cancel import LeaseStep, check_names, plan_cancel, scancel
from servatus.operations.reconcile import (
    Resolution,
    claim_handoffs,
    decide_link,
    resolve,
    resolve_step,
)
from servatus.operations.submission import (
    Progress,
    SubmittedAllocation,
    batch_scripts,
    command,
    lease_scripts,
    ping,
    script_may_exceed,
    script_problem,
    script_room,
    step_orders,
    submit_allocations,
    submit_steps,
    unanswered,
)
from servatus.plugins import Hooks, hooks
from servatus.tasks import Roster, Task, bulk, check_unique, content_size
from servatus.transport import Connect, Transport

if TYPE_CHECKING:
    from servatus.engine.report import ReportData
    from servatus.launcher import Launcher
    from servatus.operations.doctor import Diagnosis

Probe = Callable[[tuple[Task, ...]], Collection[str]]
"""The result probe: given Tasks, the keys whose result is valid."""

_SHOWN_CONFLICTS = 5

NOT_OWN = 77
"""The exit of :data:`TAIL_OWN` for a log that is a link or not a regular file of the user's."""
TAIL_OWN = (
    'p=$4; if [ -h "$p" ] || { [ -e "$p" ] && { [ ! -f "$p" ] || [ ! -O "$p" ]; }; }; then '
    f'exit {NOT_OWN}; fi; exec /usr/bin/tail "$@"'
)
"""``sh -c TAIL_OWN tail -c N -- PATH``: the last N bytes of a log only if it is a regular file
of the user's, never what a link someone planted at its name points to (issue #30). A name
swapped between the test and ``tail``'s open, where others can rename entries in ``log_root``,
is not caught; the log is only shown to the user, never used."""


@attrs.frozen
class Submitted:
    """What ``submit`` did: one receipt per accepted allocation, in submission order."""

    receipts: tuple[SubmittedAllocation, ...]
    """Each allocation Slurm accepted, with its job number; empty for a plan of nothing."""
    held: tuple[tuple[str, Hold], ...] = ()
    """The plan's held Tasks with their holds, in roster order: what ``Campaign.start``
    names when it starts nothing."""


@attrs.frozen
class _Steps:
    """A plan of steps into a lease link, with what submitting it needs: what the reading
    settled, the link's intent and job, and each step's order."""

    plan: Plan
    change: records.Settled
    link: records.Intent
    job: int
    orders: dict[str, str]


def _settle_reading(writer: store.Writer, change: records.Settled) -> None:
    """Record what a Slurm reading under the lock settled, before anything is sent from it."""
    if change.allocations or change.listed:
        writer.settle(change)


def _send_steps(
    writer: store.Writer,
    transport: Transport,
    steps: _Steps,
    budget: int | None,
    progress: Progress | None,
) -> tuple[SubmittedAllocation, ...]:
    """Record what the plan's Slurm reading settled, then each step's intent and order."""
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
    )


@attrs.frozen
class ShapeCheck:
    """``sbatch --test-only`` of one allocation shape: its number of Tasks and its time limit
    (a chain's shorter last link is a shape of its own)."""

    tasks: int
    """How many Tasks the shape holds (a lease: its slots)."""
    accepted: bool
    """Whether Slurm accepted the request; a rejection is not an error here, the CLI exits 1."""
    message: str
    """The last line Slurm printed about it, or ``exit N`` when it printed nothing."""
    time_limit: int
    """The shape's time limit in seconds, whole minutes."""


@attrs.frozen
class Cancelled:
    """What ``cancel`` did: the allocations it asked Slurm to cancel, newest first; the lease
    steps whose orders it withdrew (they never start); the steps it asked their lease to stop."""

    allocations: tuple[str, ...]
    """The allocation ids ``scancel`` was run for, newest first."""
    withdrawn: tuple[str, ...] = ()
    """Lease steps taken back before their lease started them: they never run."""
    stopping: tuple[str, ...] = ()
    """Lease steps already running, asked to stop; their lease runs on."""


@attrs.frozen
class Authoring:
    """What one authoring command did: Tasks added, Tasks already present, and the result."""

    created: bool
    """Whether this command created the campaign."""
    added: int
    """Tasks new to the campaign, appended in the order given."""
    existing: int
    """Tasks given that the campaign already held, identical (they are skipped)."""
    total: int
    """Tasks the campaign holds now."""
    sealed: bool
    """Whether the campaign is sealed now."""

    def to_document(self) -> dict[str, Any]:
        return attrs.asdict(self)


def _split(state: records.CampaignState, batch: tuple[Task, ...]) -> tuple[tuple[Task, ...], int]:
    """New Tasks in order, and how many are already present identically; refuse changed ones."""
    present = state.tasks.by_key()
    new: list[Task] = []
    changed: list[str] = []
    for task in batch:
        old = present.get(task.key)
        if old is None:
            new.append(task)
        elif old != task:
            changed.append(task.key)
    if changed:
        shown = ", ".join(changed[:_SHOWN_CONFLICTS])
        more = (
            f" and {len(changed) - _SHOWN_CONFLICTS} more"
            if len(changed) > _SHOWN_CONFLICTS
            else ""
        )
        raise TaskConflict(
            f"{len(changed)} Task(s) differ from the Task already under the same key: {shown}{more}"
            "; keys are immutable, so give changed work a new key"
        )
    return tuple(new), len(batch) - len(new)


def _result(state: records.CampaignState, *, created: bool, added: int, existing: int) -> Authoring:
    return Authoring(created, added, existing, len(state.tasks), state.sealed)


def create_state(
    path: str | Path, tasks: Iterable[Task], *, appendable: bool = False
) -> tuple[records.CampaignState, Authoring]:
    """Create a campaign holding ``tasks``; refuse if one exists there (``TaskConflict``)."""
    batch = check_unique(tasks)
    with store.writing(path, create=True) as writer:
        if writer.state is not None:
            raise TaskConflict(f"a campaign already exists at {str(path)!r}")
        state = writer.initialize(store.new_campaign(batch, sealed=not appendable))
    return state, _result(state, created=True, added=len(batch), existing=0)


def check_fits(tasks: Iterable[Task], max_script_bytes: int) -> None:
    """Refuse a Task whose batch script could never fit ``max_script_bytes``: a script carries
    every byte of its Task's content (stdin, args, env), so content over the bound never fits."""
    for task in tasks:
        size = content_size(task)
        if size > max_script_bytes:
            raise ConfigurationError(
                f"Task {task.key!r} carries {size} bytes of stdin, args and env: its batch "
                f"script could never fit max_script_bytes ({max_script_bytes}); nothing was "
                "recorded"
            )


def ensure_state(
    path: str | Path,
    tasks: Iterable[Task],
    *,
    sealed: bool = False,
    max_script_bytes: int | None = None,
) -> tuple[records.CampaignState, Authoring]:
    """Create the campaign (appendable unless ``sealed``), or append the Tasks it has not seen.

    With ``sealed``, an existing appendable campaign is sealed after the append: asking for a
    sealed campaign and getting an appendable one would leave it open to later appends. The
    result's ``sealed`` says what the campaign is now. With ``max_script_bytes``, a Task whose
    script could never fit it is refused before anything is recorded (:func:`check_fits`).
    """
    batch = check_unique(tasks)
    if max_script_bytes is not None:
        check_fits(batch, max_script_bytes)
    with store.writing(path, create=True) as writer:
        state = writer.state
        if state is None:
            state = writer.initialize(store.new_campaign(batch, sealed=sealed))
            return state, _result(state, created=True, added=len(batch), existing=0)
        new, existing = _split(state, batch)
        if new:
            if state.sealed:
                raise TaskConflict(
                    f"campaign {str(path)!r} is sealed; {len(new)} new Task(s) cannot be added"
                )
            state = writer.commit(records.Appended(new))
        if sealed and not state.sealed:
            state = writer.commit(records.Sealed())
    return state, _result(state, created=False, added=len(new), existing=existing)


def append_state(
    path: str | Path, tasks: Iterable[Task]
) -> tuple[records.CampaignState, Authoring]:
    """Append the new ones of ``tasks`` to an appendable campaign; identical ones are skipped."""
    batch = check_unique(tasks)
    with store.writing(path) as writer:
        state = writer.state
        assert state is not None
        if state.sealed:
            raise TaskConflict(f"campaign {str(path)!r} is sealed; no Task can be appended")
        new, existing = _split(state, batch)
        if new:
            state = writer.commit(records.Appended(new))
    return state, _result(state, created=False, added=len(new), existing=existing)


def saved_plan_document(state: str | Path, plan: Plan) -> dict[str, Any]:
    """The document ``plan --output`` saves: the plan's, sealed with the campaign's plan key,
    which the first saved plan creates (ADR 0011)."""
    key = store.plan_key(state, create=True)
    assert key is not None
    return seal_document(plan_to_document(plan), key)


def read_saved_plan(state: str | Path, path: str | os.PathLike[str]) -> Plan:
    """A plan saved for campaign ``state``, to validate or submit (ADR 0011): the file must be
    the user's own and writable by no one else, checked on the descriptor it is read from, and
    its seal the one the campaign's plan key makes; anything else is refused in one line
    (:class:`~servatus.errors.UnsafeFilesystem` or :class:`~servatus.errors.StalePlan`)."""
    name = os.fspath(path)
    try:
        text = read_own(name, "a plan")
    except FileNotFoundError:
        raise ConfigurationError(f"no plan file {name}") from None
    except OSError as exc:
        raise from_os_error(exc, f"cannot read {name}") from None
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):
        raise StalePlan(f"{name}: not a JSON plan document (altered?)") from None
    check_seal(data, where=name, key=store.plan_key(state, create=False))
    return plan_from_document(data, where=name)


def seal_state(path: str | Path) -> tuple[records.CampaignState, Authoring]:
    """End authoring irreversibly; sealing a sealed campaign changes nothing."""
    with store.writing(path) as writer:
        state = writer.state
        assert state is not None
        if not state.sealed:
            state = writer.commit(records.Sealed())
    return state, _result(state, created=False, added=0, existing=len(state.tasks))


def _check_launches(
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


class Campaign:
    """A campaign directory and the state read from it.

    ``probe`` (the result probe) and ``connect`` (how Slurm is reached) are kept for planning and
    submission. The state is read once; authoring methods refresh it.

    :param path: The campaign directory, which must exist (:meth:`create` and :meth:`ensure`
        make one).
    :param probe: The result probe, called with Tasks to learn which keys have a valid result;
        plans hold those ``VALID``. None: no probe, no Task is ever ``VALID``.
    :param connect: How Slurm is reached: a :class:`~servatus.testing.FakeScheduler` in tests.
        None: over ``ssh`` for a Target with a ``host``, by running the commands here without.
    """

    def __init__(
        self,
        path: str | Path,
        *,
        probe: Probe | None = None,
        connect: Connect | None = None,
        _state: records.CampaignState | None = None,
    ) -> None:
        self.path = Path(path)
        """The campaign directory."""
        self.probe = probe
        """The result probe: given Tasks, the keys whose result is valid (None: no probe)."""
        self.connect = connect
        """How Slurm is reached, a Target in and a Transport out (None: the ``ssh`` transport for
        a Target with a ``host``, else ``local``)."""
        self.record_warning: str | None = None
        """Why the last read-only command could not record what it settled (a transient
        failure; a busy campaign is no failure), or None."""
        self._version = None if _state is not None else store.journal_version(self.path)
        self._state = store.read(self.path) if _state is None else _state

    @classmethod
    def create(
        cls,
        path: str | Path,
        tasks: Iterable[Task],
        *,
        appendable: bool = False,
        probe: Probe | None = None,
        connect: Connect | None = None,
    ) -> Campaign:
        """Create a campaign, sealed unless ``appendable``; refuse if one exists.

        :param path: The campaign directory to make; its parent must exist.
        :param tasks: The Tasks, in order; keys must be unique.
        :param appendable: Allow :meth:`append` later; otherwise the campaign is sealed at once.
        :param probe: The result probe, called with Tasks to learn which keys have a valid result;
            plans hold those ``VALID``. None: no probe, no Task is ever ``VALID``.
        :param connect: How Slurm is reached: a :class:`~servatus.testing.FakeScheduler` in tests.
            None: over ``ssh`` for a Target with a ``host``, by running the commands here without.
        """
        state, _ = create_state(path, tasks, appendable=appendable)
        return cls(path, probe=probe, connect=connect, _state=state)

    @classmethod
    def ensure(
        cls,
        path: str | Path,
        tasks: Iterable[Task],
        *,
        sealed: bool = False,
        probe: Probe | None = None,
        connect: Connect | None = None,
        profile: Profile | None = None,
    ) -> Campaign:
        """Create (appendable unless ``sealed``) or append unseen Tasks, then seal if ``sealed``;
        safe to rerun. With ``profile``, a Task whose batch script could never fit its
        ``max_script_bytes`` is refused (ConfigurationError) before anything is recorded.

        :param path: The campaign directory, made if it does not exist.
        :param tasks: The Tasks; a key already present must hold an identical Task
            (:class:`~servatus.errors.TaskConflict` otherwise), new keys are appended in order.
        :param sealed: Seal the campaign afterwards, so that no Task can be added again.
        :param probe: The result probe, called with Tasks to learn which keys have a valid result;
            plans hold those ``VALID``. None: no probe, no Task is ever ``VALID``.
        :param connect: How Slurm is reached: a :class:`~servatus.testing.FakeScheduler` in tests.
            None: over ``ssh`` for a Target with a ``host``, by running the commands here without.
        :param profile: The profile whose ``max_script_bytes`` each Task must fit; None checks
            nothing until planning.
        """
        bound = profile.target.max_script_bytes if profile is not None else None
        state, _ = ensure_state(path, tasks, sealed=sealed, max_script_bytes=bound)
        return cls(path, probe=probe, connect=connect, _state=state)

    @classmethod
    def open(
        cls, path: str | Path, *, probe: Probe | None = None, connect: Connect | None = None
    ) -> Campaign:
        """Open an existing campaign.

        :param path: The campaign directory.
        :param probe: The result probe, called with Tasks to learn which keys have a valid result;
            plans hold those ``VALID``. None: no probe, no Task is ever ``VALID``.
        :param connect: How Slurm is reached: a :class:`~servatus.testing.FakeScheduler` in tests.
            None: over ``ssh`` for a Target with a ``host``, by running the commands here without.
        """
        return cls(path, probe=probe, connect=connect)

    @property
    def state(self) -> records.CampaignState:
        return self._state

    @property
    def tasks(self) -> Roster:
        """The roster, in the order Tasks were added."""
        return self._state.tasks

    @property
    def sealed(self) -> bool:
        """No Task can be added any more (:meth:`seal`, or created without ``appendable``)."""
        return self._state.sealed

    @property
    def appendable(self) -> bool:
        """Tasks can still be added: the opposite of :attr:`sealed`."""
        return not self._state.sealed

    def task(self, key: str) -> Task:
        """The Task under ``key``; KeyError if there is none.

        :param key: The Task's key.
        """
        return self._state.tasks.by_key()[key]

    def append(self, tasks: Iterable[Task]) -> Authoring:
        """Append new Tasks (identical existing ones are skipped); refused once sealed.

        :param tasks: The Tasks to add, in order; one that differs from the Task already under
            its key is refused (:class:`~servatus.errors.TaskConflict`) and nothing is added.
        """
        self._state, done = append_state(self.path, tasks)
        return done

    def seal(self) -> Authoring:
        """End authoring irreversibly."""
        self._state, done = seal_state(self.path)
        return done

    def refresh(self) -> None:
        """Read the state again, for changes made by other processes (unless the journal is
        unchanged since it was read: reading a large campaign costs far more than a ``stat``)."""
        version = store.journal_version(self.path)
        if version is not None and version == self._version:
            return
        self._state = store.read(self.path)
        self._version = version

    # -- the Slurm lane ----------------------------------------------------------------------

    def _hooks(self) -> Hooks:
        return hooks()

    def _connector(self) -> Connect:
        if self.connect is not None:
            return self.connect
        registry = self._hooks()

        def connect(target: Target) -> Transport:
            return registry.transport("ssh" if target.host else "local").connect(target)

        return connect

    def _gather(
        self,
        recorded: Iterable[Submission],
        asked: Mapping[str, MarkerQuery] | None = None,
        targets: Iterable[str] = (),
    ) -> dict[str, Evidence]:
        """One ``squeue`` and one run-marker listing per Target of ``targets`` and of
        ``recorded``; ``asked`` bounds the marker listings
        (:func:`servatus.engine.settlement.queries`)."""
        return gather(
            itertools.chain(targets, (item.target for item in recorded)),
            self._connector(),
            self._hooks().evidence_reader(),
            asked,
        )

    def _report(
        self,
        state: records.CampaignState,
        *,
        offline: bool,
        evidence: Mapping[str, Evidence] | None = None,
    ) -> Report:
        if evidence is None:
            return self._observe(state, offline=offline)[0]
        with bulk():  # hundreds of thousands of acyclic values: no full GC passes over them
            recorded = submissions(state)
            return self._project(state, recorded, evidence, offline=offline)

    def _project(
        self,
        state: records.CampaignState,
        recorded: Sequence[Submission],
        evidence: Mapping[str, Evidence],
        *,
        offline: bool = False,
        now: float | None = None,
    ) -> Report:
        report = project(
            state.tasks.keys,
            recorded,
            evidence,
            now=time.time() if now is None else now,
            offline=offline,
            state=str(self.path),
        )
        unclocked = clock_warnings(evidence)  # per Target: cheap, and almost always empty
        running = (Execution.RUNNING, Execution.ENDING)
        if unclocked and any(task.execution in running for task in report.tasks):
            report = attrs.evolve(report, warnings=(*report.warnings, *unclocked))
        return report

    def _observe(
        self,
        state: records.CampaignState,
        *,
        offline: bool,
        targets: Sequence[str] = (),
        evidence: Mapping[str, Evidence] | None = None,
    ) -> tuple[Report, records.Settled, dict[str, Evidence]]:
        """The projection, what it shows settled (with the listings it read), and the evidence.
        The marker listing asks only for the markers of allocations not settled yet. ``targets``
        are listed first, also those none of ``state``'s intents name; ``evidence``, read
        already for the same state (or a part of it with the same targets), is used instead."""
        with bulk():  # hundreds of thousands of acyclic values: no full GC passes over them
            recorded = submissions(state)
            if offline:
                return self._project(state, recorded, {}, offline=True), records.Settled(()), {}
            if evidence is None:
                evidence = self._gather(recorded, queries(state, recorded, targets), targets)
            report = self._project(state, recorded, evidence)
            change = records.Settled(settle(report, recorded), listed(evidence))
            return report, change, dict(evidence)

    def _record(self, change: records.Settled, *, partial: bool = False) -> None:
        """Record what a read-only command found settled, only if the lock is free at once: a
        busy campaign is left for the next command, and a failed write costs a warning, never
        the answer. ``partial``: the state held is the status cache's remainder."""
        self.record_warning = None
        if not change.allocations:
            return
        known = (self._version, self._state)
        try:
            with store.writing(self.path, known=known, partial=partial) as writer:
                writer.settle(change)
        except Busy:
            return
        except ServatusError as exc:
            self.record_warning = f"what settled was not recorded ({exc}); the next command retries"

    def status(self, *, offline: bool = False) -> Report:
        """Each Task's state from the record and, unless ``offline``, one ``squeue`` and one
        run-marker listing per Target (of the markers of allocations not yet settled); records
        what it finds settled when it can without waiting.

        :param offline: Ask Slurm nothing and read no markers: only what the campaign recorded
            (accepted work reads ``ACCEPTED``, run times are unknown).
        """
        self.refresh()
        report, change, _ = self._observe(self._state, offline=offline)
        self._record(change)
        return report

    def report(self, *, offline: bool = False) -> ReportData:
        """The picture's data (:class:`~servatus.report.ReportData`): what :meth:`status` reads
        (the same two listings, recording what settled the same way) with the times between.

        :param offline: Read only what the campaign recorded, as ``status --offline`` does; a
            report still draws the outcomes the campaign has settled.
        """
        from servatus.engine.report import build  # noqa: PLC0415 - loaded only for a report

        projected = self.status(offline=offline)
        return build(self._state, projected, now=time.time())

    def valid_keys(self, tasks: Sequence[Task] | None = None) -> frozenset[str]:
        """The keys the probe reports valid (none without a probe).

        :param tasks: The Tasks to ask about; None asks about the whole roster.
        """
        if self.probe is None:
            return frozenset()
        return frozenset(self.probe(tuple(self._state.tasks if tasks is None else tasks)))

    def _make_plan(
        self,
        state: records.CampaignState,
        profile: Profile,
        request: Request,
        continuation: Continuation | None = None,
    ) -> tuple[Plan, records.Settled]:
        launcher = self._launcher(profile)
        consult = consults(request, continuation, resolved=bool(state.resolutions))
        report, change, _ = self._observe(state, offline=not consult)
        made = self._decide(
            state, profile, request, continuation, work_from_report(report), report.warnings
        )
        self._check(state, profile, made, launcher)
        return made, change

    def _launcher(self, profile: Profile) -> Launcher:
        """The profile's launcher, the profile held to SERVATUS.toml's rules: both refused
        before Slurm is read."""
        _usable(profile)
        return self._hooks().launcher(profile.target.launcher)

    def _decide(
        self,
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
        valid = self.valid_keys(state.tasks) if self.probe is not None else frozenset()
        return make_plan(
            campaign_id=state.campaign_id,
            revision=state.revision,
            keys=state.tasks.keys if keys is None else keys,
            profile=profile,
            request=request,
            work=work,
            warnings=warnings,
            valid=valid,
            probe=self.probe is not None,
            now=time.time(),
            continuation=continuation,
        )

    def _check(
        self, state: records.CampaignState, profile: Profile, made: Plan, launcher: Launcher
    ) -> None:
        """Refuse a plan whose launcher or batch scripts ``submit`` would refuse; ``state``
        holds (at least) the selected Tasks."""
        _check_launches(state, profile.target, launcher, made.decision.selected)
        self._check_scripts(state, profile, made, launcher)

    def _check_scripts(
        self, state: records.CampaignState, profile: Profile, made: Plan, launcher: Launcher
    ) -> None:
        """Refuse a plan whose batch script ``submit`` would refuse, in its Tasks' terms; only
        the allocations whose content could reach ``max_script_bytes`` are rendered."""
        roster, index, registry = state.tasks, state.tasks.by_key(), self._hooks()
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
                if len(problems) == _SHOWN_CONFLICTS:
                    problems.append("(further allocations not checked)")
                    break
        if problems:
            raise ConfigurationError("; ".join(problems))

    def plan(
        self,
        profile: Profile | None = None,
        *,
        lease: str | None = None,
        retry: Iterable[str] = (),
        retry_failed: bool = False,
        only: Iterable[str] | None = None,
        tasks_per_allocation: int | None = None,
        continuation: Continuation | None = None,
    ) -> Plan:
        """Select, hold and pack Tasks for ``profile``; nothing is recorded or submitted.

        With a ``continuation`` (a lifetime budget per Task, a number of links, or both) each
        allocation becomes a chain of links; a budget needs the profile's ``signal_before_end``.

        With ``lease`` (any link id of a submitted lease) and no profile, the selected Tasks are
        one-slot steps in the lease's current link, in the slot its intent recorded; a
        continuation may then carry only a budget (``SERVATUS_BUDGET``, Tasks held ``SPENT``).

        :param profile: Where and with what resources the Tasks run (:meth:`Profile.load`);
            required unless ``lease`` is given, and refused with it.
        :param lease: The id of a submitted lease (any of its links) to start the selected Tasks
            in, as ``plan --lease``.
        :param retry: Keys to run again although they already ran (``--retry``), ``LOST`` ones
            included; an unknown key, a valid result, a Task never accepted or one whose work
            Slurm still lists refuses the plan (:class:`~servatus.errors.PlanRefused`).
        :param retry_failed: Also select every Task whose current work is ``FAILED`` or
            ``STOPPED`` (never ``LOST``), as ``--retry-failed``.
        :param only: Restrict the plan to these keys (``--only``); the other Tasks are held
            ``NOT_REQUESTED``. None: every Task may be selected.
        :param tasks_per_allocation: Pack at most this many Tasks into one allocation, below
            what the profile's ceilings allow; None packs as many as fit.
        :param continuation: A lifetime budget per Task, a number of links, or both
            (``--budget``, ``--max-links``); None plans plain allocations.
        """
        self.refresh()
        request = make_request(
            retry,
            retry_failed=retry_failed,
            only=only,
            tasks_per_allocation=tasks_per_allocation,
        )
        if lease is not None:
            request = attrs.evolve(request, tasks_per_allocation=None)
            if profile is not None:
                raise ConfigurationError("a plan into a lease takes no profile: it is the lease's")
            if tasks_per_allocation is not None:
                raise ConfigurationError("a step in a lease holds one Task; no packing applies")
            if continuation is not None and continuation.max_links is not None:
                raise ConfigurationError("a step runs in the lease link it was started in")
            budget = None if continuation is None else continuation.budget
            steps = self._make_step_plan(self._state, lease, request, budget)
            self._record(steps.change)
            return steps.plan
        if profile is None:
            raise ConfigurationError("plan needs a profile, or a lease to start steps in")
        made, change = self._make_plan(self._state, profile, request, continuation)
        self._record(change)
        return made

    def _make_step_plan(
        self, state: records.CampaignState, lease_id: str, request: Request, budget: int | None
    ) -> _Steps:
        """A plan of steps into the current link of the lease ``lease_id`` names, from one
        Slurm reading, with each step's order rendered (an order ``submit`` could not send is
        refused here)."""
        links = lease_links(state.intents, lease_id)
        recorded = submissions(state)
        jobs = {item.allocation_id: item.job for item in recorded if item.job is not None}
        identity = state.target_identities()[links[0].target]
        report, change, evidence = self._observe(state, offline=False)
        reading = evidence.get(identity, Evidence(None, None))
        current = current_link(
            [(i.allocation_id, jobs.get(i.allocation_id)) for i in links], reading
        )
        if current is None:
            pending = {item.allocation_id for item in recorded if item.outcome is Outcome.PENDING}
            if any(intent.allocation_id in pending for intent in links):
                raise ConfigurationError(
                    f"lease {lease_id}: its submission is unresolved; run servatus reconcile "
                    "first, then start steps in it"
                )
            raise ConfigurationError(no_current_link(lease_id))
        link = next(intent for intent in links if intent.allocation_id == current)
        terms = link.lease
        assert terms is not None
        target = target_from_identity(identity)
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
        valid = self.valid_keys(state.tasks) if self.probe is not None else frozenset()
        made = make_step_plan(
            campaign_id=state.campaign_id,
            revision=state.revision,
            salt=str(len(state.intents)),
            within=current,
            keys=state.tasks.keys,
            profile=profile,
            request=request,
            report=report,
            stepped=stepped,
            valid=valid,
            probe=self.probe is not None,
            now=time.time(),
            budget=budget,
        )
        launcher = self._hooks().launcher(target.launcher)
        _check_launches(state, target, launcher, made.decision.selected)
        measured = {task.key: task.run_time.total for task in report.tasks if task.run_time}
        orders = step_orders(
            self._hooks(),
            profile,
            current,
            made.allocations,
            state.tasks.by_key(),
            launcher,
            run_times={**measured, **made.decision.spent},
            budget=budget,
        )
        return _Steps(made, change, link, jobs[current], orders)

    def hold(self, profile: Profile, *, slots: int, max_links: int | None = None) -> Plan:
        """Plan a lease (ADR 0009): ``slots`` copies of the profile's per-Task resources, in
        ``max_links`` allocations one after the other (1 without it); nothing is recorded or
        submitted until :meth:`submit` of the plan.

        :param profile: The profile whose per-Task resources make one slot.
        :param slots: How many slots the lease holds, each of which runs one step at a time
            (``--hold N``).
        :param max_links: How many leases to queue one after the other (``--max-links``); None
            queues one.
        """
        _usable(profile)
        self.refresh()
        return make_lease_plan(
            campaign_id=self._state.campaign_id,
            revision=self._state.revision,
            profile=profile,
            hold=LeaseHold(slots=slots, links=1 if max_links is None else max_links),
            probe=self.probe is not None,
            now=time.time(),
        )

    def scripts(self, plan: Plan) -> list[str]:
        """The batch script of each planned allocation, exactly as ``submit`` sends it (a
        lease's: each link's lease script).

        :param plan: A plan this campaign made (not one of steps in a lease, which has none).
        """
        registry = self._hooks()
        if plan.within is not None:
            raise ConfigurationError(
                "a plan of steps in a lease has no batch scripts: its steps are orders to the "
                "lease's own"
            )
        index = self._state.tasks.by_key()
        unknown = [key for a in plan.allocations for key in a.task_keys if key not in index]
        if plan.campaign_id != self._state.campaign_id or unknown:
            raise StalePlan(
                "the plan is not of this campaign (or names Tasks it lacks); plan again"
            )
        if plan.hold is not None:  # a lease's allocations name no Task
            return lease_scripts(registry, plan.profile, plan.allocations, plan.hold.slots)
        launcher = registry.launcher(plan.profile.target.launcher)
        budget, spent = _chain_arguments(plan)
        return batch_scripts(
            registry, plan.profile, plan.allocations, index, launcher, budget=budget, spent=spent
        )

    def plan_document(self, plan: Plan) -> dict[str, Any]:
        """The document ``plan --output`` saves for ``plan``, sealed with this campaign's plan
        key (made by the first call): write it as JSON to a file of yours.

        :param plan: A plan this campaign made.
        """
        return saved_plan_document(self.path, plan)

    def read_plan(self, path: str | os.PathLike[str]) -> Plan:
        """A plan saved for this campaign, as ``submit STATE PLAN`` reads it: refused unless the
        file is yours, writable by no one else, and sealed with this campaign's plan key.

        :param path: The saved plan's file.
        """
        return read_saved_plan(self.path, path)

    def submit(self, plan: Plan, *, progress: Progress | None = None) -> Submitted:
        """Submit exactly the reviewed plan, or refuse it as stale.

        Under the campaign's lock: the plan must match the current state (same revision, and a
        rebuild gives the same plan); Slurm must answer a ping; only then is each intent recorded
        before its ``sbatch``.

        :param plan: The plan to send, from :meth:`plan`, :meth:`hold` or :meth:`read_plan`; a
            plan made before the campaign last changed is refused
            (:class:`~servatus.errors.StalePlan`).
        :param progress: Called after each accepted allocation, to show progress as the
            command line does.
        """
        if plan.probe and self.probe is None:
            raise PlanRefused(
                "this plan was made with a result probe; submit it from a Campaign with the probe"
            )
        with store.writing(self.path) as writer:
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
            connect = self._connector()
            transport = connect(plan.profile.target)
            try:
                ping(transport, plan.profile.target)
                submitting = (
                    self._submit_lease
                    if plan.hold is not None
                    else self._submit_steps
                    if plan.within is not None
                    else self._submit_tasks
                )
                receipts = submitting(writer, transport, state, plan, progress)
            finally:
                transport.close()
        self.refresh()
        return Submitted(receipts=receipts, held=plan.decision.held)

    def _submit_tasks(
        self,
        writer: store.Writer,
        transport: Transport,
        state: records.CampaignState,
        plan: Plan,
        progress: Progress | None,
    ) -> tuple[SubmittedAllocation, ...]:
        """A plan of Tasks, once a rebuild from this state and Slurm's view gives the same."""
        rebuilt, change = self._make_plan(
            state, plan.profile, plan.request, plan.decision.continuation
        )
        if not rebuilt.same_as(plan):
            raise StalePlan("the plan no longer matches the campaign and Slurm; plan again")
        _settle_reading(writer, change)  # the listing precedes the intents
        budget, spent = _chain_arguments(plan)
        return submit_allocations(
            writer,
            transport,
            self._hooks(),
            plan.profile,
            plan.allocations,
            state.tasks.by_key(),
            self._hooks().launcher(plan.profile.target.launcher),
            plan_digest=plan_to_document(plan)["digest"],
            target_identity=target_identity(plan.profile.target),
            progress=progress,
            budget=budget,
            spent=spent,
            short=_stopping_short(plan),
        )

    def _submit_steps(
        self,
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
        steps = self._make_step_plan(state, plan.within, plan.request, budget)
        if not steps.plan.same_as(plan):
            raise StalePlan(
                "the plan no longer matches the campaign, the lease and Slurm; plan again"
            )
        return _send_steps(writer, transport, steps, budget, progress)

    def start(
        self,
        tasks: Iterable[Task],
        *,
        lease: str,
        retry: Iterable[str] = (),
        retry_failed: bool = False,
        budget: str | int | None = None,
        progress: Progress | None = None,
    ) -> Submitted:
        """Register ``tasks`` as :meth:`ensure` would (a changed Task under an existing key is
        refused, and nothing is recorded), then plan exactly their keys into the lease and
        submit them: ``servatus start``.

        :param tasks: The Tasks to start; new keys are added to the campaign first.
        :param lease: The id of a submitted lease (any of its links): the steps start in its
            current link.
        :param retry: Keys of ``tasks`` to start again although they already ran.
        :param retry_failed: Also start the Tasks of ``tasks`` whose current work is ``FAILED``
            or ``STOPPED``.
        :param budget: Each step's lifetime run-time budget, seconds or ``[D-]HH:MM:SS`` text
            (``SERVATUS_BUDGET``); a Task whose run time leaves no room is held ``SPENT``.
        :param progress: Called as each step is accepted, as for :meth:`submit`.
        """
        batch = check_unique(tasks)
        keys = {task.key for task in batch}
        retry = tuple(retry)
        for key in retry:
            if key not in keys:
                raise ConfigurationError(
                    f"--retry {key}: not a key of the Tasks file; start plans exactly the "
                    "file's keys"
                )
        self.refresh()
        lease_links(self._state.intents, lease)  # an unknown lease registers nothing
        seconds = None if budget is None else Continuation(budget=budget).budget
        request = make_request(retry, retry_failed=retry_failed, only=[t.key for t in batch])
        new, _ = _split(self._state, batch)
        if new:
            self.append(new)
        # One lock holds the plan and its sending: no other start, cancel or Slurm reading can
        # come between them, so nobody reviewed a plan that could go stale.
        with store.writing(self.path) as writer:
            state = writer.state
            assert state is not None
            steps = self._make_step_plan(state, lease, request, seconds)
            plan = steps.plan
            if not plan.allocations:
                _settle_reading(writer, steps.change)
                receipts: tuple[SubmittedAllocation, ...] = ()
            else:
                transport = self._connector()(plan.profile.target)
                try:
                    ping(transport, plan.profile.target)
                    receipts = _send_steps(writer, transport, steps, seconds, progress)
                finally:
                    transport.close()
        self.refresh()
        return Submitted(receipts=receipts, held=plan.decision.held)

    def _submit_lease(
        self,
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
            self._hooks(),
            plan.profile,
            plan.allocations,
            {},
            self._hooks().launcher(plan.profile.target.launcher),
            plan_digest=plan_to_document(plan)["digest"],
            target_identity=target_identity(plan.profile.target),
            progress=progress,
            lease=plan.hold.slots,
        )

    def validate(
        self, plan: Plan, *, progress: Callable[[ShapeCheck], None] | None = None
    ) -> tuple[ShapeCheck, ...]:
        """``sbatch --test-only`` once per distinct allocation shape (its number of Tasks and
        its time limit), after a ping: a missing ``sbatch`` or a silent Slurm is ``Unavailable``,
        not a rejection. ``progress`` gets each check as it is made.

        :param plan: A plan this campaign made; its batch scripts are what Slurm judges.
        :param progress: Called with each :class:`~servatus.campaign.ShapeCheck` as it is made.
        """
        scripts = self.scripts(plan)
        shapes: dict[tuple[int, int], str] = {}
        for (tasks, limit), index in shape_indexes(plan).items():
            shapes[tasks, limit] = scripts[index]
        transport = self._connector()(plan.profile.target)
        checks = []
        try:
            if shapes:  # as submit does: Slurm that does not answer rejects no shape
                ping(transport, plan.profile.target)
            for (tasks, limit), script in sorted(shapes.items()):
                result = transport.run(
                    [command(plan.profile.target, "sbatch"), "--test-only"],
                    stdin=script.encode("utf-8", "surrogateescape"),
                )
                said = (result.stderr or result.stdout).decode("utf-8", "replace").strip()
                if unanswered(result):
                    raise Unavailable(
                        f"sbatch --test-only of the {tasks}-Task shape for "
                        f"{format_duration(limit)} got no answer from Slurm "
                        f"({said.splitlines()[-1]}); the shape was not judged"
                    )
                check = ShapeCheck(
                    tasks=tasks,
                    accepted=result.returncode == 0,
                    message=said.splitlines()[-1] if said else f"exit {result.returncode}",
                    time_limit=limit,
                )
                checks.append(check)
                if progress is not None:
                    progress(check)
        finally:
            transport.close()
        return tuple(checks)

    def reconcile(
        self, *, progress: Callable[[Resolution], None] | None = None
    ) -> tuple[Resolution, ...]:
        """Decide every unresolved allocation from Slurm's evidence; record what is decided.

        An intent too young to decide comes back as ``waiting`` with the time its evidence will
        be conclusive (the CLI exits 75 then); rerunning is always safe. ``progress`` gets each
        decision once it is recorded (a waiting one at once: nothing is recorded for it). A
        chain the decisions leave cut short, its later links never sent, is a
        :class:`~servatus.errors.StateWarning` naming the plan that continues it.

        :param progress: Called with each :class:`~servatus.reconcile.Resolution` as it is
            decided.
        """
        with store.writing(self.path) as writer:
            state = writer.state
            assert state is not None
            recorded = submissions(state)
            pending = [s for s in recorded if s.outcome is Outcome.PENDING]
            if not pending:
                self._state = state
                return ()
            now = time.time()
            evidence = self._gather(pending, queries(state, recorded))
            within = steps_within(state.intents)
            decisions = resolve(
                [s for s in pending if s.allocation_id not in within], evidence, now=now
            )
            decisions = self._withhold_handoffs(decisions, recorded, now=now)
            for decision in decisions:
                if decision.outcome != "waiting":
                    writer.add(records.Resolved(decision.allocation_id, decision.job))
                if progress is not None:
                    progress(decision)
            # A lease link just decided gives its steps their job in the same run.
            jobs = {s.allocation_id: s.job for s in recorded if s.job is not None}
            jobs.update((d.allocation_id, d.job) for d in decisions if d.job is not None)
            never = {s.allocation_id for s in recorded if s.outcome is Outcome.NOT_SUBMITTED}
            never.update(d.allocation_id for d in decisions if d.outcome == "not_submitted")
            for decision in self._resolve_steps(
                [s for s in pending if s.allocation_id in within],
                within,
                jobs,
                never,
                evidence,
                now=now,
            ):
                if decision.outcome != "waiting":
                    writer.add(records.Resolved(decision.allocation_id, decision.job))
                decisions.append(decision)
                if progress is not None:
                    progress(decision)
            # The same listings settle what they show final, the allocations just decided
            # included; a Target not listed here projects offline and settles nothing.
            state = writer.state
            assert state is not None
            recorded = submissions(state)
            report = self._project(state, recorded, evidence, now=now)
            found = settle(report, recorded)
            if found:
                writer.settle(records.Settled(found, listed(evidence)))
        self.refresh()
        for cut in cut_chain_warnings(recorded, report.tasks, str(self.path)):
            warnings.warn(StateWarning(cut), stacklevel=2)
        return tuple(decisions)

    def _withhold_handoffs(
        self, decisions: Sequence[Resolution], recorded: Sequence[Submission], *, now: float
    ) -> list[Resolution]:
        """Before a later chain link is recorded as never submitted, claim the handoffs it
        would take (ADR 0005): a late ``sbatch`` of it then runs nothing, and a claim it made
        first shows it was accepted after all
        (:func:`~servatus.operations.reconcile.decide_link`)."""
        by_id = {s.allocation_id: s for s in recorded}
        decided: list[Resolution] = []
        connect = self._connector()
        for decision in decisions:
            link = by_id[decision.allocation_id]
            chain = link.chain
            before = by_id.get(chain.after) if chain is not None and chain.after else None
            if decision.outcome != "not_submitted" or link.slots is not None or before is None:
                decided.append(decision)
                continue
            if before.job is None:  # its predecessor never ran: nothing to hand on
                decided.append(decision)
                continue
            target = target_from_identity(link.target)
            claims = None
            with contextlib.suppress(Unavailable):
                transport = connect(target)
                try:
                    claims = claim_handoffs(
                        transport,
                        target.log_root,
                        before.allocation_id,
                        before.job,
                        range(len(link.task_keys)),
                    )
                finally:
                    transport.close()
            decided.append(decide_link(decision, claims, now=now))
        return decided

    def _resolve_steps(
        self,
        steps: Sequence[Submission],
        within: Mapping[str, str],
        jobs: Mapping[str, int],
        never: Collection[str],
        evidence: Mapping[str, Evidence],
        *,
        now: float,
    ) -> list[Resolution]:
        """Withdraw each unresolved step by its claim, one command per lease link, and decide it
        by the verdict (:func:`~servatus.operations.reconcile.resolve_step`). A step of a lease link
        recorded as never submitted was never offered; one of a link still unresolved waits."""
        grouped: dict[str, list[Submission]] = {}
        for step in steps:
            grouped.setdefault(within[step.allocation_id], []).append(step)
        decisions: list[Resolution] = []
        connect = self._connector()
        for lease_id, group in grouped.items():
            job = jobs.get(lease_id)
            if job is None:
                outcome = "not_submitted" if lease_id in never else "waiting"
                retry = None if lease_id in never else now
                decisions += [Resolution(s.allocation_id, outcome, retry_at=retry) for s in group]
                continue
            target = target_from_identity(group[0].target)
            withdrawal: Withdrawal | None
            try:
                transport = connect(target)
                try:
                    withdrawal = withdraw_orders(
                        transport,
                        orders_path(target.log_root, lease_id),
                        job,
                        [s.allocation_id for s in group],
                    )
                finally:
                    transport.close()
            except Unavailable:
                withdrawal = None
            item = evidence.get(group[0].target)
            decisions += [
                resolve_step(step, lease_id, job, withdrawal, item, now=now) for step in group
            ]
        return decisions

    def cancel(
        self,
        *,
        tasks: Iterable[str] = (),
        allocations: Iterable[str] = (),
        progress: Callable[[str], None] | None = None,
        steps: Callable[[str, str], None] | None = None,
    ) -> Cancelled:
        """``scancel`` every matching allocation Slurm lists as queued or running, newest first;
        a step in a lease is withdrawn by its claim instead, or, if the lease took it, asked to
        stop (the lease stays). A lease link first has its untaken orders withdrawn.

        Everything is tried; ``progress`` gets each allocation cancelled, and ``steps`` each
        step withdrawn or stopping (``"withdrawn"`` or ``"stopping"``, then its id), as it is.
        If a ``scancel`` fails or a step's claim cannot be read,
        :class:`~servatus.errors.Unavailable` names what was and was not done.

        :param tasks: Keys whose work to stop: every allocation of theirs Slurm still lists, or
            their step in a lease.
        :param allocations: Allocation ids to cancel, as ``status`` shows them; a lease's id
            ends the lease and every step in it.
        :param progress: Called with each allocation id once it is cancelled.
        :param steps: Called with ``"withdrawn"`` or ``"stopping"`` and the step's id, for each
            step in a lease.
        """
        self.refresh()
        tasks, allocations = tuple(tasks), tuple(allocations)
        if not tasks and not allocations:
            raise ConfigurationError("name at least one --task or --allocation to cancel")
        state = self._state
        recorded = submissions(state)
        check_names(recorded, state.tasks.by_key(), tasks=tasks, allocations=allocations)
        report, change, evidence = self._observe(state, offline=False)
        self._record(change)
        chosen = plan_cancel(
            report,
            recorded,
            evidence,
            tasks=tasks,
            allocations=allocations,
            within=steps_within(state.intents),
            leases=lease_link_ids(state.intents),
        )
        done: list[str] = []
        withdrawn: list[str] = []
        stopping: list[str] = []
        failed: list[str] = []
        connect = self._connector()

        def stepped(word: str, step: LeaseStep, into: list[str]) -> None:
            into.append(step.step_id)
            if steps is not None:
                steps(word, step.step_id)

        for (identity, lease_id, job), group in _by_lease((*chosen.stop, *chosen.withdraw)).items():
            target = target_from_identity(identity)
            directory = orders_path(target.log_root, lease_id)
            to_stop = {step.step_id for step in chosen.stop}
            try:
                transport = connect(target)
                try:
                    verdicts = withdraw(transport, directory, job, [s.step_id for s in group])
                    taken = [
                        s
                        for s in group
                        if verdicts[s.step_id] is Verdict.TAKEN and s.step_id in to_stop
                    ]
                    requested = stop(transport, directory, [s.step_id for s in taken])
                finally:
                    transport.close()
            except Unavailable as exc:
                failed.extend(f"step {s.step_id} ({exc})" for s in group)
                continue
            for step in group:
                verdict = verdicts[step.step_id]
                if verdict is Verdict.WITHDRAWN:
                    stepped("withdrawn", step, withdrawn)
                elif verdict is Verdict.UNDECIDED:
                    failed.append(f"step {step.step_id} (its claim could not be read)")
                elif requested.get(step.step_id):
                    stepped("stopping", step, stopping)
                elif step.step_id in requested:
                    failed.append(f"step {step.step_id} (its stop request was not written)")
        for submission in chosen.scancel:
            target = target_from_identity(submission.target)
            try:
                transport = connect(target)
                try:
                    scancel(transport, target, submission.allocation_id)
                finally:
                    transport.close()
            except Unavailable as exc:
                failed.append(f"{submission.allocation_id} ({exc})")
            else:
                done.append(submission.allocation_id)
                if progress is not None:
                    progress(submission.allocation_id)
        if failed:
            did = [
                *done,
                *(f"withdrew {s}" for s in withdrawn),
                *(f"stopping {s}" for s in stopping),
            ]
            raise Unavailable(
                f"cancelled {', '.join(did) or 'nothing'}; NOT cancelled: {'; '.join(failed)}"
            )
        return Cancelled(tuple(done), tuple(withdrawn), tuple(stopping))

    def logs(
        self,
        *,
        tasks: Sequence[str] = (),
        allocations: Sequence[str] = (),
        size: int = 65536,
    ) -> bytes:
        """The last ``size`` bytes of each requested log, one after another.

        ``tasks`` alone: each Task's step log in its current allocation; ``allocations`` alone:
        each allocation log; both: each Task's step log in each named allocation.

        :param tasks: Keys whose step logs to read.
        :param allocations: Allocation ids whose logs to read.
        :param size: How many bytes, at most, from the end of each log.
        """
        self.refresh()
        if not tasks and not allocations:
            raise ConfigurationError("name at least one --task or --allocation")
        recorded = {item.allocation_id: item for item in submissions(self._state)}
        wanted: list[tuple[str, str | None]] = []
        for allocation_id in allocations:
            if allocation_id not in recorded:
                raise ConfigurationError(
                    f"no allocation {shlex.quote(allocation_id)} in this campaign"
                )
        keys = self._state.tasks.by_key()
        for key in tasks:
            if key not in keys:
                raise ConfigurationError(f"no Task {shlex.quote(key)} in this campaign")
        if tasks and allocations:
            wanted = [(a, key) for a in allocations for key in tasks]
        elif allocations:
            # A step has no allocation log: its one log is its Task's step log.
            steps = {i.allocation_id for i in self._state.intents if i.within is not None}
            wanted = [(a, recorded[a].task_keys[0] if a in steps else None) for a in allocations]
        else:
            # A chain's current link is known only from its markers (ADR 0006): offline, every
            # chain reads its link 1. A plain Task's current allocation needs no Slurm.
            named = set(tasks)
            chained = any(
                item.chain is not None and named.intersection(item.task_keys)
                for item in recorded.values()
            )
            report = self._report(self._state, offline=not chained)
            current = {t.key: t.allocation_id for t in report.tasks}
            for key in tasks:
                if current.get(key) is None:
                    raise ConfigurationError(f"Task {key} has no accepted allocation yet")
                wanted.append((str(current[key]), key))
        reader = self._hooks().evidence_reader()
        connect = self._connector()
        chunks = []
        for allocation_id, wanted_key in wanted:
            submission = recorded[allocation_id]
            if submission.job is None:
                raise ConfigurationError(f"allocation {allocation_id} has no job number")
            slot = None
            if wanted_key is not None:
                if wanted_key not in submission.task_keys:
                    raise ConfigurationError(
                        f"Task {wanted_key} did not run in allocation {allocation_id}"
                    )
                slot = submission.task_keys.index(wanted_key)
            target = target_from_identity(submission.target)
            path = reader.log_path(target, allocation_id, submission.job, slot)
            transport = connect(target)
            try:
                result = transport.run(
                    ["/bin/sh", "-c", TAIL_OWN, "tail", "-c", str(size), "--", path]
                )
            finally:
                transport.close()
            if result.returncode == NOT_OWN:
                raise UnsafeFilesystem(
                    f"{path} is a link or not a file of this user's (planted by another user who "
                    "can write log_root?); not read"
                )
            if result.returncode != 0:
                message = result.stderr.decode("utf-8", "replace").strip()[:200]
                why = self._why_no_log(allocation_id, wanted_key, path, message)
                if why is not None:
                    raise why
                raise Unavailable(f"cannot read {path}: {message or 'tail failed'}")
            if len(wanted) > 1:
                chunks.append(f"==> {path} <==\n".encode())
            chunks.append(result.stdout)
        return b"".join(chunks)

    def _why_no_log(
        self, allocation_id: str, key: str | None, path: str, message: str
    ) -> ServatusError | None:
        """Why a log that could not be read does not exist, if Slurm and the run markers say
        its Task (or allocation) has not started, or has ended; None when they do not (then
        the log should be there, and the failure to read it is what to report)."""
        try:
            report = self._report(self._state, offline=False)
        except Unavailable:
            return None
        return why_no_log(report, allocation_id, key, path=path, message=message)

    def __repr__(self) -> str:
        kind = "sealed" if self.sealed else "appendable"
        return f"Campaign({str(self.path)!r}, {len(self.tasks)} Tasks, {kind})"


class HeldState:
    """A campaign held at a state read elsewhere (the status cache's remainder, or its whole
    journal read once), and the steps ``status`` and ``plan`` take over it: what the status
    cache runs, without reaching into :class:`Campaign`'s own members."""

    def __init__(
        self,
        directory: Path,
        state: records.CampaignState,
        version: tuple[int, ...],
        connect: Connect | None,
    ) -> None:
        self._campaign = Campaign(directory, connect=connect, _state=state)
        self._campaign._version = version

    @property
    def record_warning(self) -> str | None:
        """Why what settled was not recorded by the last :meth:`record`, if it was not."""
        return self._campaign.record_warning

    def observe(
        self,
        state: records.CampaignState,
        *,
        offline: bool,
        targets: Sequence[str] = (),
        evidence: Mapping[str, Evidence] | None = None,
    ) -> tuple[Report, records.Settled, dict[str, Evidence]]:
        """The projection, what settled, and the evidence read (see ``Campaign._observe``)."""
        return self._campaign._observe(state, offline=offline, targets=targets, evidence=evidence)

    def record(self, change: records.Settled, *, partial: bool = False) -> None:
        """Record what settled if the lock is free at once (see ``Campaign._record``)."""
        self._campaign._record(change, partial=partial)

    def make_plan(
        self,
        state: records.CampaignState,
        profile: Profile,
        request: Request,
        continuation: Continuation | None,
    ) -> tuple[Plan, records.Settled]:
        """The plan of the whole state, checked, and what its listings showed settled."""
        return self._campaign._make_plan(state, profile, request, continuation)

    def launcher(self, profile: Profile) -> Launcher:
        """The profile's launcher, the profile refused first if SERVATUS.toml's rules do."""
        return self._campaign._launcher(profile)

    def decide(
        self,
        state: records.CampaignState,
        profile: Profile,
        request: Request,
        continuation: Continuation | None,
        work: Mapping[str, Work],
        warnings: Sequence[str],
        keys: Sequence[str],
    ) -> Plan:
        """The plan of the roster ``keys`` when ``state`` holds only some of its Tasks."""
        return self._campaign._decide(
            state, profile, request, continuation, work, warnings, keys=keys
        )

    def check(
        self, state: records.CampaignState, profile: Profile, made: Plan, launcher: Launcher
    ) -> None:
        """Refuse a plan ``submit`` would refuse; ``state`` holds the selected Tasks."""
        self._campaign._check(state, profile, made, launcher)


def _by_lease(steps: Iterable[LeaseStep]) -> dict[tuple[str, str, int], list[LeaseStep]]:
    """Steps by the lease link whose claims decide them: one command per link, not per step."""
    grouped: dict[tuple[str, str, int], list[LeaseStep]] = {}
    for step in steps:
        grouped.setdefault((step.target, step.lease_id, step.job), []).append(step)
    return grouped


def _chain_arguments(plan: Plan) -> tuple[int | None, dict[str, int] | None]:
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


_ENDED = frozenset({Execution.SUCCEEDED, Execution.FAILED, Execution.STOPPED, Execution.LOST})
"""Executions after which nothing writes the log again: one unreadable then stays so."""


def why_no_log(
    report: Report, allocation_id: str, key: str | None, *, path: str = "", message: str = ""
) -> ServatusError | None:
    """Why the log ``path`` of ``key``'s step (``key`` None: of the allocation) in
    ``allocation_id`` could not be read (``message``: what ``tail`` said), or None if the report
    shows it should be there. A queued job, or a running one whose batch script has not written
    its start marker, has written no log yet: :class:`Unavailable`, as the spec's exit 75 says,
    "retry later". A Task whose allocation ended before it started never will have one; one
    whose allocation ended has had its log removed since (a scratch purge), and retrying
    cannot bring it back: both are :class:`ConfigurationError`."""
    attempts = [
        attempt
        for attempt in report.attempts
        if attempt.allocation_id == allocation_id and (key is None or attempt.task_key == key)
    ]
    if not attempts:
        return None
    whose = f"allocation {allocation_id}" if key is None else f"Task {key}"
    attempt = attempts[0]
    where = f"allocation {allocation_id} (job {attempt.job})"
    if attempt.execution is Execution.QUEUED:
        return Unavailable(f"{whose} has no log yet: {where} is still queued; retry once it runs")
    started = attempt.observation is not None and attempt.observation.start is not None
    if attempt.execution is Execution.RUNNING and not started:
        return Unavailable(f"{whose} has no log yet: {where} has not started it; retry shortly")
    if key is not None and attempt.detail is StopReason.NEVER_STARTED:
        return ConfigurationError(f"{whose} has no log: {where} ended before it started")
    if attempt.execution in _ENDED:
        reason = _tail_reason(message)
        return ConfigurationError(
            f"{whose} has no log to read: {where} has ended and {path or 'its log'} cannot be "
            f"read{f' ({reason})' if reason else ''}; nothing writes it again, so retrying "
            "cannot help (was it removed, by a scratch purge say?)"
        )
    return None


def _tail_reason(message: str) -> str:
    """The operating system's reason in what ``tail`` said (``tail: cannot open 'P' for reading:
    No such file or directory``), without the program's words and the path said already."""
    if not message.startswith("tail: ") or message.count(": ") < 2:
        return ""
    return message.rsplit(": ", 1)[1]


_documents = make_converter()


def to_document(value: object) -> Any:
    """Receipts, submit and reconcile results, shape checks and planned allocations as JSON data.

    :param value: One of those values, or a list or tuple of them.
    """
    return _documents.unstructure(value)


def _usable(profile: Profile) -> None:
    """A Profile built or changed in Python (``attrs.evolve``) is held to SERVATUS.toml's rules
    before anything is planned with it: one Task over a ceiling is refused in one line, not
    packed into nothing or submitted past the cluster's limits."""
    problems = profile_problems(profile)
    if problems:
        raise ConfigurationError(f"profile {profile.name!r}: {'; '.join(problems)}")


def diagnose(profile: Profile, *, connect: Connect | None = None) -> Diagnosis:
    """What ``servatus doctor`` prints for ``profile``, as a :class:`~servatus.doctor.Diagnosis`.

    ``connect`` replaces how Slurm is reached, as on :class:`Campaign`.

    :param profile: The profile to check, as ``doctor --profile`` names it.
    :param connect: How Slurm is reached; None: as the profile's target says.
    """
    from servatus.operations.doctor import diagnose as run  # noqa: PLC0415 - doctor imports the engine

    return run(profile, connect=connect)


def __getattr__(name: str) -> Any:
    """``capacity`` lives with the configuration; it is re-exported here as the spec names it."""
    if name == "capacity":
        from servatus import config  # noqa: PLC0415 (loaded only when asked for)

        return config.capacity
    raise AttributeError(f"module 'servatus.campaign' has no attribute {name!r}")


__all__ = ["Authoring", "Campaign", "Probe", "append_state", "create_state", "ensure_state"]
