"""A hostile review of leases (issue 15) and ``servatus report`` (issue 16) against
FakeScheduler, through ``servatus.cli.main``: each test pins one finding of the review."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from test_lease_steps import leased, project, write

from servatus.journal import store
from servatus.testing import FakeScheduler
from testkit import run

__all__ = ["project"]  # the fixture, imported for the tests below


def steps_of(state: str, lease: str) -> list[str]:
    return [i.allocation_id for i in store.read(state).intents if i.within == lease]


def unresolved_lease(project: Path, capsys: pytest.CaptureFixture[str], fake: FakeScheduler) -> str:
    """A lease of 2 slots whose ``sbatch`` got no answer (exit 3): its intent waits for
    ``reconcile``."""
    assert run(["ensure", "gpu", write(project / "a.jsonl", "train-a")], fake, capsys)[0] == 0
    assert run(["plan", "gpu", "--hold", "2", "--output", "lease.json"], fake, capsys)[0] == 0
    [held] = json.loads(Path("lease.json").read_text())["allocations"]
    fake.unavailable("sbatch")
    assert run(["submit", "gpu", "lease.json"], fake, capsys)[0] == 3
    return str(held["allocation_id"])


def test_report_draws_running_steps_inside_their_running_lease_under_clock_skew(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The file server is five minutes ahead of the laptop: every marker is stamped by it.
    ahead = [300.0]
    fake = FakeScheduler(clock=lambda: time.time() + ahead[0])
    state, (lease,) = leased(project, capsys, fake)
    fake.start()
    tasks = write(project / "t.jsonl", "train-a", "eval-1")
    assert run(["start", state, tasks, "--lease", lease], fake, capsys)[0] == 0
    ahead[0] += 60  # a minute of running, on the file server's clock
    code, out, _ = run(["report", state, "--json"], fake, capsys)
    assert code == 0
    data = json.loads(out)
    [held] = data["leases"]
    [lease_running] = [s for s in held["segments"] if s["span"] == "running"]
    step_ends = [
        s["end"]
        for lane in data["lanes"]
        for s in lane["segments"]
        if s["span"] == "running" and s["within"] == lease
    ]
    assert len(step_ends) == 2
    assert all(end <= lease_running["end"] for end in step_ends), (step_ends, lease_running)
    assert held["busy_slot_hours"] > 0


def test_status_names_an_unresolved_lease_and_is_not_quiescent(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fake = FakeScheduler()
    lease = unresolved_lease(project, capsys, fake)
    code, out, _ = run(["status", "gpu"], fake, capsys)
    assert code == 0
    assert any(line.startswith(f"lease {lease}:") for line in out.splitlines()), out
    code, out, _ = run(["status", "gpu", "--json"], fake, capsys)
    assert json.loads(out)["quiescent"] is False


def test_plan_into_an_unresolved_lease_says_to_reconcile(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fake = FakeScheduler()
    lease = unresolved_lease(project, capsys, fake)
    code, out, err = run(["plan", "gpu", "--lease", lease], fake, capsys)
    assert (code, out) == (1, "")
    assert len(err.splitlines()) == 1
    assert "reconcile" in err, err


def test_start_retry_of_a_key_outside_the_file_is_refused_by_the_file_and_registers_nothing(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``start`` plans exactly the file's keys: a ``--retry`` of another key is bad input, said
    in the words of ``start`` (not of a ``--only`` the user never gave), before any Task of
    the file is registered."""
    fake = FakeScheduler()
    state, (lease,) = leased(project, capsys, fake)
    fake.start()
    before = Path(state, "journal").read_bytes()
    tasks = write(project / "b.jsonl", "train-b")
    code, out, err = run(
        ["start", state, tasks, "--lease", lease, "--retry", "train-a"], fake, capsys
    )
    assert (code, out) == (1, "")
    assert err == (
        "servatus: ConfigurationError: --retry train-a: not a key of the Tasks file; start "
        "plans exactly the file's keys\n"
    )
    assert Path(state, "journal").read_bytes() == before


def test_logs_of_a_step_by_its_allocation_id_read_the_step_log(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``start`` says ``submitted allocation STEP``; a step has no allocation log of its own,
    so ``logs --allocation STEP`` is its step log, never an exit 75 for a file that cannot
    appear."""
    fake = FakeScheduler()
    state, (lease,) = leased(project, capsys, fake)
    fake.start()
    (job,) = fake.jobs
    tasks = write(project / "t.jsonl", "train-a")
    assert run(["start", state, tasks, "--lease", lease], fake, capsys)[0] == 0
    [step] = steps_of(state, lease)
    fake.logs[f"servatus-{step}-{job.job}.0.out"] = b"step says hello\n"
    code, out, err = run(["logs", state, "--allocation", step], fake, capsys)
    assert (code, out, err) == (0, "step says hello\n", "")


def test_status_is_not_quiescent_while_a_lease_runs(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fake = FakeScheduler()
    state, _ = leased(project, capsys, fake)
    fake.start()
    code, out, _ = run(["status", state, "--json"], fake, capsys)
    assert code == 0
    assert json.loads(out)["quiescent"] is False
