"""Fixtures of the Slurm plugin's tests; the helpers themselves live in ``slurm_helpers``."""

from __future__ import annotations

from pathlib import Path

import pytest
from slurm_helpers import FakeCluster, make_fake_cluster


@pytest.fixture
def fake_cluster(tmp_path: Path) -> FakeCluster:
    """A temp tree with a fake ``srun`` in ``bin`` and ``work``, ``logs``, ``out`` beside it."""
    return make_fake_cluster(tmp_path)
