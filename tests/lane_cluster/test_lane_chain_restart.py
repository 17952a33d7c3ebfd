"""slurmd and slurmctld restarted while chains are mid-way (issue #14): the chains finish, their
Tasks read truthfully all along (never SUCCEEDED for work that did not run), and nothing runs
twice.

Two chains of three 1-minute links each (``--budget 00:03:00``), their worker yielding after
25 s on links 1 and 2 and exiting 0 on link 3, so each link hands on early. While link 1 runs,
slurmd is stopped for 10 s; while link 2 runs, slurmctld is stopped for 30 s. Both come back with
the jobs they knew (StateSaveLocation), as a restart at a site does. ``status --json`` is read
every 2 s throughout, over SSH, and every reading is kept.
"""

from __future__ import annotations

import itertools
import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from lane_helpers import FINAL, INNER_PYTHON, Lane, wait_until

from cluster import harness

# After every concurrent scenario (cluster.prelude):
# it stops slurmd and slurmctld.
pytestmark = [pytest.mark.cluster, pytest.mark.cluster_alone]

KEYS = ("r1", "r2")
MODES = "yield25,yield25,exit0"
UNTRUE_EVER = {"LOST", "NOT_SUBMITTED", "FAILED"}


def _links(document: dict[str, Any], key: str) -> list[tuple[str, int | None]]:
    return [
        (attempt["allocation_id"], attempt["job"])
        for attempt in document["attempts"]
        if key in attempt["task_keys"]
    ]


def _marker(lane: Lane, allocation: str, kind: str) -> float | None:
    found = sorted(Path(lane.log_root).glob(f"servatus-{allocation}.*.{kind}"))
    return found[0].stat().st_mtime if found else None


def test_restarted_daemons_mid_chain_leave_every_chain_finished_once_and_read_truthfully(
    ssh_lane: Lane,
) -> None:
    lane = ssh_lane
    lane.put_chain_worker()
    lane.limit("00:01:00", "00:00:20")
    tasks = [{"key": key, "args": [INNER_PYTHON, "chain_step.py", MODES]} for key in KEYS]
    lane.submitted(tasks, "--budget", "00:03:00", "--tasks-per-allocation", "1")

    readings: list[tuple[float, int, dict[str, Any] | None]] = []
    bounced: dict[str, float] = {}
    bouncing: list[threading.Thread] = []  # status is read on while a daemon is down

    def read() -> dict[str, Any] | None:
        shown = lane.servatus("status", "state", "--json")
        document = json.loads(shown.stdout) if shown.returncode == 0 else None
        readings.append((time.time(), shown.returncode, document))
        return document

    def link_running(document: dict[str, Any], position: int) -> bool:
        allocation, _job = _links(document, "r1")[position - 1]
        started = _marker(lane, allocation, "start")
        return started is not None and time.time() >= started + 5

    def finished(document: dict[str, Any] | None) -> bool:
        return document is not None and all(
            task["execution"] in FINAL for task in document["tasks"]
        )

    deadline = time.monotonic() + 420
    last: dict[str, Any] | None = None
    while time.monotonic() < deadline:
        document = read()
        last = document or last
        if document is not None and "slurmd" not in bounced and link_running(document, 1):
            bounced["slurmd"] = time.time()
            bouncing.append(threading.Thread(target=harness.bounce, args=("slurmd", 10)))
            bouncing[-1].start()
        elif (
            document is not None
            and "slurmd" in bounced
            and not bouncing[-1].is_alive()
            and "slurmctld" not in bounced
            and link_running(document, 2)
        ):
            bounced["slurmctld"] = time.time()
            bouncing.append(threading.Thread(target=harness.bounce, args=("slurmctld", 30)))
            bouncing[-1].start()
        if "slurmctld" in bounced and finished(document) and not bouncing[-1].is_alive():
            break
        time.sleep(2)
    for thread in bouncing:
        thread.join(timeout=120)
    assert set(bounced) == {"slurmd", "slurmctld"}, (bounced, readings[-3:])
    assert last is not None and finished(last), last and last["tasks"]

    final = {task["key"]: (task["execution"], task["link"]) for task in last["tasks"]}
    for key in KEYS:
        execution, link = final[key]
        assert execution == "SUCCEEDED" and (link["position"], link["of"]) == (3, 3), final
        links = _links(last, key)
        assert len(links) == 3 and all(job is not None for _id, job in links), links
        # Each link ran its Task once, one link after the other.
        runs = sorted(p.name for p in lane.runs.iterdir() if p.name.startswith(f"{key}."))
        assert runs == sorted(f"{key}.{job}.json" for _id, job in links), runs
        spans = [
            (_marker(lane, allocation, "start"), _marker(lane, allocation, "end.0.*"))
            for allocation, _job in links
        ]
        assert all(start is not None and end is not None for start, end in spans), spans
        for (_, end), (start, _) in itertools.pairwise(spans):
            assert start is not None and end is not None and start >= end, spans
        last_end = spans[-1][1]
        assert last_end is not None
        # Truthful all along: never a reading that the work did not bear out.
        for at, code, document in readings:
            assert code in (0, 75), (at, code)
            if document is None:
                continue
            [task] = [task for task in document["tasks"] if task["key"] == key]
            assert task["execution"] not in UNTRUE_EVER, (at, task)
            if task["execution"] == "SUCCEEDED":
                assert at >= last_end - 1, (at, last_end, task)
    unavailable = [at for at, code, _ in readings if code == 75]
    wait_until(
        "slurmctld answering", lambda: lane.servatus("status", "state").returncode == 0, seconds=30
    )
    print(f"{len(readings)} readings, {len(unavailable)} unanswered, bounced at {bounced}")
