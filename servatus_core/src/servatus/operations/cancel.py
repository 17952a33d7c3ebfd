"""Cancel: which allocations to ``scancel`` and which lease steps to withdraw or stop, and the
``scancel`` itself.

Only what Slurm lists as queued or running is cancelled, by job name under ``--me``, so an
unrelated job that reused a number is never touched. Newest first: a chain's later links go
before the link they depend on, so none becomes eligible in between (ADR 0005).

A step in a lease is never cancelled by ``scancel``: the lease would go with it. Its order is
withdrawn by its claim, and a step the lease already took is asked to stop through its orders
directory (ADR 0009, "Stopping a step"). A lease link is cancelled as any allocation, after the
orders of it and its later links that nobody took yet are withdrawn.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping, Sequence

import attrs

from servatus.config import Target, target_from_identity
from servatus.engine.slots import queued_or_running
from servatus.engine.status_inputs import submissions
from servatus.engine.status_values import Execution, Outcome, Report, Submission
from servatus.errors import ConfigurationError, Unavailable
from servatus.evidence import Evidence, MarkerKind
from servatus.ids import job_name
from servatus.journal import records
from servatus.lease import Verdict, lease_link_ids, orders_path, steps_within, stop, withdraw
from servatus.operations.context import Context
from servatus.operations.observation import observe
from servatus.operations.submission import command
from servatus.transport import Transport


def check_names(
    submissions: Sequence[Submission],
    task_keys: Collection[str],
    *,
    tasks: Sequence[str],
    allocations: Sequence[str],
) -> None:
    """Refuse a name the campaign does not hold, before Slurm is asked anything: a typo is bad
    input (exit 1) whether or not Slurm answers, never "retry later"."""
    recorded = {submission.allocation_id for submission in submissions}
    unknown = [a for a in allocations if a not in recorded]
    unknown += [f"Task {key}" for key in tasks if key not in task_keys]
    if unknown:
        raise ConfigurationError(f"nothing to cancel under: {', '.join(unknown)}")


@attrs.frozen
class LeaseStep:
    """A step decided by its order's claim: its id and Task, the lease link it runs within,
    that link's job (which names the claim), and its Target's evidence key."""

    step_id: str
    task_key: str
    lease_id: str
    job: int
    target: str


@attrs.frozen
class Cancellation:
    """What one ``cancel`` does, in this order: withdraw each of ``stop`` and ``withdraw`` by its
    claim (a taken one of ``stop`` is then asked to stop; a taken one of ``withdraw`` ends with
    its lease), then ``scancel`` each of ``scancel``, newest first."""

    stop: tuple[LeaseStep, ...]
    withdraw: tuple[LeaseStep, ...]
    scancel: tuple[Submission, ...]


def plan_cancel(
    report: Report,
    submissions: Sequence[Submission],
    evidence: Mapping[str, Evidence],
    *,
    tasks: Sequence[str],
    allocations: Sequence[str],
    within: Mapping[str, str],
    leases: Collection[str],
) -> Cancellation:
    """What ``cancel --task``/``--allocation`` does (:class:`Cancellation`).

    Allocations to ``scancel`` are those matching the request that Slurm lists as queued or
    running (``evidence``, the listings ``report`` was projected from, says so for a job without
    a receipt). A job that already ended is not an error, just not cancelled. A Task's
    allocations are every link of its chains; a named link brings every later link of its
    chain. Links are recorded in order, so newest first is the highest position first. For a
    lease link (of ``leases``), which holds no Task, and for a chain link, whose slot may read
    never started while its handoff is not listed yet, whether Slurm lists it queued or running
    under its name decides.

    A step (a key of ``within``, naming its lease link) is never among them. A named step, or a
    named Task's step, is stopped while its lease link is queued or running and no end of it is
    visible; once the lease link has ended but is still listed, its order is withdrawn if the
    lease never took it. A named lease link brings its later links; their steps not yet ended
    are withdrawn (a taken one just reads ``taken`` and ends with its job)."""
    by_id = {submission.allocation_id: submission for submission in submissions}
    keys = {task.key for task in report.tasks}
    check_names(submissions, keys, tasks=tasks, allocations=allocations)
    # An allocation without a receipt (unresolved, or recorded as not submitted) is cancelled
    # whenever Slurm lists a job under its name: after an interrupted submit it may be running.
    live = {
        (target, entry.name)
        for target, item in evidence.items()
        for entry in item.queue or ()
        if queued_or_running(entry.state)
    }
    listed = {  # in any state: a lease that ended stays listed until Slurm forgets it
        (target, entry.name) for target, item in evidence.items() for entry in item.queue or ()
    }
    ended = {
        (marker.allocation_id, marker.job)
        for item in evidence.values()
        for marker in item.markers or ()
        if marker.kind is MarkerKind.END
    }
    alive = {
        attempt.allocation_id
        for attempt in report.attempts
        if attempt.execution in (Execution.QUEUED, Execution.RUNNING)
        or (
            attempt.listed
            and attempt.execution in (Execution.NOT_SUBMITTED, Execution.UNRESOLVED)
            and (by_id[attempt.allocation_id].target, job_name(attempt.allocation_id)) in live
        )
    }
    # A lease link holds no Task, so its listing decides. So does a chain link's: on NFS the
    # login node may list a fresh handoff late, and a link that reads as never started may
    # already have claimed it and be running the Task.
    alive.update(
        submission.allocation_id
        for submission in submissions
        if (submission.chain is not None or submission.allocation_id in leases)
        and (submission.target, job_name(submission.allocation_id)) in live
    )

    def undecided(step_id: str) -> LeaseStep | None:
        """The step, if its order may still need a decision: not settled, not recorded as never
        submitted, in a lease link with a job, and not seen ending."""
        step, lease = by_id[step_id], by_id.get(within[step_id])
        if step.settled is not None or step.outcome is Outcome.NOT_SUBMITTED:
            return None
        if lease is None or lease.job is None or (step_id, lease.job) in ended:
            return None
        return LeaseStep(step_id, step.task_keys[0], lease.allocation_id, lease.job, step.target)

    wanted_keys = set(tasks)
    wanted = {a for a in allocations if a not in within}
    for submission in submissions:  # a link's successors come after it
        chain = submission.chain
        if chain is not None and chain.after in wanted:
            wanted.add(submission.allocation_id)
    stop: list[LeaseStep] = []
    withdraw: list[LeaseStep] = []
    for step_id in within:
        named = step_id in allocations or wanted_keys & set(by_id[step_id].task_keys)
        found = undecided(step_id) if named or within[step_id] in wanted else None
        if found is None:
            continue
        if named and found.lease_id in alive:
            stop.append(found)
        elif within[step_id] in wanted or (
            named and (found.target, job_name(found.lease_id)) in listed
        ):
            # A lease that ended takes no more orders: one it never took is withdrawn, so its
            # Task is free before Slurm forgets the lease.
            withdraw.append(found)
    chosen = [
        submission
        for submission in submissions
        if submission.allocation_id in alive
        and submission.allocation_id not in within
        and (submission.allocation_id in wanted or wanted_keys & set(submission.task_keys))
    ]
    return Cancellation(tuple(stop), tuple(withdraw), tuple(chosen[::-1]))


def scancel(transport: Transport, target: Target, allocation_id: str) -> None:
    """Cancel by job name under ``--me``: never an unrelated job that reused a number."""
    argv = [command(target, "scancel"), "--me", f"--name={job_name(allocation_id)}"]
    result = transport.run(argv)
    if result.returncode != 0:
        message = result.stderr.decode("utf-8", "replace").strip()[:200]
        raise Unavailable(f"scancel exited {result.returncode}: {message or 'no message'}")


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


def cancel(
    context: Context,
    state: records.CampaignState,
    *,
    tasks: Sequence[str],
    allocations: Sequence[str],
    record: Callable[[records.Settled], None],
    progress: Callable[[str], None] | None = None,
    steps: Callable[[str, str], None] | None = None,
) -> Cancelled:
    """Cancel what ``tasks`` and ``allocations`` name in ``state`` from one Slurm reading
    (what it shows settled goes to ``record``): withdraw or stop each lease step by its
    claim, one command per lease link, then ``scancel`` each allocation; everything is tried,
    and :class:`~servatus.errors.Unavailable` names what was and was not done."""
    if not tasks and not allocations:
        raise ConfigurationError("name at least one --task or --allocation to cancel")
    recorded = submissions(state)
    check_names(recorded, state.tasks.by_key(), tasks=tasks, allocations=allocations)
    report, change, evidence = observe(context, state, offline=False)
    record(change)
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
    connect = context.connect

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


def _by_lease(steps: Iterable[LeaseStep]) -> dict[tuple[str, str, int], list[LeaseStep]]:
    """Steps by the lease link whose claims decide them: one command per link, not per step."""
    grouped: dict[tuple[str, str, int], list[LeaseStep]] = {}
    for step in steps:
        grouped.setdefault((step.target, step.lease_id, step.job), []).append(step)
    return grouped
