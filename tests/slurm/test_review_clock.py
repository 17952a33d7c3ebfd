"""A hostile review of the file-server clock (issue #12, "run time never mixes clocks").

The clock listing is real ``sh``, ``mktemp`` and GNU ``find`` here, as on a login node. Each test
failed on main before its fix, for the reason its name gives.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from servatus.cli import main
from servatus.errors import Unavailable
from servatus.transport import CommandResult
from servatus_slurm.evidence import SlurmEvidenceReader
from testkit import make_target


def clock_listing(log_root: Path) -> CommandResult:
    reader = SlurmEvidenceReader()
    argv = reader.marker_command(make_target(log_root.parent, log_root=str(log_root)))
    done = subprocess.run(argv, capture_output=True, timeout=30, check=False)
    return CommandResult(tuple(argv), done.returncode, done.stdout, done.stderr)


def test_a_symbolic_link_at_the_clock_files_name_is_not_the_clock(tmp_path: Path) -> None:
    log_root = tmp_path / "logs"
    log_root.mkdir()
    elsewhere = tmp_path / "elsewhere"
    clock = log_root / f"servatus-clock.{os.getuid()}"
    clock.symlink_to(elsewhere)
    os.utime(clock, (2_000_000_000, 2_000_000_000), follow_symlinks=False)  # 2033
    result = clock_listing(log_root)
    try:
        read = SlurmEvidenceReader().parse_clock(result)
    except Unavailable:
        read = None  # refusing the link is as good as reading the real time
    assert not elsewhere.exists(), "touch followed the link and created its target"
    assert read is None or abs(read - time.time()) < 60, f"the clock read {read}"


# -- cancel while log_root cannot be written ----------------------------------------------------

_SBATCH = """#!/bin/sh
case "$*" in *--version*) echo "slurm 24.11.5"; exit 0;; esac
name=$(grep -o 'job-name=servatus-[0-9a-f]*' | head -n 1 | cut -d= -f2)
echo "5000|$name|RUNNING" >> {root}/queue
echo 5000
"""
_SQUEUE = "#!/bin/sh\ncat {root}/queue\n"
_SCANCEL = '#!/bin/sh\necho "$*" >> {root}/scancel\n'


def _can_unshare() -> bool:
    if shutil.which("unshare") is None or os.geteuid() != 0:
        return False
    done = subprocess.run(["unshare", "-m", "true"], capture_output=True, check=False)
    return done.returncode == 0


@pytest.mark.skipif(not _can_unshare(), reason="needs root and `unshare -m` for a read-only mount")
def test_cancel_stops_a_running_job_while_log_root_is_read_only(tmp_path: Path) -> None:
    root = tmp_path
    for name in ("bin", "work", "logs"):
        (root / name).mkdir()
    (root / "queue").write_text("")
    for name, text in (("sbatch", _SBATCH), ("squeue", _SQUEUE), ("scancel", _SCANCEL)):
        path = root / "bin" / name
        path.write_text(text.format(root=root))
        path.chmod(0o755)
    config = root / "SERVATUS.toml"
    config.write_text(
        f'[target]\nslurm_bin = "{root}/bin"\nwork_root = "{root}/work"\n'
        f'log_root = "{root}/logs"\npartitions = ["debug"]\nmax_tasks_per_allocation = 1\n'
        "max_cpus_per_allocation = 2\nmax_memory_mib_per_allocation = 2000\n"
        'max_time_limit = "01:00:00"\n[profiles.cpu.resources]\ncpus = 1\nmemory_mib = 500\n'
        'time_limit = "00:05:00"\n'
    )
    tasks = root / "tasks.jsonl"
    tasks.write_text(json.dumps({"key": "k0", "args": ["/usr/bin/true"]}) + "\n")
    state, plan = str(root / "state"), str(root / "plan.json")
    assert main(["create", state, str(tasks)]) == 0
    assert main(["plan", state, "--config", str(config), "--output", plan]) == 0
    assert main(["submit", state, plan]) == 0  # the local transport runs the fakes above
    assert main(["status", state]) == 0  # and reads the clock while it can

    logs = root / "logs"
    script = (
        f'mount --bind "{logs}" "{logs}" && mount -o remount,ro,bind "{logs}" "{logs}" '
        f'&& exec "{sys.executable}" -m servatus cancel "{state}" --task k0'
    )
    done = subprocess.run(
        ["unshare", "-m", "sh", "-c", script], capture_output=True, text=True, timeout=60
    )
    # Before the fix: exit 75, "listing .../logs failed (exit 1): touch: cannot touch
    # '.../logs/servatus-clock.0': Read-only file system", and no scancel.
    assert (root / "scancel").exists(), done.stderr
    assert done.returncode == 0, done.stderr
