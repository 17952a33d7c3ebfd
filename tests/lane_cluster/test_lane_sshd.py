"""The login node's sshd goes away under ``status`` and ``submit`` (SSH only: the laptop case).

A ControlMaster connection outlives sshd: stopping only the listener leaves every command working
through the master, so "sshd is down" also means closing the master (``ssh -O exit``), which the
fixture's ``stop_sshd`` does. With both gone, ``status`` exits 75 (also when sshd vanishes as
it sends its one reading of ``squeue`` and the markers), a ``submit`` whose ping fails exits 75
and records nothing, and a ``submit`` that loses sshd after recording its intent, at the
``sbatch`` call, exits 3. After sshd is back, ``reconcile`` and a new plan run the Task exactly
once.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest
from lane_helpers import Lane, allocation_ids, one_line_error, wait_until
from lane_traps import Trap, install

from cluster import harness
from cluster.fixture import SlurmCluster

# After every concurrent scenario (cluster.prelude):
# it stops sshd and closes the master connection.
pytestmark = [pytest.mark.cluster, pytest.mark.cluster_alone]


def test_a_master_connection_outlives_sshd(ssh_lane: Lane, slurm_cluster: SlurmCluster) -> None:
    lane = ssh_lane
    lane.put_worker()
    lane.ok("ensure", "state", lane.tasks_file([lane.worker_task("one", "exit", "0")]))
    lane.ok("plan", "state", "--output", "plan.json")
    lane.ok("submit", "state", "plan.json")
    master = subprocess.run(["ssh", "-O", "check", slurm_cluster.alias], capture_output=True)
    assert master.returncode == 0, "the alias's ControlMaster should be running"
    try:
        harness.stop_daemon(slurm_cluster.root, "sshd")  # the listener only
        assert not harness.port_open(harness.SSH_PORT)
        through = lane.servatus("status", "state", "--json")
        assert through.returncode == 0, through.stderr
        harness.close_master()
        cut = lane.servatus("status", "state")
        assert cut.returncode == 75, cut
        one_line_error(cut, "Unavailable")
    finally:
        slurm_cluster.start_sshd()
    lane.ok("status", "state")


def test_sshd_stopped_during_status_and_submit(
    ssh_lane: Lane, slurm_cluster: SlurmCluster, tmp_path: Path
) -> None:
    lane = ssh_lane
    trap = install(lane, tmp_path / "trap")
    lane.put_worker()
    tasks = [lane.worker_task("first", "exit", "0"), lane.worker_task("only", "sleep", "1")]
    lane.ok("ensure", "state", lane.tasks_file(tasks))
    # status reads Slurm only for recorded submissions: give it one.
    lane.ok("plan", "state", "--only", "first", "--output", "first.json")
    lane.ok("submit", "state", "first.json")
    [first] = allocation_ids(lane)
    lane.ok("plan", "state", "--only", "only", "--output", "plan.json")
    before = lane.journal()
    try:
        # sshd stopped at status's one reading of squeue and log_root (issue #33).
        trap.arm("hold-listing")
        status = held_while_sshd_stops(lane, trap, slurm_cluster, "status", "state")
        assert status.returncode == 75, status
        assert "Unavailable" in one_line_error(status, "Unavailable")
        # sshd already down when submit pings Slurm: nothing is recorded.
        refused = lane.servatus("submit", "state", "plan.json")
        assert refused.returncode == 75, refused
        one_line_error(refused, "Unavailable")
        assert lane.journal() == before
        slurm_cluster.start_sshd()
        # sshd stopped after the intent, at the sbatch call: the answer is lost, exit 3.
        trap.arm("hold-sbatch")
        lost = held_while_sshd_stops(lane, trap, slurm_cluster, "submit", "state", "plan.json")
        assert lost.returncode == 3, lost
        one_line_error(lost, "SubmissionInterrupted")
    finally:
        slurm_cluster.start_sshd()
    _, allocation = allocation_ids(lane)
    assert lane.executions()["only"] == ("UNRESOLVED", None)
    waiting = lane.servatus("reconcile", "state")
    assert waiting.returncode == 75, waiting
    later = lane.later("reconcile", "state")
    assert later.returncode == 0, later
    assert later.stdout == f"allocation {allocation}: recorded as not submitted\n"
    lane.ok("plan", "state", "--output", "again.json")
    lane.ok("submit", "state", "again.json")
    lane.wait_for(
        "both Tasks to succeed",
        lambda d: [t["execution"] for t in d["tasks"]] == ["SUCCEEDED", "SUCCEEDED"],
        seconds=120,
    )
    _, _, rerun = allocation_ids(lane)
    assert len(lane.run_records("first")) == 1
    assert [kind.split(".", 1)[1] for kind in lane.marker_kinds(first)] == ["end.0.0", "start"]
    assert len(lane.run_records("only")) == 1, lane.run_records("only")
    assert lane.marker_kinds(allocation) == []
    assert [kind.split(".", 1)[1] for kind in lane.marker_kinds(rerun)] == ["end.0.0", "start"]
    assert f"servatus-{allocation}" not in [name for _, name, _ in lane.squeue()]


def held_while_sshd_stops(
    lane: Lane, trap: Trap, cluster: SlurmCluster, *args: str
) -> subprocess.CompletedProcess[str]:
    """Run the CLI until the trap holds it, stop sshd (and the master), then let it go on."""
    process = lane.start(*args)
    try:
        wait_until("the trap to hold the CLI", lambda: trap.held, seconds=60, every=0.1)
        started = time.monotonic()
        cluster.stop_sshd()
        trap.release()
        stdout, stderr = process.communicate(timeout=90)
        assert time.monotonic() - started < 60
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)
