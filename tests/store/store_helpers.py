"""Helpers for the store tests: Task files, and the real CLI in a subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path

from servatus.tasks import Task

SPEC_JSONL = (
    '{"key": "lr-1e-3", "args": ["python", "train.py"], "stdin_file": "configs/lr-1e-3.json"}\n'
    '{"key": "lr-3e-4", "args": ["python", "train.py"], "stdin_file": "configs/lr-3e-4.json",'
    ' "env": {"WANDB_MODE": "offline"}}\n'
)


def task_line(task: Task) -> str:
    """A JSONL line for a Task without stdin (stdin needs a file)."""
    document: dict[str, object] = {"key": task.key, "args": list(task.args)}
    if task.env:
        document["env"] = dict(task.env)
    return json.dumps(document) + "\n"


def write_jsonl(path: Path, tasks: Iterable[Task]) -> Path:
    path.write_text("".join(task_line(task) for task in tasks))
    return path


def make_tasks(prefix: str, count: int, start: int = 0) -> list[Task]:
    return [Task(f"{prefix}-{i}", ["python", "train.py", str(i)]) for i in range(start, count)]


def run_servatus(
    *args: str, cwd: Path | None = None, umask: int | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """The real ``servatus`` command in a fresh process."""

    def before() -> None:
        if umask is not None:
            os.umask(umask)

    return subprocess.run(
        [sys.executable, "-m", "servatus", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        preexec_fn=before if umask is not None else None,
    )
