"""Logs: the last bytes of a Task's step log or an allocation's log, read over the transport
only if the log is a regular file of the user's, and why a log that cannot be read is missing."""

from __future__ import annotations

import shlex
from collections.abc import Sequence

from servatus.config import target_from_identity
from servatus.engine.status_inputs import submissions
from servatus.engine.status_values import Execution, Report, StopReason
from servatus.errors import ConfigurationError, ServatusError, Unavailable, UnsafeFilesystem
from servatus.journal import records
from servatus.operations.context import Context
from servatus.operations.observation import report as observed_report

NOT_OWN = 77
"""The exit of :data:`TAIL_OWN` for a log that is a link or not a regular file of the user's."""
TAIL_OWN = (
    f'p=$4; if [ -h "$p" ] || {{ [ -e "$p" ] && [ ! -f "$p" ]; }}; then exit {NOT_OWN}; fi; '
    'if [ ! -e "$p" ]; then '
    """echo "tail: cannot open '$p' for reading: No such file or directory" >&2; exit 1; fi; """
    "own() { "
    'name=$(find "$p" -prune -type f -links 1 -user "$(id -u)" -printf "%D:%i" 2>/dev/null); '
    'open=$(find -L /dev/fd/3 -prune -type f -printf "%D:%i" 2>/dev/null); '
    f'if [ -z "$name" ] || [ "$name" != "$open" ]; then exit {NOT_OWN}; fi; '
    'exec /usr/bin/tail -c "$2" <&3 3<&-; }; '
    'own "$@" 3<"$p"'
)
"""``sh -c TAIL_OWN tail -c N -- PATH``: the last N bytes of a log only if it is a regular file
of the user's with no other name, never what a link someone planted at its name points to
(issue #30). The log is opened first; then one ``lstat`` of the name (``find`` without ``-L``:
a link is no ``-type f``) must give a regular file of the user's with one link, and the same
device and inode as the open file (``/dev/fd/3``, followed), and ``tail`` reads the open file,
never the name. A name swapped to a link and back between the open and the check is refused:
the open file is then the link's target, which the name is not. A name swapped for a FIFO
just before the open can hold it until the command's time limit; nothing is read from it. A
missing log gets ``tail``'s own words, which :func:`why_no_log` reads."""


def logs(
    context: Context,
    state: records.CampaignState,
    *,
    tasks: Sequence[str],
    allocations: Sequence[str],
    size: int,
) -> bytes:
    """The last ``size`` bytes of each log ``tasks`` and ``allocations`` name in ``state``, one
    after another (see :meth:`servatus.campaign.Campaign.logs`)."""
    if not tasks and not allocations:
        raise ConfigurationError("name at least one --task or --allocation")
    recorded = {item.allocation_id: item for item in submissions(state)}
    wanted: list[tuple[str, str | None]] = []
    for allocation_id in allocations:
        if allocation_id not in recorded:
            raise ConfigurationError(f"no allocation {shlex.quote(allocation_id)} in this campaign")
    keys = state.tasks.by_key()
    for key in tasks:
        if key not in keys:
            raise ConfigurationError(f"no Task {shlex.quote(key)} in this campaign")
    if tasks and allocations:
        wanted = [(a, key) for a in allocations for key in tasks]
    elif allocations:
        # A step has no allocation log: its one log is its Task's step log.
        steps = {i.allocation_id for i in state.intents if i.within is not None}
        wanted = [(a, recorded[a].task_keys[0] if a in steps else None) for a in allocations]
    else:
        # A chain's current link is known only from its markers (ADR 0006): offline, every
        # chain reads its link 1. A plain Task's current allocation needs no Slurm.
        named = set(tasks)
        chained = any(
            item.chain is not None and named.intersection(item.task_keys)
            for item in recorded.values()
        )
        report = observed_report(context, state, offline=not chained)
        current = {t.key: t.allocation_id for t in report.tasks}
        for key in tasks:
            if current.get(key) is None:
                raise ConfigurationError(f"Task {key} has no accepted allocation yet")
            wanted.append((str(current[key]), key))
    reader = context.hooks.evidence_reader()
    connect = context.connect
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
            result = transport.run(["/bin/sh", "-c", TAIL_OWN, "tail", "-c", str(size), "--", path])
        finally:
            transport.close()
        if result.returncode == NOT_OWN:
            raise UnsafeFilesystem(
                f"{path} is a link or not a file of this user's (planted by another user who "
                "can write log_root?); not read"
            )
        if result.returncode != 0:
            message = result.stderr.decode("utf-8", "replace").strip()[:200]
            why = _why_no_log(context, state, allocation_id, wanted_key, path, message)
            if why is not None:
                raise why
            raise Unavailable(f"cannot read {path}: {message or 'tail failed'}")
        if len(wanted) > 1:
            chunks.append(f"==> {path} <==\n".encode())
        chunks.append(result.stdout)
    return b"".join(chunks)


def _why_no_log(
    context: Context,
    state: records.CampaignState,
    allocation_id: str,
    key: str | None,
    path: str,
    message: str,
) -> ServatusError | None:
    """Why a log that could not be read does not exist, if Slurm and the run markers say
    its Task (or allocation) has not started, or has ended; None when they do not (then
    the log should be there, and the failure to read it is what to report)."""
    try:
        report = observed_report(context, state, offline=False)
    except Unavailable:
        return None
    return why_no_log(report, allocation_id, key, path=path, message=message)


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
