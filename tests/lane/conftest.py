"""Fixtures for the Slurm lane against FakeScheduler (the fast lane; the real one is `cluster`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from servatus.config import Profile

PROFILE = """\
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


@pytest.fixture
def profile(tmp_path: Path) -> Profile:
    path = tmp_path / "SERVATUS.toml"
    path.write_text(PROFILE)
    return Profile.load(path)


@pytest.fixture
def config_path(tmp_path: Path) -> Path:
    path = tmp_path / "SERVATUS.toml"
    path.write_text(PROFILE)
    return path
