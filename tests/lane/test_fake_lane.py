"""The Slurm lane's decisions end to end against FakeScheduler (real runs: tests/slurm, cluster)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from servatus import Campaign, Task
from servatus.config import Profile
from servatus.engine.plan import Hold
from servatus.engine.status_values import Execution, RunTime, StopReason
from servatus.errors import (
    PlanRefused,
    ShapeRejected,
    StalePlan,
    SubmissionInterrupted,
    Unavailable,
)
from servatus.operations.doctor import diagnose
from servatus.testing import FakeScheduler
from testkit import CPU_PROFILE


def tasks(n: int = 3) -> list[Task]:
    return [
        Task(f"t{i}", ["/usr/bin/python3", "train.py"], stdin=f"{i}".encode()) for i in range(n)
    ]


def states(campaign: Campaign, **kw: bool) -> dict[str, Execution]:
    return {t.key: t.execution for t in campaign.status(**kw).tasks}


def test_plan_submit_status_succeeded(tmp_path: Path, profile: Profile) -> None:
    fake = FakeScheduler()
    campaign = Campaign.ensure(tmp_path / "state", tasks(), connect=fake)
    plan = campaign.plan(profile)
    assert plan.decision.selected == ("t0", "t1", "t2")
    assert [a.task_keys for a in plan.allocations] == [("t0", "t1"), ("t2",)]
    assert fake.calls == []  # a first plan never consults Slurm
    receipts = campaign.submit(plan).receipts
    assert [r.job for r in receipts] == [1000, 1001]
    assert fake.count("ping") == 1 and fake.count("sbatch") == 2
    assert set(states(campaign).values()) == {Execution.QUEUED}
    assert set(states(campaign, offline=True).values()) == {Execution.ACCEPTED}
    fake.calls.clear()
    campaign.status()
    assert len(fake.calls) == 2  # one squeue, one marker listing
    fake.finish(1000, 0, 3)
    fake.start(1001)
    now = states(campaign)
    assert now == {"t0": Execution.SUCCEEDED, "t1": Execution.FAILED, "t2": Execution.RUNNING}
    again = campaign.plan(profile)
    assert again.decision.selected == ()
    assert dict(again.decision.held) == {k: Hold.SUBMITTED for k in ("t0", "t1", "t2")}


def test_retry_failed_waits_for_purge_then_selects(tmp_path: Path, profile: Profile) -> None:
    fake = FakeScheduler()
    campaign = Campaign.ensure(tmp_path / "state", tasks(2), connect=fake)
    campaign.submit(campaign.plan(profile))
    fake.finish(1000, 0, 3)
    held = campaign.plan(profile, retry_failed=True)
    assert dict(held.decision.held)["t1"] is Hold.ACTIVE
    fake.purge()
    retry = campaign.plan(profile, retry_failed=True)
    assert retry.decision.selected == ("t1",)
    campaign.submit(retry)
    assert fake.jobs[-1].allocation_id == retry.allocations[0].allocation_id


def test_cancel_reads_ending_then_stopped(tmp_path: Path, profile: Profile) -> None:
    fake = FakeScheduler()
    campaign = Campaign.ensure(tmp_path / "state", tasks(1), connect=fake)
    campaign.submit(campaign.plan(profile))
    fake.start()
    assert campaign.cancel(tasks=["t0"]).allocations
    job = fake.jobs[0]
    ends = [name for name in fake.markers if f"{job.allocation_id}.{job.job}.end." in name]
    assert [name.rsplit(".", 2)[-2:] for name in ends] == [["0", "143"]]
    assert states(campaign)["t0"] is Execution.ENDING
    fake.purge()
    report = campaign.status()
    assert report.tasks[0].execution is Execution.STOPPED
    assert campaign.cancel(tasks=["t0"]).allocations == ()  # ended: not an error


def test_lost_skipped_by_retry_failed_taken_by_retry(tmp_path: Path, profile: Profile) -> None:
    fake = FakeScheduler()
    campaign = Campaign.ensure(tmp_path / "state", tasks(1), connect=fake)
    campaign.submit(campaign.plan(profile))
    fake.start()
    fake.vanish(1000)
    assert states(campaign)["t0"] is Execution.LOST
    assert campaign.plan(profile, retry_failed=True).decision.selected == ()
    assert campaign.plan(profile, retry=["t0"]).decision.selected == ("t0",)


def test_never_started_cancel(tmp_path: Path, profile: Profile) -> None:
    fake = FakeScheduler()
    campaign = Campaign.ensure(tmp_path / "state", tasks(1), connect=fake)
    campaign.submit(campaign.plan(profile))
    campaign.cancel(tasks=["t0"])
    fake.purge()
    task = campaign.status().tasks[0]
    assert (task.execution, task.detail) == (Execution.STOPPED, StopReason.NEVER_STARTED)


def test_stale_plan_after_append(tmp_path: Path, profile: Profile) -> None:
    fake = FakeScheduler()
    campaign = Campaign.ensure(tmp_path / "state", tasks(1), connect=fake)
    plan = campaign.plan(profile)
    campaign.append([Task("late", ["/bin/true"])])
    with pytest.raises(StalePlan):
        campaign.submit(plan)
    assert fake.count("sbatch") == 0


def test_failed_ping_records_nothing(tmp_path: Path, profile: Profile) -> None:
    fake = FakeScheduler()
    campaign = Campaign.ensure(tmp_path / "state", tasks(1), connect=fake)
    plan = campaign.plan(profile)
    fake.unavailable("ping")
    with pytest.raises(Unavailable):
        campaign.submit(plan)
    assert campaign.status(offline=True).tasks[0].execution is Execution.NOT_SUBMITTED
    campaign.submit(plan)  # the same plan is still good


def test_lost_answer_is_unresolved_then_reconciled(tmp_path: Path, profile: Profile) -> None:
    fake = FakeScheduler()
    campaign = Campaign.ensure(tmp_path / "state", tasks(1), connect=fake)
    fake.lose_answer("sbatch")
    with pytest.raises(SubmissionInterrupted):
        campaign.submit(campaign.plan(profile))
    assert states(campaign)["t0"] is Execution.UNRESOLVED
    assert dict(campaign.plan(profile).decision.held)["t0"] is Hold.UNRESOLVED
    with pytest.raises(PlanRefused):
        campaign.plan(profile, retry=["t0"])
    (decision,) = campaign.reconcile()
    assert (decision.outcome, decision.job) == ("accepted", 1000)
    assert states(campaign)["t0"] is Execution.QUEUED


def test_refused_sbatch_records_not_submitted(tmp_path: Path, profile: Profile) -> None:
    from servatus.errors import ShapeRejected

    fake = FakeScheduler()
    campaign = Campaign.ensure(tmp_path / "state", tasks(1), connect=fake)
    fake.fail("sbatch", stderr="sbatch: error: invalid partition specified: debug")
    with pytest.raises(ShapeRejected, match="invalid partition"):
        campaign.submit(campaign.plan(profile))
    assert states(campaign)["t0"] is Execution.NOT_SUBMITTED
    assert campaign.plan(profile).decision.selected == ("t0",)


def test_fake_find_honours_the_name_pattern() -> None:
    """Like GNU find, the fake lists only names matching ``-name``: markers, not logs."""
    fake = FakeScheduler()
    fake.markers["servatus-" + "a" * 24 + ".1000.start"] = 100.0
    fake.logs["servatus-" + "a" * 24 + "-1000.out"] = b"log\n"
    glob = "servatus-" + "?" * 24 + ".*"
    markers_only = fake.run(["find", "-H", "/logs", "-name", glob, "-printf", "%f %T@ %s\\n"])
    assert markers_only.stdout.decode().split(" ")[0] == "servatus-" + "a" * 24 + ".1000.start"
    assert len(markers_only.stdout.splitlines()) == 1
    everything = fake.run(["find", "-H", "/logs", "-name", "servatus-*", "-printf", "x"])
    assert len(everything.stdout.splitlines()) == 2


def test_cancel_stops_a_listed_job_whose_submit_was_interrupted(
    tmp_path: Path, profile: Profile
) -> None:
    """After a lost sbatch answer the job may be running; cancel must reach it before reconcile."""
    fake = FakeScheduler()
    campaign = Campaign.ensure(tmp_path / "state", tasks(1), connect=fake)
    fake.lose_answer("sbatch")
    with pytest.raises(SubmissionInterrupted):
        campaign.submit(campaign.plan(profile))
    fake.start()
    [task] = campaign.status().tasks
    assert task.execution is Execution.UNRESOLVED and task.listed
    assert task.run_time == RunTime(0, complete=False)  # running, maybe: not a final 0
    assert campaign.cancel(tasks=["t0"]).allocations == (fake.jobs[0].allocation_id,)
    assert fake.jobs[0].state == "CANCELLED"


@pytest.mark.parametrize(
    ("said", "unresolved"),
    [
        (
            "sbatch: error: Batch job submission failed: Socket timed out on send/recv operation",
            True,
        ),
        (
            "sbatch: error: Batch job submission failed: Zero Bytes were transmitted or received",
            True,
        ),
        ("sbatch: error: Batch job submission failed: Invalid account or account/partition", False),
    ],
)
def test_an_sbatch_that_lost_slurm_is_unresolved_not_refused(
    tmp_path: Path, profile: Profile, said: str, unresolved: bool
) -> None:
    """A job may exist behind a timeout: recording it as not submitted could run it twice."""
    fake = FakeScheduler()
    campaign = Campaign.ensure(tmp_path / "state", tasks(1), connect=fake)
    fake.fail("sbatch", stderr=said + "\n")
    expected = SubmissionInterrupted if unresolved else ShapeRejected
    with pytest.raises(expected, match=said.rsplit(": ", 1)[-1]):
        campaign.submit(campaign.plan(profile))
    execution = Execution.UNRESOLVED if unresolved else Execution.NOT_SUBMITTED
    assert states(campaign, offline=True)["t0"] is execution


def test_validate_without_an_answering_slurm_is_unavailable_not_a_rejection(
    tmp_path: Path, profile: Profile
) -> None:
    fake = FakeScheduler()
    campaign = Campaign.ensure(tmp_path / "state", tasks(1), connect=fake)
    plan = campaign.plan(profile)
    fake.fail("ping", returncode=127, stderr="sh: sbatch: not found\n")
    with pytest.raises(Unavailable, match="sbatch: not found"):
        campaign.validate(plan)
    assert fake.count("sbatch") == 0  # no --test-only was run
    [check] = campaign.validate(plan)
    assert check.accepted


@pytest.mark.parametrize("skew", [-3600.0, 3600.0])
def test_running_time_is_read_on_the_file_servers_clock(
    tmp_path: Path, profile: Profile, skew: float
) -> None:
    """With the laptop an hour off the file server, a Task two minutes into its run reads two
    minutes: laptop time minus the start marker's mtime read 0 or the cap."""
    server = [time.time() + skew]
    fake = FakeScheduler(clock=lambda: server[0])
    campaign = Campaign.ensure(tmp_path / "state", tasks(1), connect=fake)
    campaign.submit(campaign.plan(profile))
    fake.start()
    server[0] += 120
    (status,) = campaign.status().tasks
    assert status.execution is Execution.RUNNING
    assert status.run_time == RunTime(120, complete=False)


def test_a_log_root_that_cannot_be_written_loses_only_the_clock(
    tmp_path: Path, profile: Profile
) -> None:
    """No clock row (log_root read-only here): the listing still counts, run time runs to this
    machine's clock as before the clock existed, and status says so once."""
    server = [time.time()]
    fake = FakeScheduler(clock=lambda: server[0])
    campaign = Campaign.ensure(tmp_path / "state", tasks(1), connect=fake)
    campaign.submit(campaign.plan(profile))
    fake.start()
    fake.read_only_directories.add(profile.target.log_root)
    server[0] += 3600  # the file server's clock is ignored: none was read
    report = campaign.status()
    (status,) = report.tasks
    assert report.online and status.execution is Execution.RUNNING
    assert status.run_time is not None and status.run_time.total < 60
    assert not status.run_time.complete
    [warning] = report.warnings
    assert "clock" in warning and profile.target.log_root in warning
    fake.read_only_directories.clear()
    assert campaign.status().warnings == ()


def test_no_clock_is_no_warning_while_nothing_runs(tmp_path: Path, profile: Profile) -> None:
    """The missing clock matters only to a running Task's run time: a queued sweep, and a
    finished one whose markers are no longer listed (settled), read no warning about it."""
    fake = FakeScheduler()
    campaign = Campaign.ensure(tmp_path / "state", tasks(1), connect=fake)
    campaign.submit(campaign.plan(profile))
    fake.read_only_directories.add(profile.target.log_root)
    queued = campaign.status()
    assert [task.execution for task in queued.tasks] == [Execution.QUEUED]
    assert queued.warnings == ()
    fake.start()
    (job,) = [item.job for item in fake.jobs]
    fake.finish(job)
    fake.purge()
    first = campaign.status()  # settles the allocation
    assert [task.execution for task in first.tasks] == [Execution.SUCCEEDED]
    assert first.warnings == ()
    assert campaign.status().warnings == ()  # nothing wanted: no marker listing at all


def test_a_target_with_nothing_to_list_is_no_clock_warning_while_another_runs(
    tmp_path: Path, profile: Profile
) -> None:
    """Two Targets: one's work all settled (no marker listing, so no clock read there), the
    other's Task running. Only a log_root that cannot be written is warned of."""
    other_toml = tmp_path / "other.toml"
    other_toml.write_text(CPU_PROFILE.replace("/scratch/alice/sweep", "/scratch/alice/other"))
    other = Profile.load(other_toml)
    fake = FakeScheduler()
    campaign = Campaign.ensure(tmp_path / "state", tasks(2), connect=fake)
    campaign.submit(campaign.plan(profile, only=["t0"]))
    campaign.submit(campaign.plan(other, only=["t1"]))
    fake.finish(1000, 0)
    fake.purge()
    fake.start(1001)
    assert campaign.status().warnings == ()  # settles t0's allocation
    report = campaign.status()
    assert [task.execution for task in report.tasks] == [Execution.SUCCEEDED, Execution.RUNNING]
    assert report.warnings == ()
    fake.read_only_directories.add(other.target.log_root)
    [warning] = campaign.status().warnings
    assert other.target.log_root in warning


def test_scancel_version_tells_the_version_and_cancels_nothing(
    tmp_path: Path, profile: Profile
) -> None:
    """doctor's ``scancel --version`` is answered as Slurm's is, by the same release as
    ``sbatch``, and names no job, so a queued one stays queued."""
    fake = FakeScheduler(version="slurm 23.11.10")
    campaign = Campaign.ensure(tmp_path / "state", tasks(1), connect=fake)
    campaign.submit(campaign.plan(profile))
    answer = fake.run(["/usr/bin/scancel", "--version"])
    assert (answer.returncode, answer.stdout, answer.stderr) == (0, b"slurm 23.11.10\n", b"")
    assert [job.state for job in fake.jobs] == ["PENDING"]


@pytest.mark.parametrize("control", ["fail", "unavailable", "lose_answer"])
@pytest.mark.parametrize("name", ["/usr/bin/squeue", "sqeue", "sbatch --version", ""])
def test_a_control_naming_no_known_command_is_refused(control: str, name: str) -> None:
    fake = FakeScheduler()
    with pytest.raises(ValueError, match="its controls name one of ping, sbatch, squeue"):
        getattr(fake, control)(name)


def test_a_ping_that_ran_and_failed_reads_the_same_everywhere(
    tmp_path: Path, profile: Profile
) -> None:
    """Named by the command that ran, never by the control, and never as "did not answer"."""
    said = "sbatch --version ran and failed (exit 1): sbatch: error: refused by FakeScheduler"
    fake = FakeScheduler()
    campaign = Campaign.ensure(tmp_path / "state", tasks(1), connect=fake)
    plan = campaign.plan(profile)
    for act in (campaign.submit, campaign.validate):
        fake.fail("ping")
        with pytest.raises(Unavailable) as caught:
            act(plan)
        assert str(caught.value) == said
    fake.fail("ping")
    checks = diagnose(profile, connect=fake).checks
    assert (checks[0].status, checks[0].detail) == ("fail", said)
    fake.unavailable("ping")
    with pytest.raises(Unavailable, match=r"^sbatch --version did not answer: .* from sbatch$"):
        campaign.submit(plan)
    fake.unavailable("ping")
    assert diagnose(profile, connect=fake).checks[0].detail == (
        "sbatch --version did not answer: FakeScheduler: no answer from sbatch"
    )
