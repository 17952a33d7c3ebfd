"""``project`` returns exactly the Report of the straightforward projection it replaced.

``reference_project`` and its helpers below are a frozen copy of the projection as it stood
before the single-pass rewrite (one Observation per allocation from its grouped markers, one
``slot_execution`` and one ``slot_run_time`` call per slot, sets and dicts per Task). They are
the reference, not the implementation: they are built only on the public value types, and any
Report ``project`` returns must equal theirs field for field.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence

from hypothesis import given, settings
from hypothesis import strategies as st

from servatus.engine.slots import slot_execution, slot_run_time
from servatus.engine.status import project
from servatus.engine.status_values import (
    Attempt,
    Execution,
    Outcome,
    Report,
    RunTime,
    StopReason,
    Submission,
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
from testkit import without_evidence_notes

# --- the reference: frozen copy of the projection before the rewrite --------------------------

_YIELD_EXIT = 75
_QUEUED_STATES = frozenset({"PENDING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "RESV_DEL_HOLD"})
_RUNNING_STATES = frozenset(
    {"RUNNING", "CONFIGURING", "SUSPENDED", "STOPPED", "SIGNALING", "RESIZING", "STAGE_OUT"}
)
_START, _END, _STOP, _LIMIT = MarkerKind.START, MarkerKind.END, MarkerKind.STOP, MarkerKind.LIMIT


def reference_observe(
    allocation_id: str, slots: int, markers: Iterable[Marker], job: int | None = None
) -> Observation:
    """Only markers of ``job`` (where it is known) count; of two ends of one slot that disagree,
    the higher exit code stands."""
    start = stop = limit = None
    ends: list[SlotEnd | None] = [None] * slots
    for marker_allocation, marker_job, kind, at, slot, exit_code, _ in markers:
        if marker_allocation != allocation_id or (job is not None and marker_job != job):
            continue
        if kind is _END:
            if slot is not None and 0 <= slot < slots and exit_code is not None:
                prior = ends[slot]
                if prior is None or prior.exit_code <= exit_code:
                    ends[slot] = SlotEnd(exit_code, at)
        elif kind is _START:
            start = at if start is None else min(start, at)
        elif kind is _STOP:
            stop = at if stop is None else max(stop, at)
        elif kind is _LIMIT:
            limit = at if limit is None else min(limit, at)
    return Observation(start, stop, limit, tuple(ends))


def reference_slot_execution(
    entry: QueueEntry | None, observation: Observation, slot: int
) -> tuple[Execution, int | None, StopReason | None]:
    end = observation.ends[slot] if slot < len(observation.ends) else None
    if (
        end is not None
        and end.exit_code != 0
        and observation.stop is not None
        and end.at >= observation.stop
    ):
        end = None
    if end is not None:
        if end.exit_code == 0:
            return Execution.SUCCEEDED, 0, None
        if end.exit_code == _YIELD_EXIT:
            return Execution.STOPPED, end.exit_code, StopReason.YIELDED
        return Execution.FAILED, end.exit_code, None
    if entry is not None:
        if entry.state in _QUEUED_STATES:
            return Execution.QUEUED, None, None
        if entry.state in _RUNNING_STATES:
            return Execution.RUNNING, None, None
        return Execution.ENDING, None, None
    if observation.start is None:
        return Execution.STOPPED, None, StopReason.NEVER_STARTED
    if observation.stop is not None:
        reason = StopReason.TIME_LIMIT if observation.limit is not None else None
        return Execution.STOPPED, None, reason
    return Execution.LOST, None, None


def _half_up(span: float) -> int:
    """The one rounding change since the reference was frozen: spans round half up, as a chain
    link's ``awk`` rounds them (ADR 0005), where the reference used Python's half-to-even."""
    return int(span + 0.5) if span > -0.5 else 0


def reference_slot_run_time(
    execution: Execution, observation: Observation, slot: int, time_limit: int, now: float
) -> RunTime:
    if observation.start is None:
        return RunTime(0)
    end = observation.ends[slot] if slot < len(observation.ends) else None
    if end is not None:
        return RunTime(max(0, _half_up(end.at - observation.start)))
    if observation.stop is not None:
        return RunTime(max(0, _half_up(observation.stop - observation.start)))
    if execution is Execution.LOST:
        return RunTime(time_limit, complete=False)
    if execution in (Execution.RUNNING, Execution.ENDING):
        return RunTime(max(0, min(time_limit, _half_up(now - observation.start))), complete=False)
    return RunTime(0)


def reference_project(
    keys: Sequence[str],
    submissions: Sequence[Submission],
    evidence: Mapping[str, Evidence],
    *,
    now: float,
    offline: bool = False,
) -> Report:
    listing = {
        target: item.queue is not None and item.markers is not None
        for target, item in evidence.items()
    }
    targets = {submission.target for submission in submissions}
    online = all(listing.get(target, False) for target in targets) and (
        bool(evidence) or not submissions
    )
    online = online and not offline
    by_marker: dict[str, dict[str, list[Marker]]] = {}
    by_queue: dict[str, dict[str, QueueEntry]] = {}
    for target, item in evidence.items():
        if not listing[target]:
            continue
        grouped: dict[str, list[Marker]] = defaultdict(list)
        for marker in item.markers or ():
            grouped[marker.allocation_id].append(marker)
        by_marker[target] = grouped
        by_queue[target] = {entry.name: entry for entry in item.queue or ()}
    counted = {  # the last accepted, unsettled submission of an id names its job
        s.allocation_id: s.job
        for s in submissions
        if s.outcome is Outcome.ACCEPTED and s.settled is None
    }
    attempts: list[Attempt] = []
    warnings: list[str] = []
    latest: dict[str, Attempt] = {}
    run_times: dict[str, RunTime] = {}
    unresolved: set[str] = set()
    accepted: set[str] = set()
    listed: set[str] = set()
    for submission in submissions:
        markers = by_marker.get(submission.target)
        queue = by_queue.get(submission.target)
        job = counted.get(submission.allocation_id)
        for attempt in _reference_attempts(submission, markers, queue, now, warnings, job):
            attempts.append(attempt)
            key = attempt.task_key
            if attempt.listed:
                listed.add(key)
            execution = attempt.execution
            if execution is Execution.NOT_SUBMITTED:
                continue
            if execution is Execution.UNRESOLVED:
                unresolved.add(key)
            else:
                accepted.add(key)
            latest[key] = attempt
            run_time = attempt.run_time
            if run_time is not None:
                earlier = run_times.get(key)
                run_times[key] = run_time if earlier is None else earlier + run_time
    tasks: list[TaskStatus] = []
    zero = RunTime(0) if online else None
    for key in keys:
        current = latest.get(key)
        run_time = run_times.get(key, zero) if online else None
        if run_time is not None and key in unresolved:  # maybe running, unobserved
            run_time = RunTime(run_time.total, complete=False)
        if current is None:
            tasks.append(
                TaskStatus(
                    key, Execution.NOT_SUBMITTED, None, None, run_time, None, None, False, False,
                    key in listed,
                )
            )  # fmt: skip
        else:
            tasks.append(
                TaskStatus(
                    key, current.execution, current.exit_code, current.detail, run_time,
                    current.allocation_id, current.job, key in accepted, key in unresolved,
                    key in listed,
                )
            )  # fmt: skip
    return Report(tuple(tasks), tuple(attempts), tuple(warnings), online)


def _reference_attempts(
    submission: Submission,
    by_marker: Mapping[str, list[Marker]] | None,
    by_queue: Mapping[str, QueueEntry] | None,
    now: float,
    warnings: list[str],
    counted: int | None,
) -> list[Attempt]:
    """``counted``: the job whose markers are the allocation's evidence (None: any job's)."""
    allocation_id = submission.allocation_id
    entry = by_queue.get(JOB_NAME_PREFIX + allocation_id) if by_queue is not None else None
    if entry is not None and submission.job is not None and entry.job != submission.job:
        entry = None
    outcome = submission.outcome
    if outcome is Outcome.NOT_SUBMITTED and entry is not None:
        live = entry.state in _QUEUED_STATES or entry.state in _RUNNING_STATES
        warnings.append(
            f"allocation {allocation_id} was recorded as not submitted, but Slurm "
            f"lists job {entry.job} for it; its Tasks are held ACTIVE until it leaves the queue "
            + (
                f"(servatus cancel STATE --allocation {allocation_id} stops it)"
                if live
                else f"(it has ended, {entry.state}: nothing to cancel)"
            )
        )
    job = submission.job if submission.job is not None else (entry.job if entry else None)
    listed = None if by_queue is None else entry is not None  # None: squeue was not asked
    if outcome is not Outcome.ACCEPTED or by_marker is None:
        execution = (
            Execution.UNRESOLVED
            if outcome is Outcome.PENDING
            else Execution.NOT_SUBMITTED
            if outcome is Outcome.NOT_SUBMITTED
            else Execution.ACCEPTED
        )
        return [
            Attempt(allocation_id, key, slot, job, execution, None, None, None, listed, None)
            for slot, key in enumerate(submission.task_keys)
        ]
    slots = len(submission.task_keys)
    observation = reference_observe(allocation_id, slots, by_marker.get(allocation_id, ()), counted)
    result = []
    for slot, key in enumerate(submission.task_keys):
        execution, exit_code, detail = reference_slot_execution(entry, observation, slot)
        run_time = (
            RunTime(0)
            if observation.start is None
            else reference_slot_run_time(execution, observation, slot, submission.time_limit, now)
        )
        result.append(
            Attempt(
                allocation_id, key, slot, job, execution, exit_code, detail, run_time, listed,
                observation,
            )
        )  # fmt: skip
    return result


# --- comparison ----------------------------------------------------------------------------


def assert_same(
    keys: Sequence[str],
    submissions: Sequence[Submission],
    evidence: Mapping[str, Evidence],
    *,
    now: float,
    offline: bool = False,
) -> Report:
    got = project(keys, submissions, evidence, now=now, offline=offline)
    want = reference_project(keys, submissions, evidence, now=now, offline=offline)
    assert got.online == want.online
    assert without_evidence_notes(got).warnings == want.warnings
    assert len(got.attempts) == len(want.attempts)
    for mine, theirs in zip(got.attempts, want.attempts, strict=True):
        assert type(mine) is Attempt
        assert mine == theirs
        assert mine._asdict() == theirs._asdict()
        assert (mine.observation is None) == (theirs.observation is None)
        if mine.observation is not None:
            assert type(mine.observation) is Observation
        if mine.run_time is not None:
            assert type(mine.run_time) is RunTime
    assert len(got.tasks) == len(want.tasks)
    for mine_task, their_task in zip(got.tasks, want.tasks, strict=True):
        assert type(mine_task) is TaskStatus
        assert mine_task._asdict() == their_task._asdict()
    assert without_evidence_notes(got) == want
    return got


# --- random campaigns ----------------------------------------------------------------------

ALLOCATIONS = ("a0", "a1", "a2", "a3", "a4")
TARGETS = ("t0", "t1", "t2")
KEYS = ("k0", "k1", "k2", "k3", "k4", "k5")
STATES = ("PENDING", "REQUEUE_HOLD", "RUNNING", "SUSPENDED", "COMPLETED", "CANCELLED", "FAILED")
TIMES = (-5.0, 0.0, 10.0, 10.4, 10.6, 100.0, 1000.0, 1000.5, 5000.0)
CODES = (0, 3, 75, 143)
JOBS = (None, 1, 2, 3)

times = st.sampled_from(TIMES) | st.floats(-1e4, 1e6, allow_nan=False)

submission_values = st.builds(
    Submission,
    allocation_id=st.sampled_from(ALLOCATIONS),
    task_keys=st.lists(st.sampled_from(KEYS), max_size=4).map(tuple),
    target=st.sampled_from(TARGETS),
    recorded_at=st.just(0.0),
    time_limit=st.sampled_from((0, 60, 3600)),
    outcome=st.sampled_from(Outcome),
    job=st.sampled_from(JOBS),
    settled=st.none(),  # the reference predates settlement: tests/engine/test_settlement.py
    chain=st.none(),  # the reference predates chains: tests/engine/test_chain_projection.py
    slots=st.none(),  # and leases: tests/engine/test_lease_projection.py
    within=st.none(),
)

queue_entries = st.builds(
    QueueEntry,
    job=st.sampled_from((1, 2, 3)),
    name=st.sampled_from((*ALLOCATIONS, "zz")).map(lambda a: JOB_NAME_PREFIX + a)
    | st.just("other-job"),
    state=st.sampled_from(STATES),
)

markers = st.builds(
    Marker,
    allocation_id=st.sampled_from((*ALLOCATIONS, "zz")),
    job=st.sampled_from((1, 2, 3)),
    kind=st.sampled_from(MarkerKind),
    at=times,
    slot=st.none() | st.integers(-1, 5),
    exit_code=st.none() | st.sampled_from(CODES),
)

evidence_values = st.builds(
    Evidence,
    queue=st.none() | st.lists(queue_entries, max_size=6).map(tuple),
    markers=st.none() | st.lists(markers, max_size=14).map(tuple),
)


@settings(max_examples=1000, deadline=None)
@given(
    keys=st.lists(st.sampled_from((*KEYS, "never")), max_size=8),
    submissions=st.lists(submission_values, max_size=7),
    evidence=st.dictionaries(st.sampled_from(TARGETS), evidence_values, max_size=3),
    now=times,
    offline=st.booleans(),
)
def test_project_equals_reference(
    keys: list[str],
    submissions: list[Submission],
    evidence: dict[str, Evidence],
    now: float,
    offline: bool,
) -> None:
    assert_same(keys, submissions, evidence, now=now, offline=offline)


@settings(max_examples=1000, deadline=None)
@given(
    allocation=st.sampled_from(ALLOCATIONS),
    slots=st.integers(0, 4),
    listing=st.lists(markers, max_size=14),
    entry=st.none() | queue_entries,
    slot=st.integers(-1, 5),
    execution=st.sampled_from(Execution),
    time_limit=st.sampled_from((0, 60, 3600)),
    now=times,
)
def test_public_slot_functions_equal_reference(
    allocation: str,
    slots: int,
    listing: list[Marker],
    entry: QueueEntry | None,
    slot: int,
    execution: Execution,
    time_limit: int,
    now: float,
) -> None:
    observation = observe(allocation, slots, listing)
    assert observation == reference_observe(allocation, slots, listing)
    assert type(observation) is Observation
    assert outcome(slot_execution, entry, observation, slot) == outcome(
        reference_slot_execution, entry, observation, slot
    )
    assert outcome(slot_run_time, execution, observation, slot, time_limit, now) == outcome(
        reference_slot_run_time, execution, observation, slot, time_limit, now
    )


def outcome(function: Callable[..., object], *arguments: object) -> object:
    """The value, or the type of the exception (a negative slot past the ends raises in both)."""
    try:
        return function(*arguments)
    except IndexError as error:
        return type(error)


# --- hand-written cases ----------------------------------------------------------------------


def accepted(allocation: str, keys: tuple[str, ...], job: int, target: str = "t0") -> Submission:
    return Submission(allocation, keys, target, 0.0, 3600, Outcome.ACCEPTED, job)


def marker(
    allocation: str,
    kind: MarkerKind,
    at: float,
    slot: int | None = None,
    code: int | None = None,
    job: int = 1,
) -> Marker:
    return Marker(allocation, job, kind, at, slot, code)


def test_empty_campaign() -> None:
    report = assert_same([], [], {}, now=0.0)
    assert report.online
    assert not assert_same(["k0"], [], {}, now=0.0, offline=True).online


def test_not_submitted_but_listed_warns_and_marks_listed() -> None:
    submission = Submission("a0", ("k0", "k1"), "t0", 0.0, 60, Outcome.NOT_SUBMITTED, None)
    queue = (QueueEntry(7, JOB_NAME_PREFIX + "a0", "RUNNING"),)
    report = assert_same(["k0", "k1"], [submission], {"t0": Evidence(queue, ())}, now=10.0)
    assert len(report.warnings) == 1
    assert all(task.listed and task.execution is Execution.NOT_SUBMITTED for task in report.tasks)


def test_retries_sum_run_time_and_keep_flags() -> None:
    submissions = [
        accepted("a0", ("k0", "k1"), 1),
        Submission("a1", ("k0",), "t0", 0.0, 60, Outcome.PENDING, None),
        accepted("a2", ("k1", "k0"), 2),
        Submission("a3", ("k1",), "t0", 0.0, 60, Outcome.NOT_SUBMITTED, None),
    ]
    listing = (
        marker("a0", MarkerKind.START, 100.0),
        marker("a0", MarkerKind.END, 160.0, 0, 3),
        marker("a0", MarkerKind.END, 130.0, 1, 0),
        marker("a2", MarkerKind.START, 1000.0, job=2),
        marker("a2", MarkerKind.STOP, 1500.0, job=2),
        marker("a2", MarkerKind.LIMIT, 1400.0, job=2),
        marker("a2", MarkerKind.END, 1600.0, 0, 143, job=2),
        marker("a2", MarkerKind.END, 1200.0, 1, 75, job=2),
    )
    queue = (QueueEntry(2, JOB_NAME_PREFIX + "a2", "COMPLETING"),)
    report = assert_same(["k0", "k1"], submissions, {"t0": Evidence(queue, listing)}, now=2000.0)
    assert report.warnings == ()
    by_key = {task.key: task for task in report.tasks}
    # k0's unresolved a1 may be running unobserved: its total is a lower bound.
    assert by_key["k0"].run_time == RunTime(60 + 200, complete=False)
    assert by_key["k1"].run_time == RunTime(30 + 600)
    assert by_key["k1"].execution is Execution.ENDING


def test_multi_slot_allocation_with_markers_out_of_order_and_unknown_allocations() -> None:
    keys = tuple(f"k{index}" for index in range(6))
    listing = (
        marker("zz", MarkerKind.START, 1.0),
        marker("a0", MarkerKind.END, 50.0, 5, 0),
        marker("a0", MarkerKind.END, 60.0, 2, 3),
        marker("a1", MarkerKind.START, 5.0),
        marker("a0", MarkerKind.START, 20.0),
        marker("a0", MarkerKind.START, 10.0),
        marker("a0", MarkerKind.END, 70.0, 2, 0),
        marker("a0", MarkerKind.END, 80.0, 9, 0),
        marker("a0", MarkerKind.END, 80.0, -1, 0),
        marker("a0", MarkerKind.HANDOFF, 90.0, 1, 0),
    )
    for offline in (False, True):
        assert_same(
            [*keys, "never"],
            [accepted("a0", keys, 1), accepted("a0", (), 1), accepted("a1", ("k0",), 4)],
            {"t0": Evidence((), listing)},
            now=100.0,
            offline=offline,
        )


def test_one_listing_missing_projects_offline() -> None:
    submissions = [accepted("a0", ("k0",), 1, "t0"), accepted("a1", ("k1",), 2, "t1")]
    listing = (marker("a0", MarkerKind.START, 1.0),)
    evidence = {"t0": Evidence((), listing), "t1": Evidence(None, listing)}
    report = assert_same(["k0", "k1"], submissions, evidence, now=50.0)
    assert not report.online
    assert report.tasks[1].execution is Execution.ACCEPTED
    assert [attempt.listed for attempt in report.attempts] == [False, None]


def test_only_the_accepted_jobs_markers_count_and_disagreeing_ends_never_succeed() -> None:
    """A marker under an allocation's id but another job number (a forged one, or a stale
    one) is not its evidence; of two ends of one slot, the failing one stands (issue #30)."""
    submissions = [accepted("a0", ("k0",), 7), accepted("a1", ("k1",), 8)]
    listing = (
        marker("a0", MarkerKind.START, 100.0, job=7),
        marker("a0", MarkerKind.END, 150.0, 0, 3, job=7),
        marker("a0", MarkerKind.END, 151.0, 0, 0, job=99),
        marker("a1", MarkerKind.START, 100.0, job=8),
        marker("a1", MarkerKind.END, 140.0, 0, 2, job=8),
        marker("a1", MarkerKind.END, 141.0, 0, 0, job=8),
    )
    report = assert_same(["k0", "k1"], submissions, {"t0": Evidence((), listing)}, now=500.0)
    by_key = {task.key: task for task in report.tasks}
    assert (by_key["k0"].execution, by_key["k0"].exit_code) == (Execution.FAILED, 3)
    assert (by_key["k1"].execution, by_key["k1"].exit_code) == (Execution.FAILED, 2)
    assert report.warnings == (
        "1 marker names job 99 for allocation a0, whose job is 7; ignored",
        "allocation a1 has two different end markers for one step; the higher exit code counts",
    )
