"""Fixtures of the Slurm lane's real-cluster tests; helpers live in ``lane_helpers``."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from lane_helpers import TRANSPORTS, Lane, make_lane

from cluster import prelude
from cluster.fixture import SlurmCluster


@pytest.fixture(scope="session", autouse=True)
def prelude_scenarios(
    request: pytest.FixtureRequest,
    slurm_cluster: SlurmCluster,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[None]:
    """Start every slow scenario the session's selected tests need, side by side, at the first
    test of this directory (``cluster.prelude``); wait for them and clean up at the end."""
    names = prelude.wanted(request.session.items)
    # Made here, in the main thread: tmp_path_factory is not meant for threads.
    bases = {name: tmp_path_factory.mktemp(_directory(name)) for name in names}
    prelude.start(slurm_cluster, bases)
    try:
        yield
    finally:
        prelude.finish()


def _directory(module: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", module.removeprefix("test_lane_").lower()).strip("-")


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
