"""The chain projection (docs/development/adr/0006-projection.md): every row of the spec's
application protocol on the first, middle and last link, a Task's current work across links, queued
and removed links, run time summed over links, and settled chains read as their markers did."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from servatus.engine.settlement import settle
from servatus.engine.slots import slot_run_time
from servatus.engine.status import project
from servatus.engine.status_document import status_document
from servatus.engine.status_values import (
    Execution,
    Outcome,
    Report,
    RunTime,
    StopReason,
    Submission,
    TaskLink,
    TaskStatus,
)
from servatus.evidence import (
    Evidence,
    Marker,
    MarkerKind,
    Observation,
    QueueEntry,
    SlotEnd,
    observe,
)
from servatus.ids import JOB_NAME_PREFIX
from servatus.journal.records import ChainLink
from testkit import without_evidence_notes

START, END, STOP, LIMIT, HANDOFF = (
    MarkerKind.START,
    MarkerKind.END,
    MarkerKind.STOP,
    MarkerKind.LIMIT,
    MarkerKind.HANDOFF,
)
IDS = tuple(f"{index:02x}" * 12 for index in range(1, 9))
LIMIT_SECONDS = 1000


def link_id(position: int) -> str:
    return IDS[position - 1]


def job(position: int) -> int:
    return 100 + position


def chain(
    links: int = 3,
    keys: tuple[str, ...] = ("k0",),
    task_links: tuple[int, ...] | None = None,
    budget: int = 0,
    outcomes: dict[int, Outcome] | None = None,
) -> list[Submission]:
    """A chain of ``links`` links of ``keys``, every link accepted unless ``outcomes`` says."""
    own = task_links or (links,) * len(keys)
    result = []
    for position in range(1, links + 1):
        outcome = (outcomes or {}).get(position, Outcome.ACCEPTED)
        result.append(
            Submission(
                link_id(position),
                keys,
                "t0",
                0.0,
                LIMIT_SECONDS,
                outcome,
                job(position) if outcome is Outcome.ACCEPTED else None,
                None,
                ChainLink(
                    position, links, "" if position == 1 else link_id(position - 1), own, budget
                ),
            )
        )
    return result


def mark(
    position: int, kind: MarkerKind, at: float, slot: int | None = None, code: int | None = None
) -> Marker:
    return Marker(link_id(position), job(position), kind, at, slot, code)


def listed(position: int, state: str = "PENDING") -> QueueEntry:
    return QueueEntry(job(position), JOB_NAME_PREFIX + link_id(position), state)


def yielded(position: int, at: float, slot: int = 0) -> list[Marker]:
    """Link ``position`` ran ``slot`` from ``at`` for 100 s; it exited 75 and handed it on."""
    return [
        mark(position, START, at),
        mark(position, END, at + 100, slot, 75),
        mark(position, HANDOFF, at + 100, slot),
    ]


def run(
    submissions: Sequence[Submission],
    markers: Sequence[Marker],
    queue: Sequence[QueueEntry] = (),
    *,
    keys: Sequence[str] = ("k0",),
    now: float = 10_000.0,
) -> Report:
    return project(keys, submissions, {"t0": Evidence(tuple(queue), tuple(markers))}, now=now)


def task(report: Report, key: str = "k0") -> TaskStatus:
    return next(item for item in report.tasks if item.key == key)


# -- the application protocol on each link ---------------------------------------------------


def row_markers(row: str, position: int, at: float, *, last: bool) -> list[Marker]:
    """What link ``position`` leaves when its step does ``row``; ``last`` is the Task's last
    link, where the watcher writes no handoff and a link's own early stop does not happen."""
    start = [mark(position, START, at)]
    end_at = at + 100
    if row == "exit 0":
        return [*start, mark(position, END, end_at, 0, 0)]
    if row == "exit 75":
        handoff = [] if last else [mark(position, HANDOFF, end_at, 0)]
        return [*start, mark(position, END, end_at, 0, 75), *handoff]
    if row == "signal, then nonzero":
        handoff = [] if last else [mark(position, HANDOFF, end_at, 0)]
        return [
            *start,
            mark(position, LIMIT, at + 50),
            mark(position, END, end_at, 0, 138),
            *handoff,
        ]
    if row == "signal, then stopped at the limit":
        if last:  # Slurm's own stop: the stop marker, then SIGTERM's 143
            stop = [mark(position, STOP, end_at - 1)]
            return [
                *start,
                mark(position, LIMIT, at + 50),
                *stop,
                mark(position, END, end_at, 0, 143),
            ]
        # a middle link stops its own step (the shell's timer): its stop marker, then the 143
        return [
            *start,
            mark(position, LIMIT, at + 50),
            mark(position, STOP, end_at - 1),
            mark(position, END, end_at, 0, 143),
            mark(position, HANDOFF, end_at, 0),
        ]
    if row == "nonzero before the signal":
        return [*start, mark(position, END, end_at, 0, 3)]
    if row == "cancelled":
        return [*start, mark(position, STOP, end_at - 1), mark(position, END, end_at, 0, 143)]
    raise AssertionError(row)


STOPPED, SUCCEEDED, FAILED = Execution.STOPPED, Execution.SUCCEEDED, Execution.FAILED
# row: (reading on a link before the Task's last, reading on its last link, continues?)
PROTOCOL = {
    "exit 0": ((SUCCEEDED, 0, None), (SUCCEEDED, 0, None), False),
    "exit 75": (
        (STOPPED, 75, StopReason.YIELDED),
        (STOPPED, 75, StopReason.BUDGET_SPENT),
        True,
    ),
    "signal, then nonzero": (
        (STOPPED, 138, StopReason.TIME_LIMIT),
        (FAILED, 138, None),
        True,
    ),
    "signal, then stopped at the limit": (
        (STOPPED, 143, StopReason.TIME_LIMIT),
        (STOPPED, None, StopReason.TIME_LIMIT),
        True,
    ),
    "nonzero before the signal": ((FAILED, 3, None), (FAILED, 3, None), False),
    "cancelled": ((STOPPED, None, None), (STOPPED, None, None), False),
}


@pytest.mark.parametrize("position", [1, 2, 3])
@pytest.mark.parametrize("row", sorted(PROTOCOL))
def test_every_protocol_row_on_every_link(row: str, position: int) -> None:
    """Links before ``position`` yielded and handed on; link ``position`` does ``row``; the link
    after it is queued if the row continues the chain, else Slurm removed it (unlisted, no
    markers). The Task reads the row at ``position``, or the queued next link."""
    links = 3
    last = position == links
    markers: list[Marker] = []
    for earlier in range(1, position):
        markers += yielded(earlier, earlier * 1000.0)
    markers += row_markers(row, position, position * 1000.0, last=last)
    middle, on_last, continues = PROTOCOL[row]
    queue = [listed(later) for later in range(position + 1, links + 1)] if continues else []
    report = run(chain(links), markers, queue)
    current = task(report)
    attempts = {a.allocation_id: a for a in report.attempts}
    mine = attempts[link_id(position)]
    assert (mine.execution, mine.exit_code, mine.detail) == (on_last if last else middle)
    run_before = 100 * (position - 1)
    if continues and not last:
        assert (current.execution, current.allocation_id) == (
            Execution.QUEUED,
            link_id(position + 1),
        )
        assert current.link == TaskLink(position + 1, links, 0)
        assert current.run_time == RunTime(run_before + 100)
    else:
        assert (current.execution, current.exit_code, current.detail) == (
            on_last if last else middle
        )
        assert current.allocation_id == link_id(position)
        assert current.link == TaskLink(position, links, 0)
        for later in range(position + 1, links + 1):  # removed: nothing, not never started
            assert attempts[link_id(later)].run_time == RunTime(0)
        assert current.run_time == RunTime(run_before + 100)
    for later in range(position + 1, links + 1):
        assert attempts[link_id(later)].execution is not Execution.LOST


def test_budget_spent_is_on_the_tasks_own_last_link_of_a_packed_chain() -> None:
    """k1 has 2 links of the chain's 3: 75 on link 2 is its budget spent, while k0 yields."""
    submissions = chain(3, ("k0", "k1"), task_links=(3, 2), budget=7200)
    markers = [
        mark(1, START, 0.0),
        *(mark(1, END, 100.0, slot, 75) for slot in (0, 1)),
        *(mark(1, HANDOFF, 100.0, slot) for slot in (0, 1)),
        mark(2, START, 1000.0),
        mark(2, END, 1100.0, 0, 75),
        mark(2, HANDOFF, 1100.0, 0),
        mark(2, END, 1050.0, 1, 75),
    ]
    report = run(submissions, markers, [listed(3, "RUNNING")], keys=("k0", "k1"))
    k0, k1 = task(report, "k0"), task(report, "k1")
    assert (k1.execution, k1.exit_code, k1.detail) == (STOPPED, 75, StopReason.BUDGET_SPENT)
    assert k1.link == TaskLink(2, 2, 7200)
    assert k1.run_time == RunTime(150)
    assert (k0.execution, k0.allocation_id, k0.link) == (
        Execution.RUNNING,
        link_id(3),
        TaskLink(3, 3, 7200),
    )
    # link 3 was not handed k1: that slot is not its work, and runs no clock
    k1_in_3 = next(a for a in report.attempts if a.allocation_id == link_id(3) and a.slot == 1)
    assert (k1_in_3.execution, k1_in_3.detail, k1_in_3.run_time) == (
        STOPPED,
        StopReason.NEVER_STARTED,
        RunTime(0),
    )


def test_a_queued_later_link_does_not_hide_a_running_one() -> None:
    queue = [listed(1, "RUNNING"), listed(2), listed(3)]
    report = run(chain(3), [mark(1, START, 0.0)], queue, now=600.0)
    current = task(report)
    assert (current.execution, current.allocation_id, current.link) == (
        Execution.RUNNING,
        link_id(1),
        TaskLink(1, 3, 0),
    )
    assert current.run_time == RunTime(600, complete=False)
    later = [a for a in report.attempts if a.allocation_id != link_id(1)]
    assert [a.execution for a in later] == [Execution.QUEUED, Execution.QUEUED]
    assert [a.link.position for a in later if a.link] == [2, 3]


def test_a_plain_rule_would_read_lost_a_skipped_slot_of_a_packed_link() -> None:
    """k0 succeeded on link 1; link 2 ran k1 alone. k0's slot of link 2 (a start, no end, job
    gone) is not LOST and not never started for k0: k0 reads SUCCEEDED on link 1."""
    submissions = chain(2, ("k0", "k1"))
    markers = [
        mark(1, START, 0.0),
        mark(1, END, 50.0, 0, 0),
        mark(1, END, 100.0, 1, 75),
        mark(1, HANDOFF, 100.0, 1),
        mark(2, START, 1000.0),
        mark(2, END, 1040.0, 1, 0),
    ]
    report = run(submissions, markers, keys=("k0", "k1"))
    k0, k1 = task(report, "k0"), task(report, "k1")
    assert (k0.execution, k0.allocation_id, k0.run_time) == (SUCCEEDED, link_id(1), RunTime(50))
    assert (k1.execution, k1.allocation_id, k1.run_time) == (SUCCEEDED, link_id(2), RunTime(140))
    skipped = next(a for a in report.attempts if a.allocation_id == link_id(2) and a.slot == 0)
    assert skipped.execution is Execution.STOPPED and skipped.run_time == RunTime(0)
    assert settle(report, submissions)  # final: both links settle
    assert all(item.allocation_id in IDS[:2] for item in settle(report, submissions))


@pytest.mark.parametrize(
    ("why", "outcomes"),
    [("cancelled or removed", {}), ("refused or never submitted", {2: Outcome.NOT_SUBMITTED})],
)
def test_a_handoff_nobody_took_reads_the_link_that_handed_on(
    why: str, outcomes: dict[int, Outcome]
) -> None:
    """Link 2 never started and never will (a raw scancel after the signal takes it with the
    link that handed on, as would a refused sbatch): the Task reads as link 1 left it, as the
    spec's 'reads as a time limit' asks, not as a link that never ran."""
    report = run(chain(3, outcomes=outcomes), yielded(1, 0.0))
    current = task(report)
    assert (current.execution, current.detail, current.allocation_id, current.link) == (
        STOPPED,
        StopReason.YIELDED,
        link_id(1),
        TaskLink(1, 3, 0),
    ), why
    assert current.run_time == RunTime(100)


def test_a_handed_link_cancelled_but_still_listed_is_the_current_work_until_forgotten() -> None:
    report = run(chain(3), yielded(1, 0.0), [listed(2, "CANCELLED")])
    current = task(report)
    assert (current.execution, current.allocation_id, current.listed) == (
        Execution.ENDING,
        link_id(2),
        True,
    )
    assert current.run_time == RunTime(100)


def test_a_handoff_with_no_next_intent_reads_the_link_that_handed_on() -> None:
    """Submission stopped before link 2's intent: the Task reads link 1's yield."""
    report = run(chain(3)[:1], yielded(1, 0.0))
    current = task(report)
    assert (current.execution, current.detail, current.allocation_id) == (
        STOPPED,
        StopReason.YIELDED,
        link_id(1),
    )


def test_an_unresolved_link_decides_as_an_unresolved_allocation_does() -> None:
    submissions = chain(2, outcomes={2: Outcome.PENDING})
    report = run(submissions, [mark(1, START, 0.0)], [listed(1, "RUNNING")], now=50.0)
    current = task(report)
    assert current.execution is Execution.UNRESOLVED and current.unresolved
    assert current.run_time == RunTime(50, complete=False)


def test_offline_a_chain_reads_its_first_link() -> None:
    report = project(["k0"], chain(3), {}, now=0.0, offline=True)
    current = task(report)
    assert (current.execution, current.allocation_id, current.link) == (
        Execution.ACCEPTED,
        link_id(1),
        TaskLink(1, 3, 0),
    )
    assert current.run_time is None


def test_run_time_sums_every_link_and_a_running_link_grows() -> None:
    markers = [*yielded(1, 0.0), *yielded(2, 1000.0), mark(3, START, 2000.0)]
    report = run(chain(3, budget=3 * 3600), markers, [listed(3, "RUNNING")], now=2030.0)
    current = task(report)
    assert current.run_time == RunTime(230, complete=False)
    assert current.link == TaskLink(3, 3, 3 * 3600)


def test_a_retry_after_a_chain_is_the_current_work() -> None:
    plain = Submission(IDS[7], ("k0",), "t0", 0.0, 60, Outcome.ACCEPTED, 900)
    markers = [*yielded(1, 0.0), Marker(IDS[7], 900, START, 5000.0)]
    report = run(
        [*chain(2), plain],
        markers,
        [QueueEntry(900, JOB_NAME_PREFIX + IDS[7], "RUNNING")],
        now=5010.0,
    )
    current = task(report)
    assert (current.execution, current.allocation_id, current.link) == (
        Execution.RUNNING,
        IDS[7],
        None,
    )
    assert current.run_time == RunTime(110, complete=False)


def test_a_handoff_means_nothing_outside_a_chain() -> None:
    markers = [Marker(IDS[0], 5, START, 0.0), Marker(IDS[0], 5, HANDOFF, 1.0, 0)]
    assert observe(IDS[0], 1, markers).handed == ()
    assert observe(IDS[0], 1, markers, link=True).handed == (0,)
    plain = Submission(IDS[0], ("k0",), "t0", 0.0, 60, Outcome.ACCEPTED, 5)
    (attempt,) = run([plain], markers).attempts
    assert attempt.observation is not None and attempt.observation.handed == ()


def test_the_document_carries_links_and_handed_slots() -> None:
    report = run(chain(2, budget=7200), yielded(1, 0.0), [listed(2)])
    document = status_document(report)
    (entry,) = document["tasks"]
    assert entry["link"] == {"position": 2, "of": 2, "budget": 7200}
    assert entry["execution"] == "QUEUED"
    first, second = document["attempts"]
    assert first["link"] == {"position": 1, "of": 2, "after": None}
    assert second["link"] == {"position": 2, "of": 2, "after": link_id(1)}
    assert first["observation"]["handed"] == [0]
    assert second["observation"]["handed"] == []


# -- settled chains read as their markers did ----------------------------------------------

CODES = (0, 3, 75, 138, 143)
times = st.sampled_from((0.0, 10.0, 100.0, 1000.5)) | st.floats(0, 1e5, allow_nan=False)


@st.composite
def chained(draw: st.DrawFn) -> tuple[list[str], list[Submission], dict[str, Evidence]]:
    """One or two chains of one or two Tasks, markers of every kind on their links (handoffs
    included), and any queue."""
    keys = ("k0", "k1")
    submissions: list[Submission] = []
    ids = iter(IDS)
    for _ in range(draw(st.integers(1, 2))):
        slots = tuple(draw(st.lists(st.sampled_from(keys), min_size=1, max_size=2, unique=True)))
        of = draw(st.integers(1, 3))
        own = tuple(draw(st.integers(1, of)) for _ in slots)
        before = ""
        for position in range(1, of + 1):
            allocation_id = next(ids)
            outcome = draw(st.sampled_from(Outcome))
            submissions.append(
                Submission(
                    allocation_id,
                    slots,
                    "t0",
                    0.0,
                    draw(st.sampled_from((60, 3600))),
                    outcome,
                    draw(st.sampled_from((1, 2))) if outcome is Outcome.ACCEPTED else None,
                    None,
                    ChainLink(position, of, before, own, draw(st.sampled_from((0, 7200)))),
                )
            )
            before = allocation_id
    used = [s.allocation_id for s in submissions]
    markers = st.builds(
        Marker,
        allocation_id=st.sampled_from(used),
        job=st.sampled_from((1, 2)),
        kind=st.sampled_from(MarkerKind),
        at=times,
        slot=st.none() | st.integers(0, 2),
        exit_code=st.none() | st.sampled_from(CODES),
    )
    entries = st.builds(
        QueueEntry,
        job=st.sampled_from((1, 2)),
        name=st.sampled_from(used).map(lambda a: JOB_NAME_PREFIX + a),
        state=st.sampled_from(("PENDING", "RUNNING", "COMPLETED", "CANCELLED")),
    )
    evidence = {
        "t0": Evidence(
            tuple(draw(st.lists(entries, max_size=3))),
            tuple(draw(st.lists(markers, max_size=14))),
            draw(st.none() | times),
        )
    }
    return ["k0", "k1"], submissions, evidence


@settings(max_examples=500, deadline=None)
@given(campaign=chained(), now=times, purge=st.booleans())
def test_a_settled_chain_reads_as_its_markers_did(
    campaign: tuple[list[str], list[Submission], dict[str, Evidence]], now: float, purge: bool
) -> None:
    keys, submissions, evidence = campaign
    from_markers = project(keys, submissions, evidence, now=now)
    found = settle(from_markers, submissions)
    observed = {item.allocation_id: item.observation for item in found}
    recorded = [s._replace(settled=observed.get(s.allocation_id)) for s in submissions]
    later = evidence
    if purge:
        gone = set(observed)
        item = evidence["t0"]
        assert item.markers is not None
        kept = tuple(m for m in item.markers if m.allocation_id not in gone)
        later = {"t0": Evidence(item.queue, kept, item.clock)}
    from_record = project(keys, recorded, later, now=now)
    from_markers = without_evidence_notes(from_markers)
    from_record = without_evidence_notes(from_record)
    assert from_record == from_markers
    assert status_document(from_record) == status_document(from_markers)
    assert settle(from_record, recorded) == ()


@pytest.mark.parametrize(
    ("span", "seconds"), [(50.5, 51), (51.5, 52), (50.49, 50), (0.5, 1), (-3.0, 0)]
)
def test_a_span_rounds_half_up_as_the_batch_script_sums_it(span: float, seconds: int) -> None:
    """``SERVATUS_RUN_TIME`` (awk's ``int(span + 0.5)``) and status's RUN TIME agree to the
    second on the same mtimes, half-second spans included."""
    start = 1_796_000_000.0
    observation = Observation(start, None, None, (SlotEnd(0, start + span),))
    assert slot_run_time(Execution.SUCCEEDED, observation, 0, 600, start + 900) == RunTime(seconds)


# -- a chain cut short ---------------------------------------------------------------------------


def test_a_chain_whose_later_links_were_never_recorded_is_cut_short() -> None:
    """Links 1-2 of 4 recorded (a submit stopped after link 2): named while link 2 is queued and
    once it yielded, with the budget that continues it; a chain of all its links is not."""
    cut = chain(4, budget=4000)[:2]
    queued = run(cut, yielded(1, 1000), [listed(2)])
    assert task(queued).link == TaskLink(2, 4, 4000)
    (warning,) = queued.warnings
    assert warning == (
        f"chain cut short: allocation {link_id(2)} (link 2/4) is the last link of its chain that "
        "reached Slurm; links 3-4 were never sent, so k0 stops after it; once it has ended, "
        "continue with: servatus plan STATE --retry k0 --budget 01:06:40 --output continue.json, "
        "and the profile it was planned with"
    )
    ended = run(cut, [*yielded(1, 1000), *yielded(2, 2000)])
    assert (task(ended).execution, task(ended).detail) == (Execution.STOPPED, StopReason.YIELDED)
    assert ended.warnings == queued.warnings
    assert run(chain(4, budget=4000), [*yielded(1, 1000), *yielded(2, 2000)]).warnings == ()


def test_a_refused_link_cuts_its_chain_at_the_link_before_and_an_unresolved_one_waits() -> None:
    refused = chain(3, outcomes={2: Outcome.NOT_SUBMITTED})[:2]
    (warning,) = run(refused, yielded(1, 1000)).warnings
    assert f"allocation {link_id(1)} (link 1/3)" in warning
    assert "links 2-3 were never sent" in warning and "--max-links 2 --output" in warning
    assert run(chain(3, outcomes={2: Outcome.PENDING})[:2], yielded(1, 1000)).warnings == ()


def test_a_cut_chain_whose_tasks_are_done_or_gone_says_nothing() -> None:
    cut = chain(3, keys=("k0", "k1"))[:2]
    markers = [
        mark(1, START, 1000),
        mark(1, END, 1100, 0, 0),  # k0 succeeded on link 1
        mark(1, END, 1100, 1, 75),
        mark(1, HANDOFF, 1100, 1),  # k1 goes on to link 2
    ]
    (warning,) = run(cut, markers, [listed(2)], keys=("k0", "k1")).warnings
    assert "so k1 stops after it" in warning and "--retry k1 --max-links 1" in warning
    failed = [*markers, mark(2, START, 2000), mark(2, END, 2100, 1, 3)]
    assert run(cut, failed, keys=("k0", "k1")).warnings == ()


def test_a_leases_links_are_no_tasks_chain() -> None:
    lease = [
        Submission(link_id(1), (), "t0", 0.0, LIMIT_SECONDS, Outcome.ACCEPTED, job(1), None,
                   ChainLink(1, 2, "", (), 0), 2),
    ]  # fmt: skip
    assert run(lease, [], keys=()).warnings == ()
