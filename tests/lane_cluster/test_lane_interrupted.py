"""``servatus submit`` killed with SIGKILL around its ``sbatch``, then ``reconcile``.

The real CLI runs in a subprocess and a trap (``lane_traps``) kills it at the ``sbatch`` call:
once before ``sbatch`` runs (the intent is durable, Slurm never hears of the job) and once after
``sbatch`` answered (Slurm accepted the job, the receipt was never written). Both Tasks read
``UNRESOLVED``; a real ``reconcile`` finds the second job by its name in ``squeue`` and records
it ``ACCEPTED`` under the job number ``sbatch`` printed, and says the first is not decidable yet
(exit 75). The 15-minute rule is then exercised with a faked clock: the same CLI in a subprocess
whose ``time.time`` runs ``RECONCILE_AFTER`` + 60 s ahead, reading real evidence from the real
cluster, records the first ``NOT_SUBMITTED``. What is real: the kills, the journal, Slurm, the
markers, the evidence; what is not: the 15 minutes. Finally every Task ran exactly once.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from lane_helpers import Lane, allocation_ids
from lane_traps import install

pytestmark = pytest.mark.cluster


def test_submit_killed_before_and_after_sbatch(lane: Lane, tmp_path: Path) -> None:
    trap = install(lane, tmp_path / "trap")
    lane.put_worker()
    tasks = [lane.worker_task("early", "sleep", "1"), lane.worker_task("late", "sleep", "1")]
    lane.ok("ensure", "state", lane.tasks_file(tasks))

    # Killed at the sbatch call: the intent is durable, sbatch never ran.
    lane.ok("plan", "state", "--only", "early", "--output", "early.json")
    trap.arm("before")
    killed = lane.servatus("submit", "state", "early.json")
    assert killed.returncode == -9, killed
    assert not trap.armed
    [early] = allocation_ids(lane)
    assert lane.executions() == {"early": ("UNRESOLVED", None), "late": ("NOT_SUBMITTED", None)}

    # Killed after sbatch answered: Slurm has the job, the receipt was never recorded.
    lane.ok("plan", "state", "--only", "late", "--output", "late.json")
    trap.arm("after")
    killed = lane.servatus("submit", "state", "late.json")
    assert killed.returncode == -9, killed
    [answered] = re.findall(r"^([1-9][0-9]*)$", trap.answer, flags=re.MULTILINE)
    job = int(answered)
    first, late = allocation_ids(lane)
    assert first == early
    assert lane.executions() == {"early": ("UNRESOLVED", None), "late": ("UNRESOLVED", None)}

    waiting = lane.servatus("reconcile", "state")
    assert waiting.returncode == 75, waiting
    lines = waiting.stdout.splitlines()
    assert f"allocation {late}: accepted as job {job}" in lines
    assert any(line.startswith(f"allocation {early}: no evidence yet") for line in lines), lines
    assert waiting.stderr.startswith("servatus: StillWaiting: ")
    assert lane.status()["tasks"][1]["job"] == job

    # Fifteen minutes later (faked clock, real evidence): no job, no marker: never submitted.
    later = lane.later("reconcile", "state")
    assert later.returncode == 0, later
    assert later.stdout == f"allocation {early}: recorded as not submitted\n"
    again = lane.servatus("reconcile", "state")
    assert (again.returncode, again.stdout) == (0, "nothing to reconcile\n")

    lane.wait_for(
        "late to succeed",
        lambda d: [t["execution"] for t in d["tasks"]] == ["NOT_SUBMITTED", "SUCCEEDED"],
        seconds=120,
    )
    rerun = lane.servatus("plan", "state", "--output", "rerun.json")
    assert rerun.returncode == 0, rerun.stderr
    assert "selected: 1 Task in 1 allocation" in rerun.stdout
    assert re.search(r"^  late +SUBMITTED$", rerun.stdout, flags=re.MULTILINE), rerun.stdout
    lane.ok("submit", "state", "rerun.json")
    done = lane.wait_for(
        "early to succeed in its new allocation",
        lambda d: [t["execution"] for t in d["tasks"]] == ["SUCCEEDED", "SUCCEEDED"],
        seconds=120,
    )
    _, _, rerun_allocation = allocation_ids(lane)
    assert done["tasks"][0]["allocation"] == rerun_allocation

    # Nothing ran twice: one run per Task, one job (start marker) per accepted allocation.
    assert len(lane.run_records("early")) == 1, lane.run_records("early")
    assert len(lane.run_records("late")) == 1, lane.run_records("late")
    assert lane.marker_kinds(early) == []
    assert lane.marker_kinds(late) == [f"{job}.end.0.0", f"{job}.start"]
    [rerun_job] = {kind.split(".")[0] for kind in lane.marker_kinds(rerun_allocation)}
    assert lane.marker_kinds(rerun_allocation) == [f"{rerun_job}.end.0.0", f"{rerun_job}.start"]
    names = [name for _, name, _ in lane.squeue()]
    assert f"servatus-{early}" not in names
    assert names.count(f"servatus-{late}") <= 1
