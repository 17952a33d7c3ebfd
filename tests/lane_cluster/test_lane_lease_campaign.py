"""Leases through the product on the real cluster: ``plan --hold``, ``submit``, ``start``,
``status``, ``cancel``, ``logs`` and ``reconcile`` as a user runs them (issue #15, "Proof on the
real cluster").

Each scenario has its own lane and runs in its own thread, all at once, so the file costs about
its longest scenario (the lease links, which wait for a 2-minute link to reach its limit). A
scenario only records what it saw; the tests below judge it, so one failing scenario does not
hide what the others showed.

Over SSH: the spec's walk-through command by command, three steps into two slots, and ``start``
SIGKILLed once its orders were offered. On the login node: the spec's Python example as written,
and lease links (``--hold 1 --max-links 2``).
"""

from __future__ import annotations

import json
import re
import subprocess
import threading
import time
import traceback
from collections.abc import Callable, Collection, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from lane_helpers import (
    FINAL,
    INNER_PYTHON,
    STEPPED,
    Lane,
    make_lane,
    steps_of,
    task_of,
    wait_until,
)

from cluster import prelude
from cluster.fixture import SlurmCluster

pytestmark = pytest.mark.cluster


def _prepare(lane: Lane, *, time_limit: str = "00:05:00", signal: str = "00:00:20") -> None:
    lane.put_worker()
    lane.limit(time_limit, signal)


def _tasks(lane: Lane, name: str, tasks: dict[str, list[str]]) -> str:
    return lane.tasks_file(
        [lane.worker_task(key, *args) for key, args in tasks.items()], f"{name}.jsonl"
    )


def _executions(lane: Lane) -> dict[str, str]:
    return {task["key"]: task["execution"] for task in lane.status()["tasks"]}


def _wait_task(
    lane: Lane, key: str, wanted: Collection[str], seconds: float = 150
) -> dict[str, Any]:
    return lane.wait_for(
        f"{key} in {sorted(wanted)}",
        lambda document: task_of(document, key)["execution"] in wanted,
        seconds=seconds,
    )


def _started_at(lane: Lane, step: str) -> float | None:
    found = sorted(Path(lane.log_root).glob(f"servatus-{step}.*.step-start"))
    return found[0].stat().st_mtime if found else None


# -- scenarios ----------------------------------------------------------------------------------


def walk_through(lane: Lane, seen: dict[str, Any]) -> None:
    """The spec's walk-through: 2 slots, two steps, ``status``, ``cancel --task``, ``start
    --retry`` in the same lease, ``logs``, ``cancel --allocation`` of the lease."""
    _prepare(lane)
    lane.ok("ensure", "state", _tasks(lane, "all", {"train-a": ["usr1", "3"]}))
    links, seen["plan"] = lane.lease("--hold", "2")
    [(lease, job)] = links
    seen["lease"], seen["job"] = lease, job
    wait_until("the lease running", lambda: lane.job_state(job) == "RUNNING", seconds=90)

    started = time.time()
    first = lane.ok(
        "start", "state", _tasks(lane, "train", {"train-a": ["usr1", "3"]}), "--lease", lease
    )
    returned = time.time()
    seen["start"] = first.stdout
    _wait_task(lane, "train-a", {"RUNNING"}, seconds=60)
    seen["running_after"] = time.time() - returned
    seen["start_took"] = returned - started
    [(step, step_job, key)] = STEPPED.findall(first.stdout)
    seen["step"], seen["step_job"], seen["step_key"] = step, int(step_job), key
    at = _started_at(lane, step)
    seen["marker_after"] = None if at is None else at - returned

    second = lane.ok(
        "start", "state", _tasks(lane, "eval", {"eval-1": ["sleep", "240"]}), "--lease", lease
    )
    seen["second"] = second.stdout
    _wait_task(lane, "eval-1", {"RUNNING"}, seconds=60)
    seen["status_text"] = lane.ok("status", "state").stdout
    seen["status_json"] = lane.status()

    seen["cancel_task"] = lane.servatus("cancel", "state", "--task", "train-a")
    seen["after_cancel"] = _wait_task(lane, "train-a", FINAL, seconds=90)
    seen["lease_after_cancel"] = lane.job_state(job)
    seen["eval_after_cancel"] = task_of(lane.status(), "eval-1")["execution"]

    retried = lane.servatus("start", "state", "train.jsonl", "--lease", lease, "--retry", "train-a")
    seen["retry"] = retried
    _wait_task(lane, "train-a", {"RUNNING"}, seconds=60)
    seen["runs_after_retry"] = lane.run_records("train-a")
    logs = lane.servatus("logs", "state", "--task", "train-a", "--output", "train-a.log")
    seen["logs"] = logs
    log = lane.launch / "train-a.log"
    seen["log_text"] = log.read_text() if log.exists() else None

    seen["cancel_lease"] = lane.servatus("cancel", "state", "--allocation", lease)
    seen["final"] = lane.wait_for(
        "every Task final",
        lambda document: all(task["execution"] in FINAL for task in document["tasks"]),
        seconds=120,
    )
    seen["lease_at_end"] = lane.job_state(job)
    seen["runs"] = {key: lane.run_records(key) for key in ("train-a", "eval-1")}


def three_into_two(lane: Lane, seen: dict[str, Any]) -> None:
    """Three one-slot steps into two slots: the third waits QUEUED, then runs when one frees."""
    _prepare(lane)
    # All 20 s: whichever two the lease takes first, the third reads QUEUED for 20 s, which slow
    # status polls on a loaded machine still catch.
    tasks = {"q1": ["sleep", "20"], "q2": ["sleep", "20"], "q3": ["sleep", "20"]}
    lane.ok("ensure", "state", _tasks(lane, "all", tasks))
    [(lease, job)], _ = lane.lease("--hold", "2")
    seen["lease"], seen["job"] = lease, job
    seen["start"] = lane.ok("start", "state", "all.jsonl", "--lease", lease).stdout
    readings: list[dict[str, str]] = []

    def two_running() -> dict[str, str] | None:
        now = _executions(lane)
        readings.append(now)
        return now if list(now.values()).count("RUNNING") == 2 else None

    seen["two_running"] = wait_until("two steps running", two_running, seconds=120)
    seen["final"] = lane.wait_for(
        "all three final",
        lambda document: all(task["execution"] in FINAL for task in document["tasks"]),
        seconds=240,
    )
    seen["readings"] = readings
    seen["runs"] = {key: lane.run_records(key) for key in tasks}
    steps = {key: steps_of(seen["final"], key)[-1]["allocation_id"] for key in tasks}
    seen["spans"] = {key: _started_at(lane, step) for key, step in steps.items()}
    lane.servatus("cancel", "state", "--allocation", lease)


KILL_AFTER_OFFER = """\
#!/bin/sh
here=$(dirname "$0")
case "$*" in
*servatus.order/1*offered*) ;;
*) exec /usr/bin/ssh "$@" ;;
esac
if mv "$here/armed" "$here/fired" 2>/dev/null; then
    /usr/bin/ssh "$@"
    code=$?
    kill -KILL "$PPID"
    exit "$code"
fi
exec /usr/bin/ssh "$@"
"""


def killed_start(lane: Lane, seen: dict[str, Any]) -> None:
    """``start`` SIGKILLed right after its orders were offered: ``reconcile`` resolves each step
    at once, and nothing runs twice."""
    _prepare(lane)
    tasks = {"k1": ["sleep", "15"], "k2": ["sleep", "15"]}
    lane.ok("ensure", "state", _tasks(lane, "all", tasks))
    [(lease, job)], _ = lane.lease("--hold", "2")
    seen["lease"], seen["job"] = lease, job
    wrappers = lane.launch / "wrappers"
    wrappers.mkdir()
    lane.put(wrappers / "ssh", KILL_AFTER_OFFER, 0o755)
    (wrappers / "armed").write_text("1\n")
    lane.extra_path.insert(0, str(wrappers))
    try:
        seen["start"] = lane.servatus("start", "state", "all.jsonl", "--lease", lease)
    finally:
        lane.extra_path.remove(str(wrappers))
    seen["fired"] = (wrappers / "fired").exists()
    seen["before"] = lane.status()
    began = time.monotonic()
    seen["reconcile"] = lane.servatus("reconcile", "state")
    seen["reconcile_took"] = time.monotonic() - began
    seen["after"] = lane.status()
    seen["again"] = lane.servatus("start", "state", "all.jsonl", "--lease", lease)
    seen["final"] = lane.wait_for(
        "both final",
        lambda document: all(task["execution"] in FINAL for task in document["tasks"]),
        seconds=180,
    )
    seen["runs"] = {key: lane.run_records(key) for key in tasks}
    lane.servatus("cancel", "state", "--allocation", lease)


PYTHON_EXAMPLE = """\
import json
import sys

from servatus import Campaign, Profile, Task

campaign = Campaign.ensure("gpu", [Task("train-a", [sys.argv[1], "step.py", "exit", "0"])])
held = campaign.hold(Profile.load("SERVATUS.toml", name="cpu"), slots=2)  # --hold 2
lease = campaign.submit(held).receipts[0].allocation_id

campaign.append([Task("eval-7", [sys.argv[1], "step.py", "sleep", "300"], stdin=b'{"ckpt": 7}')])
campaign.submit(campaign.plan(lease=lease, only=["eval-7"]))
campaign.cancel(tasks=["eval-7"])
print(json.dumps({"lease": lease}))
"""


def python_example(lane: Lane, seen: dict[str, Any]) -> None:
    """The spec's lease example in Python, as written (its lines in order, with this cluster's
    profile and worker), on the login node: the step is cancelled right after it is started."""
    _prepare(lane)
    lane.put(lane.launch / "example.py", PYTHON_EXAMPLE)
    ran = lane.run([INNER_PYTHON, "example.py", INNER_PYTHON], timeout=120)
    seen["code"], seen["stderr"] = ran.returncode, ran.stderr
    seen["first"] = json.loads(ran.stdout.splitlines()[-1])
    seen["final"] = lane.wait_for(
        "eval-7 final",
        lambda document: task_of(document, "eval-7")["execution"] in FINAL,
        seconds=120,
        state="gpu",
    )
    seen["runs"] = lane.run_records("eval-7")
    lane.servatus("cancel", "gpu", "--allocation", seen["first"]["lease"])


def lease_links(lane: Lane, seen: dict[str, Any]) -> None:
    """``--hold 1 --max-links 2`` of 2-minute leases: a step started with the first link's id
    once that link ended runs in the second.

    Two minutes, not one: slurmctld sends the pre-limit signal at its first 30-second check
    once the job is within ``signal_before_end`` plus 30 s of its end, so a 1-minute link may be
    signalled 10 s after it starts, which stops a step started a few seconds late (seen in CI).
    """
    _prepare(lane, time_limit="00:02:00", signal="00:00:20")
    lane.ok(
        "ensure", "state", _tasks(lane, "all", {"early": ["sleep", "5"], "late": ["sleep", "5"]})
    )
    links, seen["plan"] = lane.lease("--hold", "1", "--max-links", "2")
    seen["links"] = links
    (first, first_job), (_second, second_job) = links
    wait_until("link 1 running", lambda: lane.job_state(first_job) == "RUNNING", seconds=90)
    seen["early"] = lane.ok(
        "start", "state", _tasks(lane, "early", {"early": ["sleep", "5"]}), "--lease", first
    ).stdout
    seen["second_while_first"] = lane.job_state(second_job)
    wait_until("link 2 running", lambda: lane.job_state(second_job) == "RUNNING", seconds=300)
    seen["first_then"] = lane.job_state(first_job)
    seen["late"] = lane.servatus(
        "start", "state", _tasks(lane, "late", {"late": ["sleep", "5"]}), "--lease", first
    )
    seen["final"] = lane.wait_for(
        "both final",
        lambda document: all(task["execution"] in FINAL for task in document["tasks"]),
        seconds=120,
    )
    lane.servatus("cancel", "state", "--allocation", first)


def variables(lane: Lane, seen: dict[str, Any]) -> None:
    """A step's reserved variables as the spec lists them, under ``--budget``: recorded by the
    chain worker, which writes every ``SERVATUS_*`` variable it was given."""
    _prepare(lane)
    lane.put_chain_worker()
    task = {"key": "v", "args": [INNER_PYTHON, "chain_step.py", "exit0"]}
    lane.ok("ensure", "state", lane.tasks_file([task], "v.jsonl"))
    [(lease, job)], _ = lane.lease("--hold", "1")
    seen["lease"], seen["job"] = lease, job
    seen["start"] = lane.ok("start", "state", "v.jsonl", "--lease", lease, "--budget", "00:10:00")
    seen["final"] = _wait_task(lane, "v", FINAL, seconds=120)
    record = lane.runs / f"v.{job}.json"
    seen["record"] = json.loads(record.read_text()) if record.exists() else None
    lane.servatus("cancel", "state", "--allocation", lease)


def at_the_limit(lane: Lane, seen: dict[str, Any]) -> None:
    """A 1-minute lease reaches its pre-limit signal with three steps running: one exits 0 on
    ``SIGUSR1``, one exits 3, one ignores it and is killed at the limit."""
    _prepare(lane, time_limit="00:01:00", signal="00:00:20")
    tasks = {"zero": ["usr1", "0"], "three": ["usr1", "3"], "keeps": ["ignore", "300"]}
    lane.ok("ensure", "state", _tasks(lane, "all", tasks))
    [(lease, job)], _ = lane.lease("--hold", "3")
    seen["lease"], seen["job"] = lease, job
    wait_until("the lease running", lambda: lane.job_state(job) == "RUNNING", seconds=90)
    seen["start"] = lane.ok("start", "state", "all.jsonl", "--lease", lease).stdout
    seen["final"] = lane.wait_for(
        "every Task final",
        lambda document: all(task["execution"] in FINAL for task in document["tasks"]),
        seconds=240,
    )
    seen["limit"] = sorted(Path(lane.log_root).glob(f"servatus-{lease}.{job}.limit"))


SCENARIOS: dict[str, tuple[str, Callable[[Lane, dict[str, Any]], None]]] = {
    "walk": ("ssh", walk_through),
    "three": ("ssh", three_into_two),
    "killed": ("ssh", killed_start),
    "python": ("local", python_example),
    "links": ("local", lease_links),
    "variables": ("ssh", variables),
    "limit": ("ssh", at_the_limit),
}


@prelude.scenario(seconds=134)
def every_scenario(cluster: SlurmCluster, base: Path) -> Iterator[dict[str, dict[str, Any]]]:
    """The scenarios above, each in its own lane and thread, beside the lane's other slow
    scenarios (``cluster.prelude``)."""
    for name in SCENARIOS:
        (base / name).mkdir()
    lanes = {
        name: make_lane(cluster, transport, base / name, f"lease-{name}")
        for name, (transport, _) in SCENARIOS.items()
    }
    seen: dict[str, dict[str, Any]] = {name: {} for name in SCENARIOS}
    lock = threading.Lock()

    def run(name: str) -> None:
        try:
            SCENARIOS[name][1](lanes[name], seen[name])
        except BaseException:  # the tests report it; the other scenarios go on
            with lock:
                seen[name]["error"] = traceback.format_exc()

    try:
        with ThreadPoolExecutor(len(SCENARIOS)) as pool:
            list(pool.map(run, SCENARIOS))
        yield seen
    finally:
        for lane in lanes.values():
            lane.cleanup()


@pytest.fixture(scope="module")
def leases() -> Iterator[dict[str, dict[str, Any]]]:
    with prelude.outcome(__name__) as seen:
        yield seen


def _ok(seen: dict[str, Any]) -> dict[str, Any]:
    assert "error" not in seen, seen["error"]
    return seen


def _done(result: subprocess.CompletedProcess[str]) -> None:
    assert result.returncode == 0, (result.returncode, result.stdout, result.stderr)


def test_the_walk_through_holds_two_slots_and_starts_a_step_within_seconds(
    leases: dict[str, dict[str, Any]],
) -> None:
    seen = _ok(leases["walk"])
    assert re.search(r"^lease: 2 slots of 1 CPUs, 100 MiB, 00:05:00$", seen["plan"], re.M), seen[
        "plan"
    ]
    assert seen["step_job"] == seen["job"] and seen["step_key"] == "train-a"
    # The spec: 5 s polling plus srun; status reads it RUNNING within a few polls of that.
    assert seen["marker_after"] is not None and seen["marker_after"] < 12, seen
    assert seen["running_after"] < 20, seen


def test_the_walk_through_status_shows_steps_within_their_lease(
    leases: dict[str, dict[str, Any]],
) -> None:
    seen = _ok(leases["walk"])
    lease, job, step = seen["lease"], seen["job"], seen["step"]
    lines = seen["status_text"].splitlines()
    [row] = [line for line in lines if line.split()[:1] == ["train-a"]]
    assert row.split()[1:3] == ["UNOBSERVED", "RUNNING"], row
    assert row.endswith(f"{step} (lease {lease})"), row
    assert f"lease {lease}: job {job} RUNNING, 2 slots" in lines, lines
    document = seen["status_json"]
    [held] = [a for a in document["attempts"] if a["allocation_id"] == lease]
    assert held["task_keys"] == [] and held["slots"] == 2 and held["within"] is None
    [attempt] = steps_of(document, "train-a")
    assert attempt["within"] == lease and attempt["job"] == job and attempt["slots"] is None
    assert attempt["observation"]["step"] is True


def test_the_walk_through_stops_a_step_and_starts_it_again_in_the_same_lease(
    leases: dict[str, dict[str, Any]],
) -> None:
    seen = _ok(leases["walk"])
    _done(seen["cancel_task"])
    stopped = task_of(seen["after_cancel"], "train-a")
    assert stopped["execution"] == "STOPPED", stopped
    assert seen["lease_after_cancel"] == "RUNNING"
    assert seen["eval_after_cancel"] == "RUNNING"
    _done(seen["retry"])
    assert len(seen["runs_after_retry"]) == 2, seen["runs_after_retry"]
    _done(seen["logs"])
    assert (
        seen["log_text"] is not None and f"train-a started in job {seen['job']}" in seen["log_text"]
    )


def test_the_walk_through_cancel_of_the_lease_ends_every_step(
    leases: dict[str, dict[str, Any]],
) -> None:
    seen = _ok(leases["walk"])
    _done(seen["cancel_lease"])
    assert seen["lease_at_end"] not in ("RUNNING", "PENDING")
    final = {task["key"]: task["execution"] for task in seen["final"]["tasks"]}
    assert final == {"train-a": "STOPPED", "eval-1": "STOPPED"}, final
    assert [len(runs) for runs in seen["runs"].values()] == [2, 1], seen["runs"]


def test_a_third_step_into_two_slots_waits_queued_then_runs(
    leases: dict[str, dict[str, Any]],
) -> None:
    seen = _ok(leases["three"])
    two = seen["two_running"]
    assert sorted(two.values()) == ["QUEUED", "RUNNING", "RUNNING"], two
    final = {task["key"]: task["execution"] for task in seen["final"]["tasks"]}
    assert final == {"q1": "SUCCEEDED", "q2": "SUCCEEDED", "q3": "SUCCEEDED"}, final
    assert all(len(runs) == 1 for runs in seen["runs"].values()), seen["runs"]
    [waiting] = [key for key, state in two.items() if state == "QUEUED"]
    others = [at for key, at in seen["spans"].items() if key != waiting]
    assert seen["spans"][waiting] is not None and all(at is not None for at in others)
    assert seen["spans"][waiting] > min(others) + 5, seen["spans"]


def test_a_start_killed_after_its_offer_is_resolved_at_once_by_reconcile(
    leases: dict[str, dict[str, Any]],
) -> None:
    seen = _ok(leases["killed"])
    assert seen["fired"] and seen["start"].returncode == -9, seen["start"]
    before = {task["key"]: task["execution"] for task in seen["before"]["tasks"]}
    assert before == {"k1": "UNRESOLVED", "k2": "UNRESOLVED"}, before
    _done(seen["reconcile"])
    after = {task["key"]: task["execution"] for task in seen["after"]["tasks"]}
    assert "UNRESOLVED" not in after.values(), after
    final = {task["key"]: task["execution"] for task in seen["final"]["tasks"]}
    assert final == {"k1": "SUCCEEDED", "k2": "SUCCEEDED"}, final
    assert all(len(runs) == 1 for runs in seen["runs"].values()), seen["runs"]


def test_the_spec_python_example_runs_as_written(leases: dict[str, dict[str, Any]]) -> None:
    seen = _ok(leases["python"])
    assert seen["code"] == 0, seen["stderr"]
    [step] = steps_of(seen["final"], "eval-7")
    assert step["within"] == seen["first"]["lease"]
    eval7 = task_of(seen["final"], "eval-7")
    assert eval7["execution"] == "STOPPED", eval7
    # Withdrawn before the lease took it, or stopped at once: it never ran to its end.
    assert len(seen["runs"]) <= 1
    if not seen["runs"]:
        assert eval7["detail"] == "never started", eval7


def test_a_step_started_with_the_first_link_id_runs_in_the_second_once_the_first_ended(
    leases: dict[str, dict[str, Any]],
) -> None:
    seen = _ok(leases["links"])
    (first, _), (second, second_job) = seen["links"]
    assert seen["second_while_first"] == "PENDING"
    _done(seen["late"])
    [(_step, job, key)] = STEPPED.findall(seen["late"].stdout)
    assert (int(job), key) == (second_job, "late")
    final = seen["final"]
    assert steps_of(final, "early")[-1]["within"] == first
    assert steps_of(final, "late")[-1]["within"] == second
    assert {task["key"]: task["execution"] for task in final["tasks"]} == {
        "early": "SUCCEEDED",
        "late": "SUCCEEDED",
    }


def test_a_step_is_given_the_spec_reserved_variables(leases: dict[str, dict[str, Any]]) -> None:
    seen = _ok(leases["variables"])
    assert task_of(seen["final"], "v")["execution"] == "SUCCEEDED"
    # status shows the step's budget as a chain's: its one link, of one, and the budget
    assert task_of(seen["final"], "v")["link"] == {"position": 1, "of": 1, "budget": 600}
    record = seen["record"]
    assert record is not None
    given = {name: record.get(name) for name in (
        "SERVATUS_SLOT", "SERVATUS_LINK", "SERVATUS_LINKS", "SERVATUS_RUN_TIME",
        "SERVATUS_BUDGET", "SERVATUS_JOB_ID", "SERVATUS_TASK_KEY",
    )}  # fmt: skip
    assert given == {
        "SERVATUS_SLOT": "0",
        "SERVATUS_LINK": "1",
        "SERVATUS_LINKS": "1",
        "SERVATUS_RUN_TIME": "0",
        "SERVATUS_BUDGET": "600",
        "SERVATUS_JOB_ID": str(seen["job"]),
        "SERVATUS_TASK_KEY": "v",
    }, record
    [step] = steps_of(seen["final"], "v")
    assert record["SERVATUS_ALLOCATION_ID"] == step["allocation_id"]
    assert str(record["SERVATUS_JOB_END_TIME"]).isdigit()


def test_at_the_pre_limit_signal_each_running_step_reads_as_the_spec_says(
    leases: dict[str, dict[str, Any]],
) -> None:
    seen = _ok(leases["limit"])
    assert seen["limit"], "the lease had no pre-limit signal"
    final = {t["key"]: (t["execution"], t["detail"]) for t in seen["final"]["tasks"]}
    assert final == {
        "zero": ("SUCCEEDED", None),
        "three": ("STOPPED", "time limit"),
        "keeps": ("STOPPED", "time limit"),
    }, final
