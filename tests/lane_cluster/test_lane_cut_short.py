"""Work left behind on the real cluster, and the command that picks it up (issue #31).

A chain cut short: in ``submit``'s one batch (ADR 0014), link 2's ``sbatch`` says Slurm timed
out and sends nothing, so the batch ends there and link 3 is never sent. ``reconcile`` waits for
evidence of link 2; 15 minutes on (a faked clock) it records it as not submitted and warns that
the chain was cut short, naming the ``plan`` that continues it; ``status`` says the same once the
Task yielded at 1/3; that plan, submitted once Slurm forgot link 1, runs the Task to success and
the warning goes.

An order a lease never took: the lease is submitted held (its ``sbatch`` adds ``--hold``), so it
waits however free the node is, takes an order, and is then cancelled by a raw ``scancel`` before
it ever ran. Slurm lists it
``CANCELLED`` until ``MinJobAge``, and the order holds its Task ``QUEUED``; ``servatus cancel
--task`` withdraws the order at once and the Task reads ``STOPPED (never started)``.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from lane_helpers import INNER_PYTHON, STEPPED, Lane, allocation_ids, wait_until
from lane_traps import TIMED_OUT, wrap_sbatch

pytestmark = pytest.mark.cluster


SECOND_TIMES_OUT = f"""\
#!/bin/sh
here=$(dirname "$0")
case " $* " in
*" --parsable "*) ;;
*) exec /usr/bin/sbatch "$@" ;;
esac
n=$(( $(cat "$here/count" 2>/dev/null || echo 0) + 1 ))
echo "$n" >"$here/count"
if [ "$n" -eq 2 ]; then
    echo '{TIMED_OUT}' >&2
    exit 1
fi
exec /usr/bin/sbatch "$@"
"""
"""``sbatch`` that sends nothing on its second call and says Slurm timed out."""


def test_a_chain_cut_short_is_named_and_continued(ssh_lane: Lane) -> None:
    lane = ssh_lane
    wrap_sbatch(lane, SECOND_TIMES_OUT)
    lane.put_chain_worker()
    lane.limit("00:01:00", "00:00:20")
    task = {"key": "cut", "args": [INNER_PYTHON, "chain_step.py", "yield2,exit0"]}
    lane.ok("ensure", "state", lane.tasks_file([task]))
    lane.ok("plan", "state", "--budget", "00:03:00", "--output", "plan.json")
    interrupted = lane.servatus("submit", "state", "plan.json")
    assert interrupted.returncode == 3, interrupted
    assert "Socket timed out" in interrupted.stderr, interrupted.stderr
    first, second, _ = allocation_ids(lane)  # one batch: every link's intent first
    waiting = lane.servatus("reconcile", "state")
    assert waiting.returncode == 75, waiting  # link 2: no evidence yet

    reconciled = lane.later("reconcile", "state")
    assert reconciled.returncode == 0, reconciled
    assert reconciled.stdout == f"allocation {second}: recorded as not submitted\n"
    [cut] = re.findall(r"^servatus: warning: (.*)$", reconciled.stderr, flags=re.MULTILINE)
    assert cut.startswith(
        f"chain cut short: allocation {first} (link 1/3) is the last link of its chain that "
        "reached Slurm; links 2-3 were never sent, so cut stops after it; once it has ended, "
        "continue with: servatus plan "
    ), cut
    assert cut.endswith(
        " --retry cut --budget 00:03:00 --output continue.json, and the profile it was planned with"
    ), cut

    yielded = lane.wait_for(
        "cut to yield on link 1", lambda d: d["tasks"][0]["execution"] == "STOPPED", seconds=90
    )
    reading = yielded["tasks"][0]
    assert (reading["detail"], reading["link"]) == (
        "yielded",
        {"position": 1, "of": 3, "budget": 180},
    )
    assert yielded["warnings"] == [cut]

    def continued() -> Any:  # refused while Slurm still lists link 1 (MinJobAge)
        plan = lane.servatus(
            "plan", "state", "--retry", "cut", "--budget", "00:03:00", "--output", "continue.json"
        )
        return plan if plan.returncode == 0 else None

    wait_until("the plan that continues it", continued, seconds=120, every=3)
    lane.ok("submit", "state", "continue.json")
    done = lane.wait_for(
        "cut to succeed", lambda d: d["tasks"][0]["execution"] == "SUCCEEDED", seconds=180
    )
    assert done["warnings"] == []


HELD = """\
#!/bin/sh
case " $* " in
*" --parsable "*) exec /usr/bin/sbatch --hold "$@" ;;
esac
exec /usr/bin/sbatch "$@"
"""
"""``sbatch`` that submits every allocation held: it stays pending until released or cancelled.
(The node declares far more CPUs than the tests hold, so no blocker could keep it waiting.)"""


def test_an_order_an_ended_lease_never_took_is_withdrawn(ssh_lane: Lane) -> None:
    lane = ssh_lane
    wrap_sbatch(lane, HELD)
    lane.put_worker()
    lane.limit("00:05:00", "00:00:20")
    tasks = lane.tasks_file([lane.worker_task("t", "exit", "0")], "t.jsonl")
    lane.ok("ensure", "state", tasks)
    [(lease, job)], _ = lane.lease("--hold", "1")
    assert lane.job_state(job) == "PENDING"
    started = lane.ok("start", "state", tasks, "--lease", lease)
    [(step, _, key)] = STEPPED.findall(started.stdout)
    assert key == "t"
    assert lane.job_state(job) == "PENDING"  # the order was given to a lease that never ran
    cancelled = lane.cluster.login([f"{lane.cluster.slurm_bin}/scancel", str(job)], timeout=30)
    assert cancelled.returncode == 0, cancelled.stderr
    wait_until("Slurm to end the lease", lambda: lane.job_state(job) == "CANCELLED" or None,
               seconds=30)  # fmt: skip

    def t(document: dict[str, Any]) -> dict[str, Any]:
        (found,) = (task for task in document["tasks"] if task["key"] == "t")
        return found

    assert t(lane.status())["execution"] == "QUEUED"  # the order holds it while Slurm lists it
    withdrawn = lane.servatus("cancel", "state", "--task", "t")
    assert withdrawn.returncode == 0, withdrawn
    assert withdrawn.stdout.startswith(f"withdrew step {step}"), withdrawn.stdout
    assert lane.job_state(job) == "CANCELLED"  # still listed: the Task is free before the purge
    now = t(lane.status())
    assert (now["execution"], now["detail"]) == ("STOPPED", "never started")
    assert lane.run_records("t") == []
