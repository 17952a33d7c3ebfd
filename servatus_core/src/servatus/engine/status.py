"""Status projection: from what the campaign recorded and what Slurm shows, each Task's state.

Pure functions over values (:mod:`servatus.engine.status_values`). The campaign's records become
:class:`~servatus.engine.status_values.Submission` values (:mod:`servatus.engine.status_inputs`),
one ``squeue`` listing and one run-marker listing per Target are fetched
(:mod:`servatus.operations.observation`), and :func:`project` does the rest, each slot by the
slot rules (:mod:`servatus.engine.slots`), each chain cut short warned of
(:mod:`servatus.engine.chain_cuts`).
A missing marker means
something only once Slurm no longer lists the job, because only then is every marker the job
wrote visible on the login node.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence

from servatus.engine.chain_cuts import cut_chain_warnings
from servatus.engine.slots import (
    NEVER_STARTED,
    QUEUED,
    QUEUED_STATES,
    execution_from,
    link_execution,
    queued_or_running,
    run_time_from,
    step_execution,
)
from servatus.engine.status_values import (
    Attempt,
    Execution,
    Outcome,
    Report,
    RunTime,
    Submission,
    TaskLink,
    TaskStatus,
)
from servatus.evidence import (
    Evidence,
    Marker,
    MarkerRecord,
    Observation,
    QueueEntry,
    fold_markers,
    link_observation,
    own_job,
    plain_observation,
    step_observation,
)
from servatus.files import path_word
from servatus.ids import ALLOCATION_ID_HEX, JOB_NAME_PREFIX
from servatus.journal.records import ChainLink

_new = tuple.__new__
"""Builds a named tuple from a tuple of its fields, skipping the generated Python ``__new__``,
which doubles the cost of each of the Attempt per slot and TaskStatus per Task a status builds."""


_Context = tuple[dict[str, QueueEntry], dict[str, MarkerRecord], float | None]


def _context(
    evidence: Evidence | None, jobs: Mapping[str, int | None], warnings: list[str]
) -> _Context | None:
    """A Target's queue entries by job name, its folded markers and its file server's clock;
    None unless both listings were read. Only evidence that is the campaign's own is folded:
    the user's files (the reader lists no other user's as markers) under the job number Slurm
    accepted for the allocation; what was set aside, and slots with two different ends, are
    named in ``warnings`` (SECURITY.md, "Evidence")."""
    if evidence is None or evidence.queue is None or evidence.markers is None:
        return None
    queue = {entry.name: entry for entry in evidence.queue}
    markers, strays = own_job(evidence.markers, jobs)
    folded = fold_markers(markers)
    warnings.extend(evidence_warnings(evidence.foreign, strays, folded, jobs))
    if evidence.renamed is not None:
        warnings.append(evidence.renamed)
    return queue, folded, evidence.clock


MAX_EVIDENCE_WARNINGS = 5
"""Lines of each kind of set-aside evidence a status names before it counts the rest."""


def evidence_warnings(
    foreign: Iterable[tuple[str, int]],
    strays: Iterable[Marker],
    folded: Mapping[str, MarkerRecord],
    jobs: Mapping[str, int | None],
) -> list[str]:
    """One line per file of the campaign's that was not counted: another user's file under one
    of its marker names, a marker of a job Slurm did not accept for its allocation, two ends of
    one slot that disagree (the higher exit code stands, so it never reads as a success)."""
    lines: list[str] = []
    start = len(JOB_NAME_PREFIX)  # a marker's name starts as its job's name: servatus-<id>
    mine = [(name, uid) for name, uid in foreign if name[start : start + ALLOCATION_ID_HEX] in jobs]
    lines += _bounded(
        [
            f"{name} in log_root belongs to another user (uid {uid}); it is not evidence and "
            "was ignored (servatus doctor checks who can write log_root)"
            for name, uid in mine
        ]
    )
    stray = Counter((marker.allocation_id, marker.job) for marker in strays)
    lines += _bounded(
        [
            f"{count} {'marker names' if count == 1 else 'markers name'} job {job} for "
            f"allocation {allocation_id}, whose job is {jobs[allocation_id]}; ignored"
            for (allocation_id, job), count in stray.items()
        ]
    )
    lines += _bounded(
        [
            f"allocation {allocation_id} has two different end markers for one step; the "
            "higher exit code counts"
            for allocation_id, record in folded.items()
            if record.conflict and allocation_id in jobs
        ]
    )
    return lines


def _bounded(lines: list[str]) -> list[str]:
    if len(lines) <= MAX_EVIDENCE_WARNINGS:
        return lines
    rest = len(lines) - MAX_EVIDENCE_WARNINGS
    return [*lines[:MAX_EVIDENCE_WARNINGS], f"... and {rest} more like it"]


def project(
    keys: Sequence[str],
    submissions: Sequence[Submission],
    evidence: Mapping[str, Evidence],
    *,
    now: float,
    offline: bool = False,
    state: str = "STATE",
) -> Report:
    """Project every Task's status. ``submissions`` are in recording order; ``evidence`` is keyed
    by each submission's ``target``. ``offline`` (or a missing listing) projects without Slurm:
    accepted work reads ``ACCEPTED`` and run time is unknown. A running Task's run time runs to
    its Target's :attr:`~servatus.evidence.Evidence.clock`, the clock that stamped its start
    marker; ``now`` stands in only for evidence that did not read it. ``state`` is the campaign's
    path, as the commands a warning suggests name it.

    A Task reads as its current work (docs/development/adr/0006-projection.md): its latest
    allocation, where a later chain link counts only once the slot was handed to it
    (:func:`_link_attempts`).

    One pass over the submissions and one over the Tasks: a status of 100,000 Tasks builds an
    attempt per slot and a status per Task, and nothing else per Task. A Task submitted once
    reads its flags and run time off its one attempt; only a Task submitted again keeps its
    attempts aside, to sum their run times. A plain allocation's slots are built here, inline:
    they are the hot path, and a call per allocation would cost more than the slot itself.
    """
    contexts: dict[str, _Context | None] = {}
    jobs = _marker_jobs(submissions)
    online = not offline
    attempts: list[Attempt] = []
    warnings: list[str] = []
    latest: dict[str, Attempt] = {}
    history: dict[str, list[Attempt]] = {}
    listed_unsubmitted: set[str] = set()
    append = attempts.append
    remember = latest.setdefault
    tally: _Tally = (append, latest, history, listed_unsubmitted)
    links: dict[str, Observation | None] = {}  # chain links seen so far, for their successors
    budgeted: dict[str, TaskLink] = {}  # steps given a budget: shown as a chain's one link
    last_target: str | None = None
    queue: dict[str, QueueEntry] | None = None
    folded: dict[str, MarkerRecord] | None = None
    server_now = now
    for (allocation_id, task_keys, target, _, time_limit, outcome, recorded, settled, chain,
         slots, within, budget) in submissions:  # fmt: skip
        if target is not last_target:
            last_target = target
            if target in contexts:
                context = contexts[target]
            else:
                context = contexts[target] = _context(evidence.get(target), jobs, warnings)
            if context is None:
                online = False
                queue = folded = None
            else:
                queue, folded, clock = context
                server_now = now if clock is None else clock
        unsent = within is not None and outcome is not _ACCEPTED
        if queue is None or settled is not None or unsent:
            # A settled job is one Slurm no longer lists; a step not accepted never reached its
            # lease, so the lease being listed is no sign of it.
            entry = None
        else:  # a step's job is its lease's: the lease link's entry is its liveness
            entry = queue.get(JOB_NAME_PREFIX + (allocation_id if within is None else within))
        job = recorded
        if entry is not None and (entry.job != recorded or outcome is Outcome.NOT_SUBMITTED):
            entry, job = _unexpected_entry(entry, allocation_id, outcome, recorded, state, warnings)
        listed = None if queue is None else entry is not None
        if slots is not None or within is not None:
            observation = _held_observation(allocation_id, outcome, settled, folded, within)
            if within is None:
                append(_lease_attempt(allocation_id, job, outcome, entry, listed, observation,
                                      chain, slots, time_limit, server_now))  # fmt: skip
            else:
                _step_attempts(allocation_id, task_keys[0], job, time_limit, outcome, entry,
                               listed, observation, within, budget, server_now, budgeted,
                               tally)  # fmt: skip
        elif chain is not None:
            observation = links[allocation_id] = _link_observation(
                allocation_id, len(task_keys), outcome, settled, folded
            )
            _link_attempts(
                allocation_id, task_keys, time_limit, outcome, job, chain, observation,
                links.get(chain.after), entry, listed, server_now, tally,
            )  # fmt: skip
        elif outcome is not _ACCEPTED or folded is None:  # no markers to read: by its outcome
            execution = _UNOBSERVED[outcome]
            for slot, key in enumerate(task_keys):
                attempt = _new(
                    Attempt,
                    (allocation_id, key, slot, job, execution, None, None, None, listed, None,
                     None, None, None),
                )  # fmt: skip
                append(attempt)
                if execution is _NOT_SUBMITTED:
                    if listed:
                        listed_unsubmitted.add(key)
                    continue
                earlier = remember(key, attempt)
                if earlier is not attempt:
                    _again(latest, history, key, earlier, attempt)
        else:  # a plain allocation read from its markers
            if settled is None:
                observation = plain_observation(folded.get(allocation_id), len(task_keys))
            else:
                observation = settled
            start, stop, limit, ends, _, _, _ = observation
            for slot, key in enumerate(task_keys):
                end = ends[slot]
                execution, exit_code, detail = execution_from(entry, start, stop, limit, end)
                run_time = run_time_from(execution, start, stop, ends, slot, time_limit, server_now)
                attempt = _new(
                    Attempt,
                    (allocation_id, key, slot, job, execution, exit_code, detail, run_time,
                     listed, observation, None, None, None),
                )  # fmt: skip
                append(attempt)
                earlier = remember(key, attempt)
                if earlier is not attempt:
                    _again(latest, history, key, earlier, attempt)
    tasks = _task_statuses(keys, latest, history, listed_unsubmitted, budgeted, online=online)
    warnings += cut_chain_warnings(submissions, tasks, state)
    return Report(tuple(tasks), tuple(attempts), tuple(warnings), online)


def _marker_jobs(submissions: Iterable[Submission]) -> dict[str, int | None]:
    """The job Slurm accepted for each allocation whose markers are still read (not settled)."""
    return {
        submission[0]: submission[6]
        for submission in submissions
        if submission[5] is _ACCEPTED and submission[7] is None
    }


def _unexpected_entry(
    entry: QueueEntry,
    allocation_id: str,
    outcome: Outcome,
    recorded: int | None,
    state: str,
    warnings: list[str],
) -> tuple[QueueEntry | None, int | None]:
    """A listed job under the submission's name that is not simply its recorded job: with no
    job recorded, the listed one is its job; another job number is not this submission's. A job
    listed for a submission recorded as not submitted is named in ``warnings``."""
    if recorded is not None and entry.job != recorded:
        return None, recorded  # same name, another job number: not this submission's job
    if outcome is Outcome.NOT_SUBMITTED:
        stops = (  # an ended job stays listed until MinJobAge: cancel finds nothing
            f"servatus cancel {path_word(state)} --allocation {allocation_id} stops it"
            if queued_or_running(entry.state)
            else f"it has ended, {entry.state}: nothing to cancel"
        )
        warnings.append(
            f"allocation {allocation_id} was recorded as not submitted, but Slurm "
            f"lists job {entry.job} for it; its Tasks are held ACTIVE until it leaves "
            f"the queue ({stops})"
        )
    return entry, entry.job


def _held_observation(
    allocation_id: str,
    outcome: Outcome,
    settled: Observation | None,
    folded: Mapping[str, MarkerRecord] | None,
    within: str | None,
) -> Observation | None:
    """A lease link's or a step's observation: its settled one, else its markers read; None
    when it was not accepted or there is no marker listing to read."""
    if outcome is not _ACCEPTED or folded is None:
        return None
    if settled is not None:
        return settled
    record = folded.get(allocation_id)
    return plain_observation(record, 0) if within is None else step_observation(record)


def _link_observation(
    allocation_id: str,
    slots: int,
    outcome: Outcome,
    settled: Observation | None,
    folded: Mapping[str, MarkerRecord] | None,
) -> Observation | None:
    """A chain link's observation: its settled one, else its markers read; None when it was not
    accepted or there is no marker listing (offline reads no settled record either, as for a
    plain allocation)."""
    if outcome is not _ACCEPTED or folded is None:
        return None
    if settled is not None:
        return settled
    return link_observation(folded.get(allocation_id), slots)


def _step_attempts(
    allocation_id: str,
    key: str,
    job: int | None,
    time_limit: int,
    outcome: Outcome,
    entry: QueueEntry | None,
    listed: bool | None,
    observation: Observation | None,
    within: str,
    budget: int | None,
    now: float,
    budgeted: dict[str, TaskLink],
    tally: _Tally,
) -> None:
    """A lease step's Attempt (:func:`_step_attempt`), which becomes its Task's current work
    unless it was never submitted; a step given a ``budget`` is recorded in ``budgeted``."""
    append, latest, history, listed_unsubmitted = tally
    attempt = _step_attempt(allocation_id, key, job, time_limit, outcome, entry, listed,
                            observation, within, now)  # fmt: skip
    append(attempt)
    if budget is not None:  # its SERVATUS_LINK and SERVATUS_LINKS are 1
        budgeted[allocation_id] = _new(TaskLink, (1, 1, budget))
    if attempt.execution is _NOT_SUBMITTED:
        if listed:
            listed_unsubmitted.add(key)
        return
    _take(latest, history, key, attempt)


def _task_statuses(
    keys: Sequence[str],
    latest: Mapping[str, Attempt],
    history: Mapping[str, list[Attempt]],
    listed_unsubmitted: Collection[str],
    budgeted: Mapping[str, TaskLink],
    *,
    online: bool,
) -> list[TaskStatus]:
    """Each Task's status in roster order, read off its current attempt; a Task submitted again
    sums its attempts' run times and flags (:func:`_summary`)."""
    tasks: list[TaskStatus] = []
    add = tasks.append
    zero = _ZERO if online else None
    total: RunTime | None
    for key in keys:
        current = latest.get(key)
        if current is None:  # never submitted (every Task of a first plan): no attempt to read
            add(
                _new(
                    TaskStatus,
                    (key, _NOT_SUBMITTED, None, None, zero, None, None, False, False,
                     key in listed_unsubmitted, None, None),
                )
            )  # fmt: skip
            continue
        (allocation_id, _, place, job, execution, exit_code, detail, total, listed, _, link, _,
         within) = current  # fmt: skip
        if history and key in history:
            total, accepted, unresolved, listed = _summary(history[key])
        else:
            unresolved = execution is _UNRESOLVED
            accepted = not unresolved
        if not online:
            total = None
        elif total is None:
            total = _UNKNOWN if unresolved else _ZERO
        elif unresolved and total.complete:
            total = _new(RunTime, (total.total, False))
        task_link: TaskLink | None
        if link is not None:
            task_link = _task_link(link, place)
        else:
            task_link = budgeted.get(allocation_id) if budgeted else None
        add(
            _new(
                TaskStatus,
                (key, execution, exit_code, detail, total, allocation_id, job, accepted,
                 unresolved, listed or key in listed_unsubmitted, task_link, within),
            )
        )  # fmt: skip
    return tasks


_NOT_SUBMITTED = Execution.NOT_SUBMITTED
_UNRESOLVED = Execution.UNRESOLVED
_ZERO = RunTime(0)
_UNKNOWN = RunTime(0, complete=False)
"""An unresolved submission's run: its job may be running, and no marker of it is read."""
_ACCEPTED = Outcome.ACCEPTED
_UNOBSERVED = {
    Outcome.PENDING: Execution.UNRESOLVED,
    Outcome.NOT_SUBMITTED: Execution.NOT_SUBMITTED,
    Outcome.ACCEPTED: Execution.ACCEPTED,
}
"""A submission's execution without markers to read (not accepted, or its Target unlisted)."""


def _again(
    latest: dict[str, Attempt],
    history: dict[str, list[Attempt]],
    key: str,
    earlier: Attempt,
    attempt: Attempt,
) -> None:
    """A Task submitted again: its latest attempt decides, and its attempts are kept."""
    latest[key] = attempt
    kept = history.get(key)
    if kept is None:
        history[key] = [earlier, attempt]
    else:
        kept.append(attempt)


_Tally = tuple[Callable[[Attempt], None], dict[str, Attempt], dict[str, list[Attempt]], set[str]]
"""What ``project`` collects while it passes over the submissions: the attempts (their
``append``), each Task's current attempt, the attempts of Tasks with more than one, and the Tasks
a listed but not submitted allocation holds."""


def _link_attempts(
    allocation_id: str,
    task_keys: tuple[str, ...],
    time_limit: int,
    outcome: Outcome,
    job: int | None,
    chain: ChainLink,
    observation: Observation | None,
    before: Observation | None,
    entry: QueueEntry | None,
    listed: bool | None,
    now: float,
    tally: _Tally,
) -> None:
    """The attempts of one chain link (``observation`` None when it has none to read: not
    accepted, or offline), and which of them become their Task's current work.

    A slot of link 1 ran by definition; a slot of a later link ran only if ``before``, the
    observation of the link before it, handed that slot on (or the slot's own end shows it
    ran). A slot that did not run is not its Task's work: it reads ``QUEUED`` while its link is
    queued and ``STOPPED (never started)`` otherwise, with no run time, and is kept aside (its
    listing still holds the Task). A handed slot whose link never started and never will (not
    submitted, or gone from Slurm without a start) is kept aside too: the Task reads as the link
    that handed it on left it, ``STOPPED (yielded)`` or ``(time limit)``."""
    append, latest, history, listed_unsubmitted = tally
    position = chain.position
    handed_on = () if before is None else before.handed
    if observation is None:
        execution = _UNOBSERVED[outcome]
        for slot, key in enumerate(task_keys):
            attempt = _new(
                Attempt,
                (allocation_id, key, slot, job, execution, None, None, None, listed, None, chain,
                 None, None),
            )  # fmt: skip
            append(attempt)
            if execution is _NOT_SUBMITTED:
                if listed:
                    listed_unsubmitted.add(key)
            elif position == 1 or execution is _UNRESOLVED:
                _take(latest, history, key, attempt)
            else:  # offline: not known to have run this slot
                _aside(latest, history, key, attempt)
        return
    start, stop, _, ends, _, _, _ = observation
    gone = start is None and entry is None  # never started, and never will
    for slot, key in enumerate(task_keys):
        end = ends[slot]
        if position == 1 or end is not None or (slot in handed_on and not gone):
            execution, exit_code, detail = link_execution(
                entry, observation, slot, last=chain.spends(slot)
            )
            run_time = run_time_from(execution, start, stop, ends, slot, time_limit, now)
            ran = True
        else:
            queued = entry is not None and entry.state in QUEUED_STATES
            execution, exit_code, detail = QUEUED if queued else NEVER_STARTED
            run_time, ran = _ZERO, False
        attempt = _new(
            Attempt,
            (allocation_id, key, slot, job, execution, exit_code, detail, run_time, listed,
             observation, chain, None, None),
        )  # fmt: skip
        append(attempt)
        if ran:
            _take(latest, history, key, attempt)
        else:
            _aside(latest, history, key, attempt)


_MOVING = frozenset({Execution.RUNNING, Execution.ENDING})


def _lease_attempt(
    allocation_id: str,
    job: int | None,
    outcome: Outcome,
    entry: QueueEntry | None,
    listed: bool | None,
    observation: Observation | None,
    chain: ChainLink | None,
    slots: int | None,
    time_limit: int,
    now: float,
) -> Attempt:
    """A lease link's own Attempt, of no Task: its execution by the plain rules with no slot
    (queued, running, ending while listed; then by its start, stop and limit markers), and how
    long it has held its slots, by the file server's clock (``now``) as a step's run time is."""
    run_time = None
    if observation is None:
        execution, exit_code, detail = _UNOBSERVED[outcome], None, None
    else:
        start, stop, limit = observation[:3]
        execution, exit_code, detail = execution_from(entry, start, stop, limit, None)
        run_time = run_time_from(execution, start, stop, (), 0, time_limit, now)
    return _new(
        Attempt,
        (allocation_id, None, None, job, execution, exit_code, detail, run_time, listed,
         observation, chain, slots, None),
    )  # fmt: skip


def _step_attempt(
    allocation_id: str,
    key: str,
    job: int | None,
    time_limit: int,
    outcome: Outcome,
    entry: QueueEntry | None,
    listed: bool | None,
    observation: Observation | None,
    within: str,
    now: float,
) -> Attempt:
    """A lease step's Attempt: one slot, judged inside its lease (:func:`step_execution`), run
    time from its own ``step-start``. It is ``listed`` (holds its Task) only while its lease is
    listed and the step has neither ended nor been withdrawn."""
    if observation is None:
        return _new(
            Attempt,
            (allocation_id, key, 0, job, _UNOBSERVED[outcome], None, None, None, listed, None,
             None, None, within),
        )  # fmt: skip
    execution, exit_code, detail = step_execution(entry, observation)
    start, stop, _, ends, _, _, claim = observation
    # A step's stop marker is the lease taking a stop request: the step runs on (SIGUSR1, then
    # SIGTERM after signal_before_end), so its run time grows until its end, not its stop.
    running = ends[0] is None and execution in _MOVING
    run_time = run_time_from(execution, start, None if running else stop, ends, 0, time_limit, now)
    if listed and (claim is False or ends[0] is not None):
        listed = False
    return _new(
        Attempt,
        (allocation_id, key, 0, job, execution, exit_code, detail, run_time, listed,
         observation, None, None, within),
    )  # fmt: skip


def _take(
    latest: dict[str, Attempt], history: dict[str, list[Attempt]], key: str, attempt: Attempt
) -> None:
    """``attempt`` becomes its Task's current work (kept with the earlier ones, if any)."""
    earlier = latest.setdefault(key, attempt)
    if earlier is not attempt:
        _again(latest, history, key, earlier, attempt)


def _aside(
    latest: dict[str, Attempt], history: dict[str, list[Attempt]], key: str, attempt: Attempt
) -> None:
    """``attempt`` counts towards its Task's run time and listing but is not its current work
    (unless the Task has none: then it is all there is to read)."""
    current = latest.get(key)
    if current is None:
        latest[key] = attempt
        return
    kept = history.get(key)
    if kept is None:
        history[key] = [current, attempt]
    else:
        kept.append(attempt)


def _task_link(link: ChainLink, slot: int | None) -> TaskLink:
    own = link.of if slot is None else link.links_of(slot)
    return _new(TaskLink, (link.position, own, link.budget))


def _summary(attempts: list[Attempt]) -> tuple[RunTime | None, bool, bool, bool]:
    """Run time summed over a Task's attempts, and whether any was accepted, unresolved, listed."""
    total: RunTime | None = None
    accepted = unresolved = listed = False
    for attempt in attempts:
        run_time = attempt.run_time
        if run_time is not None:
            total = run_time if total is None else total + run_time
        if attempt.execution is _UNRESOLVED:
            unresolved = True
        else:
            accepted = True
        listed = listed or attempt.listed is True
    return total, accepted, unresolved, listed
