"""Fixtures for the Slurm lane against FakeScheduler (the fast lane; the real one is `cluster`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from servatus.config import Profile
from testkit import CPU_PROFILE


@pytest.fixture
def profile(tmp_path: Path) -> Profile:
    path = tmp_path / "SERVATUS.toml"
    path.write_text(CPU_PROFILE)
    return Profile.load(path)


@pytest.fixture
def config_path(tmp_path: Path) -> Path:
    path = tmp_path / "SERVATUS.toml"
    path.write_text(CPU_PROFILE)
    return path
