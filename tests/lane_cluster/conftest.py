"""Fixtures of the Slurm lane's real-cluster tests; helpers live in ``lane_helpers``."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from lane_helpers import TRANSPORTS, Lane, make_lane

from cluster.fixture import SlurmCluster


def _label(request: pytest.FixtureRequest) -> str:
    name = getattr(request.node, "originalname", request.node.name)
    return re.sub(r"[^a-z0-9]+", "-", name.removeprefix("test_").lower())[:24].strip("-")


@pytest.fixture(params=TRANSPORTS)
def lane(
    request: pytest.FixtureRequest, slurm_cluster: SlurmCluster, tmp_path: Path
) -> Iterator[Lane]:
    """One test's directories, over SSH (launcher outside) and on the login node (inside)."""
    made = make_lane(slurm_cluster, request.param, tmp_path, _label(request))
    try:
        yield made
    finally:
        made.cleanup()


@pytest.fixture
def ssh_lane(
    request: pytest.FixtureRequest, slurm_cluster: SlurmCluster, tmp_path: Path
) -> Iterator[Lane]:
    """The SSH case alone, for what only exists over SSH (sshd, unreachable hosts)."""
    made = make_lane(slurm_cluster, "ssh", tmp_path, _label(request))
    try:
        yield made
    finally:
        made.cleanup()
