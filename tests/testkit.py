"""Helpers several test directories share (importable as ``testkit``: tests/ is on sys.path)."""

from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import attrs
import pytest

from servatus.cli import main
from servatus.config import Target
from servatus.engine.status_values import Report
from servatus.testing import FakeScheduler

CPU_PROFILE = """\
default_profile = "cpu"

[target]
slurm_bin = "/usr/bin"
work_root = "/scratch/alice/sweep"
log_root = "/scratch/alice/sweep/logs"
partitions = ["debug"]
max_tasks_per_allocation = 2
max_cpus_per_allocation = 2
max_memory_mib_per_allocation = 2000
max_time_limit = "01:00:00"

[profiles.cpu.resources]
cpus = 1
memory_mib = 500
time_limit = "00:05:00"
"""
"""A SERVATUS.toml for a small local CPU profile, for FakeScheduler tests of the lane."""


def run(
    args: list[str], fake: FakeScheduler, capsys: pytest.CaptureFixture[str]
) -> tuple[int, str, str]:
    """``servatus ARGS`` through ``main(connect=fake)``: its exit code and only its own output."""
    capsys.readouterr()
    code = main(args, connect=fake)
    out, err = capsys.readouterr()
    return code, out, err


def write_tasks(path: Path, count: int, **fields: object) -> str:
    """A Tasks file of ``count`` Tasks k0, k1, ... running /usr/bin/true, each with ``fields``."""
    path.write_text(
        "".join(
            json.dumps({"key": f"k{i}", "args": ["/usr/bin/true"], **fields}) + "\n"
            for i in range(count)
        )
    )
    return str(path)


def make_target(root: Path, **changes: Any) -> Target:
    """A small Target whose Slurm commands, work_root and log_root live under ``root``."""
    fields: dict[str, Any] = {
        "slurm_bin": str(root / "bin"),
        "work_root": str(root / "work"),
        "log_root": str(root / "logs"),
        "partitions": ("debug",),
        "max_tasks_per_allocation": 8,
        "max_cpus_per_allocation": 64,
        "max_memory_mib_per_allocation": 65536,
        "max_time_limit": 86400,
    }
    fields.update(changes)
    return Target(**fields)


def install_distribution(project: Path, target: Path) -> Path:
    """Build ``project`` with hatchling (no build isolation, so no network) and pip-install it
    into ``target``, a private directory to put on PYTHONPATH; returns ``target``."""
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "--target",
            str(target),
            str(project),
        ],
        check=True,
        capture_output=True,
    )
    return target


def unmount(path: Path, *, fuse: bool = False) -> None:
    """Unmount, retrying while the mount is busy, lazily as a last resort."""
    for _ in range(50):
        argv = ["fusermount", "-u", str(path)] if fuse else ["umount", str(path)]
        if subprocess.run(argv, capture_output=True).returncode == 0:
            return
        time.sleep(0.1)
    subprocess.run(["umount", "-l", str(path)], capture_output=True)


@contextmanager
def tmpfs(mount: Path, options: str) -> Iterator[Path]:
    """A real tmpfs at ``mount`` (made if missing) for the block, always unmounted after; the
    test is skipped unless it runs as root."""
    if not is_root():
        pytest.skip("mounting needs root")
    mount.mkdir(exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(mount)], check=True)
    try:
        yield mount
    finally:
        unmount(mount)


def fill_inodes(directory: Path) -> list[Path]:
    """Empty files in ``directory`` until its filesystem has no inode left (a small tmpfs): the
    files made, to remove when the shortage ends."""
    made = []
    for index in range(1000):
        path = directory / f"filler-{index}"
        try:
            path.touch()
        except OSError as exc:
            assert exc.errno == errno.ENOSPC
            return made
        made.append(path)
    raise AssertionError("the filesystem never ran out of inodes")


def count_calls(argv: list[str], syscalls: Sequence[str]) -> dict[str, int]:
    """How often each of ``syscalls`` runs in one undisturbed run of ``argv``, by ``strace -c``:
    the crash points to kill it at."""
    report = subprocess.run(
        ["strace", "-f", "-qq", "-c", "-e", f"trace={','.join(syscalls)}", *argv],
        capture_output=True,
        text=True,
        check=True,
    ).stderr
    counts = {}
    for line in report.splitlines():
        fields = line.split()
        if len(fields) >= 5 and fields[-1] in syscalls and fields[3].isdigit():
            counts[fields[-1]] = int(fields[3])
    return counts


def is_root() -> bool:
    return os.geteuid() == 0


DATA = Path(__file__).parent / "data"
"""Files written by earlier releases (``data/make_da44b63.py`` says how), read by upgrade tests."""


def owner_only_copy(source: Path, into: Path) -> Path:
    """A copy of committed campaign data with the modes servatus wrote: git keeps only the x bit."""
    shutil.copytree(source, into)
    for root, directories, files in os.walk(into):
        os.chmod(root, 0o700)
        for name in directories:
            os.chmod(Path(root, name), 0o700)
        for name in files:
            os.chmod(Path(root, name), 0o600)
    return into


def without_evidence_notes(report: Report) -> Report:
    """A report less its lines on evidence set aside (markers of another job than the one Slurm
    accepted, disagreeing ends): they are named while markers are read, and a settled
    allocation's are no longer read."""
    notes = ("; ignored", "the higher exit code counts", "more like it")
    kept = tuple(line for line in report.warnings if not any(note in line for note in notes))
    return attrs.evolve(report, warnings=kept)
