"""FAILED, STOPPED and LOST as the real cluster produces them, and what retries select.

One campaign of three one-Task allocations: ``fails`` exits 3, ``cancelled`` is cancelled with
``servatus cancel`` while it runs, and ``killed`` has every process of its job stopped then killed
with ``SIGKILL`` from inside the root (``lane_kill.py``), so its batch script writes no ``stop``
marker and no step writes an ``end`` marker: the job vanishes without recording how it ended.
While Slurm still lists the jobs (MinJobAge), retries are held ``ACTIVE`` and the cancelled and
killed Tasks read ``ENDING``; after the purge they read ``STOPPED`` and ``LOST``. A fourth Task,
``orphan``, is submitted by a ``submit`` killed after ``sbatch`` answered (``lane_traps``); once
Slurm has purged its job, ``reconcile`` can only find it by its run markers, and does.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from lane_helpers import INNER_PYTHON, Lane, allocation_ids
from lane_traps import install

pytestmark = pytest.mark.cluster

HERE = Path(__file__).resolve().parent


def by_key(document: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {task["key"]: task for task in document["tasks"]}


def plan_json(lane: Lane, *args: str) -> dict[str, Any]:
    result = lane.servatus("plan", "state", "--json", *args)
    assert result.returncode == 0, result.stderr
    document: dict[str, Any] = json.loads(result.stdout)
    return document


def test_failed_stopped_and_lost(lane: Lane, tmp_path: Path) -> None:
    trap = install(lane, tmp_path / "trap")
    lane.put_worker()
    lane.put(Path(lane.base) / "lane_kill.py", (HERE / "lane_kill.py").read_text())
    tasks = [
        lane.worker_task("fails", "exit", "3"),
        lane.worker_task("cancelled", "sleep", "300"),
        lane.worker_task("killed", "sleep", "300"),
        lane.worker_task("orphan", "exit", "0"),
    ]
    three = ("--only", "fails", "--only", "cancelled", "--only", "killed")
    lane.submitted(tasks, *three, "--tasks-per-allocation", "1")

    def settled(document: dict[str, Any]) -> bool:
        tasks = by_key(document)
        return (
            tasks["fails"]["execution"] == "FAILED"
            and tasks["cancelled"]["execution"] == "RUNNING"
            and tasks["killed"]["execution"] == "RUNNING"
            and len(lane.run_records("killed")) == 1
            and len(lane.run_records("cancelled")) == 1
        )

    running = by_key(lane.wait_for("fails FAILED, the others RUNNING", settled, seconds=150))
    assert running["fails"]["exit_code"] == 3
    # The failed job is still listed (MinJobAge): --retry-failed holds it ACTIVE.
    early = plan_json(lane, "--retry-failed")
    assert early["decision"]["selected"] == ["orphan"]  # never submitted yet
    assert ["fails", "ACTIVE"] in early["decision"]["held"]
    # orphan's submit is killed after sbatch answered: its job runs with no receipt recorded.
    lane.ok("plan", "state", "--only", "orphan", "--output", "orphan.json")
    trap.arm("after")
    assert lane.servatus("submit", "state", "orphan.json").returncode == -9
    [orphan_job] = [int(n) for n in re.findall(r"^([1-9][0-9]*)$", trap.answer, re.MULTILINE)]
    orphan_allocation = allocation_ids(lane)[-1]

    cancelled = lane.servatus("cancel", "state", "--task", "cancelled")
    assert cancelled.returncode == 0, cancelled.stderr
    assert cancelled.stdout == f"cancelled allocation {running['cancelled']['allocation']}\n"
    killer = lane.cluster.login(
        [INNER_PYTHON, f"{lane.base}/lane_kill.py", str(running["killed"]["job"])], timeout=60
    )
    assert killer.returncode == 0, killer.stderr
    killed = json.loads(killer.stdout)
    assert any("slurm_script" in command for command in killed), killed
    assert any("step.py sleep 300" in command for command in killed), killed

    def ending(document: dict[str, Any]) -> bool:
        tasks = by_key(document)
        return all(tasks[key]["execution"] == "ENDING" for key in ("cancelled", "killed"))

    seen = by_key(lane.wait_for("cancelled and killed to read ENDING", ending, seconds=60))
    assert seen["fails"]["execution"] == "FAILED"
    assert seen["orphan"]["execution"] == "UNRESOLVED"

    def purged(document: dict[str, Any]) -> bool:
        return not any(attempt["listed"] for attempt in document["attempts"])

    limit = 2 * lane.cluster.min_job_age + 90
    lane.wait_for("Slurm to purge all four jobs", purged, seconds=limit)
    # Slurm forgot orphan's job: reconcile finds it by its run markers.
    found = lane.servatus("reconcile", "state")
    assert found.returncode == 0, found
    assert found.stdout == f"allocation {orphan_allocation}: accepted as job {orphan_job}\n"
    assert not [name for _, name, _ in lane.squeue() if name == f"servatus-{orphan_allocation}"]
    final = lane.status()
    tasks = by_key(final)
    assert (tasks["orphan"]["execution"], tasks["orphan"]["job"]) == ("SUCCEEDED", orphan_job)
    assert (tasks["fails"]["execution"], tasks["fails"]["exit_code"]) == ("FAILED", 3)
    assert (tasks["cancelled"]["execution"], tasks["cancelled"]["exit_code"]) == ("STOPPED", None)
    assert (tasks["killed"]["execution"], tasks["killed"]["exit_code"]) == ("LOST", None)
    # A LOST run counts at its whole time limit (00:05:00), marked incomplete (~).
    assert tasks["killed"]["run_time"] == {"total": 300, "complete": False}
    killed_job = tasks["killed"]["job"]
    assert lane.marker_kinds(tasks["killed"]["allocation"]) == [f"{killed_job}.start"]
    # The cancelled step's watcher wrote its end after the stop: read as the stop it is.
    cancelled_job = tasks["cancelled"]["job"]
    assert lane.marker_kinds(tasks["cancelled"]["allocation"]) == [
        f"{cancelled_job}.end.0.143",
        f"{cancelled_job}.start",
        f"{cancelled_job}.stop",
    ]

    retry = plan_json(lane, "--retry-failed")
    assert retry["decision"]["selected"] == ["fails", "cancelled"]
    assert retry["decision"]["held"] == [["killed", "SUBMITTED"], ["orphan", "SUBMITTED"]]
    named = plan_json(lane, "--retry", "killed")
    assert named["decision"]["selected"] == ["killed"]
    for key in ("fails", "cancelled", "killed", "orphan"):
        assert len(lane.run_records(key)) == 1, lane.run_records(key)
