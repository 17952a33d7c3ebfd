"""Fixtures for publication tests: worker processes and real mounts that are always unmounted."""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from publish_helpers import is_root


def _unmount(path: Path, *, fuse: bool) -> None:
    for _ in range(50):
        argv = ["fusermount", "-u", str(path)] if fuse else ["umount", str(path)]
        if subprocess.run(argv, capture_output=True).returncode == 0:
            return
        time.sleep(0.1)
    subprocess.run(["umount", "-l", str(path)], capture_output=True)


@pytest.fixture
def bindfs(tmp_path: Path) -> Iterator[Path]:
    """A FUSE (bindfs) mount, where renameat2(RENAME_NOREPLACE) fails with EINVAL as on NFS."""
    if not (is_root() and shutil.which("bindfs") and Path("/dev/fuse").exists()):
        pytest.skip("bindfs and /dev/fuse are needed")
    source, mount = tmp_path / "bindfs-source", tmp_path / "bindfs"
    source.mkdir()
    mount.mkdir()
    subprocess.run(["bindfs", str(source), str(mount)], check=True)
    try:
        yield mount
    finally:
        _unmount(mount, fuse=True)


@pytest.fixture
def small_tmpfs(tmp_path: Path) -> Iterator[Path]:
    """A 4 MiB tmpfs with 64 inodes, to run out of space and of inodes for real."""
    if not is_root():
        pytest.skip("mounting needs root")
    mount = tmp_path / "tmpfs"
    mount.mkdir()
    subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=4m,nr_inodes=64,mode=755", "tmpfs", str(mount)],
        check=True,
    )
    try:
        yield mount
    finally:
        _unmount(mount, fuse=False)


@pytest.fixture
def other_tmpfs(tmp_path: Path) -> Iterator[Path]:
    """A second filesystem, for cross-filesystem refusals."""
    if not is_root():
        pytest.skip("mounting needs root")
    mount = tmp_path / "other"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mount)], check=True)
    try:
        yield mount
    finally:
        _unmount(mount, fuse=False)
