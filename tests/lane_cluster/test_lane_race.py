"""Several ``servatus submit`` processes racing on one campaign and one plan, on the real cluster.

The campaign's lock lets one in; the others exit 75 (``Busy``) at once, or, once the first has
recorded its receipts, 1 (``StalePlan``: the campaign changed). Whatever the interleaving, Slurm
gets one job per allocation and every Task runs once. Over SSH, where each process opens its own
connection to the real sshd.
"""

from __future__ import annotations

import subprocess
from typing import Any

import pytest
from lane_helpers import OUTSIDE_PYTHON, Lane

pytestmark = pytest.mark.cluster

RACERS = 4


def test_racing_submits_run_each_task_once(ssh_lane: Lane) -> None:
    lane = ssh_lane
    lane.put_worker()
    keys = [f"r{i}" for i in range(3)]
    lane.ok("ensure", "state", lane.tasks_file([lane.worker_task(k, "exit", "0") for k in keys]))
    lane.ok("plan", "state", "--tasks-per-allocation", "1", "--output", "plan.json")
    racers = [
        subprocess.Popen(
            [OUTSIDE_PYTHON, "-m", "servatus", "submit", "state", "plan.json"],
            cwd=lane.launch,
            env=lane.environment(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(RACERS)
    ]
    finished = [(racer.wait(timeout=120), *racer.communicate()) for racer in racers]
    codes = sorted(code for code, _, _ in finished)
    assert codes.count(0) == 1, finished
    for code, out, err in finished:
        if code == 0:
            assert out.count("submitted allocation") == 3, out
        else:
            assert code in (1, 75) and out == "", (code, err)
            kind = "Busy" if code == 75 else "StalePlan"
            assert err.startswith(f"servatus: {kind}: ") and err.count("\n") == 1, err
    allocations = [a["allocation_id"] for a in lane.status()["attempts"]]
    assert len(allocations) == 3  # one allocation each, recorded once
    ours = {f"servatus-{a}" for a in allocations}
    listed = [name for _, name, _ in lane.squeue() if name in ours]  # MinJobAge is 30 s
    assert sorted(listed) == sorted(ours)  # one job each

    def succeeded(document: dict[str, Any]) -> bool:
        return all(task["execution"] == "SUCCEEDED" for task in document["tasks"])

    lane.wait_for("every Task to succeed", succeeded, seconds=120)
    for key in keys:
        assert len(lane.run_records(key)) == 1, lane.run_records(key)
