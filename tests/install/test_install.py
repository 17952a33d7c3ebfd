"""Run by `tox -e install`, never the source tree's own environment: the README's install command
from a copy of this clone into a fresh virtual environment, and the worker wheels alone into
another, running the guide's worker. The commands are read from the README, so it cannot drift."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
README = (REPO / "README.md").read_text()
# Not part of a fresh clone: environments, caches and what earlier runs left.
NOT_CLONED = shutil.ignore_patterns(
    ".git", ".venv", ".tox", "__pycache__", "*.egg-info", "dist", "servatus-demo", "_build"
)


def install_blocks() -> list[list[str]]:
    """The command lines of each ``sh`` block in the README's Install section."""
    section = README.split("\n## Install\n", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"^```sh\n(.*?)^```", section, re.MULTILINE | re.DOTALL)
    return [[line for line in block.splitlines() if line.strip()] for block in blocks]


def five_minutes() -> tuple[str, str, list[str]]:
    """The README's SERVATUS.toml, tasks.jsonl and ``servatus`` commands, in order."""
    blocks = re.findall(r"^```(\w+)\n(.*?)^```", README, re.MULTILINE | re.DOTALL)
    ((config,), (tasks,)) = ([b for lang, b in blocks if lang == kind] for kind in ("toml", "json"))
    lines = (
        line.split("#", 1)[0].strip()
        for lang, b in blocks
        if lang == "sh"
        for line in b.splitlines()
    )
    return config, tasks, [line for line in lines if line.startswith("servatus ")]


# Runs each command line given through the installed CLI against one FakeScheduler.
AGAINST_THE_FAKE = """
import shlex, sys
from servatus.cli import main
from servatus.testing import FakeScheduler
fake = FakeScheduler()
for line in sys.argv[1:]:
    print("$", line, flush=True)
    if main(shlex.split(line)[1:], connect=fake):
        raise SystemExit(f"{line}: failed")
"""


def worker_source() -> str:
    page = (REPO / "docs" / "worker.md").read_text()
    (source,) = re.findall(
        r"^```\{code-block\} python\n:caption: train\.py\n(.*?)^```", page, re.MULTILINE | re.DOTALL
    )
    return source


@pytest.fixture(scope="module")
def clone(tmp_path_factory: pytest.TempPathFactory) -> Path:
    target = tmp_path_factory.mktemp("clone") / "servatus"
    shutil.copytree(REPO, target, ignore=NOT_CLONED)
    return target


def fresh_venv(path: Path) -> dict[str, str]:
    """A new virtual environment, and the variables of a shell with it activated."""
    subprocess.run([sys.executable, "-m", "venv", str(path)], check=True)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    return {**env, "VIRTUAL_ENV": str(path), "PATH": f"{path / 'bin'}{os.pathsep}{env['PATH']}"}


def sh(line: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        ["sh", "-c", line], cwd=cwd, env=env, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, f"{line}\n{done.stdout}{done.stderr}"
    return done


def test_the_readme_install_command_installs_every_part(clone: Path, tmp_path: Path) -> None:
    (command,), _ = install_blocks()
    env = fresh_venv(tmp_path / "venv")
    sh(command, clone, env)
    elsewhere = tmp_path / "elsewhere"  # not the clone, whose directories would import too
    elsewhere.mkdir()
    assert sh("servatus --version", elsewhere, env).stdout == "servatus 0.14.1\n"
    plugins = json.loads(sh("servatus plugins --json", elsewhere, env).stdout)
    assert {p["distribution"]: p["version"] for p in plugins["plugins"]} == {
        "servatus-core": "0.14.1",
        "servatus-publish": "0.14.1",
        "servatus-slurm": "0.14.1",
        "servatus-apptainer": "0.14.1",
    }
    assert (plugins["transports"], plugins["launchers"]) == (
        ["local", "ssh"],
        ["apptainer", "direct"],
    )
    where = sh("python3 -c 'import servatus_slurm; print(servatus_slurm.__file__)'", elsewhere, env)
    assert str(tmp_path / "venv") in where.stdout  # installed, not the clone's source

    # The README's five minutes, through the installed package, against FakeScheduler.
    config, tasks, commands = five_minutes()
    (elsewhere / "SERVATUS.toml").write_text(config)
    (elsewhere / "tasks.jsonl").write_text(tasks)
    done = subprocess.run(
        ["python3", "-c", AGAINST_THE_FAKE, *commands],
        cwd=elsewhere,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert len(commands) >= 5 and "Tasks: 2 QUEUED" in done.stdout, done.stdout


def test_the_worker_wheels_alone_run_the_guide_worker(clone: Path, tmp_path: Path) -> None:
    _, (build, install) = install_blocks()
    sh(build, clone, fresh_venv(tmp_path / "build-venv"))
    image = tmp_path / "image"
    shutil.copytree(clone / "dist", image / "dist")
    env = fresh_venv(tmp_path / "worker-venv")
    sh(install, image, env)
    work_root = tmp_path / "work_root"
    (work_root / "results").mkdir(parents=True)
    (work_root / "train.py").write_text(worker_source())
    for absent in ("servatus_slurm", "servatus_apptainer"):
        missing = subprocess.run(
            ["python3", "-c", f"import {absent}"], cwd=work_root, env=env, capture_output=True
        )
        assert missing.returncode == 1 and b"ModuleNotFoundError" in missing.stderr, absent

    python = str(tmp_path / "worker-venv" / "bin" / "python")
    step_environment = {"SERVATUS_TASK_KEY": "lr-0.1", "SERVATUS_SLOT": "0"}
    settings = b'{"lr": 0.1, "seconds_per_step": 0.05, "steps": 20}'

    def start() -> subprocess.Popen[bytes]:
        worker = subprocess.Popen(
            [python, "train.py"],
            cwd=work_root,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=step_environment,
        )
        assert worker.stdin is not None
        worker.stdin.write(settings)
        worker.stdin.close()
        return worker

    warned = start()
    assert warned.stdout is not None
    assert warned.stdout.readline() == b"checkpoint at step 5\n"
    warned.send_signal(signal.SIGUSR1)
    assert warned.wait(timeout=30) == 75
    warned.stdout.close()
    resumed = start()
    assert resumed.stdout is not None
    output = resumed.stdout.read()
    resumed.stdout.close()
    assert resumed.wait(timeout=30) == 0
    assert output.startswith(b"resumed at step ") and output.endswith(b"published results/lr-0.1\n")
    metrics = json.loads((work_root / "results" / "lr-0.1" / "metrics.json").read_text())
    assert metrics["step"] == 20
