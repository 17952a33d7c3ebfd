"""Batched submission (ADR 0014) on the real cluster, cut in every way the issue names.

The lane's ``slurm_bin`` is a wrapper directory (``lane_traps.wrap_sbatch``): its ``sbatch``
counts the batch program's calls, takes ``pace`` seconds over each, and at call N does what the
file ``at.N`` says: ``before`` (SIGKILL servatus, never run ``sbatch``), ``after`` (run the real
``sbatch``, then SIGKILL servatus), ``hold`` (wait for the test to stop sshd), ``refuse`` (real
Slurm refuses a bad partition) or ``drop`` (say Slurm timed out, having sent nothing). Everything
else is real: the CLI in a subprocess, the journal, ``ssh``, the batch program, Slurm.

The scenarios run at once, each in its own lane and thread, beside the lane's other slow
scenarios (``cluster.prelude``); the sshd one runs alone after all of them (``cluster_alone``),
since it takes the login node away from every SSH lane. After every cut the same books are kept:
each receipt is a job Slurm lists under the allocation's name; what is unresolved is exactly
what had no answer; ``reconcile`` (now, and 15 minutes later on a faked clock) resolves each
allocation as Slurm has it; and a new plan sends each Task that was never accepted, so in the end
every Task has exactly one job.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import time
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from lane_helpers import (
    INNER_PYTHON,
    Lane,
    allocation_ids,
    make_lane,
    one_line_error,
    wait_until,
)
from lane_traps import KILL_CALLER, TIMED_OUT, Trap, killed_when_asked, wrap_sbatch

from cluster import prelude
from cluster.fixture import SlurmCluster

pytestmark = pytest.mark.cluster

TASKS = 8
"""Tasks per round, one per allocation: all in one batch."""

ROUNDS = int(os.environ.get("SERVATUS_KILL_ROUNDS", "3"))
"""Rounds of each kill test: a few in CI, as many as a soak wants."""

PACED = f"""\
#!/bin/sh
here=$(dirname "$0")
case " $* " in
*" --parsable "*) ;;
*) exec /usr/bin/sbatch "$@" ;;
esac
n=$(( $(cat "$here/count" 2>/dev/null || echo 0) + 1 ))
echo "$n" >"$here/count"
sleep "$(cat "$here/pace" 2>/dev/null || echo 0)"
mode=$(cat "$here/at.$n" 2>/dev/null)
case $mode in
before)
{KILL_CALLER}    exit 1 ;;
after)
    answer=$(/usr/bin/sbatch "$@")
    code=$?
{KILL_CALLER}    printf '%s\\n' "$answer"
    exit "$code" ;;
hold)
    : >"$here/held"
    while [ ! -e "$here/go" ]; do sleep 0.1; done
    exec /usr/bin/sbatch "$@" ;;
refuse)
    exec /usr/bin/sbatch --partition=nosuch "$@" ;;
drop)
    echo '{TIMED_OUT}' >&2
    exit 1 ;;
esac
exec /usr/bin/sbatch "$@"
"""


class Paced:
    """The wrapper's control files."""

    def __init__(self, trap: Trap) -> None:
        self.trap = trap
        self.directory = trap.directory

    def reset(self, pace: float, **at: str) -> None:
        for path in self.directory.iterdir():
            done = ("count", "held", "go", "kill-now", "killed")
            if path.name in done or path.name.startswith("at."):
                path.unlink()
        self.trap.lane.put(self.directory / "pace", f"{pace}\n")
        for call, mode in at.items():
            self.trap.lane.put(self.directory / f"at.{call.removeprefix('n')}", f"{mode}\n")

    @property
    def calls(self) -> int:
        path = self.directory / "count"
        return int(path.read_text()) if path.exists() else 0


@pytest.fixture
def paced_ssh(ssh_lane: Lane) -> Iterator[Paced]:
    yield Paced(wrap_sbatch(ssh_lane, PACED))


BOOKS = """\
import json, sys
from servatus.journal import store
read = store.read(sys.argv[1])
print(json.dumps([
    [[r.allocation_id, r.job] for r in read.receipts],
    [[r.allocation_id, r.job] for r in read.resolutions],
    [i.allocation_id for i in read.intents],
]))
"""


def books(lane: Lane, state: str) -> tuple[dict[str, int], dict[str, int | None], list[str]]:
    """The journal read by its owner (alice on the login node): receipts, resolutions, and the
    intents in order."""
    read = lane.run([lane.python, "-c", BOOKS, state])
    assert read.returncode == 0, read.stderr
    receipts, resolutions, intents = json.loads(read.stdout)
    return dict(receipts), dict(resolutions), intents


def slurm_jobs(lane: Lane, ids: list[str]) -> dict[str, list[int]]:
    """Every job Slurm lists under each allocation's name."""
    names = {f"servatus-{a}": a for a in ids}
    found: dict[str, list[int]] = {a: [] for a in ids}
    for job, name, _state in lane.squeue():
        if name in names:
            found[names[name]].append(job)
    return found


def settle(lane: Lane, paced: Paced) -> None:
    """Let a batch program left running by a killed servatus finish what it does (it stops at
    its next answer, or runs out), so Slurm's list is final."""
    last = -1
    while paced.calls != last:
        last = paced.calls
        time.sleep(3)


def check_books(lane: Lane, state: str, answered_before: int) -> list[str]:
    """Receipts are real jobs; the first ``answered_before`` allocations have theirs; the rest
    are unresolved; ``reconcile`` (now and 15 minutes on) makes the books Slurm's. Returns the
    allocation ids."""
    receipts, resolved, ids = books(lane, state)
    assert len(ids) == TASKS
    listed = slurm_jobs(lane, ids)
    for allocation, job in receipts.items():
        assert listed[allocation] == [job], (allocation, job, listed)
    assert set(receipts) >= set(ids[:answered_before]), (answered_before, receipts)
    assert not resolved
    assert set(ids) - set(receipts) == set(ids[len(receipts) :])  # unresolved: the tail
    lane.servatus("reconcile", state)
    later = lane.later("reconcile", state)
    assert later.returncode == 0, later
    receipts, resolved, _ = books(lane, state)
    listed = slurm_jobs(lane, ids)
    for allocation in ids:
        jobs = listed[allocation]
        assert len(jobs) <= 1, (allocation, jobs)  # no allocation, so no Task, in two jobs
        if jobs:
            assert receipts.get(allocation, resolved.get(allocation)) == jobs[0], allocation
        else:
            assert allocation not in receipts and resolved.get(allocation, 0) is None, allocation
    return ids


def planned(lane: Lane, state: str) -> None:
    lane.put_worker()
    tasks = [lane.worker_task(f"t{i}", "exit", "0") for i in range(TASKS)]
    lane.ok("ensure", state, lane.tasks_file(tasks, f"{state}.jsonl"))
    lane.ok("plan", state, "--tasks-per-allocation", "1", "--output", f"{state}.json")


def once_each(lane: Lane, state: str) -> None:
    """What was never accepted is planned and sent again, and then every Task has one job."""
    again = lane.servatus("plan", state, "--output", f"{state}-again.json")
    assert again.returncode == 0, again.stderr
    if "selected: 0 Tasks" not in again.stdout:
        lane.ok("submit", state, f"{state}-again.json")
    document = lane.status(state)
    jobs: dict[str, set[int]] = {}
    for attempt in document["attempts"]:
        if attempt.get("job") is not None:
            for key in attempt["task_keys"]:
                jobs.setdefault(key, set()).add(attempt["job"])
    assert sorted(jobs) == [f"t{i}" for i in range(TASKS)], jobs
    assert all(len(found) == 1 for found in jobs.values()), jobs


def submit(lane: Lane, paced: Paced, state: str) -> subprocess.CompletedProcess[str]:
    """``submit`` of the state's plan; over SSH watched, to be killed when the wrapper asks."""
    if not lane.ssh:
        return lane.servatus("submit", state, f"{state}.json")
    return killed_when_asked(lane.start("submit", state, f"{state}.json"), paced.directory)


def killed_at_an_sbatch(lane: Lane, paced: Paced) -> None:
    """Rounds of a SIGKILL of ``submit`` just before, or just after, the N-th ``sbatch`` of its
    batch (N and the side drawn at random, seed printed)."""
    seed = random.randrange(1 << 30)
    print(f"killed at an sbatch ({lane.name}): seed {seed}")
    rng = random.Random(seed)
    for round_ in range(ROUNDS):
        state = f"killed{round_}"
        planned(lane, state)
        call, side = rng.randint(1, TASKS), rng.choice(["before", "after"])
        paced.reset(0.5, **{f"n{call}": side})
        killed = submit(lane, paced, state)
        assert killed.returncode == -9, (round_, call, side, killed)
        settle(lane, paced)
        check_books(lane, state, call - 1)
        once_each(lane, state)


def killed_at_random_moments(lane: Lane, paced: Paced) -> None:
    """Rounds of a SIGKILL at a random moment of a paced batch from the laptop, wherever that
    falls: before the batch, between answers, or while a receipt is written."""
    seed = random.randrange(1 << 30)
    print(f"killed at random moments: seed {seed}")
    rng = random.Random(seed)
    for round_ in range(ROUNDS + 1):
        state = f"moment{round_}"
        planned(lane, state)
        paced.reset(0.25)
        process = lane.start("submit", state, f"{state}.json")
        time.sleep(rng.uniform(0.5, 3.5))
        process.send_signal(signal.SIGKILL)
        process.communicate()
        settle(lane, paced)
        receipts, _, ids = books(lane, state)
        if ids:  # killed after its intents were written
            check_books(lane, state, len(receipts))
        once_each(lane, state)


def refused_in_the_middle(lane: Lane, paced: Paced) -> None:
    state = "refused"
    planned(lane, state)
    paced.reset(0, n3="refuse")
    refused = lane.servatus("submit", state, f"{state}.json")
    assert refused.returncode == 1, refused
    said = one_line_error(refused, "ShapeRejected")
    assert "Invalid partition name specified" in said and "2 of 8 allocations" in said, said
    assert paced.calls == 3  # the rest were never sent
    receipts, resolved, ids = books(lane, state)
    assert list(receipts) == ids[:2]
    assert resolved == dict.fromkeys(ids[2:])  # the refused one and the never sent: not submitted
    listed = slurm_jobs(lane, ids)
    assert {a: jobs for a, jobs in listed.items() if jobs} == {a: [receipts[a]] for a in ids[:2]}
    executions = lane.executions(state)
    assert [executions[f"t{i}"][0] for i in range(2, TASKS)] == ["NOT_SUBMITTED"] * (TASKS - 2)
    once_each(lane, state)


def chain_cut_after_link_2(lane: Lane, paced: Paced) -> None:
    lane.put_chain_worker()
    lane.limit("00:01:00", "00:00:20")
    task: Mapping[str, Any] = {
        "key": "cut",
        "args": [INNER_PYTHON, "chain_step.py", "yield20,exit0"],
    }
    lane.ok("ensure", "chain", lane.tasks_file([task], "chain.jsonl"))
    lane.ok("plan", "chain", "--budget", "00:04:00", "--output", "chain.json")
    paced.reset(0, n3="drop")
    dropped = lane.servatus("submit", "chain", "chain.json")
    assert dropped.returncode == 3, dropped
    said = one_line_error(dropped, "SubmissionInterrupted")
    assert "Socket timed out" in said and "2 of 4 allocations were accepted" in said, said
    receipts, resolved, ids = books(lane, "chain")
    assert len(ids) == 4 and list(receipts) == ids[:2]
    assert resolved == {ids[3]: None}  # link 4 was never sent; link 3 is unresolved
    waiting = lane.servatus("reconcile", "chain")
    assert waiting.returncode == 75, waiting
    later = lane.later("reconcile", "chain")
    assert later.returncode == 0, later
    assert later.stdout == f"allocation {ids[2]}: recorded as not submitted\n", later.stdout
    assert (
        f"chain cut short: allocation {ids[1]} (link 2/4) is the last link of its chain that "
        "reached Slurm; links 3-4 were never sent" in later.stderr
    ), later.stderr
    assert [job for jobs in slurm_jobs(lane, ids).values() for job in jobs] == [
        receipts[ids[0]],
        receipts[ids[1]],
    ]
    assert allocation_ids(lane, "chain") == ids


SCENARIOS: dict[str, tuple[str, Callable[[Lane, Paced], None]]] = {
    "killed-ssh": ("ssh", killed_at_an_sbatch),
    "killed-local": ("local", killed_at_an_sbatch),
    "moments": ("ssh", killed_at_random_moments),
    "refused-ssh": ("ssh", refused_in_the_middle),
    "refused-local": ("local", refused_in_the_middle),
    "chain-ssh": ("ssh", chain_cut_after_link_2),
    "chain-local": ("local", chain_cut_after_link_2),
}
"""Each scenario in its own lane, over SSH or on the login node."""


@prelude.scenario(seconds=51)
def every_scenario(cluster: SlurmCluster, base: Path) -> Iterator[dict[str, Exception | None]]:
    """Every scenario at once, each in its own lane and thread (they share only the cluster),
    beside the lane's other slow scenarios (``cluster.prelude``): what each raised, or None."""
    for name in SCENARIOS:
        (base / name).mkdir()
    lanes = {
        name: make_lane(cluster, transport, base / name, name)
        for name, (transport, _) in SCENARIOS.items()
    }

    def run(name: str) -> Exception | None:
        lane = lanes[name]
        try:
            SCENARIOS[name][1](lane, Paced(wrap_sbatch(lane, PACED)))
        except Exception as exc:  # handed to the scenario's own test
            return exc
        return None

    try:
        with ThreadPoolExecutor(len(SCENARIOS)) as pool:
            raised = dict(zip(SCENARIOS, pool.map(run, SCENARIOS), strict=True))
        yield raised
    finally:
        for lane in lanes.values():
            lane.cleanup()


@pytest.fixture(scope="module")
def scenarios() -> Iterator[dict[str, Exception | None]]:
    with prelude.outcome(__name__) as raised:
        yield raised


def outcome(scenarios: Mapping[str, Exception | None], name: str) -> None:
    failed = scenarios[name]
    if failed is not None:
        raise failed


def test_submit_killed_at_an_sbatch_of_its_batch_over_ssh(scenarios: Any) -> None:
    outcome(scenarios, "killed-ssh")


def test_submit_killed_at_an_sbatch_of_its_batch_on_the_login_node(scenarios: Any) -> None:
    outcome(scenarios, "killed-local")


def test_submit_killed_at_random_moments_over_ssh(scenarios: Any) -> None:
    outcome(scenarios, "moments")


def test_an_sbatch_refused_in_the_middle_ends_the_batch_over_ssh(scenarios: Any) -> None:
    outcome(scenarios, "refused-ssh")


def test_an_sbatch_refused_in_the_middle_ends_the_batch_on_the_login_node(
    scenarios: Any,
) -> None:
    outcome(scenarios, "refused-local")


def test_a_chain_whose_batch_is_cut_after_link_2_of_4_over_ssh(scenarios: Any) -> None:
    outcome(scenarios, "chain-ssh")


def test_a_chain_whose_batch_is_cut_after_link_2_of_4_on_the_login_node(scenarios: Any) -> None:
    outcome(scenarios, "chain-local")


@pytest.mark.cluster_alone  # it takes the login node away from every SSH lane
def test_sshd_stopped_in_the_middle_of_a_batch(
    ssh_lane: Lane, paced_ssh: Paced, slurm_cluster: SlurmCluster
) -> None:
    lane, paced = ssh_lane, paced_ssh
    state = "sshd"
    planned(lane, state)
    paced.reset(0, n3="hold")
    process = lane.start("submit", state, f"{state}.json")
    try:
        wait_until("the third sbatch", (paced.directory / "held").exists, seconds=60)
        slurm_cluster.stop_sshd()
        (paced.directory / "go").touch()
        out, err = process.communicate(timeout=120)
    finally:
        slurm_cluster.start_sshd()
        if process.poll() is None:
            process.kill()
    assert process.returncode == 3, (out, err)
    said = one_line_error(subprocess.CompletedProcess([], 3, out, err), "SubmissionInterrupted")
    assert "2 of 8 allocations were accepted" in said, said
    settle(lane, paced)
    ids = check_books(lane, state, 2)
    receipts, _, _ = books(lane, state)
    assert set(receipts) >= set(ids[:2])
    once_each(lane, state)
