"""The spec's Quickstart (steps 2 to 4) run as written on the real cluster, both ways in.

``quickstart/train.txt`` and ``quickstart/launcher.txt`` are verbatim copies of the spec's worker
and Python launcher. The worker is installed unchanged as ``train.py``; its ``from mylab import
Trainer`` is satisfied by ``quickstart/mylab.py`` beside it. The launcher is adapted only where
:func:`adaptations` says (paths, the absolute Python, three Tasks instead of nine), each edit
checked to apply exactly once. Over SSH it runs outside as root, reaching Slurm through ``ssh
servatus-test`` and reading results through ``/scratch``; on the login node it runs inside the
root as alice with the cluster's Python and no ``host``.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest
from lane_helpers import INNER_PYTHON, Lane

pytestmark = pytest.mark.cluster

QUICKSTART = Path(__file__).resolve().parent / "quickstart"
WORKSPACE_PREFIX = ".servatus-workspace."

HELD = """\
import json
import sys
from pathlib import Path

from servatus import Campaign, Profile

RESULTS = Path(sys.argv[1])


def finished(tasks):
    return {task.key for task in tasks if (RESULTS / task.key).is_dir()}


plan = Campaign.open("state", probe=finished).plan(Profile.load("SERVATUS.toml"))
print(json.dumps({
    "selected": list(plan.decision.selected),
    "held": [[key, hold.value] for key, hold in plan.decision.held],
    "allocations": len(plan.allocations),
}))
"""


def adaptations(results: str) -> list[tuple[str, str]]:
    """Every edit made to the spec's launcher: (verbatim text, replacement)."""
    return [
        ('RESULTS = Path("/scratch/alice/sweep/results")', f"RESULTS = Path({results!r})"),
        (
            '["python", "train.py"],',
            # The direct launcher (no apptainer/image) runs args[0] under env -i, with no PATH
            # to search: it needs an absolute args[0], here the cluster's Python.
            f'["{INNER_PYTHON}", "train.py"],  # absolute: the direct launcher needs it',
        ),
        ("for seed in range(3)", "for seed in range(1)  # 3 Tasks instead of 9, for time"),
    ]


def adapted_launcher(results: str) -> str:
    text = (QUICKSTART / "launcher.txt").read_text()
    for verbatim, replacement in adaptations(results):
        assert text.count(verbatim) == 1, verbatim
        text = text.replace(verbatim, replacement)
    return text


def test_quickstart_runs_as_written(lane: Lane) -> None:
    work = Path(lane.work_root)
    lane.put(work / "train.py", (QUICKSTART / "train.txt").read_text())
    lane.put(work / "mylab.py", (QUICKSTART / "mylab.py").read_text())
    lane.put(lane.launch / "launcher.py", adapted_launcher(lane.results))
    lane.put(lane.launch / "held.py", HELD)
    keys = [f"lr-{lr}-seed-0" for lr in (1e-3, 3e-4, 1e-4)]

    first = lane.run([lane.python, "launcher.py"], timeout=180)
    assert first.returncode == 0, first.stderr
    assert first.stdout == "3 selected, 0 held\n"

    def all_succeeded(document: dict[str, object]) -> bool:
        tasks = document["tasks"]
        assert isinstance(tasks, list)
        assert not {t["execution"] for t in tasks} & {"FAILED", "LOST", "STOPPED"}, tasks
        return all(t["execution"] == "SUCCEEDED" for t in tasks)

    done = lane.wait_for("every Quickstart Task to succeed", all_succeeded, seconds=180)
    assert [t["key"] for t in done["tasks"]] == keys
    assert {t["exit_code"] for t in done["tasks"]} == {0}
    allocations = {a["allocation_id"] for a in done["attempts"]}
    assert len(allocations) == 2  # three 1-CPU Tasks, at most two per allocation

    results = Path(lane.results)
    for lr, key in zip((1e-3, 3e-4, 1e-4), keys, strict=True):
        published = results / key
        assert sorted(os.listdir(published)) == ["metrics.json", "model.pt"]
        model = published / "model.pt"
        assert stat.S_ISREG(model.lstat().st_mode)
        checkpoint = json.loads(model.read_text())
        assert checkpoint["state"]["step_count"] == 6
        metrics = json.loads((published / "metrics.json").read_text())
        assert metrics["config"] == {"lr": lr, "seed": 0}
        assert metrics["steps"] == 6
        assert metrics["loss"] == checkpoint["state"]["losses"][-1]
        assert metrics["loss"] < metrics["first_loss"]
    # publish() removed each Task's private work once its result was committed.
    assert not [name for name in os.listdir(results) if name.startswith(WORKSPACE_PREFIX)]

    again = lane.run([lane.python, "launcher.py"], timeout=120)
    assert again.returncode == 0, again.stderr
    assert again.stdout == "0 selected, 3 held\n"
    held = lane.run([lane.python, "held.py", lane.results], timeout=120)
    assert held.returncode == 0, held.stderr
    assert json.loads(held.stdout) == {
        "selected": [],
        "held": [[key, "VALID"] for key in keys],
        "allocations": 0,
    }
    # Step 4's watching commands, as written.
    table = lane.ok("status", "state").stdout
    assert "3 Tasks: 3 SUCCEEDED" in table, table
    lane.ok("logs", "state", "--task", keys[0], "--output", f"{keys[0]}.log")
    assert stat.S_IMODE((lane.launch / f"{keys[0]}.log").stat().st_mode) == 0o600
    retry = lane.ok("plan", "state", "--retry-failed", "--output", "retry.json").stdout
    assert "selected: 0 Tasks in 0 allocations" in retry, retry
    after = lane.status()
    assert {a["allocation_id"] for a in after["attempts"]} == allocations
    assert [t["execution"] for t in after["tasks"]] == ["SUCCEEDED"] * 3
    for key in keys:
        assert len(list(results.glob(f"{key}*"))) == 1
