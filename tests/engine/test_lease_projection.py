"""Leases and their steps in the status projection (ADR 0009 "What status reads"), from values:
Submissions, Evidence and markers built here."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from servatus.engine.plan import Hold, Request, decide
from servatus.engine.settlement import settle
from servatus.engine.status import project
from servatus.engine.status_document import status_document
from servatus.engine.status_values import (
    Execution,
    Outcome,
    Report,
    RunTime,
    StopReason,
    Submission,
)
from servatus.errors import ConfigurationError, PlanRefused
from servatus.evidence import Evidence, Marker, MarkerKind, QueueEntry
from servatus.ids import JOB_NAME_PREFIX
from servatus.journal.records import ChainLink, Intent, LeaseTerms, Settlement
from servatus.lease import current_link, lease_links
from testkit import without_evidence_notes

LEASE = "a" * 24
STEP = "b" * 24
OTHER_STEP = "c" * 24
JOB = 41234
LIMIT = 3600
CLOCK = 1000.0
A, B = Marker, MarkerKind

lease = Submission(LEASE, (), "t", 0.0, LIMIT, Outcome.ACCEPTED, JOB, None, None, 2, None)
step = Submission(STEP, ("train-a",), "t", 0.0, LIMIT, Outcome.ACCEPTED, JOB, within=LEASE)


def queue(state: str | None, job: int = JOB) -> tuple[QueueEntry, ...]:
    return () if state is None else (QueueEntry(job, JOB_NAME_PREFIX + LEASE, state),)


def mine(kind: MarkerKind, at: float, **extra: int) -> Marker:
    return Marker(STEP, JOB, kind, at, **extra)  # type: ignore[arg-type]


TAKEN = mine(B.CLAIM, 50.0, size=300)
WITHDRAWN = mine(B.CLAIM, 50.0, size=0)
BEGAN = mine(B.STEP_START, 100.0)
LEASE_START = Marker(LEASE, JOB, B.START, 10.0)


def end(code: int, at: float = 400.0) -> Marker:
    return mine(B.END, at, slot=0, exit_code=code)


def run(
    state: str | None, *markers: Marker, submissions: Sequence[Submission] = (lease, step)
) -> Report:
    evidence = Evidence(queue(state), (LEASE_START, *markers), CLOCK)
    return project(["train-a", "eval-1"], submissions, {"t": evidence}, now=5000.0)


NEVER = (Execution.STOPPED, StopReason.NEVER_STARTED)
RULES = [
    # (lease state in squeue or None if forgotten, step markers, execution, detail, run time)
    ("RUNNING", (WITHDRAWN,), *NEVER, RunTime(0)),
    (None, (WITHDRAWN,), *NEVER, RunTime(0)),
    ("RUNNING", (TAKEN, end(1)), *NEVER, RunTime(0)),
    ("RUNNING", (TAKEN, BEGAN, end(0)), Execution.SUCCEEDED, None, RunTime(300)),
    ("RUNNING", (TAKEN, BEGAN, end(3)), Execution.FAILED, None, RunTime(300)),
    ("RUNNING", (TAKEN, BEGAN, end(75)), Execution.STOPPED, StopReason.YIELDED, RunTime(300)),
    # stopped by its own stop marker while the lease runs on: STOPPED, not RUNNING
    ("RUNNING", (TAKEN, BEGAN, mine(B.STOP, 390.0), end(137)), Execution.STOPPED, None,
     RunTime(300)),
    ("RUNNING", (TAKEN, BEGAN, mine(B.LIMIT, 390.0), end(1)), Execution.STOPPED,
     StopReason.TIME_LIMIT, RunTime(300)),
    ("PENDING", (), Execution.QUEUED, None, RunTime(0)),
    ("RUNNING", (TAKEN,), Execution.QUEUED, None, RunTime(0)),
    ("COMPLETING", (TAKEN,), Execution.QUEUED, None, RunTime(0)),
    ("RUNNING", (TAKEN, BEGAN), Execution.RUNNING, None, RunTime(900, complete=False)),
    # asked to stop (its stop marker) and still running: its run time still grows
    ("RUNNING", (TAKEN, BEGAN, mine(B.STOP, 390.0)), Execution.RUNNING, None,
     RunTime(900, complete=False)),
    ("COMPLETING", (TAKEN, BEGAN), Execution.ENDING, None, RunTime(900, complete=False)),
    (None, (TAKEN, BEGAN), Execution.LOST, None, RunTime(LIMIT, complete=False)),
    (None, (TAKEN,), *NEVER, RunTime(0)),
    (None, (), *NEVER, RunTime(0)),
    (None, (TAKEN, BEGAN, mine(B.STOP, 390.0), mine(B.LIMIT, 380.0)), Execution.STOPPED,
     StopReason.TIME_LIMIT, RunTime(290)),
]  # fmt: skip


@pytest.mark.parametrize(("state", "markers", "execution", "detail", "run_time"), RULES)
def test_the_step_rule_table(
    state: str | None,
    markers: tuple[Marker, ...],
    execution: Execution,
    detail: StopReason | None,
    run_time: RunTime,
) -> None:
    report = run(state, *markers)
    task = report.tasks[0]
    assert (task.execution, task.detail, task.run_time) == (execution, detail, run_time)
    assert (task.allocation_id, task.job) == (STEP, JOB)
    attempt = next(a for a in report.attempts if a.allocation_id == STEP)
    assert attempt.within == LEASE and attempt.observation is not None
    assert attempt.observation.step
    over = execution in (Execution.SUCCEEDED, Execution.FAILED, Execution.STOPPED)
    assert task.listed is (state is not None and not over)


def test_a_lease_of_another_job_number_is_not_the_steps_lease() -> None:
    assert run(None, TAKEN, BEGAN).tasks[0].execution is Execution.LOST
    report = project(
        ["train-a"],
        [lease, step],
        {"t": Evidence(queue("RUNNING", 9), (TAKEN, BEGAN), 0.0)},
        now=0.0,
    )
    assert report.tasks[0].execution is Execution.LOST


def test_a_lease_is_an_attempt_of_no_task_and_never_a_tasks_status() -> None:
    report = run("RUNNING")
    held = report.attempts[0]
    assert (held.allocation_id, held.task_key, held.slot, held.slots, held.within) == (
        LEASE, None, None, 2, None,
    )  # fmt: skip
    assert held.execution is Execution.RUNNING and held.listed
    assert [t.key for t in report.tasks] == ["train-a", "eval-1"]
    assert report.tasks[1].execution is Execution.NOT_SUBMITTED
    alone = project(["train-a"], [lease], {"t": Evidence(queue("RUNNING"), (), 0.0)}, now=0.0)
    assert alone.tasks[0].execution is Execution.NOT_SUBMITTED and not alone.tasks[0].listed


def test_status_json_carries_slots_within_and_step() -> None:
    document = status_document(run("RUNNING", TAKEN, BEGAN))
    held, started = document["attempts"]
    assert (held["task_keys"], held["executions"], held["slots"], held["within"]) == (
        [], [], 2, None,
    )  # fmt: skip
    assert held["observation"]["step"] is False
    assert (started["task_keys"], started["slots"], started["within"]) == (["train-a"], None, LEASE)
    assert started["observation"]["step"] is True and started["observation"]["start"] == 100.0


def test_a_step_not_accepted_is_not_held_by_its_listed_lease() -> None:
    refused = step._replace(outcome=Outcome.NOT_SUBMITTED, job=None)
    report = run("RUNNING", submissions=(lease, refused))
    assert report.tasks[0].execution is Execution.NOT_SUBMITTED
    assert not report.tasks[0].listed and report.warnings == ()


def test_holds_active_only_while_the_step_runs_and_again_at_once_after() -> None:
    """A step's Task is ACTIVE only while its lease is listed and the step has neither ended
    nor been withdrawn; once its step ended it can be started again, in the same lease."""
    request = Request(retry_failed=True)
    for markers, hold in [
        ((TAKEN, BEGAN), Hold.SUBMITTED),  # running: not a retryable execution
        ((TAKEN, BEGAN, mine(B.STOP, 390.0), end(137)), None),
        ((WITHDRAWN,), None),
        ((TAKEN, BEGAN, end(1)), None),
    ]:
        work = {task.key: task for task in run("RUNNING", *markers).tasks}
        assert dict(decide(["train-a"], work, request).held).get("train-a") == hold, markers
        if hold is None:
            assert decide(["train-a"], work, Request(retry=("train-a",))).selected == ("train-a",)
        else:
            with pytest.raises(PlanRefused, match="Slurm still lists its earlier work"):
                decide(["train-a"], work, Request(retry=("train-a",)))
    ending = {task.key: task for task in run("COMPLETING", TAKEN, BEGAN).tasks}
    assert decide(["train-a"], ending, request).held == (("train-a", Hold.ACTIVE),)


def settled_step(
    found: Sequence[Settlement], submissions: Sequence[Submission]
) -> list[Submission]:
    by_id = {item.allocation_id: item for item in found}
    return [
        item
        if (kept := by_id.get(item.allocation_id)) is None
        else item._replace(settled=kept.observation._replace(step=item.within is not None))
        for item in submissions
    ]


def test_a_withdrawn_step_settles_at_once_others_when_the_lease_is_gone() -> None:
    report = run("RUNNING", WITHDRAWN)
    assert [item.allocation_id for item in settle(report, [lease, step])] == [STEP]
    assert settle(report, [lease, step])[0].claim is False
    assert settle(run("RUNNING", TAKEN, BEGAN, end(0)), [lease, step]) == ()
    gone = run(None, TAKEN, BEGAN, end(0), Marker(LEASE, JOB, B.STOP, 900.0))
    found = settle(gone, [lease, step])
    assert [item.allocation_id for item in found] == [LEASE, STEP]
    assert found[1].claim is True and found[1].start == 100.0


@st.composite
def lease_campaigns(draw: st.DrawFn) -> tuple[list[Submission], Evidence]:
    state = draw(st.sampled_from((None, "PENDING", "RUNNING", "COMPLETING", "COMPLETED")))
    kinds = st.sampled_from([B.STEP_START, B.STOP, B.LIMIT, B.END, B.CLAIM, B.START])
    marker = st.builds(
        Marker,
        allocation_id=st.sampled_from((LEASE, STEP, OTHER_STEP)),
        job=st.just(JOB),
        kind=kinds,
        at=st.sampled_from((10.0, 100.0, 200.0, 300.0)),
        slot=st.just(0),
        exit_code=st.sampled_from((0, 1, 75, 137)),
        size=st.sampled_from((0, 300)),
    )
    other = Submission(
        OTHER_STEP, ("eval-1",), "t", 0.0, LIMIT, Outcome.ACCEPTED, JOB, within=LEASE
    )
    markers = tuple(draw(st.lists(marker, max_size=10)))
    return [lease, step, other], Evidence(queue(state), markers, CLOCK)


@settings(max_examples=400, deadline=None)
@given(campaign=lease_campaigns(), purge=st.booleans())
def test_a_settled_step_answers_as_its_markers_did(
    campaign: tuple[list[Submission], Evidence], purge: bool
) -> None:
    submissions, evidence = campaign
    keys = ["train-a", "eval-1"]
    from_markers = project(keys, submissions, {"t": evidence}, now=5000.0)
    found = settle(from_markers, submissions)
    recorded = settled_step(found, submissions)
    gone = {item.allocation_id for item in found}
    markers = evidence.markers or ()
    later = Evidence(
        evidence.queue, tuple(m for m in markers if not purge or m.allocation_id not in gone), CLOCK
    )
    from_record = project(keys, recorded, {"t": later}, now=5000.0)
    from_markers = without_evidence_notes(from_markers)
    from_record = without_evidence_notes(from_record)
    assert from_markers == from_record
    assert status_document(from_markers) == status_document(from_record)
    assert settle(from_record, recorded) == ()


TERMS = LeaseTerms("cpu", 2, 1, 100, 0, 20)


def link_intent(position: int, after: str, allocation_id: str) -> Intent:
    chain = ChainLink(position, 3, after, (), 0)
    return Intent(allocation_id, (), "d", 0.0, "t", LIMIT, chain, TERMS)


FIRST, SECOND, THIRD = "1" * 24, "2" * 24, "3" * 24
LINK_INTENTS = [
    link_intent(1, "", FIRST),
    link_intent(2, FIRST, SECOND),
    link_intent(3, SECOND, THIRD),
]
LINKS = [(FIRST, 11), (SECOND, 12), (THIRD, 13)]


def listing(entries: dict[str, tuple[int, str]], limits: Sequence[str] = ()) -> Evidence:
    rows = tuple(
        QueueEntry(job, JOB_NAME_PREFIX + name, state) for name, (job, state) in entries.items()
    )
    jobs = dict(LINKS)
    markers = tuple(Marker(name, jobs[name], B.LIMIT, 5.0) for name in limits)
    return Evidence(rows, markers, 0.0)


def test_any_link_names_the_whole_lease_in_chain_order() -> None:
    step_intent = Intent(STEP, ("train-a",), "e", 1.0, "t", LIMIT, within=FIRST)
    shuffled = [LINK_INTENTS[2], step_intent, LINK_INTENTS[0], LINK_INTENTS[1]]
    for name in (FIRST, SECOND, THIRD):
        assert [item.allocation_id for item in lease_links(shuffled, name)] == [
            FIRST,
            SECOND,
            THIRD,
        ]
    alone = Intent(LEASE, (), "d", 0.0, "t", LIMIT, lease=TERMS)
    assert lease_links([alone, step_intent], LEASE) == [alone]
    with pytest.raises(ConfigurationError, match="no lease"):
        lease_links([alone, step_intent], STEP)


@pytest.mark.parametrize(
    ("entries", "limits", "current"),
    [
        ({FIRST: (11, "RUNNING"), SECOND: (12, "PENDING")}, (), FIRST),
        ({FIRST: (11, "RUNNING"), SECOND: (12, "PENDING")}, (FIRST,), SECOND),
        ({FIRST: (11, "COMPLETING"), SECOND: (12, "PENDING")}, (), SECOND),
        ({FIRST: (11, "TIMEOUT"), SECOND: (12, "CONFIGURING")}, (), SECOND),
        ({SECOND: (12, "RUNNING"), THIRD: (13, "PENDING")}, (), SECOND),
        ({FIRST: (99, "RUNNING"), THIRD: (13, "PENDING")}, (), THIRD),  # another job's number
        ({FIRST: (11, "RUNNING")}, (FIRST,), None),
        ({}, (), None),
    ],
)
def test_the_current_link(
    entries: dict[str, tuple[int, str]], limits: tuple[str, ...], current: str | None
) -> None:
    assert current_link(LINKS, listing(entries, limits)) == current


def test_no_current_link_without_a_listing() -> None:
    assert current_link(LINKS, Evidence(None, None)) is None
    assert current_link(LINKS, Evidence(listing({FIRST: (11, "RUNNING")}).queue, None)) is None


def test_a_settlement_keeps_the_claims_verdict_in_the_journal() -> None:
    from servatus.journal import codec, records

    kept = tuple(
        Settlement(f"{index:024x}", JOB, 1.0, None, None, (None,), (), claim)
        for index, claim in enumerate((True, False, None))
    )
    assert codec.decode(codec.encode(records.Settled(kept))) == records.Settled(kept)
    plain = records.Settled((Settlement(STEP, JOB, 1.0, None, None, (None,)),))
    assert b"claim" not in codec.encode(plain)  # a journal without steps reads as before
    with pytest.raises((TypeError, ValueError)):
        codec.decode(codec.encode(records.Settled(kept)).replace(b"true", b"1"))


def test_status_shows_the_specs_lease_example_literally() -> None:
    """The spec's walk-through: one step running for 01:02:13, one waiting for a slot, and the
    lease's own line (the README's "Leases" section, copied as written)."""
    from servatus.cli.render import status_lines

    held, running, waiting = (
        "3f9c0e2a7b1d4c5e6f708192",
        "5b2e7c90d41f3a6b8e2c1d07",
        "8d01f4c2e9a7b6d5c3e2f1a0",
    )
    limit = 3 * 86400
    submissions = [
        Submission(held, (), "t", 0.0, limit, Outcome.ACCEPTED, 41234, None, None, 2),
        Submission(running, ("train-a",), "t", 0.0, limit, Outcome.ACCEPTED, 41234, within=held),
        Submission(waiting, ("eval-1",), "t", 0.0, limit, Outcome.ACCEPTED, 41234, within=held),
    ]
    began = 100_000.0
    markers = (
        Marker(held, 41234, B.START, began - 50),
        Marker(running, 41234, B.CLAIM, began - 5, size=700),
        Marker(running, 41234, B.STEP_START, began),
        Marker(waiting, 41234, B.CLAIM, began + 10, size=700),
    )
    evidence = Evidence(
        (QueueEntry(41234, JOB_NAME_PREFIX + held, "RUNNING"),), markers, began + 3733
    )
    report = project(["train-a", "eval-1"], submissions, {"t": evidence}, now=0.0)
    assert status_lines(report)[:4] == [  # the spec's lines, each split in two here
        "KEY      RESULT      EXECUTION  EXIT  RUN TIME   LINK  ALLOCATION",
        "train-a  UNOBSERVED  RUNNING    -     ~01:02:13  -     "
        "5b2e7c90d41f3a6b8e2c1d07 (lease 3f9c0e2a7b1d4c5e6f708192)",
        "eval-1   UNOBSERVED  QUEUED     -     00:00:00   -     "
        "8d01f4c2e9a7b6d5c3e2f1a0 (lease 3f9c0e2a7b1d4c5e6f708192)",
        "lease 3f9c0e2a7b1d4c5e6f708192: job 41234 RUNNING, 2 slots",
    ]
    gone = project(["train-a", "eval-1"], submissions, {"t": Evidence((), markers, 0.0)}, now=0.0)
    assert not any(line.startswith("lease ") for line in status_lines(gone))  # only when listed
