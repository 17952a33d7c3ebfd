"""``cancel --task`` racing a running lease for fresh orders, through the CLI over SSH (issue #15,
"The claim under contention"): each order is either run or withdrawn, never both and never
neither, and ``status`` agrees with what ran, counted from each step's own ``step-start`` marker
and the worker's own run record.

50 rounds, five at a time in threads: each round ``start``s one fresh Task (a worker that exits
0 at once) in a lease of six slots, so a taken step never waits for a slot, then sleeps a random
0 to 6 s (the lease polls every 5 s, so both outcomes come up) and runs ``cancel --task``.
Four in five of the offers' wake-ups are dropped (a wrapper ``scancel``, as when the signal does
not arrive): a woken lease takes every order in its directory within milliseconds, before any
``cancel`` could, so only orders left to the poll race ``cancel`` as before; with half dropped,
the other rounds' wake-ups took nearly every order (48 ran, 2 withdrawn).
"""

from __future__ import annotations

import os
import random
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from lane_helpers import FINAL, Lane, wait_until
from lane_traps import SLURM_COMMANDS

pytestmark = pytest.mark.cluster

ROUNDS = 50
AT_ONCE = 5

DROPPING_SCANCEL = """#!/bin/sh
case "$*" in
"--batch --signal=URG "*)
    if [ $(($(od -An -N1 -tu1 /dev/urandom) % 5)) -ne 0 ]; then exit 0; fi ;;
esac
exec {real}/scancel "$@"
"""
"""Drops a wake-up at random, four in five; every other ``scancel`` is the real one."""


def drop_most_wake_ups(lane: Lane) -> None:
    inner = f"{lane.base}/bin"
    lane.cluster.make_dirs(inner)
    directory = lane.cluster.outside(inner)
    lane.put(
        directory / "scancel", DROPPING_SCANCEL.format(real=lane.cluster.slurm_bin), mode=0o755
    )
    for name in ("sbatch", *(name for name in SLURM_COMMANDS if name != "scancel")):
        link = directory / name
        link.symlink_to(f"{lane.cluster.slurm_bin}/{name}")  # resolved inside the root
        os.lchown(link, lane.cluster.uid, lane.cluster.gid)
    (lane.launch / "SERVATUS.toml").unlink()
    lane.put(lane.launch / "SERVATUS.toml", lane.toml(slurm_bin=inner))


def test_cancel_racing_the_lease_runs_or_withdraws_each_order_and_status_agrees(
    ssh_lane: Lane,
) -> None:
    lane = ssh_lane
    lane.put_worker()
    drop_most_wake_ups(lane)
    lane.limit("00:10:00", "00:00:20")
    keys = [f"c{index:02d}" for index in range(ROUNDS)]
    files = {
        key: lane.tasks_file([lane.worker_task(key, "exit", "0")], f"{key}.jsonl") for key in keys
    }
    lane.ok("ensure", "state", files[keys[0]])
    lane.ok("plan", "state", "--profile", "cpu", "--hold", "6", "--output", "lease.json")
    submitted = lane.ok("submit", "state", "lease.json").stdout
    lease = submitted.split()[2].rstrip(":")
    job = int(submitted.split()[-1])
    wait_until(
        "the lease running",
        lambda: any(row[0] == job and row[2] == "RUNNING" for row in lane.squeue()),
        seconds=90,
    )
    said: dict[str, tuple[Any, Any]] = {}
    lock = threading.Lock()
    rng = random.Random(15)
    delays = {key: rng.uniform(0, 6) for key in keys}

    def patiently(*args: str) -> Any:
        """The command, again while another round holds the campaign's lock (Busy, exit 75),
        as a user would run it again."""
        for _ in range(40):
            done = lane.servatus(*args)
            if done.returncode != 75 or "Busy" not in done.stderr:
                return done
            time.sleep(0.25)
        return done

    def round_of(key: str) -> None:
        started = patiently("start", "state", files[key], "--lease", lease)
        time.sleep(delays[key])
        cancelled = patiently("cancel", "state", "--task", key)
        with lock:
            said[key] = (started, cancelled)

    with ThreadPoolExecutor(AT_ONCE) as pool:
        list(pool.map(round_of, keys))
    final = lane.wait_for(
        "every Task final",
        lambda document: all(task["execution"] in FINAL for task in document["tasks"]),
        seconds=120,
    )
    tasks = {task["key"]: task for task in final["tasks"]}
    steps = {
        attempt["task_keys"][0]: attempt["allocation_id"]
        for attempt in final["attempts"]
        if attempt.get("within") == lease
    }
    counted = {"ran": 0, "withdrawn": 0, "stopped before it began": 0}
    problems = []
    for key in keys:
        started, cancelled = said[key]
        assert started.returncode == 0, (key, started.stderr)
        assert cancelled.returncode == 0, (key, cancelled.returncode, cancelled.stderr)
        step = steps[key]
        began = sorted(Path(lane.log_root).glob(f"servatus-{step}.{job}.step-start"))
        runs = lane.run_records(key)
        task = tasks[key]
        never = (task["execution"], task["detail"]) == ("STOPPED", "never started")
        if began:  # the step's own marker: it ran, once, and was never withdrawn
            counted["ran"] += 1
            once = len(began) == 1 and len(runs) <= 1
            if not once or never or "withdrew" in cancelled.stdout:
                problems.append((key, "ran", runs, began, task, cancelled.stdout))
        elif "withdrew" in cancelled.stdout:
            counted["withdrawn"] += 1
            if runs or not never:
                problems.append((key, "withdrawn", runs, task))
        else:  # taken, then stopped before srun began it: the spec's "ends without starting"
            counted["stopped before it began"] += 1
            if runs or not never or "stopping" not in cancelled.stdout:
                problems.append((key, "neither ran nor withdrawn", runs, task, cancelled.stdout))
    print(f"of {ROUNDS} rounds: {counted}")
    assert not problems, problems
    assert counted["ran"] and counted["withdrawn"], counted
    lane.servatus("cancel", "state", "--allocation", lease)
