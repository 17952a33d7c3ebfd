"""``sbatch`` answering as Slurm does under load, and refusing, on the real cluster.

What ``FakeScheduler.fail("sbatch", stderr=...)`` and ``lose_answer`` stand for, proven against
real Slurm: the lane's ``slurm_bin`` is a directory inside the root whose ``sbatch`` is a wrapper
(``lane_traps.wrap_sbatch``), the other commands the real ones. Armed once by its ``mode`` file,
it answers the next ``sbatch --parsable``:

``lie``     runs the real ``sbatch`` (the job exists), then says what ``sbatch`` says when it
            lost slurmctld (``Socket timed out on send/recv operation``) and exits 1;
``drop``    says the same without running ``sbatch`` (the job does not exist);
``refuse``  runs the real ``sbatch`` with ``--partition=nosuch`` first, so real Slurm refuses it.

A timeout reads ``UNRESOLVED`` (exit 3) either way. The job that exists is listed, so ``cancel``
reaches it before anything is reconciled, and ``reconcile`` then records it accepted under the
job number the real ``sbatch`` printed; the one that does not exist waits (exit 75) and, 15
minutes later (faked clock, real evidence), is recorded not submitted and planned again. The
refusal is recorded not submitted at once (exit 1) and planned again. Every Task runs once.
"""

from __future__ import annotations

import re

import pytest
from lane_helpers import Lane, allocation_ids, one_line_error, wait_until
from lane_traps import wrap_sbatch

pytestmark = pytest.mark.cluster

TIMED_OUT = "sbatch: error: Batch job submission failed: Socket timed out on send/recv operation"

WRAPPER = f"""\
#!/bin/sh
here=$(dirname "$0")
case " $* " in
*" --parsable "*) ;;
*) exec /usr/bin/sbatch "$@" ;;
esac
if mv "$here/mode" "$here/mode.used" 2>/dev/null; then
    mode=$(cat "$here/mode.used")
else
    mode=pass
fi
case $mode in
lie)
    /usr/bin/sbatch "$@" >"$here/answer"
    echo "{TIMED_OUT}" >&2
    exit 1 ;;
drop)
    echo "{TIMED_OUT}" >&2
    exit 1 ;;
refuse)
    exec /usr/bin/sbatch --partition=nosuch "$@" ;;
esac
exec /usr/bin/sbatch "$@"
"""


def test_sbatch_timing_out_and_refusing(lane: Lane) -> None:
    trap = wrap_sbatch(lane, WRAPPER)
    lane.put_worker()
    tasks = [
        lane.worker_task("lied", "sleep", "300"),
        lane.worker_task("dropped", "exit", "0"),
        lane.worker_task("refused", "exit", "0"),
    ]
    lane.ok("ensure", "state", lane.tasks_file(tasks))

    # Timed out, but submitted: unresolved, listed, cancelled before reconcile, then accepted.
    lane.ok("plan", "state", "--only", "lied", "--output", "lied.json")
    trap.arm("lie")
    lied = lane.servatus("submit", "state", "lied.json")
    assert lied.returncode == 3, lied
    assert "Socket timed out on send/recv operation" in one_line_error(
        lied, "SubmissionInterrupted"
    )
    [job] = [int(n) for n in re.findall(r"^([1-9][0-9]*)$", trap.answer, flags=re.MULTILINE)]
    [lied_id] = allocation_ids(lane)
    name = f"servatus-{lied_id}"
    wait_until(
        "the lied-about job to run",
        lambda: (job, name, "RUNNING") in lane.squeue() and lane.run_records("lied"),
        seconds=60,
    )
    [task] = [t for t in lane.status()["tasks"] if t["key"] == "lied"]
    assert (task["execution"], task["job"]) == ("UNRESOLVED", job)  # squeue names it
    [attempt] = lane.status()["attempts"]
    assert attempt["listed"] is True
    cancelled = lane.ok("cancel", "state", "--task", "lied")
    assert cancelled.stdout == f"cancelled allocation {lied_id}\n"
    wait_until(
        "Slurm to end the cancelled job",
        lambda: [s for j, _, s in lane.squeue() if j == job and s not in ("RUNNING", "PENDING")],
        seconds=60,
    )
    resolved = lane.ok("reconcile", "state")
    assert resolved.stdout == f"allocation {lied_id}: accepted as job {job}\n"
    [task] = [t for t in lane.status()["tasks"] if t["key"] == "lied"]
    assert (task["execution"], task["job"]) == ("ENDING", job)  # STOPPED once Slurm forgets it

    # Timed out, never submitted: unresolved, waits, then not submitted and planned again.
    lane.ok("plan", "state", "--only", "dropped", "--output", "dropped.json")
    trap.arm("drop")
    dropped = lane.servatus("submit", "state", "dropped.json")
    assert dropped.returncode == 3, dropped
    assert "Socket timed out" in one_line_error(dropped, "SubmissionInterrupted")
    _, dropped_id = allocation_ids(lane)
    assert f"servatus-{dropped_id}" not in {n for _, n, _ in lane.squeue()}
    waiting = lane.servatus("reconcile", "state")
    assert waiting.returncode == 75, waiting
    assert waiting.stdout.startswith(f"allocation {dropped_id}: no evidence yet"), waiting.stdout
    later = lane.later("reconcile", "state")
    assert (later.returncode, later.stdout) == (
        0,
        f"allocation {dropped_id}: recorded as not submitted\n",
    ), later

    # Refused by real Slurm: not submitted at once.
    lane.ok("plan", "state", "--only", "refused", "--output", "refused.json")
    trap.arm("refuse")
    refused = lane.servatus("submit", "state", "refused.json")
    assert refused.returncode == 1, refused
    assert "Invalid partition name specified" in one_line_error(refused, "ShapeRejected")
    _, _, refused_id = allocation_ids(lane)
    assert lane.executions()["refused"] == ("NOT_SUBMITTED", None)

    # Both are planned again (lied is held: it has accepted work) and run once.
    again = lane.ok("plan", "state", "--output", "again.json")
    assert "selected: 2 Tasks in 1 allocation" in again.stdout, again.stdout
    assert re.search(r"^  lied +SUBMITTED$", again.stdout, flags=re.MULTILINE), again.stdout
    assert not trap.armed
    lane.ok("submit", "state", "again.json")
    lane.wait_for(
        "dropped and refused to succeed",
        lambda d: [t["execution"] for t in d["tasks"]][1:] == ["SUCCEEDED", "SUCCEEDED"],
        seconds=90,
    )
    for key in ("lied", "dropped", "refused"):
        assert len(lane.run_records(key)) == 1, (key, lane.run_records(key))
    assert lane.marker_kinds(dropped_id) == lane.marker_kinds(refused_id) == []
