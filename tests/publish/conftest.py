"""Fixtures for publication tests: real mounts that are always unmounted."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from testkit import is_root, tmpfs, unmount


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
        unmount(mount, fuse=True)


@pytest.fixture
def other_tmpfs(tmp_path: Path) -> Iterator[Path]:
    """A second filesystem, for cross-filesystem refusals."""
    with tmpfs(tmp_path / "other", "size=4m") as mount:
        yield mount
