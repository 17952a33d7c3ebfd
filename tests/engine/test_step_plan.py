"""Planning steps into a lease, by values (``servatus.engine.planning.make_step_plan``) and the
current-link rule (``servatus.lease.current_link``): no Slurm, no campaign."""

from __future__ import annotations

from servatus.config import Profile, Resources, Target
from servatus.engine.plan import Hold, Plan, Request
from servatus.engine.planning import make_step_plan
from servatus.engine.status_values import Execution, Report, RunTime, TaskStatus
from servatus.evidence import Evidence, Marker, MarkerKind, QueueEntry
from servatus.lease import current_link

LEASE = "a" * 24
PROFILE = Profile(
    "l40s",
    Target(
        slurm_bin="/usr/bin",
        work_root="/w",
        log_root="/l",
        partitions=("p",),
        max_tasks_per_allocation=2,
        max_cpus_per_allocation=4,
        max_memory_mib_per_allocation=200,
        max_time_limit=7200,
    ),
    Resources(cpus=2, memory_mib=100, time_limit=3600, signal_before_end=60),
)


def status(key: str, execution: Execution, *, listed: bool = True, ran: int = 0) -> TaskStatus:
    return TaskStatus(key, execution, None, None, RunTime(ran), "b" * 24, 7, True, False, listed)


def plan(report: Report, request: Request | None = None, budget: int | None = None) -> Plan:
    return make_step_plan(
        campaign_id="c",
        revision=1,
        salt="3",
        within=LEASE,
        keys=[task.key for task in report.tasks],
        profile=PROFILE,
        request=request or Request(),
        report=report,
        stepped={
            task.key for task in report.tasks if task.execution is not Execution.NOT_SUBMITTED
        },
        valid=(),
        probe=False,
        now=0.0,
        budget=budget,
    )


def test_a_step_that_waits_or_runs_is_active_and_one_that_ended_can_be_retried_at_once() -> None:
    report = Report(
        (
            status("run", Execution.RUNNING),
            status("wait", Execution.QUEUED),
            status("done", Execution.SUCCEEDED),
            status("stopped", Execution.STOPPED),
            TaskStatus(
                "new", Execution.NOT_SUBMITTED, None, None, None, None, None, False, False, False
            ),
        ),
        (),
        (),
        True,
    )
    made = plan(report)
    assert made.decision.selected == ("new",)
    assert dict(made.decision.held) == {
        "run": Hold.ACTIVE, "wait": Hold.ACTIVE, "done": Hold.SUBMITTED, "stopped": Hold.SUBMITTED,
    }  # fmt: skip
    # Its lease is still listed, but the step has ended: started again in the same lease.
    again = plan(report, Request(retry=("stopped",)))
    assert "stopped" in again.decision.selected
    failed = plan(report, Request(retry_failed=True))
    assert "stopped" in failed.decision.selected
    (step,) = made.allocations
    assert step.task_keys == ("new",) and made.within == LEASE
    assert plan(report).allocations == made.allocations


def test_a_budget_holds_spent_tasks_and_records_what_each_selected_one_ran() -> None:
    report = Report(
        (status("old", Execution.STOPPED, listed=False, ran=3600),
         status("young", Execution.STOPPED, listed=False, ran=60)),
        (), (), True,
    )  # fmt: skip
    made = plan(report, Request(retry_failed=True), budget=3600)
    assert made.decision.selected == ("young",)
    assert dict(made.decision.held) == {"old": Hold.SPENT}
    assert made.decision.spent == {"young": 60}


def link(job: int, state: str) -> QueueEntry:
    return QueueEntry(job, f"servatus-{LINKS[job - 1][0]}", state)


LINKS = [("1" * 24, 1), ("2" * 24, 2), ("3" * 24, 3)]


def test_the_current_link_is_the_first_listed_not_ended_without_its_limit() -> None:
    limit = Marker("1" * 24, 1, MarkerKind.LIMIT, 5.0, None, None)
    queued = (link(1, "RUNNING"), link(2, "PENDING"), link(3, "PENDING"))
    assert current_link(LINKS, Evidence(queued, ())) == "1" * 24
    assert current_link(LINKS, Evidence(queued, (limit,))) == "2" * 24
    ending = (link(1, "COMPLETING"), link(2, "TIMEOUT"), link(3, "PENDING"))
    assert current_link(LINKS, Evidence(ending, ())) == "3" * 24
    assert current_link(LINKS, Evidence((link(1, "COMPLETED"),), ())) is None
    assert current_link([("1" * 24, None)], Evidence(queued, ())) is None  # no job number
    assert current_link(LINKS, Evidence(None, ())) is None
    other = (QueueEntry(1, "servatus-" + "f" * 24, "RUNNING"),)  # another allocation's job 1
    assert current_link(LINKS, Evidence(other, ())) is None
