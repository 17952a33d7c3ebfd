"""Cancel: which allocations to ``scancel``, and the ``scancel`` itself.

Only what Slurm lists as queued or running is cancelled, by job name under ``--me``, so an
unrelated job that reused a number is never touched. Newest first: a chain's later links go
before the link they depend on, so none becomes eligible in between (ADR 0005).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

from servatus.config import Target
from servatus.errors import ConfigurationError, Unavailable
from servatus.evidence import Evidence
from servatus.ids import job_name
from servatus.status import Execution, Report, Submission, queued_or_running
from servatus.submission import command
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


def cancellable(
    report: Report,
    submissions: Sequence[Submission],
    evidence: Mapping[str, Evidence],
    *,
    tasks: Sequence[str],
    allocations: Sequence[str],
) -> list[Submission]:
    """Allocations to ``scancel``, newest first: those matching the request that Slurm lists
    as queued or running (``evidence``, the listings ``report`` was projected from, says so for
    a job without a receipt). A job that already ended is not an error, just not cancelled.

    A Task's allocations are every link of its chains; a named link brings every later link of
    its chain. Links are recorded in order, so newest first is the highest position first."""
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
    wanted_keys = set(tasks)
    wanted = set(allocations)
    for submission in submissions:  # a link's successors come after it
        chain = submission.chain
        if chain is not None and chain.after in wanted:
            wanted.add(submission.allocation_id)
    chosen = [
        submission
        for submission in submissions
        if submission.allocation_id in alive
        and (submission.allocation_id in wanted or wanted_keys & set(submission.task_keys))
    ]
    return chosen[::-1]


def scancel(transport: Transport, target: Target, allocation_id: str) -> None:
    """Cancel by job name under ``--me``: never an unrelated job that reused a number."""
    argv = [command(target, "scancel"), "--me", f"--name={job_name(allocation_id)}"]
    result = transport.run(argv)
    if result.returncode != 0:
        message = result.stderr.decode("utf-8", "replace").strip()[:200]
        raise Unavailable(f"scancel exited {result.returncode}: {message or 'no message'}")
