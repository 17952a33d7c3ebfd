"""A forged end marker never settles (issue #30, attack 3), with two real Unix users and real
``servatus`` processes on the local transport.

The victim's campaign writes its markers to the project's ``log_root`` (root's, group-writable,
no sticky bit). Its one Task failed with exit 3. Mallory, who sees the allocation's id and job
number in ``squeue``, plants an empty ``end.0.0`` under them, and another under a job number of
her choosing. ``status`` must read FAILED 3 and name her files; once settled, the outcome stays
FAILED 3 after she deletes them, and ``plan --retry-failed`` selects the Task.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from fake_bin import make_fake_bin, submitted

from userkit import User, owned, project_directory, python_code

RUN_SERVATUS = "import runpy; runpy.run_module('servatus', run_name='__main__', alter_sys=True)\n"


class Scene:
    def __init__(self, base: Path, victim: User, mallory: User) -> None:
        self.victim, self.mallory = victim, mallory
        home = owned(base / "victim", victim, 0o755)
        self.config, own_logs = make_fake_bin(home)
        self.logs = project_directory(base / "logs", 0o770)
        for path in (self.config, home / "bin" / "sbatch"):
            path.write_text(path.read_text().replace(str(own_logs), str(self.logs)))
        (home / "tasks.jsonl").write_text(json.dumps({"key": "k0", "args": ["/bin/true"]}) + "\n")
        for path in [home, *home.rglob("*")]:
            os.chown(path, victim.uid, victim.gid)
        self.home, self.state = home, home / "state"

    def servatus(self, *args: str) -> subprocess.CompletedProcess[str]:
        done = self.victim.run(python_code(self.victim, RUN_SERVATUS, *args), cwd=self.home)
        return subprocess.CompletedProcess(
            done.args, done.returncode, done.stdout.decode(), done.stderr.decode()
        )

    def ok(self, *args: str) -> str:
        done = self.servatus(*args)
        assert done.returncode == 0, done.stderr
        return done.stdout

    def status(self) -> tuple[dict[str, object], list[str]]:
        done = self.servatus("status", str(self.state), "--json")
        assert done.returncode == 0, done.stderr
        document = json.loads(done.stdout)
        task = document["tasks"][0]
        return {"execution": task["execution"], "exit_code": task["exit_code"]}, document[
            "warnings"
        ]


@pytest.fixture
def scene(shared: Path, users: tuple[User, User]) -> Scene:
    return Scene(shared, *users)


def test_a_forged_end_marker_never_turns_a_failure_into_a_success(scene: Scene) -> None:
    scene.ok("ensure", str(scene.state), str(scene.home / "tasks.jsonl"))
    plan = scene.home / "plan.json"
    scene.ok("plan", str(scene.state), "--config", str(scene.config), "--output", str(plan))
    scene.ok("submit", str(scene.state), str(plan))
    [(allocation, job)] = submitted(scene.home)
    # The job ended with exit 3 (the fake sbatch wrote 0: the victim's own file, renamed).
    prefix = f"servatus-{allocation}"
    done = scene.victim.sh(
        f"mv {scene.logs}/{prefix}.{job}.end.0.0 {scene.logs}/{prefix}.{job}.end.0.3"
    )
    assert done.returncode == 0
    forged = [f"{prefix}.{job}.end.0.0", f"{prefix}.{job + 1}.end.0.0"]
    for name in forged:
        assert scene.mallory.sh(f": >{scene.logs}/{name}").returncode == 0
    task, warnings = scene.status()
    assert task == {"execution": "FAILED", "exit_code": 3}
    for name in forged:
        assert any(name in line and f"uid {scene.mallory.uid}" in line for line in warnings)
    # Settled by that status (Slurm lists nothing): her files gone, the outcome stays.
    for name in forged:
        (scene.logs / name).unlink()
    task, warnings = scene.status()
    assert task == {"execution": "FAILED", "exit_code": 3}
    assert warnings == []
    retry = scene.home / "retry.json"
    out = scene.ok(
        "plan",
        str(scene.state),
        "--config",
        str(scene.config),
        "--retry-failed",
        "--output",
        str(retry),
    )
    assert "selected: 1 Task in 1 allocation" in out


def test_logs_never_prints_what_her_planted_step_log_points_to(scene: Scene) -> None:
    """Her link at the step log's name, to a file of the victim's: ``logs`` refuses it in one
    line and prints nothing of that file (a tail by name followed it)."""
    scene.ok("ensure", str(scene.state), str(scene.home / "tasks.jsonl"))
    plan = scene.home / "plan.json"
    scene.ok("plan", str(scene.state), "--config", str(scene.config), "--output", str(plan))
    scene.ok("submit", str(scene.state), str(plan))
    [(allocation, job)] = submitted(scene.home)
    private = scene.home / "private.txt"
    private.write_text("the victim's own secret\n")
    os.chown(private, scene.victim.uid, scene.victim.gid)
    private.chmod(0o600)
    link = scene.logs / f"servatus-{allocation}-{job}.0.out"
    assert scene.mallory.sh(f"ln -s {private} {link}").returncode == 0
    done = scene.servatus("logs", str(scene.state), "--task", "k0")
    assert done.returncode == 1, done
    assert "secret" not in done.stdout
    assert done.stderr.count("\n") == 1 and "not a file of this user's" in done.stderr
