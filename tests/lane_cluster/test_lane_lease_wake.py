"""Concurrent ``start``s into one running lease with the wake-up, through the CLI over SSH (issue
#33, "Concurrent `start`s into one lease with the wake-up: each step runs once").

Twenty fresh Tasks (a worker that exits 0 at once) are started five at a time into one lease of
four slots, so some steps wait for a slot and several offers (and their wake-ups) land while the
lease is reading its orders. Every step must run exactly once: one ``step-start`` marker, one
run record of the worker, one ``end.0.0``, ``SUCCEEDED`` in ``status``. Each offer wakes the
lease, so a step that had a free slot begins well inside the lease's 5 s poll.
"""

from __future__ import annotations

import statistics
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from lane_helpers import FINAL, Lane, wait_until

# After every concurrent scenario (cluster.prelude):
# it asserts a median wake-up latency under 2 s.
pytestmark = [pytest.mark.cluster, pytest.mark.cluster_alone]

STARTS = 20
AT_ONCE = 5
POLL = 5.0


def test_concurrent_starts_into_one_woken_lease_run_each_step_once(ssh_lane: Lane) -> None:
    lane = ssh_lane
    lane.put_worker()
    lane.limit("00:10:00", "00:00:20")
    keys = [f"w{index:02d}" for index in range(STARTS)]
    files = {
        key: lane.tasks_file([lane.worker_task(key, "exit", "0")], f"{key}.jsonl") for key in keys
    }
    lane.ok("ensure", "state", files[keys[0]])
    [(lease, job)], _ = lane.lease("--hold", "4")
    wait_until(
        "the lease running",
        lambda: any(row[0] == job and row[2] == "RUNNING" for row in lane.squeue()),
        seconds=90,
    )
    time.sleep(1)  # past its first reading of the orders: asleep in a poll
    returned: dict[str, float] = {}
    said: dict[str, Any] = {}
    lock = threading.Lock()

    def start(key: str) -> None:
        for _ in range(80):  # again while another start holds the campaign (Busy, exit 75)
            done = lane.servatus("start", "state", files[key], "--lease", lease)
            if done.returncode != 75 or "Busy" not in done.stderr:
                break
            time.sleep(0.1)
        with lock:
            said[key] = done
            returned[key] = time.time()

    with ThreadPoolExecutor(AT_ONCE) as pool:
        list(pool.map(start, keys))
    for key in keys:
        assert said[key].returncode == 0, (key, said[key].stderr)
    final = lane.wait_for(
        "every Task final",
        lambda document: all(task["execution"] in FINAL for task in document["tasks"]),
        seconds=180,
    )
    tasks = {task["key"]: task for task in final["tasks"]}
    steps = {
        attempt["task_keys"][0]: attempt["allocation_id"]
        for attempt in final["attempts"]
        if attempt.get("within") == lease
    }
    assert sorted(steps) == keys
    logs = Path(lane.log_root)
    problems = []
    latencies = []
    for key in keys:
        step = steps[key]
        began = sorted(logs.glob(f"servatus-{step}.{job}.step-start"))
        ended = sorted(p.name for p in logs.glob(f"servatus-{step}.{job}.end.0.*"))
        runs = lane.run_records(key)
        execution = (tasks[key]["execution"], tasks[key]["exit_code"])
        if len(began) != 1 or len(runs) != 1 or ended != [f"servatus-{step}.{job}.end.0.0"]:
            problems.append((key, began, runs, ended))
        elif execution != ("SUCCEEDED", 0):
            problems.append((key, execution))
        else:
            latencies.append(began[0].stat().st_mtime - returned[key])
    assert not problems, problems
    median = statistics.median(latencies)
    print(
        f"{STARTS} concurrent starts: start returned -> step-start median {median:.2f} s, "
        f"min {min(latencies):.2f} s, max {max(latencies):.2f} s"
    )
    # Woken, not polled: a poll alone gives a median of half the poll plus srun (2.5 s and more);
    # the benchmark (bench_lease_start.py) holds the 0.3 s, this only tells the two apart
    # with room for a loaded machine.
    assert median < POLL * 0.4, latencies
    lane.servatus("cancel", "state", "--allocation", lease)


def test_a_storm_of_wake_ups_harms_neither_a_running_step_nor_the_lease(ssh_lane: Lane) -> None:
    """The wake-up as the offer sends it, fifty times in a row at a lease with a running step and
    one still waiting for the only slot (a waiting ``srun`` ends unstarted on any signal it
    handles): the batch shell alone gets each, so both steps run to their end once, untouched,
    and the lease writes no ``stop`` or ``limit`` and stays running."""
    lane = ssh_lane
    lane.put_worker()
    lane.limit("00:10:00", "00:00:20")
    running = lane.tasks_file([lane.worker_task("running", "sleep", "8")], "running.jsonl")
    waiting = lane.tasks_file([lane.worker_task("waiting", "exit", "0")], "waiting.jsonl")
    lane.ok("ensure", "state", running)
    [(lease, job)], _ = lane.lease("--hold", "1")
    wait_until(
        "the lease running",
        lambda: any(row[0] == job and row[2] == "RUNNING" for row in lane.squeue()),
        seconds=90,
    )
    lane.ok("start", "state", running, "--lease", lease)
    wait_until("the first step running", lambda: lane.run_records("running"), seconds=30)
    lane.ok("start", "state", waiting, "--lease", lease)
    storm = (
        f"for i in $(seq 50); do {lane.cluster.slurm_bin}/scancel --batch --signal=URG {job}"
        " || exit 1; done"
    )
    done = lane.cluster.login(["/bin/sh", "-c", storm], timeout=60)
    assert done.returncode == 0, done.stderr
    assert lane.job_state(job) == "RUNNING"
    final = lane.wait_for(
        "both steps final",
        lambda document: all(task["execution"] in FINAL for task in document["tasks"]),
        seconds=90,
    )
    executions = {task["key"]: (task["execution"], task["exit_code"]) for task in final["tasks"]}
    assert executions == {"running": ("SUCCEEDED", 0), "waiting": ("SUCCEEDED", 0)}
    assert [len(lane.run_records(key)) for key in ("running", "waiting")] == [1, 1]
    assert lane.job_state(job) == "RUNNING"
    # No stop, no limit: the lease took the wakes for nothing else.
    assert lane.marker_kinds(lease) == [f"{job}.start", "orders"]
    lane.servatus("cancel", "state", "--allocation", lease)
