"""The rootless demo (``demo/run`` without root, or ``--fake``): the same 3-Task sweep through
Servatus' own commands against FakeScheduler, its workers run here, their results published."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

DEMO = Path(__file__).resolve().parents[2] / "demo" / "fake_sweep.py"


def test_the_rootless_demo_runs_every_task_once_and_publishes_each_result(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(DEMO)], cwd=tmp_path, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    final = done.stdout.split("$ servatus status state")[-1]
    assert "3 Tasks: 3 SUCCEEDED" in final, done.stdout
    demo = tmp_path / "servatus-demo"
    keys = [json.loads(line)["key"] for line in (demo / "tasks.jsonl").read_text().splitlines()]
    for key in keys:
        published = demo / "work" / "results" / key
        assert sorted(item.name for item in published.iterdir()) == ["metrics.json", "model.pt"]
        assert json.loads((published / "metrics.json").read_text())["steps"] == 12
    assert done.stdout.count("$ servatus submit") == 1
    # A second run refuses to reuse the campaign, in one line.
    again = subprocess.run(
        [sys.executable, str(DEMO)], cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    assert again.returncode == 1 and again.stderr.count("\n") == 1, again.stderr
    assert "exists from an earlier run" in again.stderr
