"""reconcile's decisions: each Target's listings are folded once, whatever the number of pending
intents, and decide exactly as a scan of the listings per intent did."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence

from hypothesis import given, settings
from hypothesis import strategies as st

from servatus.evidence import Evidence, Marker, MarkerKind, QueueEntry
from servatus.script import job_name
from servatus.status import Outcome, Submission
from servatus.submission import RECONCILE_AFTER, Resolution, resolve

IDS = tuple(f"{index:02d}" * 12 for index in range(4))


def reference(
    pending: Sequence[Submission], evidence: Mapping[str, Evidence], now: float
) -> list[Resolution]:
    """The scan per pending intent that resolve replaced."""
    decisions = []
    for submission in pending:
        item = evidence[submission.target]
        name = job_name(submission.allocation_id)
        listed = [entry.job for entry in item.queue or () if entry.name == name]
        marked = sorted(
            {m.job for m in item.markers or () if m.allocation_id == submission.allocation_id}
        )
        if listed or marked:
            decisions.append(
                Resolution(submission.allocation_id, "accepted", job=(listed or marked)[0])
            )
        elif now - submission.recorded_at >= RECONCILE_AFTER:
            decisions.append(Resolution(submission.allocation_id, "not_submitted"))
        else:
            retry_at = submission.recorded_at + RECONCILE_AFTER
            decisions.append(Resolution(submission.allocation_id, "waiting", retry_at=retry_at))
    return decisions


def pending(allocation_id: str, target: str = "t0", at: float = 0.0) -> Submission:
    return Submission(allocation_id, ("k",), target, at, 60, Outcome.PENDING)


@settings(max_examples=500, deadline=None)
@given(
    chosen=st.lists(
        st.tuples(
            st.sampled_from(IDS), st.sampled_from(("t0", "t1")), st.sampled_from((0.0, 500.0))
        ),
        unique_by=lambda item: item[0],
    ),
    queue=st.lists(
        st.builds(
            QueueEntry, st.integers(1, 5), st.sampled_from(IDS).map(job_name), st.just("PENDING")
        )
    ),
    markers=st.lists(
        st.builds(
            Marker, st.sampled_from(IDS), st.integers(1, 5), st.just(MarkerKind.START), st.just(1.0)
        )
    ),
    now=st.sampled_from((100.0, 1000.0, 2000.0)),
)
def test_resolve_decides_as_the_scan_per_intent_did(
    chosen: list[tuple[str, str, float]],
    queue: list[QueueEntry],
    markers: list[Marker],
    now: float,
) -> None:
    submissions = [pending(a, target, at) for a, target, at in chosen]
    evidence = {
        "t0": Evidence(tuple(queue), tuple(markers)),
        "t1": Evidence(tuple(queue[::-1]), tuple(markers[1:])),
    }
    assert resolve(submissions, evidence, now=now) == reference(submissions, evidence, now)


class Counted(tuple):  # type: ignore[type-arg]
    """A listing that counts how often it is read through."""

    reads = 0

    def __iter__(self) -> Iterator[object]:
        Counted.reads += 1
        return super().__iter__()


def test_each_listing_is_read_once_for_every_pending_intent() -> None:
    markers = Counted(Marker(a, 9, MarkerKind.START, 1.0) for a in IDS[:2])
    queue = Counted([QueueEntry(8, job_name(IDS[2]), "RUNNING")])
    Counted.reads = 0
    decided = resolve([pending(a) for a in IDS], {"t0": Evidence(queue, markers)}, now=10.0)
    assert [(d.outcome, d.job) for d in decided] == [
        ("accepted", 9),
        ("accepted", 9),
        ("accepted", 8),
        ("waiting", None),
    ]
    assert Counted.reads == 2
