"""``servatus doctor`` against the real test cluster, over SSH and on the login node.

The cluster runs with MinJobAge 30 and proctrack/linuxproc, so exactly those two checks fail;
restarted with MinJobAge 300 and proctrack/cgroup (the fixture's ``configured``, which restores
the previous settings afterwards) every check passes and doctor exits 0. A missing ``log_root``
fails, and so does ``sbatch --test-only`` for a profile asking for more CPUs than the node has
while staying within its own ceilings. A ``slurm_bin`` holding every Slurm command but
``scancel`` fails the ``scancel`` check, and only that one.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from lane_helpers import TRANSPORTS, Lane, make_lane, wait_until

from cluster import harness
from cluster.fixture import SlurmCluster

# After every concurrent scenario (cluster.prelude):
# it restarts Slurm with other settings.
pytestmark = [pytest.mark.cluster, pytest.mark.cluster_alone]

CHECKS = [
    "slurm version",
    "squeue",
    "scancel",
    "MinJobAge",
    "ProctrackType",
    "work_root",
    "log_root",
    "find -printf",
    "sbatch --test-only",
]

BIG = f"""
# Within its own ceilings, beyond the node: {harness.CPUS} CPUs.
[profiles.big.target]
max_tasks_per_allocation = 1
max_cpus_per_allocation = {2 * harness.CPUS}

[profiles.big.resources]
cpus = {2 * harness.CPUS}
"""


def doctor(lane: Lane, *args: str) -> tuple[int, dict[str, tuple[str, str]]]:
    result = lane.servatus("doctor", "--json", *args, timeout=200)
    assert result.stdout, (lane.name, result.stderr)
    document: dict[str, Any] = json.loads(result.stdout)
    checks = {c["name"]: (c["status"], c["detail"]) for c in document["checks"]}
    assert list(checks) == CHECKS, result.stdout
    assert 0 < document["round_trip"] < 30, result.stdout  # measured, over ssh or on the node
    return result.returncode, checks


def without_scancel(lane: Lane) -> str:
    """A directory inside the root with links to the real sbatch, squeue, scontrol, srun and
    sinfo but no scancel; the lane's SERVATUS.toml names it as ``slurm_bin``."""
    inner = f"{lane.base}/bin"
    lane.cluster.make_dirs(inner)
    directory = lane.cluster.outside(inner)
    for name in ("sbatch", "squeue", "scontrol", "srun", "sinfo"):
        link = directory / name
        link.symlink_to(f"{lane.cluster.slurm_bin}/{name}")  # resolved inside the root
        os.lchown(link, lane.cluster.uid, lane.cluster.gid)
    (lane.launch / "SERVATUS.toml").unlink()
    lane.put(lane.launch / "SERVATUS.toml", lane.toml(slurm_bin=inner))
    return inner


def idle(cluster: SlurmCluster) -> bool:
    """No job of alice queued or running: a restart would lose nothing."""
    listed = cluster.login([f"{cluster.slurm_bin}/squeue", "--me", "--noheader"], timeout=30)
    return listed.returncode == 0 and not listed.stdout.strip()


def test_doctor_reports_the_real_cluster(slurm_cluster: SlurmCluster, tmp_path: Path) -> None:
    lanes = [make_lane(slurm_cluster, transport, tmp_path, "doctor") for transport in TRANSPORTS]
    for lane in lanes:
        lane.put(lane.launch / "missing.toml", lane.toml(log_root=f"{lane.base}/no-such-logs"))
        lane.put(lane.launch / "SERVATUS.toml", lane.toml() + BIG)
        code, checks = doctor(lane)
        assert code == 1, (lane.name, checks)
        assert checks["slurm version"] == ("pass", "Slurm 24.11"), lane.name
        assert checks["squeue"][0] == "pass"
        assert checks["scancel"] == ("pass", f"{slurm_cluster.slurm_bin}/scancel answers")
        assert checks["MinJobAge"] == ("fail", "30 s < 120 s")
        assert checks["ProctrackType"] == ("fail", "proctrack/linuxproc")
        assert checks["work_root"] == ("pass", lane.work_root)
        assert checks["log_root"] == ("pass", lane.log_root)
        assert checks["find -printf"][0] == "pass"
        assert checks["sbatch --test-only"][0] == "pass", checks["sbatch --test-only"]

        code, missing = doctor(lane, "--config", "missing.toml")
        assert code == 1
        assert missing["log_root"] == (
            "fail",
            f"{lane.base}/no-such-logs is not a writable directory",
        )
        assert missing["work_root"][0] == "pass"
        assert missing["find -printf"][0] == "fail"

        code, big = doctor(lane, "--profile", "big")
        assert code == 1
        status, detail = big["sbatch --test-only"]
        assert status == "fail", detail
        assert "configuration is not available" in detail, detail

    wait_until(
        "alice's jobs to finish before restarting Slurm", lambda: idle(slurm_cluster), seconds=120
    )
    with slurm_cluster.configured(min_job_age=300, proctrack="proctrack/cgroup"):
        assert (slurm_cluster.min_job_age, slurm_cluster.proctrack) == (300, "proctrack/cgroup")
        for lane in lanes:
            code, checks = doctor(lane)
            assert checks["MinJobAge"] == ("pass", "300 s"), lane.name
            assert checks["ProctrackType"] == ("pass", "proctrack/cgroup")
            assert {status for status, _ in checks.values()} == {"pass"}, checks
            assert code == 0
    assert (slurm_cluster.min_job_age, slurm_cluster.proctrack) == (30, "proctrack/linuxproc")
    code, checks = doctor(lanes[0])
    assert checks["MinJobAge"] == ("fail", "30 s < 120 s")


def test_doctor_fails_a_slurm_bin_without_scancel(
    slurm_cluster: SlurmCluster, tmp_path: Path
) -> None:
    """The real ``scancel --version`` passes at the cluster's ``slurm_bin``; at one without
    ``scancel`` each transport's own not-found answer fails the check, saying what breaks,
    and every other check reads as it did at the real ``slurm_bin``. No restart of Slurm."""
    for transport in TRANSPORTS:
        lane = make_lane(slurm_cluster, transport, tmp_path, "doctor-scancel")
        _, real = doctor(lane)
        assert real["scancel"] == ("pass", f"{slurm_cluster.slurm_bin}/scancel answers"), real
        inner = without_scancel(lane)
        code, checks = doctor(lane)
        assert code == 1
        status, detail = checks.pop("scancel")
        said = (
            f"env: '{inner}/scancel': No such file or directory"
            if lane.ssh
            else f"{inner}/scancel: not found"
        )
        assert (status, detail) == (
            "fail",
            f"{said} (servatus cancel and chains need scancel in slurm_bin)",
        ), lane.name
        real.pop("scancel")
        assert {name: status for name, (status, _) in checks.items()} == {
            name: status for name, (status, _) in real.items()
        }, (lane.name, checks)
