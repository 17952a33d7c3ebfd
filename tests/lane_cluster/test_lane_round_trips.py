"""Over the real OpenSSH transport, ``status`` reads a Target's ``squeue``, clock and run markers
in one ``ssh`` (issue #33), and ``cancel`` adds only its ``scancel``: counted by a wrapper ``ssh``
on ``PATH`` that logs each time it is started."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from lane_helpers import Lane, task_of, wait_until

pytestmark = pytest.mark.cluster

COUNTING_SSH = """\
#!/bin/sh
echo ssh >>"$(dirname "$0")/started"
exec /usr/bin/ssh "$@"
"""


@contextlib.contextmanager
def counting_ssh(lane: Lane) -> Iterator[Path]:
    """While it lasts, each ``ssh`` the lane's CLI starts adds a line to the file it yields."""
    wrappers = lane.launch / "wrappers"
    wrappers.mkdir(exist_ok=True)
    lane.put(wrappers / "ssh", COUNTING_SSH, 0o755)
    lane.extra_path.insert(0, str(wrappers))
    try:
        yield wrappers / "started"
    finally:
        lane.extra_path.remove(str(wrappers))


def test_status_is_one_ssh_per_target(ssh_lane: Lane) -> None:
    lane = ssh_lane
    lane.put_worker()
    tasks = [lane.worker_task("failed", "exit", "3"), lane.worker_task("runs", "sleep", "120")]
    lane.ok("ensure", "state", lane.tasks_file(tasks))
    lane.ok("plan", "state", "--tasks-per-allocation", "1", "--output", "plan.json")
    lane.ok("submit", "state", "plan.json")

    def ready(document: dict[str, Any]) -> bool:
        return (
            task_of(document, "failed")["execution"],
            task_of(document, "runs")["execution"],
        ) == (
            "FAILED",
            "RUNNING",
        )

    lane.wait_for("one failed, one running", ready, seconds=120)
    with counting_ssh(lane) as started:
        document = lane.status()
        assert started.read_text().count("ssh") == 1
        # The markers came in the same command: the exit code, and the running one's run time.
        assert task_of(document, "failed")["exit_code"] == 3
        assert task_of(document, "runs")["execution"] == "RUNNING"
        assert task_of(document, "runs")["run_time"]["total"] >= 0
        started.unlink()
        cancelled = lane.servatus("cancel", "state", "--task", "runs")
        assert cancelled.returncode == 0, cancelled.stderr
        assert started.read_text().count("ssh") == 2  # the reading, then its one scancel


def test_start_is_one_ssh_and_its_guard_reads_the_real_queue(ssh_lane: Lane) -> None:
    """Issue #33: ``start`` of new Tasks into a running lease is one ``ssh`` (the offer and its
    guard), and the step runs. Once the lease's job is cancelled behind Servatus's back (the
    journal still names it live), the guard's own ``squeue`` sees it ended: nothing is
    written into the orders directory, the steps are recorded unsent, and ``start`` reads
    Slurm and refuses as it always did: two ``ssh`` for it, no step unresolved."""
    lane = ssh_lane
    lane.put_worker()
    lane.limit("00:10:00", "00:00:20")
    first = lane.tasks_file([lane.worker_task("one", "exit", "0")], "one.jsonl")
    lane.ok("ensure", "state", first)
    [(lease, job)], _ = lane.lease("--hold", "1")
    wait_until(
        "the lease running",
        lambda: lane.job_state(job) == "RUNNING",
        seconds=90,
    )
    with counting_ssh(lane) as started:
        done = lane.servatus("start", "state", first, "--lease", lease)
        assert done.returncode == 0, done.stderr
        assert started.read_text().count("ssh") == 1
        lane.wait_for(
            "the step succeeded",
            lambda document: task_of(document, "one")["execution"] == "SUCCEEDED",
            seconds=90,
        )
        cancelled = lane.cluster.login([f"{lane.cluster.slurm_bin}/scancel", str(job)], timeout=30)
        assert cancelled.returncode == 0, cancelled.stderr
        wait_until("the lease ended", lambda: lane.job_state(job) != "RUNNING", seconds=60)
        started.unlink()
        second = lane.tasks_file([lane.worker_task("two", "exit", "0")], "two.jsonl")
        refused = lane.servatus("start", "state", second, "--lease", lease)
        assert refused.returncode == 1, refused.stderr
        assert "no link can take steps" in refused.stderr
        assert started.read_text().count("ssh") == 2  # the guarded offer, then the reading
    orders = Path(lane.log_root) / f"servatus-{lease}.orders"
    assert sorted(p.name for p in orders.iterdir() if not p.name.endswith(".claim")) == []
    document = lane.status()
    two = [a for a in document["attempts"] if a["task_keys"] == ["two"]]
    assert two and all(a["job"] is None for a in two), two
    assert task_of(document, "two")["execution"] == "NOT_SUBMITTED"
