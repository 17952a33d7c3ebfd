"""Shared test configuration: the real-cluster fixture (``slurm_cluster``) and a small tmpfs."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from testkit import tmpfs

pytest_plugins = ["cluster.fixture"]

# tests/smoke runs only against the installed wheels (`tox -e wheels`), never the source tree.
collect_ignore = ["smoke"]


@pytest.fixture
def small_tmpfs(tmp_path: Path) -> Iterator[Path]:
    """A 4 MiB tmpfs with 64 inodes, to run out of space and of inodes for real."""
    with tmpfs(tmp_path / "tmpfs", "size=4m,nr_inodes=64,mode=755") as mount:
        yield mount
