"""How jobs end when Slurm ends them: a time limit with its pre-limit signal, and cancels racing
steps that are just ending. Both are slow (a minute to the limit, then MinJobAge before Slurm
forgets the jobs), so the module fixture submits both campaigns at once and the tests wait for
them together.

**Time limit.** One allocation of four one-CPU steps, ``--time=1`` with
``signal_before_end = 20 s``: Slurm sends ``SIGUSR1`` to the batch shell 20 to 50 s before the
limit (its periodic check runs every 30 s), which marks ``limit`` and relays it to every step.
``ignores`` ignores it and runs into the limit; ``dies`` dies of it (138); ``yields`` exits 75
on it; ``finishes`` exits 0 on it. At the limit Slurm sends ``SIGTERM`` to the batch shell
(``stop``) and to ``ignores``, whose end comes after the stop. Read once Slurm forgot the job:
``STOPPED (time limit)``, ``FAILED`` 138 (a plain allocation's nonzero exit after the signal),
``STOPPED (yielded)`` 75 and ``SUCCEEDED``, each with a complete run time measured by the markers.
``test_fake_scheduler_time_limit.py`` pins the same outcome on the ``FakeScheduler``.

**Cancels racing steps** (issue #12). Rounds of three-step jobs (``lane_racer.py``): when all
three run, one step runs the real ``scancel`` on its own job, then every step sleeps a few
milliseconds (a spread across rounds) and exits 3, unless the cancel's ``SIGTERM`` ends it first.
A step's end marker carries the truth: 3 when it ended by itself, 143 or 137 when the cancel
killed it. A killed step must never read ``FAILED`` (or ``SUCCEEDED``); one that exited 3 may read
``FAILED`` 3, or ``STOPPED`` when its end is stamped at or after the stop (docs/markers.md).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest
from lane_helpers import HERE, INNER_PYTHON, Lane, allocation_ids, make_lane, wait_until

from cluster.fixture import SlurmCluster

pytestmark = pytest.mark.cluster

RACE_JOBS = 12
RACE_SLOTS = 3
RACE_DELAYS_MS = tuple(job * 7 + slot * 120 for job in range(RACE_JOBS) for slot in range(3))
"""One delay per racing step, 0 to 317 ms, around when the cancel's signal lands (50 to 220 ms
after the ``scancel`` here)."""

PURGED = 180
"""Seconds to wait for Slurm to forget ended jobs (MinJobAge 30 purges 35 to 55 s after)."""


def small(lane: Lane, resources: str) -> str:
    """The lane's SERVATUS.toml with 100 MiB Tasks (four fit the allocation ceiling)."""
    text = lane.toml().replace("memory_mib = 500\n", "memory_mib = 100\n", 1)
    return text.replace('time_limit = "00:05:00"\n', resources, 1)


@attrs.frozen
class Endings:
    limited: Lane
    racing: Lane


@pytest.fixture(scope="module")
def endings(
    slurm_cluster: SlurmCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Endings]:
    """Both slow campaigns, submitted at once: one over SSH, one on the login node."""
    limited = make_lane(slurm_cluster, "ssh", tmp_path_factory.mktemp("limit"), "time-limit")
    racing = make_lane(slurm_cluster, "local", tmp_path_factory.mktemp("race"), "cancel-race")
    try:
        limited.put(
            limited.launch / "SERVATUS.toml",
            small(limited, 'time_limit = "00:01:00"\nsignal_before_end = "00:00:20"\n'),
        )
        limited.put_worker()
        tasks = [
            limited.worker_task("ignores", "ignore", "600"),
            limited.worker_task("dies", "sleep", "600"),
            limited.worker_task("yields", "usr1", "75"),
            limited.worker_task("finishes", "usr1", "0"),
        ]
        limited.ok("ensure", "state", limited.tasks_file(tasks))
        limited.ok("plan", "state", "--tasks-per-allocation", "4", "--output", "plan.json")
        limited.ok("submit", "state", "plan.json")

        racing.put(racing.launch / "SERVATUS.toml", small(racing, 'time_limit = "00:05:00"\n'))
        racing.put(Path(racing.work_root) / "racer.py", (HERE / "lane_racer.py").read_text())
        racing.cluster.make_dirs(f"{racing.work_root}/race")
        racers = [
            {"key": f"r{i:03d}", "args": [INNER_PYTHON, "racer.py", str(delay), str(RACE_SLOTS)]}
            for i, delay in enumerate(RACE_DELAYS_MS)
        ]
        racing.ok("ensure", "state", racing.tasks_file(racers))
        per = str(RACE_SLOTS)
        racing.ok("plan", "state", "--tasks-per-allocation", per, "--output", "plan.json")
        racing.ok("submit", "state", "plan.json")
        yield Endings(limited, racing)
    finally:
        limited.cleanup()
        racing.cleanup()


def forgotten(lane: Lane) -> dict[str, Any]:
    """``status --json`` once Slurm lists none of the campaign's jobs any more."""
    names = {f"servatus-{a}" for a in allocation_ids(lane)}

    def probe() -> dict[str, Any] | None:
        if any(name in names for _, name, _ in lane.squeue()):
            return None
        return lane.status()

    return wait_until("Slurm to forget the campaign's jobs", probe, seconds=PURGED, every=3)


def test_a_job_that_runs_into_its_time_limit(endings: Endings) -> None:
    lane = endings.limited
    [allocation] = allocation_ids(lane)
    [job] = {task["job"] for task in lane.status()["tasks"]}
    ended = wait_until(
        "Slurm to end the job",
        lambda: [s for j, _, s in lane.squeue() if j == job and s not in ("RUNNING", "PENDING")],
        seconds=180,
    )
    assert ended == ["TIMEOUT"]
    document = forgotten(lane)

    # What the batch script left: the limit and stop traps, the relayed signal's ends, and the
    # end of the step that ignored it, which Slurm's SIGTERM at the limit ended after the stop.
    assert lane.marker_kinds(allocation) == [
        f"{job}.end.0.143",
        f"{job}.end.1.138",
        f"{job}.end.2.75",
        f"{job}.end.3.0",
        f"{job}.limit",
        f"{job}.start",
        f"{job}.stop",
    ]
    log = (Path(lane.log_root) / f"servatus-{allocation}-{job}.out").read_text()
    assert f"*** JOB {job} ON " in log and "DUE TO TIME LIMIT ***" in log, log
    [attempt] = document["attempts"]
    seen = attempt["observation"]
    start, limit, stop = seen["start"], seen["limit"], seen["stop"]
    assert start < limit < stop
    # Sent at a 30 s check 20 to 50 s before the limit, enforced at a check up to 30 s after it.
    assert 20 <= stop - limit <= 85
    ignores, dies, yields, finishes = seen["ends"]
    assert ignores["at"] >= stop
    assert all(limit <= end["at"] < stop for end in (dies, yields, finishes))

    tasks = {task["key"]: task for task in document["tasks"]}
    outcome = {
        key: (task["execution"], task["detail"], task["exit_code"], task["run_time"]["complete"])
        for key, task in tasks.items()
    }
    assert outcome == {
        "ignores": ("STOPPED", "time limit", None, True),
        "dies": ("FAILED", None, 138, True),
        "yields": ("STOPPED", "yielded", 75, True),
        "finishes": ("SUCCEEDED", None, 0, True),
    }
    assert 60 <= tasks["ignores"]["run_time"]["total"] <= 100  # --time=1, checked every 30 s
    for key, end in (("dies", dies), ("yields", yields), ("finishes", finishes)):
        assert tasks[key]["run_time"]["total"] == round(end["at"] - start)
    human = lane.ok("status", "state").stdout
    assert "STOPPED (time limit)" in human, human


def test_a_cancel_racing_steps_that_are_just_ending(endings: Endings) -> None:
    """A step the cancel killed never reads FAILED. Printed: how many killed steps returned
    before the batch shell's stop marker, the race the watchers close by asking squeue."""
    lane = endings.racing
    document = forgotten(lane)
    tasks = {task["key"]: task for task in document["tasks"]}
    killed, by_itself, early = 0, 0, []
    for attempt in document["attempts"]:
        seen = attempt["observation"]
        stop = seen["stop"]
        assert stop is not None, attempt  # every round was cancelled while its steps ran
        logs = f"servatus-{attempt['allocation_id']}-{attempt['job']}"
        for slot, (key, end) in enumerate(zip(attempt["task_keys"], seen["ends"], strict=True)):
            task = tasks[key]
            reading = (task["execution"], task["detail"], task["exit_code"])
            if end is not None and end["exit_code"] == 3:  # it ended by itself, during the cancel
                by_itself += 1
                assert reading in (("FAILED", None, 3), ("STOPPED", None, None)), (key, end)
                assert (reading[0] == "STOPPED") == (end["at"] >= stop), (key, end, stop)
                continue
            killed += 1
            assert reading == ("STOPPED", None, None), (key, end, stop)
            returned = (Path(lane.log_root) / f"{logs}.{slot}.out").stat().st_mtime
            if end is not None and returned < stop:
                early.append(f"{stop - returned:.3f}/{end['at'] - returned:.3f}")
                assert end["at"] - returned < 0.9, (key, end, stop)  # squeue said, no 1 s guess
    print(
        f"cancel race: {killed} steps killed, {by_itself} ended by themselves; killed steps that "
        f"returned before the stop marker (s to the stop / s to their end): {early or 'none'}"
    )
    assert killed and by_itself, (killed, by_itself)
