"""A slurm_bin whose sbatch cannot be executed, or that is a file, is named in one line with
exit 1, through the real program (``python -m servatus``) on the local transport (issue #30)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from fake_bin import make_fake_bin


def servatus(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "servatus", *args],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def planned(root: Path) -> Path:
    config, _ = make_fake_bin(root)
    (root / "tasks.jsonl").write_text(json.dumps({"key": "a", "args": ["/bin/true"]}) + "\n")
    assert servatus(root, "ensure", "st", "tasks.jsonl").returncode == 0
    done = servatus(root, "plan", "st", "--config", str(config), "--output", "plan.json")
    assert done.returncode == 0, done.stderr
    return config


def test_an_sbatch_that_cannot_be_executed_is_named(tmp_path: Path) -> None:
    config = planned(tmp_path)
    sbatch = tmp_path / "bin" / "sbatch"
    sbatch.write_text("echo no shebang\n")  # executable, but no #! line: ENOEXEC
    done = servatus(tmp_path, "submit", "st", "plan.json")
    assert done.returncode == 1, done.stderr
    assert done.stderr.count("\n") == 1
    assert f"{sbatch}: cannot execute: not a program" in done.stderr
    assert "cannot write the output" not in done.stderr
    done = servatus(tmp_path, "doctor", "--config", str(config), "--json")
    checks = {c["name"]: c for c in json.loads(done.stdout)["checks"]}
    assert done.returncode == 1
    assert f"{sbatch}: cannot execute" in checks["slurm version"]["detail"]


def test_a_slurm_bin_that_is_a_file_is_named(tmp_path: Path) -> None:
    config = planned(tmp_path)
    bindir = tmp_path / "bin"
    bindir.rename(tmp_path / "bin.d")
    bindir.write_text("not a directory\n")
    done = servatus(tmp_path, "submit", "st", "plan.json")
    assert done.returncode == 1, done.stderr
    assert done.stderr.count("\n") == 1
    assert f"{bindir}/sbatch: cannot execute: {bindir} is not a directory" in done.stderr
    assert "campaign" not in done.stderr
    done = servatus(tmp_path, "doctor", "--config", str(config))
    assert done.returncode == 1
    assert f"{bindir}/squeue: cannot execute: {bindir} is not a directory" in done.stdout
