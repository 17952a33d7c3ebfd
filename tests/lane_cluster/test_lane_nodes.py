"""Servatus on the test cluster's extra nodes n1, n2, n3 (issue #34): work placed on several nodes,
and a node that fails for real and comes back.

The lane's SERVATUS.toml targets partition ``nodes`` (n1..n3, each its own slurmd); profiles
place work with Slurm features (each node has its own name as one): ``pair`` on ``n1|n2``,
``single`` on ``n1|n2`` one Task per allocation, ``on3`` on ``n3``. Two scenarios run at once,
each in its own lane and thread, driving the ``servatus`` CLI as a user would:

``across`` (on the login node): a budgeted chain of two links on ``n1|n2``. While link 1 runs,
    the node it runs on is drained, then link 1 yields (75): link 2 can only start on the other
    node. Which node each link's job ran on is read from Slurm (``squeue %N``, polled every second
    while the jobs are listed).
``failure`` (over SSH): a lease on n3 with one step running in it, one-Task allocations on
    ``n1|n2`` beside it, a budgeted chain whose link 1 runs on n3, and a packed allocation of three
    Tasks on n3 (one succeeded, one failed with exit 3, one still running). Then n3 fails for real
    (``harness.fail_node``: its slurmd, every slurmstepd of it and all their processes SIGKILLed,
    then ``State=DOWN``). The test reads what ``status``/``status --json`` say while Slurm lists
    the jobs NODE_FAIL and once it forgot them, runs ``reconcile``, plans ``--retry-failed``
    (which must take the failed Task only) and ``--retry`` of each lost Task, submits while n3 is
    still down, returns n3, and sees every rerun run there once and succeed. The chain's link 2
    waits (``afterany``) for a node that is down, so Slurm still lists it and ``--retry`` of the
    lost Task is refused until it is cancelled (``cancel --task``) and forgotten.

Every run leaves a record (``lane_node_worker.py``), so the test counts runs per Task and checks
that a rerun began only after its first run's process was killed.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from lane_helpers import (
    HERE,
    INNER_PYTHON,
    LEASED,
    STEPPED,
    Lane,
    allocation_ids,
    make_lane,
    task_of,
    wait_until,
)

from cluster import harness, prelude
from cluster.fixture import SlurmCluster

pytestmark = pytest.mark.cluster

TIME_LIMIT = "00:02:00"
SIGNAL = "00:00:40"
BUDGET = "00:04:00"
"""Two full links of two minutes."""
FAILED_NODE = "n3"
PAIR = ("n1", "n2")

PROFILES = """
[profiles.pair.target]
constraint = "n1|n2"

[profiles.single.target]
constraint = "n1|n2"
max_tasks_per_allocation = 1

[profiles.on3.target]
constraint = "n3"
"""


def _prepare(lane: Lane) -> None:
    """The lane's TOML on partition ``nodes`` with the profiles above, the worker, gates/."""
    lane.limit(TIME_LIMIT, SIGNAL)
    path = lane.launch / "SERVATUS.toml"
    text = path.read_text()
    wanted = f'partitions = ["{harness.NODES_PARTITION}"]'
    text = text.replace(f'partitions = ["{harness.PARTITION}"]', wanted, 1)
    assert wanted in text
    path.unlink()
    lane.put(path, text + PROFILES)
    lane.put(Path(lane.work_root) / "node_step.py", (HERE / "lane_node_worker.py").read_text())
    lane.cluster.make_dirs(f"{lane.work_root}/gates")


def _tasks(lane: Lane, name: str, tasks: dict[str, str]) -> str:
    documents = [
        {"key": key, "args": [INNER_PYTHON, "node_step.py", modes]} for key, modes in tasks.items()
    ]
    return lane.tasks_file(documents, f"{name}.jsonl")


def _records(lane: Lane, key: str) -> list[dict[str, Any]]:
    """Every run of ``key``, oldest first, each with ``ended`` (time, exit code) or None."""
    found = []
    for path in sorted(lane.runs.glob(f"{key}.*.json")):
        record = json.loads(path.read_text())
        end = path.with_suffix(".end")
        if end.exists():
            at, code = end.read_text().split()
            record["ended"] = (float(at), int(code))
        else:
            record["ended"] = None
        found.append(record)
    return sorted(found, key=lambda r: r["started"])


def _nodes_of(lane: Lane) -> dict[int, str]:
    """Each of alice's jobs Slurm lists, to the node list it ran or runs on (``%N``)."""
    listed = lane.cluster.login(
        [f"{lane.cluster.slurm_bin}/squeue", "--me", "-h", "--states=all", "-o", "%A|%N"],
        timeout=30,
    )
    assert listed.returncode == 0, listed.stderr
    rows = (line.split("|") for line in listed.stdout.split())
    return {int(job): nodes for job, nodes in rows if nodes}


def _states(lane: Lane) -> dict[int, str]:
    return {job: state for job, _name, state in lane.squeue()}


def _watch_nodes(lane: Lane, seen: dict[int, str], stop: threading.Event) -> None:
    """Keep every node Slurm named for each job: a job forgets its node list once it ends."""
    while not stop.is_set():
        for job, nodes in _nodes_of(lane).items():
            seen.setdefault(job, nodes)
        stop.wait(1)


def _plan(lane: Lane, state: str, *args: str, output: str) -> dict[str, Any]:
    """``plan`` with ``args`` into ``output``; its exit code, stdout and selected keys."""
    result = lane.servatus("plan", state, *args, "--output", output)
    selected: list[str] = []
    path = lane.launch / output
    if result.returncode == 0 and path.exists():
        selected = sorted(json.loads(path.read_text())["decision"]["selected"])
    return {"code": result.returncode, "out": result.stdout, "err": result.stderr, "keys": selected}


def _status_code(lane: Lane, state: str) -> tuple[int, str]:
    result = lane.servatus("status", state)
    return result.returncode, result.stdout


def _executions(lane: Lane, state: str) -> dict[str, tuple[str, str | None, int | None]]:
    return {
        task["key"]: (task["execution"], task["detail"], task["exit_code"])
        for task in lane.status(state)["tasks"]
    }


def _wait(
    lane: Lane, state: str, what: str, done: Callable[[dict[str, Any]], bool], seconds: float
) -> dict[str, Any]:
    return lane.wait_for(what, done, seconds=seconds, state=state)


def _is(key: str, *executions: str) -> Callable[[dict[str, Any]], bool]:
    return lambda document: task_of(document, key)["execution"] in executions


# -- scenario: links on different nodes ---------------------------------------------------------


@contextlib.contextmanager
def _watching_nodes(lane: Lane) -> Iterator[dict[int, str]]:
    """The lane prepared, and each of its jobs' node, read from Slurm while the block runs."""
    _prepare(lane)
    nodes: dict[int, str] = {}
    stop = threading.Event()
    watcher = threading.Thread(target=_watch_nodes, args=(lane, nodes, stop), daemon=True)
    watcher.start()
    try:
        yield nodes
    finally:
        stop.set()
        watcher.join()


def across(lane: Lane, seen: dict[str, Any]) -> None:
    with _watching_nodes(lane) as nodes:
        lane.ok("ensure", "chain", _tasks(lane, "chain", {"walk": "gate75,exit0"}))
        seen["plan"] = _plan(
            lane, "chain", "--profile", "pair", "--budget", BUDGET, output="c.json"
        )
        seen["submit"] = lane.servatus("submit", "chain", "c.json")
        first = wait_until("walk's link 1 running", lambda: _records(lane, "walk"), seconds=90)
        seen["link1_record"] = first[0]
        ran_on = _nodes_of(lane)[first[0]["job"]]
        seen["drained"] = ran_on
        lane.cluster.drain_node(ran_on, "servatus-test: link 2 must go elsewhere")
        try:
            lane.put(Path(lane.work_root) / "gates" / "walk.1", "")
            seen["final"] = _wait(
                lane, "chain", "walk SUCCEEDED", _is("walk", "SUCCEEDED"), seconds=120
            )
        finally:
            lane.cluster.undrain_node(ran_on)
        seen["status"] = _status_code(lane, "chain")
        time.sleep(2)
    seen["records"] = _records(lane, "walk")
    seen["nodes"] = nodes


# -- scenario: a node fails under a lease step, a chain link and a packed allocation -------------


def failure(lane: Lane, seen: dict[str, Any]) -> None:
    with _watching_nodes(lane) as nodes:
        seen["nodes"] = nodes
        try:
            _failure(lane, seen)
        finally:
            seen["records"] = {
                key: _records(lane, key)
                for key in ("plain-a", "plain-b", "lost-link", "p-ok", "p-bad", "p-run", "l-run")
            }


def _failure(lane: Lane, seen: dict[str, Any]) -> None:
    # The lease on n3 first: it holds one slot.
    lane.ok("ensure", "lease", _tasks(lane, "lease", {"l-run": "hangonce"}))
    planned = lane.ok("plan", "lease", "--profile", "on3", "--hold", "1", "--output", "l.json")
    held = lane.ok("submit", "lease", "l.json")
    [(lease, lease_job)] = [(i, int(j)) for i, j in LEASED.findall(held.stdout)]
    seen["lease"], seen["lease_job"], seen["lease_plan"] = lease, lease_job, planned.stdout
    # Plain one-Task allocations on the other nodes, running through the failure: each waits for
    # its gate, opened once n3 has failed (a fixed sleep could end first on a loaded machine).
    lane.ok("ensure", "plain", _tasks(lane, "plain", {"plain-a": "gate0", "plain-b": "gate0"}))
    seen["plain_plan"] = _plan(lane, "plain", "--profile", "single", output="p.json")
    lane.ok("submit", "plain", "p.json")
    # A budgeted chain on n3, and a packed allocation of three Tasks on n3.
    lane.ok("ensure", "chain", _tasks(lane, "chain", {"lost-link": "hangonce"}))
    seen["chain_plan"] = _plan(
        lane, "chain", "--profile", "on3", "--budget", BUDGET, output="c.json"
    )
    lane.ok("submit", "chain", "c.json")
    packed = {"p-ok": "exit0", "p-bad": "failonce", "p-run": "hangonce"}
    lane.ok("ensure", "packed", _tasks(lane, "packed", packed))
    seen["packed_plan"] = _plan(lane, "packed", "--profile", "on3", output="k.json")
    lane.ok("submit", "packed", "k.json")
    wait_until("the lease running", lambda: lane.job_state(lease_job) == "RUNNING", seconds=60)
    started = lane.ok("start", "lease", "lease.jsonl", "--lease", lease)
    seen["step"] = STEPPED.findall(started.stdout)

    # Everything in place: the step, link 1 and p-run running, p-ok and p-bad done.
    _wait(lane, "lease", "l-run RUNNING", _is("l-run", "RUNNING"), seconds=60)
    _wait(lane, "chain", "lost-link RUNNING", _is("lost-link", "RUNNING"), seconds=60)
    _wait(
        lane,
        "packed",
        "p-ok, p-bad done and p-run running",
        lambda d: (
            [task_of(d, k)["execution"] for k in ("p-ok", "p-bad", "p-run")]
            == ["SUCCEEDED", "FAILED", "RUNNING"]
        ),
        seconds=60,
    )
    _wait(
        lane,
        "plain",
        "both plain Tasks RUNNING",
        lambda d: all(t["execution"] == "RUNNING" for t in d["tasks"]),
        seconds=60,
    )
    wait_until(
        "a run record of each running Task",
        lambda: all(_records(lane, k) for k in ("l-run", "lost-link", "p-run")),
        seconds=30,
    )
    seen["before"] = {state: lane.status(state) for state in ("lease", "chain", "packed", "plain")}
    seen["jobs_before"] = _nodes_of(lane)

    # n3 fails.
    seen["failed_at"] = time.time()
    seen["killed"] = lane.cluster.fail_node(FAILED_NODE, "servatus-test: NODE_FAIL")
    seen["left_on_node"] = harness.node_processes(FAILED_NODE)
    seen["node_states_after_fail"] = lane.cluster.node_states()
    for key in ("plain-a", "plain-b"):
        lane.put(Path(lane.work_root) / "gates" / f"{key}.1", "")

    def ended() -> dict[int, str] | None:
        states = _states(lane)
        return states if states.get(lease_job) not in ("RUNNING", None) else None

    seen["slurm_after_fail"] = wait_until("Slurm to end n3's jobs", ended, seconds=30)
    seen["ending"] = {
        state: _executions(lane, state) for state in ("lease", "chain", "packed", "plain")
    }
    seen["ending_status"] = {state: _status_code(lane, state) for state in ("lease", "chain")}

    # The plain Tasks on n1/n2 finish as if nothing happened.
    seen["plain_final"] = _wait(
        lane,
        "plain",
        "both plain Tasks SUCCEEDED",
        lambda d: all(t["execution"] == "SUCCEEDED" for t in d["tasks"]),
        seconds=90,
    )

    # Once Slurm forgot n3's jobs, the runs with no end are LOST.
    seen["lost"] = {
        state: _wait(lane, state, f"{key} LOST", _is(key, "LOST"), seconds=120)
        for state, key in (("packed", "p-run"), ("chain", "lost-link"), ("lease", "l-run"))
    }
    seen["lost_status"] = {
        state: _status_code(lane, state) for state in ("lease", "chain", "packed")
    }
    seen["reconcile"] = {
        state: lane.servatus("reconcile", state) for state in ("lease", "chain", "packed")
    }
    seen["retry_failed"] = {
        "packed": _plan(lane, "packed", "--profile", "on3", "--retry-failed", output="rf.json"),
        "chain": _plan(
            lane,
            "chain",
            "--profile",
            "on3",
            "--budget",
            BUDGET,
            "--retry-failed",
            output="cf.json",
        ),
    }
    # Rerun what was lost, by name, with the failed one; submitted while n3 is still down.
    seen["retry_packed"] = _plan(
        lane,
        "packed",
        "--profile",
        "on3",
        "--retry-failed",
        "--retry",
        "p-run",
        output="rk.json",
    )
    retry_chain = ("--profile", "on3", "--budget", BUDGET, "--retry", "lost-link")
    seen["retry_chain_refused"] = _plan(lane, "chain", *retry_chain, output="rc.json")
    seen["link2_state"] = lane.job_state(seen["before"]["chain"]["attempts"][1]["job"])
    seen["cancel_chain"] = lane.servatus("cancel", "chain", "--task", "lost-link")
    seen["submit_packed"] = lane.servatus("submit", "packed", "rk.json")
    time.sleep(3)
    seen["queued_while_down"] = _executions(lane, "packed")

    # n3 returns; the reruns run there, and a new lease there runs the lost step again.
    seen["returned_at"] = time.time()
    lane.cluster.return_node(FAILED_NODE)
    seen["node_states_after_return"] = lane.cluster.node_states()
    replanned = lane.ok("plan", "lease", "--profile", "on3", "--hold", "1", "--output", "l2.json")
    seen["lease2_plan"] = replanned.stdout
    again = lane.ok("submit", "lease", "l2.json")
    [(lease2, lease2_job)] = [(i, int(j)) for i, j in LEASED.findall(again.stdout)]
    seen["lease2"], seen["lease2_job"] = lease2, lease2_job
    wait_until("the new lease running", lambda: lane.job_state(lease2_job) == "RUNNING", seconds=60)
    seen["restart"] = lane.servatus("start", "lease", "lease.jsonl", "--lease", lease2)
    seen["restart_retry"] = lane.servatus(
        "start", "lease", "lease.jsonl", "--lease", lease2, "--retry", "l-run"
    )
    seen["final"] = {
        "packed": _wait(
            lane,
            "packed",
            "every packed Task SUCCEEDED",
            lambda d: all(t["execution"] == "SUCCEEDED" for t in d["tasks"]),
            seconds=120,
        ),
        "lease": _wait(lane, "lease", "l-run SUCCEEDED", _is("l-run", "SUCCEEDED"), 120),
    }
    # The chain's lost Task, once Slurm forgot its cancelled link 2.
    seen["after_cancel"] = _wait(
        lane,
        "chain",
        "link 2 forgotten",
        lambda d: not any(a["listed"] for a in d["attempts"]),
        seconds=120,
    )
    seen["retry_chain"] = _plan(lane, "chain", *retry_chain, output="rc.json")
    seen["submit_chain"] = lane.servatus("submit", "chain", "rc.json")
    seen["final"]["chain"] = _wait(
        lane, "chain", "lost-link SUCCEEDED", _is("lost-link", "SUCCEEDED"), 120
    )
    seen["final_status"] = {
        state: _status_code(lane, state) for state in ("lease", "chain", "packed", "plain")
    }
    lane.servatus("cancel", "lease", "--allocation", lease2)


# -- the module fixture -------------------------------------------------------------------------


@prelude.scenario(seconds=115)
def both_scenarios(cluster: SlurmCluster, base: Path) -> Iterator[dict[str, dict[str, Any]]]:
    """Both scenarios at once, beside the lane's other slow scenarios (``cluster.prelude``):
    they drain and fail nodes of partition ``nodes``, which nothing else running then uses."""
    lanes = {
        "across": make_lane(cluster, "local", base, "nodes-across"),
        "failure": make_lane(cluster, "ssh", base, "nodes-failure"),
    }
    scenarios = {"across": across, "failure": failure}
    seen: dict[str, dict[str, Any]] = {name: {} for name in scenarios}
    started = time.monotonic()

    def run(name: str) -> None:
        try:
            scenarios[name](lanes[name], seen[name])
        except BaseException:
            seen[name]["error"] = traceback.format_exc()
        finally:
            seen[name]["took"] = time.monotonic() - started

    try:
        with ThreadPoolExecutor(max_workers=len(scenarios)) as pool:
            list(pool.map(run, scenarios))
        harness.log(
            "nodes scenarios took "
            + ", ".join(f"{name} {seen[name]['took']:.0f} s" for name in scenarios)
        )
        yield seen
    finally:
        for node in cluster.nodes:
            state = cluster.node_states().get(node, "")
            if state.startswith("down"):
                cluster.return_node(node)
            elif state.startswith("drain"):
                cluster.undrain_node(node)
        for made in lanes.values():
            _cancel_all(made)


@pytest.fixture(scope="module")
def nodes() -> Iterator[dict[str, dict[str, Any]]]:
    with prelude.outcome(__name__) as seen:
        yield seen


def _cancel_all(lane: Lane) -> None:
    """Cancel, by name, whatever any of the lane's campaigns still has queued or running."""
    names = {
        f"servatus-{allocation}"
        for state in ("chain", "lease", "packed", "plain")
        for allocation in allocation_ids(lane, state)
    }
    for _job, name, state in lane.squeue(all_states=False):
        if name in names and state in ("PENDING", "RUNNING"):
            lane.cluster.login(
                [f"{lane.cluster.slurm_bin}/scancel", "--me", f"--name={name}"], timeout=30
            )


def _scenario(nodes: dict[str, dict[str, Any]], name: str) -> dict[str, Any]:
    seen = nodes[name]
    assert "error" not in seen, seen["error"]
    return seen


def _job(document: dict[str, Any], key: str) -> int:
    job = task_of(document, key)["job"]
    assert isinstance(job, int), (key, document)
    return job


# -- the tests ----------------------------------------------------------------------------------


def test_a_chain_link_runs_on_another_node_once_its_first_node_is_drained(
    nodes: dict[str, dict[str, Any]],
) -> None:
    seen = _scenario(nodes, "across")
    assert seen["plan"]["code"] == 0 and seen["plan"]["keys"] == ["walk"], seen["plan"]
    assert "link 2/2" in seen["plan"]["out"], seen["plan"]["out"]
    assert seen["submit"].returncode == 0, seen["submit"].stderr
    first, second = seen["records"]
    assert (first["link"], first["ended"][1]) == (1, 75), first
    assert (second["link"], second["ended"][1]) == (2, 0), second
    # Slurm ran link 1 on the node then drained, and link 2 on the other one.
    ran = seen["nodes"]
    assert ran[first["job"]] == seen["drained"] and seen["drained"] in PAIR, (ran, seen["drained"])
    assert ran[second["job"]] in PAIR and ran[second["job"]] != seen["drained"], ran
    assert second["started"] >= first["ended"][0], (first, second)
    walk = task_of(seen["final"], "walk")
    assert (walk["execution"], walk["exit_code"], walk["job"]) == ("SUCCEEDED", 0, second["job"])
    assert walk["link"] == {"position": 2, "of": 2, "budget": 240}, walk
    code, text = seen["status"]
    assert code == 0 and "2/2" in text, text


def test_a_node_failure_kills_every_process_on_it_and_nothing_on_the_other_nodes(
    nodes: dict[str, dict[str, Any]],
) -> None:
    seen = _scenario(nodes, "failure")
    before = seen["before"]
    n3_jobs = {
        "lease": seen["lease_job"],
        "chain": _job(before["chain"], "lost-link"),
        "packed": _job(before["packed"], "p-run"),
    }
    for what, job in n3_jobs.items():
        assert seen["jobs_before"][job] == FAILED_NODE, (what, job, seen["jobs_before"])
    plain_jobs = {_job(before["plain"], key) for key in ("plain-a", "plain-b")}
    assert {seen["jobs_before"][job] for job in plain_jobs} <= set(PAIR), seen["jobs_before"]
    killed = seen["killed"].values()
    assert f"/usr/sbin/slurmd -N {FAILED_NODE}" in killed, killed
    for job in n3_jobs.values():
        assert any(c.startswith(f"slurmstepd: [{job}.batch]") for c in killed), (job, killed)
    for key in ("l-run", "lost-link", "p-run"):
        [run] = [r for r in seen["records"][key] if r["earlier"] == 0]
        assert run["pid"] in seen["killed"], (key, run)
        assert seen["nodes"][run["job"]] == FAILED_NODE, (key, run, seen["nodes"])
        assert run["ended"] is None, run
    assert seen["left_on_node"] == {}
    states = seen["node_states_after_fail"]
    assert states[FAILED_NODE].startswith("down"), states
    assert all(not states[node].startswith("down") for node in PAIR), states
    # Slurm ends the node's jobs NODE_FAIL; the plain ones on n1/n2 run on and succeed, once.
    slurm = seen["slurm_after_fail"]
    assert {slurm.get(job) for job in n3_jobs.values()} == {"NODE_FAIL"}, (n3_jobs, slurm)
    for task in seen["plain_final"]["tasks"]:
        assert (task["execution"], task["exit_code"]) == ("SUCCEEDED", 0), task
        [run] = seen["records"][task["key"]]
        assert seen["nodes"][run["job"]] in PAIR and run["ended"][1] == 0, (run, seen["nodes"])
        assert run["started"] < seen["failed_at"] < run["ended"][0], (run, seen["failed_at"])


def test_status_reads_a_failed_nodes_work_ending_then_lost_and_exits_0(
    nodes: dict[str, dict[str, Any]],
) -> None:
    seen = _scenario(nodes, "failure")
    ending = seen["ending"]
    # While Slurm lists the jobs NODE_FAIL: the runs with no end marker are ENDING, the ones that
    # ended before the failure keep their outcome.
    assert ending["lease"]["l-run"][0] == "ENDING", ending["lease"]
    assert ending["chain"]["lost-link"][0] == "ENDING", ending["chain"]
    assert ending["packed"] == {
        "p-ok": ("SUCCEEDED", None, 0),
        "p-bad": ("FAILED", None, 3),
        "p-run": ("ENDING", None, None),
    }, ending["packed"]
    assert all(code == 0 for code, _ in seen["ending_status"].values()), seen["ending_status"]
    # Once Slurm forgot them: LOST, never STOPPED or FAILED (no marker says how they ended).
    lost = seen["lost"]
    for state, key in (("packed", "p-run"), ("chain", "lost-link"), ("lease", "l-run")):
        task = task_of(lost[state], key)
        assert (task["execution"], task["exit_code"]) == ("LOST", None), task
    assert task_of(lost["packed"], "p-ok")["execution"] == "SUCCEEDED"
    assert task_of(lost["packed"], "p-bad")["exit_code"] == 3
    for state, (code, text) in seen["lost_status"].items():
        assert code == 0 and "LOST" in text, (state, code, text)
    for state, result in seen["reconcile"].items():
        assert result.returncode == 0, (state, result.returncode, result.stdout, result.stderr)


def test_retry_failed_takes_the_failed_task_only_and_a_lost_one_is_rerun_by_name(
    nodes: dict[str, dict[str, Any]],
) -> None:
    seen = _scenario(nodes, "failure")
    failed = seen["retry_failed"]
    assert failed["packed"]["code"] == 0 and failed["packed"]["keys"] == ["p-bad"], failed
    assert failed["chain"]["keys"] == [], failed["chain"]
    assert seen["retry_packed"]["keys"] == ["p-bad", "p-run"], seen["retry_packed"]
    assert seen["submit_packed"].returncode == 0, seen["submit_packed"].stderr
    # Submitted while n3 is down: queued, not run anywhere else.
    down = seen["queued_while_down"]
    assert down["p-bad"][0] == "QUEUED" and down["p-run"][0] == "QUEUED", down
    assert down["p-ok"][0] == "SUCCEEDED", down
    # The lost chain link's successor waits (afterany) for the down node: Slurm lists it, so the
    # Task is refused by name until it is cancelled and forgotten; then it is planned again.
    refused = seen["retry_chain_refused"]
    assert seen["link2_state"] == "PENDING", seen["link2_state"]
    assert refused["code"] == 1, refused
    assert refused["err"] == (
        "servatus: PlanRefused: lost-link: Slurm still lists its earlier work; wait or cancel\n"
    ), refused
    assert seen["cancel_chain"].returncode == 0, seen["cancel_chain"].stderr
    assert task_of(seen["after_cancel"], "lost-link")["execution"] == "LOST", seen["after_cancel"]
    assert seen["retry_chain"]["code"] == 0, seen["retry_chain"]
    assert seen["retry_chain"]["keys"] == ["lost-link"], seen["retry_chain"]
    assert "budget left 00:02:00, 1 link" in seen["retry_chain"]["out"], seen["retry_chain"]
    assert seen["submit_chain"].returncode == 0, seen["submit_chain"].stderr


def test_the_returned_node_reruns_each_lost_or_failed_task_once_and_never_beside_itself(
    nodes: dict[str, dict[str, Any]],
) -> None:
    seen = _scenario(nodes, "failure")
    # Back in service: idle, or already running the reruns queued while it was down (slurmctld
    # schedules every second, and the state is read after return_node: CI read "mixed").
    returned = seen["node_states_after_return"][FAILED_NODE]
    assert returned in {"idle", "mixed", "allocated"}, seen["node_states_after_return"]
    final = seen["final"]
    for state, document in final.items():
        for task in document["tasks"]:
            assert (task["execution"], task["exit_code"]) == ("SUCCEEDED", 0), (state, task)
    assert all(code == 0 for code, _ in seen["final_status"].values()), seen["final_status"]
    # A lost lease step is not started again unless named.
    assert seen["restart"].returncode == 0, seen["restart"]
    assert seen["restart"].stdout.startswith("nothing to start:"), seen["restart"].stdout
    assert "held 1 SUBMITTED (l-run)" in seen["restart"].stdout, seen["restart"].stdout
    assert seen["restart_retry"].returncode == 0, seen["restart_retry"].stderr
    records = seen["records"]
    assert len(records["p-ok"]) == 1, records["p-ok"]
    # The lost link's successor never ran the Task: it had no handoff to claim.
    successor = seen["before"]["chain"]["attempts"][1]["job"]
    assert all(run["job"] != successor for run in records["lost-link"]), records["lost-link"]
    for key in ("p-bad", "p-run", "lost-link", "l-run"):
        runs = records[key]
        assert len(runs) == 2, (key, runs)
        first, again = runs
        assert seen["nodes"][again["job"]] == FAILED_NODE and again["ended"][1] == 0, again
        assert again["started"] > seen["returned_at"] > seen["failed_at"], again
        # Never two at once: the first run had ended (exit 3) or was killed with the node
        # before the rerun began.
        if first["ended"] is not None:
            assert first["ended"][0] <= seen["failed_at"] < again["started"], (first, again)
        else:
            assert first["pid"] in seen["killed"], first
