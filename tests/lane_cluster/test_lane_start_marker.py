"""No start marker, no step, on the real cluster.

A job that ran its Task but could not leave its start marker would read ``STOPPED (never
started)`` once Slurm forgets it, and ``--retry-failed`` would run the Task again. Here the start
marker's name is taken (a directory) for the job numbers Slurm will hand out next, so the batch
script cannot create it: the job must end without starting its step, say why in its Slurm log,
and read as never started, which is then the truth.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from lane_helpers import Lane

from cluster import harness

# After every concurrent scenario (cluster.prelude):
# it blocks the job numbers Slurm hands out next.
pytestmark = [pytest.mark.cluster, pytest.mark.cluster_alone]

AHEAD = 5
"""Job numbers blocked ahead of the next one (nothing else submits while a cluster test runs)."""


def next_job(lane: Lane) -> int:
    """The number Slurm hands out next: one more than a held job submitted and cancelled now."""
    held = lane.cluster.login(
        [
            f"{lane.cluster.slurm_bin}/sbatch",
            "--parsable",
            "--hold",
            f"--partition={harness.PARTITION}",
            "--job-name=probe-next-job",
            f"--output={lane.log_root}/probe-%j.out",
            "--wrap=true",
        ],
        timeout=30,
    )
    assert held.returncode == 0, held.stderr
    job = int(held.stdout.strip().split(";")[0])
    cancelled = lane.cluster.login([f"{lane.cluster.slurm_bin}/scancel", str(job)], timeout=30)
    assert cancelled.returncode == 0, cancelled.stderr
    return job + 1


def test_a_job_that_cannot_mark_its_start_runs_nothing(ssh_lane: Lane) -> None:
    lane = ssh_lane
    lane.put_worker()
    lane.ok("ensure", "state", lane.tasks_file([lane.worker_task("guarded", "exit", "0")]))
    lane.ok("plan", "state", "--output", "plan.json")
    [allocation] = [
        a["allocation_id"]
        for a in json.loads((lane.launch / "plan.json").read_text())["allocations"]
    ]
    first = next_job(lane)
    lane.cluster.make_dirs(
        *(f"{lane.log_root}/servatus-{allocation}.{first + k}.start" for k in range(AHEAD))
    )
    submitted = lane.ok("submit", "state", "plan.json", "--json")
    [receipt] = json.loads(submitted.stdout)["receipts"]
    job = receipt["job"]
    assert first <= job < first + AHEAD, f"job {job} was not among the blocked {first}+{AHEAD}"

    def gone(document: dict[str, Any]) -> bool:
        return not document["attempts"][0]["listed"]

    limit = 2 * lane.cluster.min_job_age + 90
    final = lane.wait_for("Slurm to end and forget the job", gone, seconds=limit)
    [task] = final["tasks"]
    assert (task["execution"], task["detail"], task["job"]) == ("STOPPED", "never started", job)
    assert lane.run_records("guarded") == []  # the step never started
    log = Path(lane.log_root) / f"servatus-{allocation}-{job}.out"
    assert (
        f"servatus: cannot create the start marker in {lane.log_root}; no step was started"
        in log.read_text()
    )
    assert not (Path(lane.log_root) / f"servatus-{allocation}-{job}.0.out").exists()
    # Never started is the truth now, so --retry-failed may take it: it runs once, for real.
    lane.ok("plan", "state", "--retry-failed", "--output", "retry.json")
    lane.ok("submit", "state", "retry.json")

    def succeeded(document: dict[str, Any]) -> bool:
        return bool(document["tasks"][0]["execution"] == "SUCCEEDED")

    lane.wait_for("the retry to succeed", succeeded, seconds=120)
    assert len(lane.run_records("guarded")) == 1
