"""Starting Tasks in a lease against FakeScheduler (ADR 0009): the spec's Python lease example as
written, ``plan --lease``, ``submit`` of its plan and ``start``, with their refusals."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from test_cli_budget import L40S

from servatus import Campaign, Profile, Task
from servatus.engine.status_values import StopReason
from servatus.errors import Busy
from servatus.journal import store
from servatus.lease import GUARDED_OFFER_SCRIPT, OFFER_SCRIPT
from servatus.testing import FakeJob, FakeScheduler
from testkit import run

LOG_ROOT = "/scratch/alice/train/logs"


CONTAINED = L40S.replace(
    'gpu_gres = "gpu:l40s"',
    'gpu_gres = "gpu:l40s"\nlauncher = "apptainer"\napptainer = "/usr/bin/apptainer"\n'
    'image = "/scratch/alice/train.sif"',
)
"""The spec's profile, in a container: its Tasks name programs on the image's PATH."""


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "SERVATUS.toml").write_text(CONTAINED)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_the_spec_lease_example_runs_as_written(project: Path) -> None:
    fake = FakeScheduler()
    tasks = [Task("train-a", ["python", "train.py"])]
    # From the spec's "Leases" section, line for line (connect= added, as for every example).
    campaign = Campaign.ensure("gpu", tasks, connect=fake)
    held = campaign.hold(Profile.load("SERVATUS.toml", name="l40s"), slots=2)  # --hold 2
    lease = campaign.submit(held).receipts[0].allocation_id

    campaign.append([Task("eval-7", ["python", "eval.py"], stdin=b'{"ckpt": 7}')])
    campaign.submit(campaign.plan(lease=lease, only=["eval-7"]))
    campaign.cancel(tasks=["eval-7"])

    (job,) = fake.jobs
    # Cancelled while the lease was still queued: the order is withdrawn, never taken.
    [eval7] = [task for task in campaign.status().tasks if task.key == "eval-7"]
    assert (eval7.execution.value, eval7.detail) == ("STOPPED", StopReason.NEVER_STARTED)
    fake.start(job.job)
    assert fake.steps(job.job) == {}


def test_the_spec_lease_example_takes_its_step_once_the_lease_runs(project: Path) -> None:
    fake = FakeScheduler()
    campaign = Campaign.ensure("gpu", [Task("train-a", ["python", "train.py"])], connect=fake)
    held = campaign.hold(Profile.load("SERVATUS.toml", name="l40s"), slots=2)
    lease = campaign.submit(held).receipts[0].allocation_id
    campaign.append([Task("eval-7", ["python", "eval.py"], stdin=b'{"ckpt": 7}')])
    campaign.submit(campaign.plan(lease=lease, only=["eval-7"]))

    (job,) = fake.jobs
    step = next(i for i in store.read("gpu").intents if i.within == lease)
    assert step.task_keys == ("eval-7",)
    assert [r.job for r in store.read("gpu").receipts] == [job.job, job.job]
    orders = fake.orders[f"{LOG_ROOT}/servatus-{lease}.orders"]
    assert list(orders) == [step.allocation_id]  # offered while the lease is queued
    fake.start(job.job)
    assert fake.steps(job.job) == {step.allocation_id: "RUNNING"}
    assert orders == {}  # taken
    claim = fake.claims[f"servatus-{step.allocation_id}.{job.job}.claim"][1]
    assert claim.startswith(f"# servatus.order/1 {step.allocation_id} lease={lease}".encode())
    assert f"servatus-{step.allocation_id}.{job.job}.step-start" in fake.markers


def write(path: Path, *keys: str, args: list[str] | None = None) -> str:
    path.write_text(
        "".join(json.dumps({"key": k, "args": args or ["python", f"{k}.py"]}) + "\n" for k in keys)
    )
    return str(path)


def leased(
    project: Path, capsys: pytest.CaptureFixture[str], fake: FakeScheduler, *extra: str
) -> tuple[str, list[str]]:
    """An appendable campaign with one Task, and its submitted lease of 2 slots."""
    assert run(["ensure", "gpu", write(project / "a.jsonl", "train-a")], fake, capsys)[0] == 0
    args = ["plan", "gpu", "--hold", "2", *extra, "--output", "lease.json"]
    assert run(args, fake, capsys)[0] == 0
    assert run(["submit", "gpu", "lease.json"], fake, capsys)[0] == 0
    return "gpu", [
        a["allocation_id"] for a in json.loads(Path("lease.json").read_text())["allocations"]
    ]


def test_start_offers_each_key_and_a_third_step_waits_for_a_slot(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fake = FakeScheduler()
    state, (lease,) = leased(project, capsys, fake)
    fake.start()
    (job,) = fake.jobs
    tasks = write(project / "t.jsonl", "train-a", "eval-1", "eval-2")
    code, out, err = run(["start", state, tasks, "--lease", lease], fake, capsys)
    assert (code, err) == (0, "")
    steps = [i for i in store.read(state).intents if i.within == lease]
    assert out.splitlines() == [
        f"submitted allocation {s.allocation_id}: job {job.job} ({s.task_keys[0]})" for s in steps
    ]
    assert [s.task_keys for s in steps] == [("train-a",), ("eval-1",), ("eval-2",)]
    ids = [s.allocation_id for s in steps]
    assert list(fake.steps(job.job).values()) == ["RUNNING", "RUNNING", "QUEUED"]
    fake.finish_step(ids[0], 0)
    assert fake.steps(job.job) == {ids[0]: "ENDED 0", ids[1]: "RUNNING", ids[2]: "RUNNING"}
    assert fake.count("offer") == 1  # one transport command for every step
    code, out, _ = run(["start", state, tasks, "--lease", lease], fake, capsys)
    assert (code, out) == (
        0,
        "nothing to start: none of the 3 Tasks is selected; held 2 ACTIVE (eval-1, eval-2), "
        "1 SUBMITTED (train-a); see plan\n",
    )
    code, out, _ = run(["start", state, tasks, "--lease", lease, "--json"], fake, capsys)
    assert (code, json.loads(out)) == (
        0,
        {
            "receipts": [],
            "held": [["train-a", "SUBMITTED"], ["eval-1", "ACTIVE"], ["eval-2", "ACTIVE"]],
        },
    )


def test_plan_lease_shows_steps_and_holds_and_requests_nothing_more(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fake = FakeScheduler()
    state, (lease,) = leased(project, capsys, fake)
    fake.start()
    assert run(["start", state, "a.jsonl", "--lease", lease], fake, capsys)[0] == 0
    assert run(["append", state, write(project / "b.jsonl", "eval-1")], fake, capsys)[0] == 0
    code, out, err = run(["plan", state, "--lease", lease, "--output", "steps.json"], fake, capsys)
    assert (code, err) == (0, "")
    saved = json.loads(Path("steps.json").read_text())
    (step,) = saved["allocations"]
    assert saved["within"] == lease and "hold" not in saved and step["task_keys"] == ["eval-1"]
    lines = out.splitlines()
    # train-a's hold (ACTIVE while its step runs) needs status to read steps: lease-status's
    # part; the rule itself is pinned by values in tests/engine/test_step_plan.py.
    assert lines[:4] + lines[5:6] == [
        "profile l40s (apptainer launcher)",
        f"selected: 1 Task as steps in lease {lease}",
        f"  {step['allocation_id']}  eval-1",
        "held: 1 Task",
        "requests nothing beyond the lease: each step uses one of its slots",
    ]
    assert lines[4].split()[0] == "train-a"
    document = json.loads(run(["plan", state, "--lease", lease, "--json"], fake, capsys)[1])
    assert document["totals"] == {"cpu_hours": 0.0, "gpu_hours": 0.0, "memory_gib_hours": 0.0}
    code, out, _ = run(["submit", state, "steps.json"], fake, capsys)
    assert code == 0 and out.endswith(f"({'eval-1'})\n")


@pytest.mark.parametrize(
    "extra", [["--profile", "l40s"], ["--config", "SERVATUS.toml"], ["--hold", "1"],
              ["--tasks-per-allocation", "1"], ["--max-links", "2"], ["--show-scripts"]]
)  # fmt: skip
def test_plan_lease_refuses_a_profile_and_everything_that_packs_or_renders(
    project: Path, capsys: pytest.CaptureFixture[str], extra: list[str]
) -> None:
    fake = FakeScheduler()
    state, (lease,) = leased(project, capsys, fake)
    code, out, err = run(["plan", state, "--lease", lease, *extra], fake, capsys)
    assert (code, out) == (2, "")
    assert f"--lease plans steps in a lease, which takes no {extra[0]}" in err


def test_the_current_link_is_the_first_listed_unended_and_unsignalled(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fake = FakeScheduler()
    state, (first, second) = leased(project, capsys, fake, "--max-links", "2")
    assert run(["append", state, write(project / "b.jsonl", "eval-1")], fake, capsys)[0] == 0
    plan = ["plan", state, "--lease", second, "--json"]
    assert json.loads(run(plan, fake, capsys)[1])["within"] == first  # queued: it takes orders
    fake.start()
    fake.signal_limit(1000)
    assert json.loads(run(plan, fake, capsys)[1])["within"] == second
    fake.time_out(1000)
    fake.time_out(1001)
    code, out, err = run(["plan", state, "--lease", first], fake, capsys)
    assert (code, out) == (1, "")
    assert err == (
        f"servatus: ConfigurationError: lease {first}: no link can take steps (every link "
        "ended or had its pre-limit signal)\n"
    )
    code, _, err = run(["plan", state, "--lease", "0" * 24], fake, capsys)
    assert code == 1 and f"no lease {'0' * 24} in this campaign" in err
    code, _, err = run(["plan", state, "--lease", ""], fake, capsys)
    assert (code, err) == (1, "servatus: ConfigurationError: no lease '' in this campaign\n")
    code, _, err = run(["logs", state, "--allocation", "a b", "--task", ""], fake, capsys)
    assert (code, err) == (
        1,
        "servatus: ConfigurationError: no allocation 'a b' in this campaign\n",
    )


def test_start_refuses_a_changed_task_and_records_nothing(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fake = FakeScheduler()
    state, (lease,) = leased(project, capsys, fake)
    before = store.read(state)
    changed = write(project / "c.jsonl", "new", "train-a", args=["python", "other.py"])
    code, out, err = run(["start", state, changed, "--lease", lease], fake, capsys)
    assert (code, out) == (1, "") and "differ from the Task already under the same key" in err
    after = store.read(state)
    assert (after.tasks.keys, after.intents) == (before.tasks.keys, before.intents)


def test_an_offer_without_answer_leaves_every_step_unresolved(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fake = FakeScheduler()
    state, (lease,) = leased(project, capsys, fake)
    fake.unavailable("offer")
    code, out, err = run(["start", state, "a.jsonl", "--lease", lease, "--json"], fake, capsys)
    assert code == 3 and "UNRESOLVED" in err
    assert json.loads(out)["receipts"] == []
    recorded = store.read(state)
    (step,) = [i for i in recorded.intents if i.within == lease]
    assert step.allocation_id not in {r.allocation_id for r in recorded.receipts}
    assert step.allocation_id not in {r.allocation_id for r in recorded.resolutions}


def test_a_full_filesystem_refuses_the_offer_with_exit_75_and_a_missing_directory_exit_1(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fake = FakeScheduler()
    state, (lease,) = leased(project, capsys, fake)
    directory = f"{LOG_ROOT}/servatus-{lease}.orders"
    fake.full_directories.add(directory)
    code, _, err = run(["start", state, "a.jsonl", "--lease", lease], fake, capsys)
    assert code == 75 and "filesystem is full" in err
    assert [r.job for r in store.read(state).resolutions] == [None]
    fake.full_directories.clear()
    del fake.orders[directory]
    code, _, err = run(["start", state, "a.jsonl", "--lease", lease], fake, capsys)
    assert code == 1 and "directory" in err


def test_an_order_over_max_script_bytes_is_refused_at_planning(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fake = FakeScheduler()
    state, (lease,) = leased(project, capsys, fake)
    big = project / "big.jsonl"
    task = {"key": "big", "args": ["python"], "env": {"BIG": "x" * 2_000_000}}
    big.write_text(json.dumps(task) + "\n")
    code, out, err = run(["start", state, str(big), "--lease", lease], fake, capsys)
    assert (code, out) == (1, "") and "max_script_bytes" in err
    assert fake.count("offer") == 0


def test_the_spec_walk_through_reads_as_the_spec_shows(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The spec's lease commands in order: a step RUNNING in its lease, a second beside it,
    ``cancel --task`` stopping one (the lease stays), ``start --retry`` in the same lease, and
    ``cancel --allocation`` of the lease ending every step."""
    fake = FakeScheduler()
    state, [lease] = leased(project, capsys, fake)
    (job,) = fake.jobs
    fake.start(job.job)
    code, out, _ = run(["start", state, "a.jsonl", "--lease", lease], fake, capsys)
    assert code == 0
    [first] = [i.allocation_id for i in store.read(state).intents if i.within == lease]
    assert out == f"submitted allocation {first}: job {job.job} (train-a)\n"
    assert (
        run(["start", state, write(project / "e.jsonl", "eval-1"), "--lease", lease], fake, capsys)[
            0
        ]
        == 0
    )
    code, out, _ = run(["status", state], fake, capsys)
    rows = out.splitlines()
    assert [row.split()[:3] for row in rows[1:3]] == [
        ["train-a", "UNOBSERVED", "RUNNING"],
        ["eval-1", "UNOBSERVED", "RUNNING"],
    ]
    assert rows[1].endswith(f"{first} (lease {lease})")
    assert f"lease {lease}: job {job.job} RUNNING, 2 slots" in rows

    code, out, _ = run(["cancel", state, "--task", "train-a"], fake, capsys)
    assert (code, out.split(":")[0]) == (0, f"stopping step {first}")
    assert f"servatus-{first}.{job.job}.stop" in fake.markers
    code, out, _ = run(["status", state, "--json"], fake, capsys)
    task = json.loads(out)["tasks"][0]
    assert (task["execution"], task["run_time"]["complete"]) == ("RUNNING", False)
    fake.finish_step(first, 3)  # the application's answer to SIGUSR1
    code, out, _ = run(["status", state, "--json"], fake, capsys)
    assert json.loads(out)["tasks"][0]["execution"] == "STOPPED"
    assert job.state == "RUNNING"

    code, out, _ = run(["start", state, "a.jsonl", "--lease", lease], fake, capsys)
    assert code == 0 and out.startswith("nothing to start")
    code, out, _ = run(
        ["start", state, "a.jsonl", "--lease", lease, "--retry", "train-a"], fake, capsys
    )
    assert code == 0
    again = [i.allocation_id for i in store.read(state).intents if i.within == lease][-1]
    assert again != first and fake.steps(job.job)[again] == "RUNNING"

    assert run(["cancel", state, "--allocation", lease], fake, capsys)[0] == 0
    assert job.state != "RUNNING"
    fake.purge()
    code, out, _ = run(["status", state, "--json"], fake, capsys)
    executions = {t["key"]: t["execution"] for t in json.loads(out)["tasks"]}
    assert executions == {"train-a": "STOPPED", "eval-1": "STOPPED"}


class Meddling(FakeScheduler):
    """A cluster where, at every ``squeue`` reading, another command tries to append a Task to
    the campaign (a second ``start`` into the lease, say), as five ``start``s at once do on the
    real cluster."""

    def __init__(self) -> None:
        super().__init__()
        self.other: Campaign | None = None
        self.tries: list[str] = []

    def run(self, argv: Sequence[str], *, stdin: bytes = b"", timeout: float = 30) -> Any:
        if self.other is not None and any(os.path.basename(word) == "squeue" for word in argv):
            try:
                self.other.append([Task(f"late-{len(self.tries)}", ["python", "late.py"])])
                self.tries.append("appended")
            except Busy:
                self.tries.append("busy")
        return super().run(argv, stdin=stdin, timeout=timeout)


def test_start_reads_slurm_only_under_the_lock_that_sends_its_steps(project: Path) -> None:
    """No other command can change the campaign between what ``start`` read and what it sends:
    every change tried meanwhile finds the campaign busy, and ``start`` never answers StalePlan
    (it did when its plan was made before taking the lock)."""
    fake = Meddling()
    campaign = Campaign.ensure("gpu", [Task("train-a", ["python", "train.py"])], connect=fake)
    held = campaign.hold(Profile.load("SERVATUS.toml", name="l40s"), slots=2)
    lease = campaign.submit(held).receipts[0].allocation_id
    fake.start()
    fake.other = Campaign.open("gpu", connect=fake)
    done = campaign.start([Task("eval-1", ["python", "eval.py"])], lease=lease)
    assert [receipt.task_keys for receipt in done.receipts] == [("eval-1",)]
    assert fake.tries and set(fake.tries) == {"busy"}
    assert [i.task_keys for i in store.read("gpu").intents if i.within == lease] == [("eval-1",)]


def sent(fake: FakeScheduler) -> dict[str, int]:
    """How many times each remote command ran since the calls were last cleared."""
    names = ("ping", "squeue", "find", "offer", "scancel", "sbatch")
    return {name: fake.count(name) for name in names if fake.count(name)}


def test_start_is_one_guarded_offer_that_wakes_only_a_running_lease(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue #33: new Tasks into a lease are planned from the journal alone and offered in one
    command, no ping and no reading; the guard on the cluster checks the link the plan assumed
    and wakes its batch shell (its own job, from the journal) only once it runs."""
    fake = FakeScheduler()
    state, (lease,) = leased(project, capsys, fake)
    (job,) = fake.jobs
    fake.calls.clear()
    before = fake.round_trips
    assert run(["start", state, write(project / "t.jsonl", "q-1"), "--lease", lease],
               fake, capsys)[0] == 0  # fmt: skip
    assert (sent(fake), fake.round_trips - before) == ({"offer": 1}, 1)
    (offered,) = fake.calls
    assert offered[2] == GUARDED_OFFER_SCRIPT and offered[5] == str(job.job)
    assert offered[7:10] == ("/usr/bin/scancel", "/usr/bin/squeue", f"servatus-{lease}")
    assert offered[10] == f"{LOG_ROOT}/servatus-{lease}.{job.job}.limit"
    assert fake.wakes == []  # pending: its first poll reads the order
    fake.start(job.job)
    fake.calls.clear()
    assert run(["start", state, write(project / "u.jsonl", "w-1"), "--lease", lease],
               fake, capsys)[0] == 0  # fmt: skip
    assert sent(fake) == {"offer": 1}
    assert fake.wakes == [job.job]
    assert set(fake.steps(job.job)) == {
        i.allocation_id for i in store.read(state).intents if i.within == lease
    }


def test_a_failed_guard_reads_slurm_and_plans_again(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The link the journal names had its pre-limit signal: the guard writes nothing, its
    steps are recorded unsent, and the reading decides as it always did (here: no link can
    take steps). No step is left unresolved, and none was ever offered."""
    fake = FakeScheduler()
    state, (lease,) = leased(project, capsys, fake)
    (job,) = fake.jobs
    fake.start(job.job)
    fake.markers[f"servatus-{lease}.{job.job}.limit"] = fake.clock()
    fake.calls.clear()
    code, _, err = run(["start", state, write(project / "t.jsonl", "q-1"), "--lease", lease],
                       fake, capsys)  # fmt: skip
    assert code == 1 and "no link can take steps" in err
    assert sent(fake) == {"offer": 1, "squeue": 1, "find": 1}
    steps = [i.allocation_id for i in store.read(state).intents if i.within == lease]
    resolved = {r.allocation_id: r.job for r in store.read(state).resolutions}
    assert steps and all(resolved.get(step, "unresolved") is None for step in steps)
    assert fake.orders[f"{LOG_ROOT}/servatus-{lease}.orders"] == {}
    assert fake.steps(job.job) == {}
    code, out, _ = run(["status", state, "--json"], fake, capsys)
    document = json.loads(out)
    assert [t["execution"] for t in document["tasks"] if t["key"] == "q-1"] == ["NOT_SUBMITTED"]


def test_a_failed_guard_then_starts_the_steps_the_reading_plans(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The journal's guess is wrong but the lease still takes steps (Slurm forgot nothing, the
    job only left squeue's view for the guard): the fallback offers the reading's plan, and
    each Task runs once."""
    fake = FakeScheduler()
    state, (lease,) = leased(project, capsys, fake)
    (job,) = fake.jobs
    fake.start(job.job)
    fake.fail("squeue")  # the guard's squeue and the reading's first try both fail...
    code, _, _ = run(["start", state, write(project / "t.jsonl", "q-1", "q-2"), "--lease", lease],
                     fake, capsys)  # fmt: skip
    assert code == 75  # ...and the reading says so: nothing was offered, nothing unresolved
    intents = [i for i in store.read(state).intents if i.within == lease]
    resolved = {r.allocation_id: r.job for r in store.read(state).resolutions}
    assert len(intents) == 2 and all(resolved[i.allocation_id] is None for i in intents)
    fake.calls.clear()
    code, _, err = run(["start", state, write(project / "t.jsonl", "q-1", "q-2"), "--lease", lease],
                       fake, capsys)  # fmt: skip
    assert (code, err) == (0, "")
    assert sent(fake) == {"offer": 1}
    running = fake.steps(job.job)
    keys = sorted(i.task_keys for i in store.read(state).intents if i.allocation_id in running)
    assert keys == [("q-1",), ("q-2",)]


def q1_started(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> tuple[FakeScheduler, str, str, FakeJob]:
    """A running lease with the Task q-1 started in it: the fake, the state, the lease, its job."""
    fake = FakeScheduler()
    state, (lease,) = leased(project, capsys, fake)
    (job,) = fake.jobs
    fake.start(job.job)
    assert run(["start", state, write(project / "t.jsonl", "q-1"), "--lease", lease],
               fake, capsys)[0] == 0  # fmt: skip
    return fake, state, lease, job


def test_a_retry_of_settled_work_reads_before_it_offers(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A Task that ran shows what it did; a plan from the journal alone is made only for Tasks
    no job ever took, so a failed guard could never hide a result behind NOT_SUBMITTED."""
    fake, state, lease, job = q1_started(project, capsys)
    (step,) = fake.steps(job.job)
    fake.finish_step(step, 0)
    assert run(["status", state], fake, capsys)[0] == 0
    fake.calls.clear()
    tasks = write(project / "u.jsonl", "q-1")
    assert run(["start", state, tasks, "--lease", lease, "--retry", "q-1"], fake, capsys)[0] == 0
    assert sent(fake) == {"squeue": 1, "find": 1, "offer": 1}


def test_start_of_tasks_with_unsettled_work_reads_before_it_offers(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A Task whose step has not settled may be running: only a reading can say, so the plan
    is made from one, as before: two round trips."""
    fake, state, lease, job = q1_started(project, capsys)
    fake.calls.clear()
    before = fake.round_trips
    tasks = write(project / "u.jsonl", "q-1", "q-2")
    assert run(["start", state, tasks, "--lease", lease], fake, capsys)[0] == 0
    assert (sent(fake), fake.round_trips - before) == ({"squeue": 1, "find": 1, "offer": 1}, 2)
    assert fake.calls[-1][2] == OFFER_SCRIPT
    running = fake.steps(job.job)
    keys = sorted(i.task_keys for i in store.read(state).intents if i.allocation_id in running)
    assert keys == [("q-1",), ("q-2",)]  # q-1 once, still its first step


def test_start_that_never_reached_the_cluster_offered_nothing_and_exits_75(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """ssh could not connect, so the offer certainly did not run: its steps are recorded unsent
    (no order of them can exist), never left for reconcile, and the exit is 75, retry later."""
    fake = FakeScheduler()
    state, (lease,) = leased(project, capsys, fake)
    fake.start()
    fake.unreachable("offer")
    code, _, err = run(["start", state, write(project / "t.jsonl", "x-1"), "--lease", lease],
                       fake, capsys)  # fmt: skip
    assert code == 75 and "never reached the cluster" in err and "none of 1 steps" in err
    assert err.startswith("servatus: Unavailable: ")  # the name the exit code table knows
    steps = [i.allocation_id for i in store.read(state).intents if i.within == lease]
    resolved = {r.allocation_id: r.job for r in store.read(state).resolutions}
    assert len(steps) == 1 and resolved[steps[0]] is None
    assert run(["start", state, write(project / "t.jsonl", "x-1"), "--lease", lease],
               fake, capsys)[0] == 0  # fmt: skip
    assert fake.count("offer") == 2


def test_start_whose_offer_got_no_answer_is_left_to_reconcile(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An answer lost after the command may have run is not a refusal: exit 3, the step
    unresolved until reconcile reads its claim."""
    fake = FakeScheduler()
    state, (lease,) = leased(project, capsys, fake)
    fake.start()
    fake.lose_answer("offer")
    code, _, err = run(["start", state, write(project / "t.jsonl", "x-1"), "--lease", lease],
                       fake, capsys)  # fmt: skip
    assert code == 3 and "UNRESOLVED" in err
    steps = [i.allocation_id for i in store.read(state).intents if i.within == lease]
    assert len(steps) == 1 and steps[0] not in {
        r.allocation_id for r in store.read(state).resolutions
    }
