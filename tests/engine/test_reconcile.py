"""``resolve`` decides each unresolved intent as the scan it replaced did.

``reference_resolve`` is a frozen copy of ``resolve`` as it stood when it scanned every queue
entry and every marker once per pending intent. ``resolve`` now reads each Target's listings
once; for any intents and evidence its decisions must equal the reference's, in order.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from hypothesis import given, settings
from hypothesis import strategies as st

from servatus.engine.status_values import Outcome, Submission
from servatus.evidence import Evidence, Marker, MarkerKind, QueueEntry
from servatus.ids import JOB_NAME_PREFIX
from servatus.operations.reconcile import RECONCILE_AFTER, Resolution, resolve


def reference_resolve(
    pending: Sequence[Submission], evidence: Mapping[str, Evidence], *, now: float
) -> list[Resolution]:
    decisions = []
    for submission in pending:
        item = evidence[submission.target]
        name = JOB_NAME_PREFIX + submission.allocation_id
        listed = [entry.job for entry in item.queue or () if entry.name == name]
        marked = sorted(
            {m.job for m in item.markers or () if m.allocation_id == submission.allocation_id}
        )
        if listed or marked:
            job = (listed or marked)[0]
            decisions.append(Resolution(submission.allocation_id, "accepted", job=job))
        elif now - submission.recorded_at >= RECONCILE_AFTER:
            decisions.append(Resolution(submission.allocation_id, "not_submitted"))
        else:
            retry_at = submission.recorded_at + RECONCILE_AFTER
            decisions.append(Resolution(submission.allocation_id, "waiting", retry_at=retry_at))
    return decisions


ALLOCATIONS = ("a0", "a1", "a2", "a3")
TARGETS = ("t0", "t1")
JOBS = st.integers(1, 6)

pending_values = st.builds(
    Submission,
    allocation_id=st.sampled_from(ALLOCATIONS),
    task_keys=st.just(("k",)),
    target=st.sampled_from(TARGETS),
    recorded_at=st.sampled_from((0.0, 100.0)),
    time_limit=st.just(60),
    outcome=st.just(Outcome.PENDING),
)

queue_entries = st.builds(
    QueueEntry,
    job=JOBS,
    name=st.sampled_from((*ALLOCATIONS, "zz")).map(lambda a: JOB_NAME_PREFIX + a)
    | st.sampled_from(ALLOCATIONS),  # a job named like the bare id is not the allocation's
    state=st.sampled_from(("PENDING", "RUNNING", "COMPLETED")),
)

markers = st.builds(
    Marker,
    allocation_id=st.sampled_from((*ALLOCATIONS, "zz")),
    job=JOBS,
    kind=st.sampled_from(MarkerKind),
    at=st.just(5.0),
)

evidence_values = st.builds(
    Evidence,
    queue=st.none() | st.lists(queue_entries, max_size=6).map(tuple),
    markers=st.none() | st.lists(markers, max_size=12).map(tuple),
)


@settings(max_examples=500, deadline=None)
@given(
    pending=st.lists(pending_values, max_size=6),
    evidence=st.fixed_dictionaries({target: evidence_values for target in TARGETS}),
    now=st.sampled_from((0.0, RECONCILE_AFTER - 1.0, RECONCILE_AFTER, RECONCILE_AFTER + 100.0)),
)
def test_resolve_equals_reference(
    pending: list[Submission], evidence: dict[str, Evidence], now: float
) -> None:
    assert resolve(pending, evidence, now=now) == reference_resolve(pending, evidence, now=now)


def intent(allocation: str, target: str = "t0", at: float = 0.0) -> Submission:
    return Submission(allocation, ("k",), target, at, 60, Outcome.PENDING)


def start(allocation: str, job: int) -> Marker:
    return Marker(allocation, job, MarkerKind.START, 5.0)


def test_a_listed_job_wins_over_marked_ones_and_the_first_listed_is_taken() -> None:
    queue = (
        QueueEntry(9, JOB_NAME_PREFIX + "a0", "RUNNING"),
        QueueEntry(7, JOB_NAME_PREFIX + "a0", "PENDING"),
    )
    evidence = {"t0": Evidence(queue=queue, markers=(start("a0", 3),))}
    assert resolve([intent("a0")], evidence, now=0.0) == [Resolution("a0", "accepted", job=9)]


def test_without_a_listing_the_lowest_marked_job_is_taken() -> None:
    evidence = {"t0": Evidence(queue=(), markers=(start("a0", 8), start("a0", 4), start("a1", 2)))}
    assert resolve([intent("a0")], evidence, now=0.0) == [Resolution("a0", "accepted", job=4)]


def test_evidence_of_another_target_decides_nothing() -> None:
    evidence = {
        "t0": Evidence(queue=(QueueEntry(5, JOB_NAME_PREFIX + "a0", "RUNNING"),), markers=()),
        "t1": Evidence(queue=(), markers=(start("a1", 6),)),
    }
    got = resolve([intent("a0", "t1"), intent("a1", "t0"), intent("a1", "t1")], evidence, now=0.0)
    assert got == [
        Resolution("a0", "waiting", retry_at=RECONCILE_AFTER),
        Resolution("a1", "waiting", retry_at=RECONCILE_AFTER),
        Resolution("a1", "accepted", job=6),
    ]


def test_without_evidence_age_decides() -> None:
    evidence = {"t0": Evidence(queue=None, markers=None)}
    got = resolve([intent("a0", at=0.0), intent("a1", at=10.0)], evidence, now=RECONCILE_AFTER)
    assert got == [
        Resolution("a0", "not_submitted"),
        Resolution("a1", "waiting", retry_at=10.0 + RECONCILE_AFTER),
    ]
