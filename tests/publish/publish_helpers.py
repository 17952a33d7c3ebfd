"""Helpers shared by the publication tests (a module of its own so tests can import it)."""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
WORKER = HERE / "publish_worker.py"
PYTHON = sys.executable


def python(*argv: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """Run a fresh interpreter with ``argv`` and capture its output."""
    return subprocess.run(
        [PYTHON, *argv], cwd=cwd, capture_output=True, text=True, timeout=300, check=False
    )


def worker(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``publish_worker.py`` with ``args``; its last stdout line is the outcome."""
    return python(str(WORKER), *args, cwd=cwd)


def worker_argv(*args: str) -> list[str]:
    return [PYTHON, str(WORKER), *args]


def make_tree(root: Path, files: int, *, per_dir: int = 100) -> Path:
    """A source tree of ``files`` small files, ``per_dir`` to a directory."""
    for index in range(files):
        sub = root / f"d{index // per_dir:03d}"
        if index % per_dir == 0:
            sub.mkdir(parents=True)
        (sub / f"f{index:05d}.txt").write_text(f"file {index}\n")
    return root


def tree_listing(root: Path) -> dict[str, str]:
    """Every regular file under ``root`` with its content, by relative path."""
    return {
        str(path.relative_to(root)): path.read_text()
        for path in sorted(root.rglob("*"))
        if path.is_file()
    }


def leftovers(directory: Path) -> list[str]:
    """Hidden Servatus entries left in ``directory`` (stages and private work)."""
    return sorted(p.name for p in directory.iterdir() if p.name.startswith(".servatus"))


def renameat2_noreplace_errno(directory: Path) -> int:
    """What the kernel answers RENAME_NOREPLACE with in ``directory`` (0: it works)."""
    libc = ctypes.CDLL(None, use_errno=True)
    (directory / "probe-a").write_text("a")
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        result = libc.renameat2(fd, b"probe-a", fd, b"probe-b", 1)
        code = 0 if result == 0 else ctypes.get_errno()
    finally:
        os.close(fd)
    for name in ("probe-a", "probe-b"):
        (directory / name).unlink(missing_ok=True)
    return code


PROCESSES = 8


def race(argvs: list[list[str]], go: Path) -> list[str]:
    """Start every process, release them together, and return each one's outcome line."""
    processes = [
        subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for argv in argvs
    ]
    time.sleep(0.5)  # let every interpreter reach the barrier
    go.touch()
    outcomes = []
    for process in processes:
        out, err = process.communicate(timeout=120)
        assert process.returncode == 0, err
        outcomes.append(out.split()[-1])
    return outcomes
