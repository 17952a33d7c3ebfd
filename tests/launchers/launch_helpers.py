"""Helpers for the launcher tests: Targets, the stand-in image, and running steps for real.

Steps run two ways, both as real processes: :func:`run_step` starts a step's argv with the
environment ``srun --export=NAMES`` would give it, and :func:`run_allocation` renders the whole
batch script with the installed Slurm plugin and runs it under ``dash`` with the fake ``srun``
of ``tests/slurm``. :func:`sweep` drives a whole campaign against a real cluster, in this process
or, run as a script, in another one. A plain module, not ``conftest.py``: ``tests/conftest.py``
owns that name.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs

from servatus.campaign import Campaign
from servatus.config import Profile, Resources, Target
from servatus.engine.plan import Allocation
from servatus.engine.status_values import Execution
from servatus.launcher import Launcher, StepCommand
from servatus.operations.submission import RUNTIME_VARIABLES, script_spec
from servatus.plugins import hooks
from servatus.tasks import Task, read_jsonl
from testkit import make_target

HERE = Path(__file__).resolve().parent
PYTHON = "/usr/bin/python3"
PROBE = HERE / "probe.py"
STAND_IN = HERE / "stand_in_apptainer.py"
FAKE_SRUN = HERE.parent / "slurm" / "fake_srun.py"
ALLOCATION = "0123456789abcdef01234567"
JOB = 4242
END_TIME = "1900000000"
SLURM = {"SLURM_JOB_ID": str(JOB), "SLURM_STEP_ID": "0", "SLURM_CPUS_ON_NODE": "2"}
"""What Slurm adds to every step, whatever ``--export`` says."""


def install_stand_in(path: Path) -> Path:
    """Put the stand-in ``apptainer`` at ``path``, executable by everyone."""
    path.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(STAND_IN, path)
    path.chmod(0o755)
    return path


def make_image(path: Path) -> Path:
    """A file the stand-in accepts as a SIF image."""
    from stand_in_apptainer import sif_header

    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(sif_header() + b"stand-in image\n")
    path.chmod(0o644)
    return path


def srun_environment(
    command: StepCommand,
    *,
    inherit: Mapping[str, str] | None = None,
    extra: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The environment a step starts with under ``srun --export=NAMES``: the exported and
    inherited names, plus what Slurm adds (``SLURM_*``, and ``extra`` such as a step-local
    ``CUDA_VISIBLE_DEVICES``)."""
    values = {"SERVATUS_JOB_ID": str(JOB), "SERVATUS_JOB_END_TIME": END_TIME}
    return {
        **SLURM,
        **(values if inherit is None else inherit),
        **dict(command.exported),
        **(extra or {}),
    }


def run_step(
    command: StepCommand, *, cwd: Path, env: Mapping[str, str], timeout: float = 30
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        list(command.argv),
        cwd=cwd,
        env=dict(env),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def probe_args(out: Path, code: int = 0, *paths: str, python: str = PYTHON) -> list[str]:
    """The probe's command line, with a copy of the probe beside ``out``: a sandbox sees that
    directory, while the checkout may sit where it does not (under a private /tmp, say)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    probe = out.parent / PROBE.name
    if not probe.exists():
        shutil.copyfile(PROBE, probe)
    return [python, str(probe), str(out), str(code), *paths]


def read_probe(out: Path) -> dict[str, Any]:
    record: dict[str, Any] = json.loads(out.read_text())
    return record


@attrs.frozen
class Tree:
    """A temp tree: ``bin`` (the fake ``srun``), ``work``, ``logs`` and ``out``."""

    root: Path

    @property
    def work(self) -> Path:
        return self.root / "work"

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    @property
    def out(self) -> Path:
        return self.root / "out"

    def target(self, **changes: Any) -> Target:
        return make_target(self.root, **changes)


def make_tree(root: Path) -> Tree:
    for name in ("bin", "work", "logs", "out"):
        (root / name).mkdir(parents=True, exist_ok=True)
    srun = root / "bin" / "srun"
    srun.write_text(f"#!{PYTHON}\n" + FAKE_SRUN.read_text())
    srun.chmod(0o755)
    assert shutil.which("dash"), "dash is needed: it is /bin/sh on Debian clusters"
    return Tree(root)


def profile_for(target: Target, *, gpus: int = 0) -> Profile:
    return Profile("test", target, Resources(cpus=1, memory_mib=100, time_limit=600, gpus=gpus))


def render_allocation(profile: Profile, tasks: Sequence[Task], launcher: Launcher) -> str:
    allocation = Allocation(ALLOCATION, tuple(task.key for task in tasks))
    spec = script_spec(profile, allocation, {task.key: task for task in tasks}, launcher)
    assert spec.inherit == RUNTIME_VARIABLES
    return hooks().batch_script(spec)


def run_allocation(
    tree: Tree, profile: Profile, tasks: Sequence[Task], launcher: Launcher, timeout: float = 60
) -> dict[int, int]:
    """Run the rendered batch script as Slurm would start it; return each slot's exit code,
    read from its ``end`` run marker."""
    script = tree.root / "job.sh"
    script.write_text(render_allocation(profile, tasks, launcher))
    env = {
        "SLURM_JOB_ID": str(JOB),
        "SLURM_JOB_END_TIME": END_TIME,
        "SLURM_CPUS_ON_NODE": "2",
        "NOT_FOR_STEPS": "leak",
    }
    done = subprocess.run(
        ["dash", str(script)],
        env=env,
        cwd=tree.work,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    prefix = f"servatus-{ALLOCATION}.{JOB}.end."
    ends = {}
    for entry in os.listdir(tree.logs):
        if entry.startswith(prefix):
            slot, code = entry[len(prefix) :].split(".")
            ends[int(slot)] = int(code)
    return ends


def step_log(tree: Tree, slot: int) -> str:
    logs = [p for p in tree.logs.iterdir() if p.name.endswith(f".{slot}.out")]
    return "".join(p.read_text() for p in logs)


def sweep(
    config: Path,
    state: Path,
    tasks: Sequence[Task],
    *,
    profile: str | None = None,
    seconds: float = 240,
) -> dict[str, tuple[str, int | None, int | None]]:
    """ensure, plan, submit, then status until quiescent: each Task's (state, exit, job)."""
    campaign = Campaign.ensure(state, tasks)
    plan = campaign.plan(Profile.load(config, name=profile))
    assert len(plan.allocations) == 1
    submitted = campaign.submit(plan)
    assert len(submitted.receipts) == 1
    deadline = time.monotonic() + seconds
    settled = {Execution.SUCCEEDED, Execution.FAILED, Execution.STOPPED, Execution.LOST}
    while True:
        report = campaign.status()
        if report.quiescent and all(task.execution in settled for task in report.tasks):
            break
        assert time.monotonic() < deadline, f"not settled: {report.counts} {report.warnings}"
        time.sleep(2)
    return {t.key: (t.execution.value, t.exit_code, t.job) for t in report.tasks}


if __name__ == "__main__":
    # python launch_helpers.py CONFIG STATE TASKS.jsonl: sweep() in a process of its own, for a
    # plugin installed only on that process's PYTHONPATH. Prints {key: [state, exit, job]}.
    config, state, tasks = sys.argv[1:]
    print(json.dumps(sweep(Path(config), Path(state), read_jsonl(tasks))))
