"""A ``log_root`` removed on the cluster (a scratch purge) is a configuration error, in one line,
for every command that lists it: asking again cannot bring it back (issue #30)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

from fake_bin import make_fake_bin


def servatus(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "servatus", *args], capture_output=True, text=True, timeout=120
    )


def test_status_plan_and_cancel_say_log_root_is_gone(tmp_path: Path) -> None:
    config, logs = make_fake_bin(tmp_path)
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(json.dumps({"key": "k0", "args": ["/bin/true"]}) + "\n")
    state = tmp_path / "state"
    assert servatus("ensure", str(state), str(tasks)).returncode == 0
    plan = tmp_path / "plan.json"
    assert (
        servatus("plan", str(state), "--config", str(config), "--output", str(plan)).returncode == 0
    )
    assert servatus("submit", str(state), str(plan)).returncode == 0
    shutil.rmtree(logs)
    journal = sorted(p.read_bytes() for p in state.iterdir())
    retry = ["plan", str(state), "--config", str(config), "--retry-failed"]
    for args in (["status", str(state)], retry, ["cancel", str(state), "--task", "k0"]):
        done = servatus(*args)
        assert done.returncode == 1, (args, done.stderr)
        assert done.stderr.count("\n") == 1, done.stderr
        assert f"log_root {logs} is not a directory on the cluster" in done.stderr
    assert sorted(p.read_bytes() for p in state.iterdir()) == journal  # nothing recorded
