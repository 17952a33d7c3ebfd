"""Settlement: what settles, and that an answer from a settled record is the answer from the
markers it was made from (Reports and ``status --json`` documents alike), markers present or
purged."""

from __future__ import annotations

from collections.abc import Sequence

from hypothesis import given, settings
from hypothesis import strategies as st

from servatus.engine.settlement import settle
from servatus.engine.status import project
from servatus.engine.status_document import status_document
from servatus.engine.status_values import Execution, Outcome, Report, Submission
from servatus.evidence import Evidence, Marker, MarkerKind, QueueEntry
from servatus.ids import JOB_NAME_PREFIX
from servatus.journal.records import Settlement
from testkit import without_evidence_notes

ALLOCATIONS = tuple(f"{index:02d}" * 12 for index in range(6))
KEYS = ("k0", "k1", "k2", "k3")
TARGETS = ("t0", "t1")
STATES = ("PENDING", "RUNNING", "COMPLETING", "COMPLETED", "FAILED")
times = st.sampled_from((0.0, 10.0, 10.4, 100.0, 1000.5)) | st.floats(0, 1e6, allow_nan=False)


@st.composite
def campaigns(draw: st.DrawFn) -> tuple[list[str], list[Submission], dict[str, Evidence]]:
    """Unique allocations (as a campaign has), jobs 1 to 3, markers of them and of strangers."""
    ids = draw(st.lists(st.sampled_from(ALLOCATIONS), unique=True, max_size=6))
    submissions = [
        Submission(
            allocation_id,
            tuple(draw(st.lists(st.sampled_from(KEYS), min_size=1, max_size=3))),
            draw(st.sampled_from(TARGETS)),
            0.0,
            draw(st.sampled_from((0, 60, 3600))),
            draw(st.sampled_from(Outcome)),
            draw(st.sampled_from((None, 1, 2, 3))),
        )
        for allocation_id in ids
    ]
    submissions = [
        s._replace(job=s.job or 1) if s.outcome is Outcome.ACCEPTED else s for s in submissions
    ]
    markers = st.builds(
        Marker,
        allocation_id=st.sampled_from((*ALLOCATIONS, "zz")),
        job=st.sampled_from((1, 2, 3)),
        kind=st.sampled_from(MarkerKind),
        at=times,
        slot=st.none() | st.integers(0, 3),
        exit_code=st.none() | st.sampled_from((0, 3, 75, 143)),
    )
    entries = st.builds(
        QueueEntry,
        job=st.sampled_from((1, 2, 3)),
        name=st.sampled_from(ALLOCATIONS).map(lambda a: JOB_NAME_PREFIX + a),
        state=st.sampled_from(STATES),
    )
    evidence = draw(
        st.dictionaries(
            st.sampled_from(TARGETS),
            st.builds(
                Evidence,
                queue=st.none() | st.lists(entries, max_size=4).map(tuple),
                markers=st.none() | st.lists(markers, max_size=16).map(tuple),
                clock=st.none() | times,
            ),
        )
    )
    keys = draw(st.lists(st.sampled_from((*KEYS, "never")), unique=True))
    return keys, submissions, evidence


def settled(submissions: Sequence[Submission], found: Sequence[Settlement]) -> list[Submission]:
    """The submissions as ``state.submissions`` gives them once ``found`` is recorded."""
    by_id = {item.allocation_id: item.observation for item in found}
    return [s._replace(settled=by_id.get(s.allocation_id, s.settled)) for s in submissions]


def purged(evidence: dict[str, Evidence], found: Sequence[Settlement]) -> dict[str, Evidence]:
    """The same listings after a scratch purge took every marker of the settled allocations."""
    gone = {item.allocation_id for item in found}
    return {
        target: Evidence(
            item.queue,
            None
            if item.markers is None
            else tuple(m for m in item.markers if m.allocation_id not in gone),
            item.clock,
        )
        for target, item in evidence.items()
    }


def same(first: Report, second: Report) -> None:
    first, second = without_evidence_notes(first), without_evidence_notes(second)
    assert first == second
    assert status_document(first) == status_document(second)
    assert status_document(first, valid={"k0"}) == status_document(second, valid={"k0"})


@settings(max_examples=1500, deadline=None)
@given(campaign=campaigns(), now=times, purge=st.booleans())
def test_the_settled_record_answers_as_the_markers_did(
    campaign: tuple[list[str], list[Submission], dict[str, Evidence]], now: float, purge: bool
) -> None:
    keys, submissions, evidence = campaign
    from_markers = project(keys, submissions, evidence, now=now)
    found = settle(from_markers, submissions)
    recorded = settled(submissions, found)
    later = purged(evidence, found) if purge else evidence
    from_record = project(keys, recorded, later, now=now)
    same(from_markers, from_record)
    assert settle(from_record, recorded) == ()  # never settled twice
    for item in found:
        mine = [a for a in from_markers.attempts if a.allocation_id == item.allocation_id]
        assert mine and all(not a.listed for a in mine)
        assert {a.execution for a in mine} <= {
            Execution.SUCCEEDED,
            Execution.FAILED,
            Execution.STOPPED,
        }


def one(outcome: Outcome = Outcome.ACCEPTED, keys: tuple[str, ...] = ("k0", "k1")) -> Submission:
    return Submission(ALLOCATIONS[0], keys, "t0", 0.0, 600, outcome, 7)


def mark(kind: MarkerKind, at: float, slot: int | None = None, code: int | None = None) -> Marker:
    return Marker(ALLOCATIONS[0], 7, kind, at, slot, code)


DONE = (
    mark(MarkerKind.START, 10.0),
    mark(MarkerKind.END, 20.0, 0, 0),
    mark(MarkerKind.END, 30.0, 1, 3),
)


def test_a_finished_unlisted_allocation_settles_with_its_observation() -> None:
    report = project(["k0", "k1"], [one()], {"t0": Evidence((), DONE)}, now=99.0)
    (found,) = settle(report, [one()])
    assert (found.allocation_id, found.job, found.start, found.stop) == (
        ALLOCATIONS[0],
        7,
        10.0,
        None,
    )
    assert [(end.exit_code, end.at) for end in found.ends if end] == [(0, 20.0), (3, 30.0)]


def test_what_never_settles() -> None:
    listed = (QueueEntry(7, JOB_NAME_PREFIX + ALLOCATIONS[0], "COMPLETED"),)
    lost = (mark(MarkerKind.START, 10.0), mark(MarkerKind.END, 20.0, 0, 0))  # slot 1 LOST
    cases = [
        ([one()], {"t0": Evidence(listed, DONE)}),  # Slurm still lists the job
        ([one()], {"t0": Evidence((), lost)}),
        ([one(Outcome.PENDING)], {"t0": Evidence((), DONE)}),  # UNRESOLVED
        ([one(Outcome.NOT_SUBMITTED)], {"t0": Evidence((), DONE)}),
        ([one()], {"t0": Evidence(None, DONE)}),  # the queue was not read
        ([one()], {"t0": Evidence((), None)}),  # the markers were not read
        ([one()], {}),
        ([one()._replace(job=None)], {"t0": Evidence((), DONE)}),  # no job number
    ]
    for submissions, evidence in cases:
        report = project(["k0", "k1"], submissions, evidence, now=99.0)
        assert settle(report, submissions) == (), (submissions, evidence)
    offline = project(["k0", "k1"], [one()], {"t0": Evidence((), DONE)}, now=99.0, offline=True)
    assert settle(offline, [one()]) == ()


def test_never_started_settles_as_stopped() -> None:
    report = project(["k0"], [one(keys=("k0",))], {"t0": Evidence((), ())}, now=99.0)
    (found,) = settle(report, [one(keys=("k0",))])
    assert found.start is None and found.ends == (None,)
    assert report.tasks[0].execution is Execution.STOPPED
