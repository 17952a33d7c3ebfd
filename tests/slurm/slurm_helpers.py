"""Helpers for the Slurm plugin's tests: Targets, script specs, a tree with a fake ``srun``.

A plain module rather than ``conftest.py``: ``tests/conftest.py`` already owns that name.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

import attrs

from servatus.config import Target
from servatus.direct import DirectLauncher
from servatus.script import ScriptSpec, ScriptStep
from servatus_slurm.markers import allocation_log_name
from testkit import make_target

HERE = Path(__file__).resolve().parent
PYTHON = "/usr/bin/python3"
STEP_PROGRAM = HERE / "step_program.py"
ALLOCATION = "0123456789abcdef01234567"
INHERIT = ("SERVATUS_JOB_ID", "SERVATUS_JOB_END_TIME")


def direct_step(
    target: Target,
    slot: int,
    args: Sequence[str],
    *,
    stdin: bytes = b"",
    env: Mapping[str, str] | None = None,
    inherit: Sequence[str] = INHERIT,
) -> ScriptStep:
    """A step shaped by the real direct launcher, as the engine would shape it."""
    command = DirectLauncher().command(target, args, dict(env or {}), inherit=inherit, gpus=0)
    return ScriptStep(slot=slot, task_key=f"task-{slot}", command=command, stdin=stdin)


def make_spec(target: Target, steps: Sequence[ScriptStep], **changes: object) -> ScriptSpec:
    spec = ScriptSpec(
        allocation_id=ALLOCATION,
        target=target,
        cpus=1,
        memory_mib=100,
        gpus=0,
        time_limit=600,
        signal_before_end=None,
        steps=tuple(steps),
        inherit=INHERIT,
    )
    return attrs.evolve(spec, **changes)


@attrs.frozen
class FakeCluster:
    """A temp tree holding a fake ``srun`` in ``bin``, plus ``work``, ``logs`` and ``out``."""

    root: Path

    @property
    def target(self) -> Target:
        return make_target(self.root)

    @property
    def out(self) -> Path:
        return self.root / "out"

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    def step_args(self, name: str, mode: str, *extra: str) -> list[str]:
        return [PYTHON, str(STEP_PROGRAM), str(self.out), name, mode, *extra]

    def start(
        self,
        script: str,
        *,
        shell: Sequence[str] = ("dash",),
        job: int = 4242,
        end_time: int = 1900000000,
        env: Mapping[str, str] | None = None,
    ) -> subprocess.Popen[bytes]:
        path = self.root / "job.sh"
        path.write_text(script)
        env = {
            **job_env(self.root / "srun", job, end_time),
            "NOT_FOR_STEPS": "leak",
            **(env or {}),
        }
        return subprocess.Popen(
            [*shell, str(path)],
            env=env,
            cwd=self.root / "work",
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def job_env(record: Path, job: int = 4242, end_time: int = 1900000000) -> dict[str, str]:
    """What Slurm gives a batch script of job ``job``, and where the fake ``srun`` records."""
    return {
        "SLURM_JOB_ID": str(job),
        "SLURM_JOB_END_TIME": str(end_time),
        "SLURM_CPUS_ON_NODE": "2",
        "FAKE_SRUN_RECORD": str(record),
    }


def make_fake_cluster(tmp_path: Path) -> FakeCluster:
    for name in ("bin", "work", "logs", "out", "srun"):
        (tmp_path / name).mkdir()
    srun = tmp_path / "bin" / "srun"
    srun.write_text(f"#!{PYTHON}\n" + (HERE / "fake_srun.py").read_text())
    srun.chmod(0o755)
    # What a link that hands nothing on removes: each scancel's words, one line per call.
    scancel = tmp_path / "bin" / "scancel"
    scancel.write_text(f'#!/bin/sh\necho "$*" >>{tmp_path}/scancel.log\n')
    scancel.chmod(0o755)
    assert shutil.which("dash"), "dash is needed: it is /bin/sh on Debian clusters"
    os.chmod(tmp_path, 0o755)
    return FakeCluster(tmp_path)


def allocation_log(cluster: FakeCluster, job: int = 4242, allocation: str = ALLOCATION) -> str:
    """What the batch script said: its own log in ``log_root`` (Slurm's ``--output`` is
    ``/dev/null``: the script opens its log itself, ADR 0012); empty when it made none."""
    path = cluster.logs / allocation_log_name(allocation, job)
    return path.read_text(errors="replace") if path.exists() else ""
