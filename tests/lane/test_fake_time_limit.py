"""``FakeScheduler.signal_limit``, ``end_step`` and ``time_out`` against what the real cluster
leaves (``tests/lane_cluster/test_lane_slurm_answers.py``): the same markers, the same reading.

On Slurm 24.11 one allocation of four steps with ``--time=1 --signal=B:USR1@20`` got the signal
12 s in; ``dies`` (default action) ended 138, ``yields`` 75 and ``finishes`` 0 a moment later;
at 73 s Slurm ended the job ``TIMEOUT``: the batch shell marked ``stop`` and ``ignores`` ended
143 just after it.
"""

from __future__ import annotations

from pathlib import Path

from servatus import Campaign, Task
from servatus.config import Profile
from servatus.engine.status_values import Execution, RunTime, StopReason
from servatus.testing import FakeScheduler
from testkit import CPU_PROFILE

KEYS = ("ignores", "dies", "yields", "finishes")


class Clock:
    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


def four_slot_profile(tmp_path: Path) -> Profile:
    text = CPU_PROFILE.replace("max_tasks_per_allocation = 2", "max_tasks_per_allocation = 4")
    text = text.replace("max_cpus_per_allocation = 2", "max_cpus_per_allocation = 4")
    text = text.replace(
        'time_limit = "00:05:00"', 'time_limit = "00:01:00"\nsignal_before_end = "00:00:20"'
    )
    path = tmp_path / "SERVATUS.toml"
    path.write_text(text)
    return Profile.load(path)


def test_a_time_limit_reads_as_on_the_real_cluster(tmp_path: Path) -> None:
    clock = Clock()
    fake = FakeScheduler(clock=clock)
    tasks = [Task(key, ["/usr/bin/python3", "step.py"]) for key in KEYS]
    campaign = Campaign.ensure(tmp_path / "state", tasks, connect=fake)
    [receipt] = campaign.submit(campaign.plan(four_slot_profile(tmp_path))).receipts
    job = receipt.job
    fake.start(job)
    clock.now += 12
    fake.signal_limit(job)
    clock.now += 1
    for slot, code in ((1, 138), (2, 75), (3, 0)):
        fake.end_step(job, slot, code)
    clock.now += 60
    fake.time_out(job)

    prefix = f"servatus-{receipt.allocation_id}.{job}."
    assert sorted(name.removeprefix(prefix) for name in fake.markers) == [
        "end.0.143",
        "end.1.138",
        "end.2.75",
        "end.3.0",
        "limit",
        "start",
        "stop",
    ]
    assert fake.markers[prefix + "end.0.143"] >= fake.markers[prefix + "stop"]
    assert [job.state for job in fake.jobs] == ["TIMEOUT"]
    listed = {t.key: t.execution for t in campaign.status().tasks}
    assert listed["ignores"] is Execution.ENDING  # final once Slurm forgets the job

    fake.purge()
    read = {
        t.key: (t.execution, t.detail, t.exit_code, t.run_time) for t in campaign.status().tasks
    }
    assert read == {
        "ignores": (Execution.STOPPED, StopReason.TIME_LIMIT, None, RunTime(73, complete=True)),
        "dies": (Execution.FAILED, None, 138, RunTime(13, complete=True)),
        "yields": (Execution.STOPPED, StopReason.YIELDED, 75, RunTime(13, complete=True)),
        "finishes": (Execution.SUCCEEDED, None, 0, RunTime(13, complete=True)),
    }


def test_a_step_that_ignores_the_signal_is_stopped_at_the_limit_alone(tmp_path: Path) -> None:
    """One step, no end of its own: the time limit's 143 after the stop, STOPPED (time limit)."""
    clock = Clock()
    fake = FakeScheduler(clock=clock)
    campaign = Campaign.ensure(
        tmp_path / "state", [Task("ignores", ["/usr/bin/python3", "step.py"])], connect=fake
    )
    [receipt] = campaign.submit(campaign.plan(four_slot_profile(tmp_path))).receipts
    fake.start(receipt.job)
    clock.now += 30
    fake.signal_limit(receipt.job)
    clock.now += 40
    fake.time_out(receipt.job)
    fake.time_out(receipt.job)  # a second signal changes nothing
    fake.purge()
    [task] = campaign.status().tasks
    assert (task.execution, task.detail, task.exit_code) == (
        Execution.STOPPED,
        StopReason.TIME_LIMIT,
        None,
    )
    assert task.run_time == RunTime(70, complete=True)
    assert [name.rsplit(".", 3)[-3:] for name in fake.markers if ".end." in name] == [
        ["end", "0", "143"]
    ]


def test_finishing_a_job_keeps_the_code_of_a_step_that_already_ended(tmp_path: Path) -> None:
    """``end_step`` then ``finish``: one end marker per step, the first code kept, as a real
    step ends once."""
    clock = Clock()
    fake = FakeScheduler(clock=clock)
    tasks = [Task(key, ["/usr/bin/python3", "step.py"]) for key in KEYS[:2]]
    campaign = Campaign.ensure(tmp_path / "state", tasks, connect=fake)
    [receipt] = campaign.submit(campaign.plan(four_slot_profile(tmp_path))).receipts
    fake.start(receipt.job)
    clock.now += 5
    fake.end_step(receipt.job, 0, 2)
    clock.now += 5
    fake.finish(receipt.job, 0, 0)
    fake.purge()
    ends = sorted(name.rsplit(".", 3)[-2:] for name in fake.markers if ".end." in name)
    assert ends == [["0", "2"], ["1", "0"]]
    read = {t.key: (t.execution, t.exit_code, t.run_time) for t in campaign.status().tasks}
    assert read == {
        "ignores": (Execution.FAILED, 2, RunTime(5, complete=True)),
        "dies": (Execution.SUCCEEDED, 0, RunTime(10, complete=True)),
    }
