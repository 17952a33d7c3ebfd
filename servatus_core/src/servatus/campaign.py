"""Campaigns: an ordered roster of Tasks in a durable store, and what can be done with it.

:class:`Campaign` is the public face of the commands; each command's body lives in the module of
:mod:`servatus.operations` named after it (authoring, saved plans, observation, planning,
submit, validate, reconcile, cancel, logs), which a Campaign calls with one
:class:`~servatus.operations.context.Context`. The values those return are re-exported here,
where the API page documents them.
"""

from __future__ import annotations

import os
import time
import warnings
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs
from cattrs.preconf.json import make_converter

from servatus.config import Profile, Target  # noqa: F401 (Connect's Target, for the API page's signatures)
from servatus.continuation import Continuation
from servatus.engine.plan import LeaseHold, Plan, make_request
from servatus.engine.planning import make_lease_plan
from servatus.engine.status_values import Report
from servatus.errors import ConfigurationError, StateWarning
from servatus.journal import records, store
from servatus.lease import lease_links
from servatus.operations import context
from servatus.operations.authoring import (
    Authoring,
    append_state,
    check_fits,
    create_state,
    ensure_state,
    seal_state,
    split,
)
from servatus.operations.cancel import Cancelled, cancel
from servatus.operations.held import HeldState
from servatus.operations.logs import NOT_OWN, TAIL_OWN, logs, why_no_log
from servatus.operations.observation import observe, record
from servatus.operations.planning import plan_steps, plan_tasks, usable, valid_keys
from servatus.operations.reconcile import Resolution, reconcile
from servatus.operations.saved_plan import read_saved_plan, saved_plan_document
from servatus.operations.submission import BatchProgress, Progress
from servatus.operations.submit import Submitted, scripts, start_steps, submit
from servatus.operations.validate import ShapeCheck, validate
from servatus.plugins import Hooks, hooks
from servatus.tasks import Roster, Task, check_unique
from servatus.transport import Connect

if TYPE_CHECKING:
    from servatus.engine.report import ReportData
    from servatus.operations.doctor import Diagnosis

Probe = context.Probe
"""The result probe: given Tasks, the keys whose result is valid."""


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
        return context.connector(self._hooks(), self.connect)

    def _context(self) -> context.Context:
        registry = self._hooks()
        return context.Context(
            self.path, context.connector(registry, self.connect), registry, self.probe
        )

    def _record(self, change: records.Settled, *, partial: bool = False) -> None:
        """Record what a read-only command found settled, if the lock is free at once
        (:func:`~servatus.operations.observation.record`)."""
        self.record_warning = record(
            self.path, change, known=(self._version, self._state), partial=partial
        )

    def status(self, *, offline: bool = False) -> Report:
        """Each Task's state from the record and, unless ``offline``, one ``squeue`` and one
        run-marker listing per Target, in one remote command (of the markers of allocations not
        yet settled); records what it finds settled when it can without waiting.

        :param offline: Ask Slurm nothing and read no markers: only what the campaign recorded
            (accepted work reads ``ACCEPTED``, run times are unknown).
        """
        self.refresh()
        report, change, _ = observe(self._context(), self._state, offline=offline)
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
        return valid_keys(self.probe, self._state.tasks if tasks is None else tasks)

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
            steps = plan_steps(self._context(), self._state, lease, request, budget)
            self._record(steps.change)
            return steps.plan
        if profile is None:
            raise ConfigurationError("plan needs a profile, or a lease to start steps in")
        made, change = plan_tasks(self._context(), self._state, profile, request, continuation)
        self._record(change)
        return made

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
        usable(profile)
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
        return scripts(self._hooks(), self._state, plan)

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

    def submit(
        self,
        plan: Plan,
        *,
        progress: Progress | None = None,
        batches: BatchProgress | None = None,
    ) -> Submitted:
        """Submit exactly the reviewed plan, or refuse it as stale.

        Under the campaign's lock: the plan must match the current state (same revision, and a
        rebuild gives the same plan); Slurm must answer a ping; only then is each intent recorded
        before its ``sbatch``.

        :param plan: The plan to send, from :meth:`plan`, :meth:`hold` or :meth:`read_plan`; a
            plan made before the campaign last changed is refused
            (:class:`~servatus.errors.StalePlan`).
        :param progress: Called after each accepted allocation, to show progress as the
            command line does.
        :param batches: Called as each batch of allocations goes out in one remote command
            (ADR 0014), with how many were sent before it, its size and the plan's count.
        """
        done = submit(self._context(), plan, progress, batches)
        if plan.allocations:
            self.refresh()
        return done

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
        new, _ = split(self._state, batch)
        if new:
            self.append(new)
        done = start_steps(self._context(), lease, request, seconds, progress)
        self.refresh()
        return done

    def validate(
        self, plan: Plan, *, progress: Callable[[ShapeCheck], None] | None = None
    ) -> tuple[ShapeCheck, ...]:
        """``sbatch --test-only`` once per distinct allocation shape (its number of Tasks and
        its time limit), after a ping: a missing ``sbatch`` or a silent Slurm is ``Unavailable``,
        not a rejection. ``progress`` gets each check as it is made.

        :param plan: A plan this campaign made; its batch scripts are what Slurm judges.
        :param progress: Called with each :class:`~servatus.campaign.ShapeCheck` as it is made.
        """
        made = self.scripts(plan)
        return validate(self._connector(), plan, made, progress)

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
        done = reconcile(self._context(), progress)
        if done.unchanged is not None:
            self._state = done.unchanged
            return ()
        self.refresh()
        for cut in done.cut:
            warnings.warn(StateWarning(cut), stacklevel=2)
        return done.decisions

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
        return cancel(
            self._context(),
            self._state,
            tasks=tuple(tasks),
            allocations=tuple(allocations),
            record=self._record,
            progress=progress,
            steps=steps,
        )

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
        return logs(self._context(), self._state, tasks=tasks, allocations=allocations, size=size)

    def __repr__(self) -> str:
        kind = "sealed" if self.sealed else "appendable"
        return f"Campaign({str(self.path)!r}, {len(self.tasks)} Tasks, {kind})"


_documents = make_converter()


def to_document(value: object) -> Any:
    """Receipts, submit and reconcile results, shape checks and planned allocations as JSON data.

    :param value: One of those values, or a list or tuple of them.
    """
    return _documents.unstructure(value)


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


__all__ = [
    "NOT_OWN",
    "TAIL_OWN",
    "Authoring",
    "Campaign",
    "Cancelled",
    "HeldState",
    "Probe",
    "ShapeCheck",
    "Submitted",
    "append_state",
    "check_fits",
    "create_state",
    "ensure_state",
    "read_saved_plan",
    "saved_plan_document",
    "seal_state",
    "why_no_log",
]
