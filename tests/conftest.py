"""Shared test configuration: the real-cluster fixture (``slurm_cluster``), a small tmpfs, and two
real Unix users for the security tests."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from testkit import tmpfs
from userkit import User, shared_base, two_users

pytest_plugins = ["cluster.fixture"]

# tests/smoke runs only against the installed wheels (`tox -e wheels`), never the source tree;
# tests/install builds fresh environments of its own (`tox -e install`).
collect_ignore = ["smoke", "install"]


@pytest.fixture
def small_tmpfs(tmp_path: Path) -> Iterator[Path]:
    """A 4 MiB tmpfs with 64 inodes, to run out of space and of inodes for real."""
    with tmpfs(tmp_path / "tmpfs", "size=4m,nr_inodes=64,mode=755") as mount:
        yield mount


@pytest.fixture
def users() -> tuple[User, User]:
    """The victim and Mallory (``userkit``): real users, which only root can make. In CI, where
    the tests run as root, a test that needs them never skips."""
    if os.geteuid() != 0:
        if os.environ.get("CI"):
            pytest.fail("the security tests need root to make their two users")
        pytest.skip("needs root: the test makes two real Unix users")
    return two_users()


@pytest.fixture
def shared(users: tuple[User, User]) -> Iterator[Path]:
    """A fresh directory both users can enter (pytest's tmp_path is root's alone)."""
    with shared_base() as base:
        yield base
