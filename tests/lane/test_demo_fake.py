"""The rootless demo (``demo/run`` without root, or ``--fake``): the same 3-Task sweep through
Servatus' own commands against FakeScheduler, its workers run here, their results published."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

DEMO = Path(__file__).resolve().parents[2] / "demo" / "fake_sweep.py"
WORKER = DEMO.with_name("train.py")


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
    # What the demo says to run next works, and reads the same outcomes.
    (next_command,) = re.findall(r"^demo: go on with: (.*)$", done.stdout, re.MULTILINE)
    after = subprocess.run(
        ["sh", "-c", next_command], cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    assert after.returncode == 0, after.stderr
    assert after.stdout.splitlines()[-1] == "3 Tasks: 3 SUCCEEDED", after.stdout
    # ... and so does the command it gives for a Task's output, its step log.
    (logs_command,) = re.findall(r"^demo: and a Task's output: (.*)$", done.stdout, re.MULTILINE)
    output = subprocess.run(
        ["sh", "-c", logs_command], cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    assert output.returncode == 0, output.stderr
    assert output.stdout.splitlines()[0] == "starting at step 0 of 12", output.stdout
    assert output.stdout.splitlines()[-1] == f"published results/{keys[0]}", output.stdout
    # A second run refuses to reuse the campaign, in one line.
    again = subprocess.run(
        [sys.executable, str(DEMO)], cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    assert again.returncode == 1 and again.stderr.count("\n") == 1, again.stderr
    assert "exists from an earlier run" in again.stderr


def test_the_demo_worker_yields_on_the_warning_and_resumes(tmp_path: Path) -> None:
    """On SIGUSR1 it checkpoints and exits 75 (YIELD_EXIT), as docs/worker.md teaches; the next
    attempt resumes from the checkpoint and publishes."""
    settings = b'{"lr": 0.1, "steps": 400, "seconds_per_step": 0.01}'
    env = {"SERVATUS_TASK_KEY": "lr-0.1", "PYTHONPATH": ":".join(sys.path)}
    (tmp_path / "results").mkdir()

    def start() -> subprocess.Popen[bytes]:
        worker = subprocess.Popen(
            [sys.executable, str(WORKER)], cwd=tmp_path, stdin=subprocess.PIPE, env=env
        )
        assert worker.stdin is not None
        worker.stdin.write(settings)
        worker.stdin.close()
        return worker

    warned = start()
    checkpoint = tmp_path / "results" / ".servatus-workspace.lr-0.1" / "work" / "checkpoint.pt"
    deadline = time.monotonic() + 30
    while not checkpoint.exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    warned.send_signal(signal.SIGUSR1)
    assert warned.wait(timeout=30) == 75
    assert not (tmp_path / "results" / "lr-0.1").exists()
    stopped_at = json.loads(checkpoint.read_text())["step"]
    assert 5 <= stopped_at < 400
    resumed = start()
    assert resumed.wait(timeout=60) == 0
    assert (
        json.loads((tmp_path / "results" / "lr-0.1" / "metrics.json").read_text())["steps"] == 400
    )
