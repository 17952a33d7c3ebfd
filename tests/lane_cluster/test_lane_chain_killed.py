"""A chain link killed outright mid-step on the real cluster (issue #14, ADR 0005 "Conflict 1
revisited"): no trap and no epilogue runs, so the link cannot remove the rest of its chain. The
next link is allocated once, finds nothing handed on, runs no step, removes the rest and exits
1; the last link is never allocated; the Task reads ``LOST`` at link 1, and only ``--retry KEY``
runs it again.

Two 3-link chains of 1-minute links (``--budget 00:03:00``, ``signal_before_end`` 20 s), planned
and submitted through the CLI over SSH, their step ignoring ``SIGUSR1``, and each link 1 killed
3 s after its step started, in two ways at once (``lane_kill.py``):

* ``shell``: every process of the job (batch shell, watchers, ``srun``, the task) stopped, then
  ``SIGKILL``ed, its ``slurmstepd`` daemons left alive: they tell slurmctld the batch shell died.
* ``node``: the same with the ``slurmstepd`` daemons as well, so nothing on the node is left to
  tell: slurmctld still counts the job running, as after a node crash it has not noticed yet,
  until its time limit ends it.

``status --json`` and alice's ``squeue`` are read every 2 s throughout and every distinct reading
is kept, so the tests below judge what was said all along, not only at the end. A node that Slurm
declares down (``NODE_FAIL``) behaves the same after the state word, but on this one-node cluster
it kills every job running there, other tests' too, so it was seen by hand only (ADR 0005).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest
from lane_helpers import HERE, INNER_PYTHON, Lane, make_lane, task_of, wait_until

from cluster import prelude
from cluster.fixture import SlurmCluster

pytestmark = pytest.mark.cluster

KEYS = ("shell", "node")
BUDGET = "00:03:00"
NEVER = {"SUCCEEDED", "FAILED", "STOPPED", "NOT_SUBMITTED"}
"""What neither Task may ever read: it did not succeed, fail or stop, and it was submitted."""


@attrs.define
class Seen:
    """Everything read of the campaign while it ran, per Task and per link."""

    readings: dict[str, list[tuple[float, str, str | None, str | None]]] = attrs.field(factory=dict)
    """Each Task's distinct (when, execution, detail, link) readings, in order."""
    states: dict[int, list[tuple[float, str]]] = attrs.field(factory=dict)
    """Each job's distinct Slurm states, in order, with when they were first seen."""
    running: dict[int, float] = attrs.field(factory=dict)
    """When each job was last seen ``RUNNING``."""
    shown: dict[int, str] = attrs.field(factory=dict)
    """``scontrol -o show job`` of each link 1 once it ended (its reason and exit code)."""
    killed: dict[str, tuple[float, list[str]]] = attrs.field(factory=dict)
    """When each Task's link 1 was killed, and what was killed."""
    last: dict[str, Any] = attrs.field(factory=dict)
    """The last ``status --json`` document."""
    plans: dict[str, dict[str, Any]] = attrs.field(factory=dict)
    """``plan --json`` documents once Slurm forgot every link."""

    def links(self, key: str) -> list[tuple[str, int]]:
        return [
            (attempt["allocation_id"], attempt["job"])
            for attempt in self.last["attempts"]
            if key in attempt["task_keys"]
        ]


def _poll(lane: Lane, seen: Seen) -> dict[str, Any]:
    document = lane.status()
    now = time.time()
    for task in document["tasks"]:
        link = task["link"]
        reading = (
            task["execution"],
            task["detail"],
            f"{link['position']}/{link['of']}" if link else None,
        )
        kept = seen.readings.setdefault(task["key"], [])
        if not kept or kept[-1][1:] != reading:
            kept.append((now, *reading))
    firsts = {seen.links(key)[0][1] for key in KEYS} if seen.last else set()
    for job, _name, state in lane.squeue():
        kept_states = seen.states.setdefault(job, [])
        if not kept_states or kept_states[-1][1] != state:
            kept_states.append((now, state))
        if state == "RUNNING":
            seen.running[job] = now
        elif job in firsts and state not in ("PENDING", "COMPLETING") and job not in seen.shown:
            shown = lane.cluster.login(
                [f"{lane.cluster.slurm_bin}/scontrol", "-o", "show", "job", str(job)]
            )
            seen.shown[job] = shown.stdout.strip()
    seen.last = document
    return document


def _kill(lane: Lane, key: str, job: int) -> list[str]:
    """Link 1 of ``key`` killed outright: as alice inside (``shell``), or as root with its
    ``slurmstepd`` daemons (``node``)."""
    script = Path(lane.base) / "lane_kill.py"
    if key == "node":
        killer = subprocess.run(
            [sys.executable, str(script), str(job), "--daemons"],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    else:
        inner = str(script)  # scratch is mounted at the same path inside
        killer = lane.cluster.login([INNER_PYTHON, inner, str(job)], timeout=60)
    assert killer.returncode == 0, killer.stderr
    killed: list[str] = json.loads(killer.stdout)
    return killed


def _step_started(lane: Lane, key: str, job: int) -> float | None:
    record = lane.runs / f"{key}.{job}.json"
    return record.stat().st_mtime if record.exists() else None


def _plan(lane: Lane, *options: str) -> dict[str, Any]:
    planned = lane.servatus("plan", "state", "--json", *options)
    assert planned.returncode == 0, planned.stderr
    document: dict[str, Any] = json.loads(planned.stdout)
    return document


@prelude.scenario(seconds=144)
def killed_and_watched(cluster: SlurmCluster, base: Path) -> Iterator[tuple[Lane, Seen]]:
    """Both chains submitted, their first links killed, watched until Slurm forgot every link,
    beside the lane's other slow scenarios (``cluster.prelude``)."""
    lane = make_lane(cluster, "ssh", base, "chain-killed")
    try:
        lane.put_chain_worker()
        lane.put(Path(lane.base) / "lane_kill.py", (HERE / "lane_kill.py").read_text())
        lane.limit("00:01:00", "00:00:20")
        tasks = [{"key": key, "args": [INNER_PYTHON, "chain_step.py", "ignore"]} for key in KEYS]
        lane.submitted(tasks, "--budget", BUDGET, "--tasks-per-allocation", "1")
        seen = Seen()
        started = time.monotonic()

        def settled() -> bool:
            document = _poll(lane, seen)
            for key in KEYS:
                if key in seen.killed:
                    continue
                first_job = seen.links(key)[0][1]
                step = _step_started(lane, key, first_job)
                if step is not None and time.time() >= step + 3:
                    seen.killed[key] = (time.time(), _kill(lane, key, first_job))
            return len(seen.killed) == len(KEYS) and not any(
                attempt["listed"] for attempt in document["attempts"]
            )

        wait_until("both chains to end and be forgotten", settled, seconds=240, every=2)
        seen.plans["retry-failed"] = _plan(lane, "--retry-failed")
        seen.plans["retry"] = _plan(lane, "--retry", "node", "--retry", "shell", "--budget", BUDGET)
        print(f"chains killed and forgotten in {time.monotonic() - started:.0f} s")
        yield lane, seen
    finally:
        lane.cleanup()


@pytest.fixture(scope="module")
def killed() -> Iterator[tuple[Lane, Seen]]:
    with prelude.outcome(__name__) as seen:
        yield seen


def _report(lane: Lane, seen: Seen, key: str) -> str:
    rows = [f"{key}: killed {seen.killed.get(key)}", f"  readings {seen.readings.get(key)}"]
    for position, (allocation, job) in enumerate(seen.links(key), 1):
        rows.append(
            f"  link {position} {allocation} job {job}: {lane.marker_kinds(allocation)} "
            f"states {seen.states.get(job)}"
        )
    return "\n".join(rows)


@pytest.mark.parametrize("key", KEYS)
def test_the_next_link_is_allocated_once_runs_nothing_and_removes_the_last(
    killed: tuple[Lane, Seen], key: str
) -> None:
    lane, seen = killed
    print(_report(lane, seen, key))
    (first, one), (second, two), (third, three) = seen.links(key)
    # Link 1: its start marker and nothing after it: no stop, end or handoff.
    kinds = {kind.split(".", 1)[1] for kind in lane.marker_kinds(first)}
    assert kinds - {"limit"} == {"start"}, kinds
    # Link 2: allocated once, after Slurm ended link 1; it waited for link 1's over file, which
    # a link killed outright never makes (an eighth of its 1-minute limit), ran no step (its
    # start marker alone, no step log, no run of the worker), said why, and exited 1 (FAILED)
    # having removed link 3.
    assert lane.marker_kinds(second) == [f"{two}.start"]
    started = (Path(lane.log_root) / f"servatus-{second}.{two}.start").stat().st_mtime
    assert started > seen.running[one], (started, seen.running[one])
    logs = Path(lane.log_root)
    assert not (logs / f"servatus-{second}-{two}.0.out").exists()
    said = (logs / f"servatus-{second}-{two}.out").read_text()
    assert said == (
        "servatus: the previous link left no over file; its handoffs are read as listed\n"
        "servatus: link 2/3 hands nothing on; it removes the rest of the chain\n"
    )
    assert not list(logs.glob(f".servatus-{first}.*.over"))
    assert [state for _, state in seen.states[two]][-1] == "FAILED", seen.states[two]
    # Link 3: never allocated, cancelled while it waited, no marker.
    assert lane.marker_kinds(third) == []
    assert [state for _, state in seen.states[three]] in (
        ["PENDING", "CANCELLED"],
        ["CANCELLED"],
    ), seen.states[three]
    # Nothing else ran: the worker started once, in link 1.
    assert lane.run_records(key) == [f"{key}.{one}.json"]


def test_a_batch_shell_killed_under_a_live_slurmstepd_ends_the_link_at_once(
    killed: tuple[Lane, Seen],
) -> None:
    _, seen = killed
    (_, one), (_, two), _ = seen.links("shell")
    at, what = seen.killed["shell"]
    assert any("slurm_script" in command for command in what), what
    assert not any(command.startswith("slurmstepd") for command in what), what
    print(seen.states[one], seen.states[two], seen.shown[one])
    # The slurmstepd saw the batch shell die: Slurm ended the job within seconds, FAILED.
    assert [state for _, state in seen.states[one]][-2:] in (
        ["COMPLETING", "FAILED"],
        ["RUNNING", "FAILED"],
    ), seen.states[one]
    # Within seconds; ``at`` is taken before the kill, so a loaded machine's kill counts too.
    assert seen.running[one] - at < 30, (at, seen.running[one])
    assert "JobState=FAILED" in seen.shown[one], seen.shown[one]


def test_a_job_whose_node_lost_every_process_runs_on_in_slurm_to_its_time_limit(
    killed: tuple[Lane, Seen],
) -> None:
    lane, seen = killed
    (_, one), (_, two), _ = seen.links("node")
    _, what = seen.killed["node"]
    assert any(command.startswith("slurmstepd") for command in what), what
    print(seen.states[one], seen.states[two], seen.shown[one])
    # Nothing told slurmctld: it counted the job RUNNING to its time limit (the rest of its
    # minute), then ended it TIMEOUT, and only then was link 2 allocated.
    ended = [state for _, state in seen.states[one] if state != "COMPLETING"]  # a poll may see it
    assert ended[-2:] == ["RUNNING", "TIMEOUT"], seen.states[one]
    assert "Reason=TimeLimit" in seen.shown[one], seen.shown[one]
    started = Path(lane.log_root) / f"servatus-{seen.links('node')[0][0]}.{one}.start"
    assert seen.running[one] - started.stat().st_mtime > 50, seen.running[one]
    # Meanwhile status read the Task RUNNING, Slurm's word, with no marker to say otherwise;
    # ENDING only once Slurm ended the job.
    readings = seen.readings["node"]
    during = [execution for when, execution, _, _ in readings if when <= seen.running[one]]
    assert during[-1] == "RUNNING", readings
    after = [execution for when, execution, _, _ in readings if when > seen.running[one]]
    assert after[:1] == ["ENDING"], readings


@pytest.mark.parametrize("key", KEYS)
def test_the_task_reads_truthfully_throughout_and_lost_at_link_one_at_the_end(
    killed: tuple[Lane, Seen], key: str
) -> None:
    _, seen = killed
    readings = seen.readings[key]
    print(key, readings)
    assert not [r for r in readings if r[1] in NEVER], readings
    # Never a link past the one that ran: link 2 was never handed the Task.
    assert {r[3] for r in readings if r[1] != "QUEUED"} == {"1/3"}, readings
    final = task_of(seen.last, key)
    assert (final["execution"], final["detail"], final["exit_code"]) == ("LOST", None, None)
    assert (final["link"]["position"], final["link"]["of"]) == (1, 3)
    assert final["allocation"] == seen.links(key)[0][0]
    # A LOST run counts at its whole limit, marked incomplete.
    assert final["run_time"] == {"total": 60, "complete": False}


def test_retry_failed_never_takes_the_lost_tasks_and_retry_key_does(
    killed: tuple[Lane, Seen],
) -> None:
    _, seen = killed
    retry_failed, retry = seen.plans["retry-failed"], seen.plans["retry"]
    print(json.dumps(retry_failed["decision"]), json.dumps(retry["decision"]))
    assert retry_failed["decision"]["selected"] == []
    assert sorted(retry_failed["decision"]["held"]) == [
        ["node", "SUBMITTED"],
        ["shell", "SUBMITTED"],
    ]
    assert sorted(retry["decision"]["selected"]) == ["node", "shell"]
