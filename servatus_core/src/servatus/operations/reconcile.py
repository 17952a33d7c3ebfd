"""Reconcile: an intent left without an outcome is decided from Slurm's evidence alone.

An interrupted ``submit`` (:mod:`servatus.operations.submission`) may leave an intent whose
``sbatch`` never answered; the job may or may not exist. ``resolve`` decides each such intent from
what ``squeue`` lists and what run markers name, and waits while the evidence cannot yet be
conclusive.

A chain link is an intent like any other: it is found by its own name or markers, and
resolving it never submits the links after it. A chain an interruption cut short is simply
shorter; its Tasks hand on at the new end and read ``STOPPED`` (ADR 0005, ADR 0006). Before a
later link is recorded as never submitted, ``reconcile`` claims the handoffs it would take
(:func:`claim_handoffs`), so a late ``sbatch`` of it, which ``afterany`` lets start, runs
nothing; a claim a link made first shows that it was accepted. A lease link is resolved like
any other intent; a step in a lease is decided at once by its order's claim instead
(``resolve_step``, ADR 0009 "Recovery").
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Collection, Mapping, Sequence

import attrs

from servatus.config import target_from_identity
from servatus.engine.chain_cuts import cut_chain_warnings
from servatus.engine.settlement import listed, queries, settle
from servatus.engine.status_inputs import submissions
from servatus.engine.status_values import Outcome, Submission
from servatus.errors import ConfigurationError, Unavailable
from servatus.evidence import Evidence
from servatus.ids import ALLOCATION_ID, job_name
from servatus.journal import records, store
from servatus.lease import (
    LINK_EMPTY,
    Verdict,
    Withdrawal,
    nonce,
    orders_path,
    steps_within,
    withdraw_orders,
)
from servatus.operations.context import Context
from servatus.operations.observation import gather, projection
from servatus.transport import Transport

RECONCILE_AFTER = 15 * 60
"""Seconds after its intent that an allocation with no evidence at all counts as never sent."""


@attrs.frozen
class Resolution:
    """What ``reconcile`` decided for one unresolved allocation.

    ``outcome`` is ``accepted`` (with the job), ``not_submitted``, or ``waiting`` (too young to
    decide; ``retry_at`` says when evidence will be conclusive).
    """

    allocation_id: str
    """The allocation (or lease step) decided."""
    outcome: str
    """``accepted``, ``not_submitted`` or ``waiting``."""
    job: int | None = None
    """Slurm's job number, for ``accepted`` (a step's: its lease's)."""
    retry_at: float | None = None
    """For ``waiting``: when, in UNIX seconds, running ``reconcile`` again can decide it."""


def resolve(
    pending: Sequence[Submission],
    evidence: Mapping[str, Evidence],
    *,
    now: float,
) -> list[Resolution]:
    """Decide unresolved allocations from evidence: a job ``squeue`` lists under the allocation's
    name, else one its run markers name, is accepted; with neither, an intent at least
    :data:`RECONCILE_AFTER` old was never submitted, and a younger one waits."""
    folded: dict[str, _Jobs] = {}
    decisions = []
    for submission in pending:
        jobs = folded.get(submission.target)
        if jobs is None:
            jobs = folded[submission.target] = _Jobs.of(evidence[submission.target])
        allocation_id = submission.allocation_id
        job = jobs.listed.get(job_name(allocation_id), jobs.marked.get(allocation_id))
        if job is not None:
            decisions.append(Resolution(allocation_id, "accepted", job=job))
        elif now - submission.recorded_at >= RECONCILE_AFTER:
            decisions.append(Resolution(allocation_id, "not_submitted"))
        else:
            retry_at = submission.recorded_at + RECONCILE_AFTER
            decisions.append(Resolution(allocation_id, "waiting", retry_at=retry_at))
    return decisions


def resolve_step(
    step: Submission,
    lease_id: str,
    lease_job: int,
    withdrawal: Withdrawal | None,
    evidence: Evidence | None,
    *,
    now: float,
) -> Resolution:
    """Decide an unresolved step by its order's claim, which this ``reconcile`` (or an earlier
    ``cancel``) withdrew: taken is accepted with the lease's job, withdrawn was never submitted.
    No answer (``withdrawal`` None) or an unreadable claim waits. A missing orders directory
    waits while Slurm lists the lease link (only the lease's own claims there could show it
    took the order); once the link is forgotten nothing can take it, and ADR 0003's rule
    decides: a marker of the step naming the lease's job, else 15 minutes of nothing."""
    verdict = Verdict.UNDECIDED if withdrawal is None else withdrawal.verdicts[step.allocation_id]
    if verdict is Verdict.TAKEN:
        return Resolution(step.allocation_id, "accepted", job=lease_job)
    if verdict is Verdict.WITHDRAWN:
        return Resolution(step.allocation_id, "not_submitted")
    queue = None if evidence is None else evidence.queue
    if withdrawal is None or not withdrawal.no_directory or queue is None:
        return Resolution(step.allocation_id, "waiting", retry_at=now)
    if any(entry.name == job_name(lease_id) for entry in queue):
        return Resolution(step.allocation_id, "waiting", retry_at=now)
    markers = evidence.markers if evidence is not None else None
    if any(m.allocation_id == step.allocation_id and m.job == lease_job for m in markers or ()):
        return Resolution(step.allocation_id, "accepted", job=lease_job)
    if now - step.recorded_at >= RECONCILE_AFTER:
        return Resolution(step.allocation_id, "not_submitted")
    return Resolution(step.allocation_id, "waiting", retry_at=step.recorded_at + RECONCILE_AFTER)


@attrs.frozen
class _Jobs:
    """One Target's listings folded once, so each intent is a lookup rather than a scan of
    every marker: the first job ``squeue`` lists under each name, and the lowest job number
    the markers name for each allocation."""

    listed: dict[str, int]
    marked: dict[str, int]

    @classmethod
    def of(cls, item: Evidence) -> _Jobs:
        listed: dict[str, int] = {}
        for entry in item.queue or ():
            listed.setdefault(entry.name, entry.job)
        marked: dict[str, int] = {}
        for marker in item.markers or ():
            known = marked.get(marker.allocation_id)
            if known is None or marker.job < known:
                marked[marker.allocation_id] = marker.job
        return cls(listed, marked)


CLAIM_SCRIPT = (
    "umask 077\nd=$1 id=$2 job=$3 nonce=$4\nshift 4\n"
    + LINK_EMPTY
    + r"""
for s in "$@"; do
    c="$d/servatus-$id.$job.taken.$s"
    link_empty "$c" "$d/.servatus-$id.$job.void.$s.$nonce"
    if [ -f "$c" ] && [ ! -h "$c" ] && t=$(cat -- "$c" 2>/dev/null); then
        case $t in
        '') echo "withdrawn $s" ;;
        *[!0-9]* | 0*) echo "undecided $s" ;;
        *) echo "taken $s $t" ;;
        esac
    else
        echo "undecided $s"
    fi
done
"""
)
"""``sh -c CLAIM_SCRIPT claim LOG_ROOT ID JOB NONCE SLOT...``: claims the handoff of each slot of
link ``ID``'s job ``JOB`` (``servatus-<id>.<job>.taken.<slot>``) with an empty file, and answers
``withdrawn SLOT`` (the claim is empty: no link can take that handoff any more), ``taken SLOT
JOB`` (a link claimed it first, with its job number), or ``undecided SLOT``."""


def claim_command(log_root: str, previous: str, job: int, slots: Sequence[int]) -> list[str]:
    """The command that claims link ``previous``'s handoffs of ``slots`` for ``reconcile``."""
    if not ALLOCATION_ID.fullmatch(previous) or job < 1:
        raise ConfigurationError(f"not a link to claim from: {previous!r} job {job}")
    words = [str(slot) for slot in slots]
    return ["/bin/sh", "-c", CLAIM_SCRIPT, "claim", log_root, previous, str(job), nonce(), *words]


def read_claims(stdout: bytes, slots: Sequence[int]) -> dict[int, int | bool | None]:
    """Each slot's claim: the job number of the link that took it, False when ``reconcile``'s
    empty claim holds, None when undecided (a slot the answer does not name included)."""
    found: dict[int, int | bool | None] = dict.fromkeys(slots)
    for line in stdout.decode("ascii", "replace").splitlines():
        words = line.split()
        if len(words) < 2 or not words[1].isdigit() or int(words[1]) not in found:
            continue
        slot = int(words[1])
        if words[0] == "withdrawn" and len(words) == 2:
            found[slot] = False
        elif words[0] == "taken" and len(words) == 3 and words[2].isdigit():
            found[slot] = int(words[2])
    return found


def claim_handoffs(
    transport: Transport, log_root: str, previous: str, job: int, slots: Sequence[int]
) -> dict[int, int | bool | None]:
    """Claim link ``previous``'s (job ``job``) handoffs of ``slots``, so no late link can take
    them: :func:`read_claims` of the answer, every slot undecided when none came back. Raises
    :class:`~servatus.errors.Unavailable` when the transport has no answer at all."""
    result = transport.run(claim_command(log_root, previous, job, slots))
    if result.returncode != 0 or result.truncated:
        return dict.fromkeys(slots)
    return read_claims(result.stdout, slots)


def decide_link(
    decision: Resolution, claims: Mapping[int, int | bool | None] | None, *, now: float
) -> Resolution:
    """A later link's ``not_submitted`` decision, checked against its predecessor's handoffs:
    a claim a link took means that link was accepted (with the job that took it), every claim
    withheld confirms the decision, and anything undecided (``claims`` None: no answer) waits."""
    if claims is None:
        return Resolution(decision.allocation_id, "waiting", retry_at=now)
    taken = [job for job in claims.values() if job is not None and job is not False]
    if taken:
        return Resolution(decision.allocation_id, "accepted", job=int(min(taken)))
    if all(value is False for value in claims.values()):
        return decision
    return Resolution(decision.allocation_id, "waiting", retry_at=now)


@attrs.frozen
class Reconciled:
    """What one ``reconcile`` decided, and the warnings of the chains its decisions left cut
    short; ``unchanged``: the state read, when nothing was unresolved (nothing was recorded)."""

    decisions: tuple[Resolution, ...]
    cut: tuple[str, ...] = ()
    unchanged: records.CampaignState | None = None


def reconcile(context: Context, progress: Callable[[Resolution], None] | None = None) -> Reconciled:
    """Decide every unresolved allocation from Slurm's evidence, under the campaign's lock,
    recording each decision (and what the same listings show settled) as it is made."""
    with store.writing(context.path) as writer:
        state = writer.state
        assert state is not None
        recorded = submissions(state)
        pending = [s for s in recorded if s.outcome is Outcome.PENDING]
        if not pending:
            return Reconciled((), unchanged=state)
        now = time.time()
        evidence = gather(context, pending, queries(state, recorded))
        within = steps_within(state.intents)
        decisions = resolve(
            [s for s in pending if s.allocation_id not in within], evidence, now=now
        )
        decisions = _withhold_handoffs(context, decisions, recorded, now=now)
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
        for decision in _resolve_steps(
            context,
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
        report = projection(context, state, recorded, evidence, now=now)
        found = settle(report, recorded)
        if found:
            writer.settle(records.Settled(found, listed(evidence)))
    cut = cut_chain_warnings(recorded, report.tasks, str(context.path))
    return Reconciled(tuple(decisions), cut=tuple(cut))


def _withhold_handoffs(
    context: Context, decisions: Sequence[Resolution], recorded: Sequence[Submission], *, now: float
) -> list[Resolution]:
    """Before a later chain link is recorded as never submitted, claim the handoffs it
    would take (ADR 0005): a late ``sbatch`` of it then runs nothing, and a claim it made
    first shows it was accepted after all
    (:func:`~servatus.operations.reconcile.decide_link`)."""
    by_id = {s.allocation_id: s for s in recorded}
    decided: list[Resolution] = []
    connect = context.connect
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
    context: Context,
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
    connect = context.connect
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
