"""The report's data layer over constructed values: lease links and their steps (ADR 0009),
chain links, and the spans status cannot observe."""

from __future__ import annotations

import pytest

from reportkit import (
    LEASE,
    LINK1,
    LINK2,
    LOCAL,
    PLAIN,
    STEP_A,
    STEP_B,
    STEP_C,
    TERMS,
    T,
    attempt,
    lease_report,
    lease_state,
    task,
)
from servatus.engine.report import (
    Span,
    build,
    distribution,
    occupancy,
    report_document,
)
from servatus.engine.status_values import Execution, Report, RunTime, StopReason, TaskLink
from servatus.evidence import Observation, SlotEnd
from servatus.journal import folding, records
from servatus.tasks import Task


def test_lease_steps_are_drawn_within_their_lease_with_its_idle_slot_time() -> None:
    data = build(lease_state(), lease_report(lease_attempt=True), now=T + 2000)
    (lease,) = data.leases
    assert (lease.allocation_id, lease.job, lease.slots) == (LEASE, 41, 2)
    assert [(s.span, s.start, s.end) for s in lease.segments] == [
        (Span.QUEUED, T, T + 100), (Span.RUNNING, T + 100, T + 1100),
    ]  # fmt: skip
    assert lease.steps == (STEP_A, STEP_B, STEP_C)
    # a and b from 200, b ends at 400 and c starts at 300: 2 busy until 600, then c alone
    assert lease.busy == ((T + 200, 2), (T + 600, 1), (T + 1100, 0))
    assert lease.held_slot_hours == pytest.approx(2 * 1000 / 3600)
    busy = (400 * 2 + 500 * 1) / 3600  # b and c overlap a: never more than 2 slots
    assert lease.busy_slot_hours == pytest.approx(busy)
    assert lease.idle_slot_hours == pytest.approx(2 * 1000 / 3600 - busy)
    assert [p.at for p in lease.points] == [T + 1000]
    lanes = {lane.key: lane for lane in data.lanes}
    running = lanes["c"].segments[1]
    assert (running.within, running.job, running.execution) == (LEASE, 41, "STOPPED (time limit)")
    assert [p.at for p in lanes["c"].points] == [T + 1000]
    # the lease's whole allocation is what was requested and used, its steps not again
    assert data.summary.requested.cpu == pytest.approx(3600 * 2 * 4 / 3600)
    assert data.summary.used.cpu == pytest.approx(1000 * 2 * 4 / 3600)
    assert data.summary.used.gpu == pytest.approx(1000 * 2 / 3600)
    assert data.summary.unknown_resources == 0
    document = report_document(data)
    assert document["leases"][0]["idle_slot_hours"] == pytest.approx(lease.idle_slot_hours)


def test_a_lease_reads_from_its_settlement_before_status_projects_leases() -> None:
    state = lease_state()
    settled = records.Settlement(LEASE, 41, T + 100, T + 1100, T + 1000, ())
    state = folding.fold([*fold_records(state), records.Settled((settled,))])
    data = build(state, lease_report(lease_attempt=False), now=T + 2000)
    (lease,) = data.leases
    assert [s.span for s in lease.segments] == [Span.QUEUED, Span.RUNNING]
    assert lease.held_slot_hours == pytest.approx(2 * 1000 / 3600)


def fold_records(state: records.CampaignState) -> list[object]:
    return [
        records.Created(state.campaign_id, state.created_at, state.sealed, state.tasks),
        *state.targets, *state.intents, *state.receipts, *state.resolutions,
    ]  # fmt: skip


def test_a_lease_still_queued_and_one_lost_read_as_what_they_are() -> None:
    state = lease_state()
    queued = build(
        state,
        Report((), (attempt(LEASE, None, 41, Execution.QUEUED, Observation()),), (), True),
        now=T + 50,
    ).leases[0]
    assert [(s.span, s.end, s.open) for s in queued.segments] == [(Span.QUEUED, T + 50, True)]
    assert queued.held_slot_hours == 0
    lost = build(
        state,
        Report((), (attempt(LEASE, None, 41, Execution.LOST, Observation(T + 100)),), (), True),
        now=T + 9000,
    ).leases[0]
    assert [(s.span, s.end) for s in lost.segments] == [
        (Span.QUEUED, T + 100), (Span.LOST, T + 3700),
    ]  # fmt: skip


def chain_state() -> records.CampaignState:
    slot = records.TaskResources(2, 1024, 1)
    return folding.fold(
        [
            records.Created("c2", T, False, (Task("a", ["x"]), Task("u", ["y"]), Task("o", ["z"]))),
            records.TargetSeen(LOCAL, '{"host":null}'),
            records.Intent(LINK1, ("a",), "d", T, LOCAL, 600, link_of(1, ""), resources=slot),
            records.Receipt(LINK1, 7),
            records.Intent(LINK2, ("a",), "d", T, LOCAL, 600, link_of(2, LINK1), resources=slot),
            records.Receipt(LINK2, 8),
            records.Intent(PLAIN, ("u",), "d", T + 5, LOCAL, 600),
            records.Intent("0d" * 12, ("o",), "d", T + 5, LOCAL, 600),
            records.Receipt("0d" * 12, 9),
        ]
    )  # fmt: skip


def test_chain_links_are_numbered_and_unresolved_and_unobserved_spans_drawn_as_such() -> None:
    first = link_of(1, "")
    second = link_of(2, LINK1)
    attempts = (
        attempt(LINK1, "a", 7, Execution.STOPPED,
                Observation(T + 10, None, None, (SlotEnd(75, T + 610),), (0,)), 600, link=first,
                exit_code=75, detail=StopReason.YIELDED),
        attempt(LINK2, "a", 8, Execution.RUNNING, Observation(T + 620, None, None, (None,)), 100,
                link=second),
        attempt(PLAIN, "u", None, Execution.UNRESOLVED, None),
        attempt("0d" * 12, "o", 9, Execution.ACCEPTED, None),
    )  # fmt: skip
    attempts = (
        attempts[0],
        attempts[1]._replace(run_time=RunTime(100, complete=False)),
        *attempts[2:],
    )
    tasks = (
        task("a", Execution.RUNNING, LINK2, 8, run_time=RunTime(700, False),
             link=TaskLink(2, 2, 900)),
        task("u", Execution.UNRESOLVED, PLAIN, None),
        task("o", Execution.ACCEPTED, "0d" * 12, 9),
    )  # fmt: skip
    data = build(chain_state(), Report(tasks, attempts, (), True), now=T + 720)
    lanes = {lane.key: lane for lane in data.lanes}
    spans = [(s.span, s.link, s.start, s.end, s.open) for s in lanes["a"].segments]
    assert spans == [
        (Span.QUEUED, 1, T, T + 10, False),
        (Span.RUNNING, 1, T + 10, T + 610, False),
        (Span.QUEUED, 2, T + 610, T + 620, False),  # from link 1's end, which it waited for
        (Span.RUNNING, 2, T + 620, T + 720, True),
    ]
    assert [(s.span, s.open) for s in lanes["u"].segments] == [(Span.UNRESOLVED, True)]
    assert [(s.span, s.end) for s in lanes["o"].segments] == [(Span.UNOBSERVED, T + 720)]
    (chain,) = data.summary.chains
    assert (chain.key, chain.run_time, chain.complete, chain.budget) == ("a", 700, False, 900)
    assert data.summary.used.cpu == pytest.approx(700 * 2 / 3600)
    assert data.summary.requested.gpu == pytest.approx(1200 / 3600)
    assert data.summary.unknown_resources == 1  # job 9's intent predates recorded resources
    assert data.summary.run_time.count == 1  # the running link's time is still growing


def link_of(position: int, after: str) -> records.ChainLink:
    return records.ChainLink(position, 2, after, (2,), 900)


def test_occupancy_caps_at_the_slots_and_clips_to_the_lease() -> None:
    spans = [(0.0, 10.0), (5.0, 20.0), (6.0, 8.0), (30.0, 50.0)]
    assert occupancy(spans, 2, (2.0, 40.0)) == (
        (2.0, 1),
        (5.0, 2),
        (10.0, 1),
        (20.0, 0),
        (30.0, 1),
        (40.0, 0),
    )
    assert occupancy(spans, 2, None) == ()


def test_a_distribution_of_nothing_and_of_values() -> None:
    assert distribution([]).count == 0
    value = distribution([float(v) for v in range(1, 11)], bins=5)
    assert (value.count, value.minimum, value.median, value.p90, value.maximum) == (10, 1, 5, 9, 10)
    assert sum(b[2] for b in value.bins) == 10


def test_a_lease_without_a_receipt_is_unresolved_and_one_never_submitted_draws_nothing() -> None:
    history = [r for r in fold_records(lease_state()) if not isinstance(r, records.Receipt)]
    pending = build(folding.fold(history), Report((), (), (), True), now=T + 50).leases[0]
    assert [(s.span, s.open) for s in pending.segments] == [(Span.UNRESOLVED, True)]
    projected = Report((), (attempt(LEASE, None, None, Execution.UNRESOLVED, None),), (), True)
    assert [s.span for s in build(lease_state(), projected, now=T).leases[0].segments] == [
        Span.UNRESOLVED
    ]
    never = build(
        folding.fold([*history, records.Resolved(LEASE, None)]), Report((), (), (), True), now=T
    ).leases[0]
    assert (never.segments, never.held_slot_hours) == ((), 0)


def test_a_later_chain_link_is_queued_from_the_end_of_the_link_before_it() -> None:
    """Every link's intent is recorded at submit, but a later link waits in Slurm on its
    dependency, not in the queue, until the link before it ends: its queued bar starts there,
    after the earlier link's running bar rather than over it, and the queue wait it adds is
    its own (10 s here, not the 610 s link 1 ran)."""
    first, second = link_of(1, ""), link_of(2, LINK1)
    attempts = (
        attempt(LINK1, "a", 7, Execution.STOPPED,
                Observation(T + 10, None, None, (SlotEnd(75, T + 610),), (0,)), 600, link=first,
                exit_code=75, detail=StopReason.YIELDED),
        attempt(LINK2, "a", 8, Execution.SUCCEEDED,
                Observation(T + 620, None, None, (SlotEnd(0, T + 700),)), 80, link=second,
                exit_code=0),
    )  # fmt: skip
    tasks = (task("a", Execution.SUCCEEDED, LINK2, 8, exit_code=0, run_time=RunTime(680),
                  link=TaskLink(2, 2, 900)),)  # fmt: skip
    state = folding.fold([r for r in fold_records(chain_state()) if _of_chain(r)])
    data = build(state, Report(tasks, attempts, (), True), now=T + 720)
    (lane,) = data.lanes
    assert [(s.span, s.link, s.start, s.end) for s in lane.segments] == [
        (Span.QUEUED, 1, T, T + 10),
        (Span.RUNNING, 1, T + 10, T + 610),
        (Span.QUEUED, 2, T + 610, T + 620),
        (Span.RUNNING, 2, T + 620, T + 700),
    ]
    assert (data.summary.queue_wait.count, data.summary.queue_wait.maximum) == (2, 10)


def _of_chain(record: object) -> bool:
    """The chain's records alone (its Task's creation kept whole)."""
    allocation = getattr(record, "allocation_id", None)
    return allocation is None or allocation in (LINK1, LINK2)


def lease_link(position: int, after: str) -> records.ChainLink:
    return records.ChainLink(position, 2, after, (), 0)


def test_a_lease_s_later_link_is_queued_from_the_end_of_the_link_before_it() -> None:
    second = "1f" * 12
    state = folding.fold(
        [
            records.Created("c3", T, False, ()),
            records.TargetSeen(LOCAL, '{"host":null}'),
            records.Intent(LEASE, (), "d", T, LOCAL, 600, lease_link(1, ""), lease=TERMS),
            records.Receipt(LEASE, 41),
            records.Intent(second, (), "d", T, LOCAL, 600, lease_link(2, LEASE), lease=TERMS),
            records.Receipt(second, 42),
            records.Settled(
                (
                    records.Settlement(LEASE, 41, T + 100, T + 700, None, ()),
                    records.Settlement(second, 42, T + 720, T + 900, None, ()),
                )
            ),
        ]
    )
    first, later = build(state, Report((), (), (), True), now=T + 1000).leases
    assert [(s.span, s.start, s.end) for s in first.segments] == [
        (Span.QUEUED, T, T + 100), (Span.RUNNING, T + 100, T + 700),
    ]  # fmt: skip
    assert [(s.span, s.start, s.end) for s in later.segments] == [
        (Span.QUEUED, T + 700, T + 720), (Span.RUNNING, T + 720, T + 900),
    ]  # fmt: skip
