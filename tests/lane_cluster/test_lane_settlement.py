"""Settlement on the real cluster: a settled sweep survives a purge of every marker, an unsettled
allocation without its markers never reads SUCCEEDED, two campaigns on one log_root each list
only their own markers, and status races submit without waiting or losing a record."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from lane_helpers import OUTSIDE_PYTHON, Lane, allocation_ids, wait_until

from servatus.journal import store

pytestmark = pytest.mark.cluster


_SETTLED = (
    "import json, sys\n"
    "from servatus.journal import store\n"
    "print(json.dumps([item.allocation_id for item in store.read(sys.argv[1]).settlements]))\n"
)


def settled_ids(lane: Lane, state: str = "state") -> set[str]:
    """The allocations the campaign recorded as settled, read where the launcher runs, as its
    user: the store refuses state that another user owns, root included."""
    result = lane.run([lane.python, "-c", _SETTLED, state])
    assert result.returncode == 0, result.stderr
    return set(json.loads(result.stdout))


def delete_markers(lane: Lane, allocation_ids: set[str]) -> int:
    """What a scratch purge does: every marker of those allocations goes (logs too)."""
    gone = 0
    for path in Path(lane.log_root).iterdir():
        if path.name.startswith("servatus-") and path.name[9:33] in allocation_ids:
            path.unlink()
            gone += 1
    return gone


_CACHED_STATUS = textwrap.dedent(
    """
    import sys
    from servatus.cli import status_cache
    from servatus.journal import codec
    from servatus.cli import main

    status_cache.MIN_CACHED = 1  # a cache of any size: this sweep has three Tasks
    status_cache.MIN_SHARE = 0.0
    folds = []
    whole = codec.fold_journal

    def load(data, name):
        folds.append(name)
        return whole(data, name)

    codec.fold_journal = load
    code = main(sys.argv[1:])
    print(f"folds={len(folds)}", file=sys.stderr)
    sys.exit(code)
    """
)


def cached_answers(lane: Lane) -> tuple[str, str]:
    """``status`` and ``status --json`` with the status cache of any size: the first of each
    writes it (or finds it), the second reads it and folds no journal; both print the same."""
    shown = []
    for form in ([], ["--json"]):
        printed = []
        for _ in range(2):
            result = lane.run([lane.python, "-c", _CACHED_STATUS, "status", "state", *form])
            assert result.returncode == 0, result.stderr
            printed.append((result.stdout, result.stderr.splitlines()[-1]))
        assert printed[1] == (printed[0][0], "folds=0"), printed
        shown.append(printed[0][0])
    return shown[0], shown[1]


def answers(lane: Lane) -> tuple[str, str, Any]:
    text = lane.ok("status", "state").stdout
    document = lane.ok("status", "state", "--json").stdout
    plan = json.loads(lane.ok("plan", "state", "--retry-failed", "--json").stdout)
    return text, document, [plan["decision"], plan["totals"]]


def test_a_settled_sweep_answers_the_same_after_every_marker_is_deleted(lane: Lane) -> None:
    lane.put_worker()
    tasks = [
        lane.worker_task("ok-1", "exit", "0"),
        lane.worker_task("ok-2", "exit", "0"),
        lane.worker_task("fails", "exit", "3"),
    ]
    lane.submitted(tasks, "--tasks-per-allocation", "1")
    ids = set(allocation_ids(lane))
    # Settled once Slurm forgets the jobs (MinJobAge): every status polled may record it.
    wait_until(
        "every allocation settled",
        lambda: (lane.status(), settled_ids(lane) == ids)[1] or None,
        seconds=lane.cluster.min_job_age + 180,
        every=3,
    )
    before = answers(lane)
    assert cached_answers(lane) == before[:2]
    assert delete_markers(lane, ids) >= 6
    assert answers(lane) == before
    assert cached_answers(lane) == before[:2]  # the cache holds the rows: no marker needed
    planned = lane.run(
        [lane.python, "-c", _CACHED_STATUS, "plan", "state", "--retry-failed", "--json"]
    )
    assert planned.stderr.splitlines()[-1] == "folds=0", planned.stderr  # from the cache
    plan = json.loads(planned.stdout)
    assert [plan["decision"], plan["totals"]] == before[2]
    executions = lane.executions()
    assert executions == {
        "ok-1": ("SUCCEEDED", 0),
        "ok-2": ("SUCCEEDED", 0),
        "fails": ("FAILED", 3),
    }
    lane.ok("plan", "state", "--retry-failed", "--output", "retry.json")
    submitted = json.loads(lane.ok("submit", "state", "retry.json", "--json").stdout)
    assert [r["task_keys"] for r in submitted["receipts"]] == [["fails"]]
    assert len(lane.run_records("ok-1")) == len(lane.run_records("ok-2")) == 1


def test_an_unsettled_allocation_without_markers_never_reads_succeeded(lane: Lane) -> None:
    lane.put_worker()
    lane.submitted([lane.worker_task("long", "sleep", "300")])
    lane.wait_for("long RUNNING", lambda d: d["tasks"][0]["execution"] == "RUNNING", seconds=120)
    ids = set(allocation_ids(lane))
    assert delete_markers(lane, ids) >= 1  # its start marker, while Slurm lists it running
    assert lane.executions()["long"][0] == "RUNNING"
    lane.ok("cancel", "state", "--task", "long")

    def ended(document: dict[str, Any]) -> bool:
        assert document["tasks"][0]["execution"] != "SUCCEEDED"
        return document["tasks"][0]["execution"] == "STOPPED"

    lane.wait_for("long STOPPED", ended, seconds=lane.cluster.min_job_age + 180)
    assert settled_ids(lane) <= ids


def test_two_campaigns_on_one_log_root_each_list_only_their_own(ssh_lane: Lane) -> None:
    lane = ssh_lane
    lane.put_worker()
    lane.ok("ensure", "one", lane.tasks_file([lane.worker_task("a", "sleep", "60")], "a.jsonl"))
    lane.ok("ensure", "two", lane.tasks_file([lane.worker_task("b", "sleep", "60")], "b.jsonl"))
    for state in ("one", "two"):
        lane.ok("plan", state, "--output", f"{state}.json")
        lane.ok("submit", state, f"{state}.json")
    for state in ("one", "two"):
        lane.wait_for(
            f"{state} RUNNING", lambda d: d["tasks"][0]["execution"] == "RUNNING", state=state
        )
    probe = textwrap.dedent(
        """
        import json, sys
        from servatus.campaign import Campaign
        from servatus_slurm.evidence import SlurmEvidenceReader

        seen = []
        parse = SlurmEvidenceReader.parse_markers

        def recording(reader, result):
            # The marker listing, read back from the one command that also ran squeue.
            seen.append(result.stdout.decode())
            return parse(reader, result)

        SlurmEvidenceReader.parse_markers = recording
        Campaign.open(sys.argv[1]).status()
        # After the clock row, the root row (log_root's mode), then the markers.
        names = [line.split(" ")[0] for text in seen for line in text.splitlines()[2:]]
        print(json.dumps(names))
        """
    )
    lane.put(lane.launch / "probe.py", probe)
    for state, other in (("one", "two"), ("two", "one")):
        listed = json.loads(lane.run([OUTSIDE_PYTHON, "probe.py", state]).stdout)
        (mine,) = allocation_ids(lane, state)
        (theirs,) = allocation_ids(lane, other)
        assert listed and all(name.startswith(f"servatus-{mine}.") for name in listed)
        assert not any(theirs in name for name in listed)


RACER = textwrap.dedent(
    """
    import json, subprocess, sys, time
    role, rounds, step = sys.argv[1], int(sys.argv[2]), sys.argv[3]

    def servatus(*args):
        began = time.monotonic()
        done = subprocess.run([sys.executable, "-m", "servatus", *args], capture_output=True,
                              text=True)
        return done.returncode, time.monotonic() - began, done.stderr

    log = []
    for i in range(rounds):
        if role == "status":
            log.append(servatus("status", "state", "--json"))
            continue
        with open(f"tasks-{i}.jsonl", "w") as handle:
            task = {"key": f"n{i}", "args": [step, "step.py", "exit", "0"]}
            handle.write(json.dumps(task) + "\\n")
        while servatus("append", "state", f"tasks-{i}.jsonl")[0] == 75:
            time.sleep(0.2)
        while servatus("plan", "state", "--output", f"plan-{i}.json")[0] == 75:
            time.sleep(0.2)
        time.sleep(1)
        while (result := servatus("submit", "state", f"plan-{i}.json"))[0] == 75:
            time.sleep(0.2)
        log.append(result)
    print(json.dumps(log))
    """
)


def test_status_races_submit_without_waiting_or_losing_a_record(ssh_lane: Lane) -> None:
    lane = ssh_lane
    lane.put_worker()
    lane.ok("ensure", "state", lane.tasks_file([lane.worker_task("n-first", "exit", "0")]))
    lane.put(lane.launch / "racer.py", RACER)
    rounds = 6
    racers = {
        role: subprocess.Popen(
            [
                sys.executable,
                "racer.py",
                role,
                str(rounds * (3 if role == "status" else 1)),
                "/opt/servatus/bin/python",
            ],
            cwd=lane.launch,
            env=lane.environment(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for role in ("submit", "status")
    }
    logs = {}
    for role, racer in racers.items():
        out, err = racer.communicate(timeout=900)
        assert racer.returncode == 0, (role, err)
        logs[role] = json.loads(out)
    assert [code for code, _, _ in logs["status"]] == [0] * (rounds * 3)
    assert max(seconds for _, seconds, _ in logs["status"]) < 30  # none waited on the lock
    assert [code for code, _, _ in logs["submit"]] == [0] * rounds  # every saved plan valid
    state = store.read(lane.launch / "state")
    receipts = {r.allocation_id: r.job for r in state.receipts}
    assert len(receipts) == len(state.intents)  # every intent has its receipt
    keys = [key for intent in state.intents for key in intent.task_keys]
    assert sorted(keys) == sorted(state.tasks.keys)  # every Task submitted exactly once
    intents = {intent.allocation_id for intent in state.intents}
    for job, name, _ in lane.squeue():  # what Slurm still lists was recorded, with its job
        allocation_id = name.removeprefix("servatus-")
        if allocation_id in intents:
            assert receipts.get(allocation_id) == job
