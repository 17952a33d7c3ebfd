"""Settlement by real ``servatus`` processes on the local transport with a fake ``slurm_bin``:
SIGKILL at every write of a settlement record, and status racing submit and reconcile."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import time
from collections import Counter
from pathlib import Path

import pytest
from fake_bin import make_fake_bin, submitted

from servatus.journal import store
from testkit import count_calls

CRASH_SYSCALLS = (
    "flock",
    "pwrite64",
    "fsync",
    "fdatasync",
    "ftruncate",
    "rename",
    "renameat",
    "renameat2",
)

WORKER = textwrap.dedent(
    """
    import sys
    from servatus.journal import store
    from servatus.cli import main

    state, compact = sys.argv[1:3]
    if compact == "1":  # every record makes a compaction due: kills land inside it too
        store.COMPACT_RECORDS = 0
    sys.exit(main(["status", state]))
    """
)


def servatus(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "servatus", *args], capture_output=True, text=True, timeout=timeout
    )


def make_sweep(root: Path, count: int) -> tuple[Path, Path]:
    """A submitted sweep of ``count`` Tasks, two per allocation, every job already finished."""
    config, _ = make_fake_bin(root)
    tasks = root / "tasks.jsonl"
    tasks.write_text(
        "".join(
            json.dumps({"key": f"k{i}", "args": ["/bin/true", str(i)]}) + "\n" for i in range(count)
        )
    )
    state = root / "state"
    assert servatus("ensure", str(state), str(tasks)).returncode == 0
    plan = root / "plan.json"
    made = servatus("plan", str(state), "--config", str(config), "--output", str(plan))
    assert made.returncode == 0, made.stderr
    sent = servatus("submit", str(state), str(plan))
    assert sent.returncode == 0, sent.stderr
    return state, config


@pytest.mark.slow
@pytest.mark.parametrize("compact", [False, True], ids=["append", "compaction"])
def test_sigkill_at_every_write_of_a_settlement(tmp_path: Path, compact: bool) -> None:
    if not shutil.which("strace"):
        pytest.skip("strace is needed")
    template, _ = make_sweep(tmp_path, 4)
    assert store.read(template).settlements == ()
    shutil.copytree(template, tmp_path / "reference")
    reference = servatus("status", str(tmp_path / "reference"), "--json")
    assert reference.returncode == 0 and store.read(template).settlements == ()
    flag = "1" if compact else "0"

    def argv(state: Path) -> list[str]:
        return [sys.executable, "-c", WORKER, str(state), flag]

    counted = tmp_path / "counted"
    shutil.copytree(template, counted)
    counts = count_calls(argv(counted), CRASH_SYSCALLS)
    assert len(store.read(counted).settlements) == 2
    assert counts.get("pwrite64", 0) >= 1 and counts.get("fsync", 0) >= 1, counts
    if compact:
        assert sum(counts.get(name, 0) for name in CRASH_SYSCALLS if "rename" in name), counts
    outcomes: Counter[str] = Counter()
    for syscall, calls in sorted(counts.items()):
        for n in range(1, calls + 1):
            state = tmp_path / f"{syscall}-{n}"
            shutil.copytree(template, state)
            injected = f"inject={syscall}:signal=SIGKILL:when={n}"
            subprocess.run(
                ["strace", "-f", "-qq", "-o", "/dev/null", "-e", injected, *argv(state)],
                capture_output=True,
                timeout=120,
            )
            settled = store.read(state).settlements  # the campaign opens
            outcomes["settled" if settled else "not settled"] += 1
            assert len(settled) in (0, 2), (syscall, n)
            again = servatus("status", str(state), "--json")
            assert again.returncode == 0, (syscall, n, again.stderr)
            assert len(store.read(state).settlements) == 2, (syscall, n)
            assert json.loads(again.stdout) == json.loads(reference.stdout)
    print(f"settlement crash points {counts}: {dict(outcomes)}")
    assert outcomes["settled"] and outcomes["not settled"]


RACER = textwrap.dedent(
    """
    import json, subprocess, sys, time
    role, state, config, rounds, work = sys.argv[1:6]
    rounds = int(rounds)

    def servatus(*args):
        began = time.monotonic()
        done = subprocess.run([sys.executable, "-m", "servatus", *args], capture_output=True,
                              text=True)
        return done.returncode, time.monotonic() - began, done.stdout, done.stderr

    log = []
    for i in range(rounds):
        if role == "status":
            log.append(servatus("status", state, "--json")[:2])
        elif role == "reconcile":
            log.append(servatus("reconcile", state)[:2])
        else:
            tasks = f"{work}/tasks-{i}.jsonl"
            with open(tasks, "w") as handle:
                handle.write(json.dumps({"key": f"n{i}", "args": ["/bin/true", str(i)]}) + "\\n")
            while (result := servatus("append", state, tasks))[0] == 75:
                time.sleep(0.05)
            assert result[0] == 0, result
            plan = f"{work}/plan-{i}.json"
            while (result := servatus("plan", state, "--config", config, "--output", plan))[0]:
                assert result[0] == 75 or "busy" in result[3], result
                time.sleep(0.05)
            time.sleep(0.2)  # statuses settle meanwhile: the saved plan must stay valid
            while (result := servatus("submit", state, plan))[0] == 75:
                time.sleep(0.05)
            log.append(result[:2] + (result[3],))
    print(json.dumps(log))
    """
)


@pytest.mark.slow
def test_status_races_submit_and_reconcile_on_one_campaign(tmp_path: Path) -> None:
    state, config = make_sweep(tmp_path, 6)
    rounds = 8
    racers = {
        role: subprocess.Popen(
            [
                sys.executable,
                "-c",
                RACER,
                role,
                str(state),
                str(config),
                str(rounds),
                str(tmp_path),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for role in ("submit", "status", "reconcile")
    }
    # A writer holds the lock for a while: a status started meanwhile answers without waiting.
    with store.writing(state):
        began = time.monotonic()
        held = servatus("status", str(state))
        assert held.returncode == 0 and held.stderr == ""
        assert time.monotonic() - began < 10
    logs = {}
    for role, racer in racers.items():
        out, err = racer.communicate(timeout=600)
        assert racer.returncode == 0, (role, err)
        logs[role] = json.loads(out)
    assert [code for code, _ in logs["status"]] == [0] * rounds
    assert {code for code, _ in logs["reconcile"]} <= {0, 75}
    assert [entry[0] for entry in logs["submit"]] == [0] * rounds, logs["submit"]  # never stale
    final = store.read(state)
    taken = submitted(tmp_path)
    receipts = {r.allocation_id: r.job for r in final.receipts}
    assert len(taken) == len(set(taken)) == len(final.intents) == len(receipts) == 3 + rounds
    assert dict(taken) == receipts  # every sbatch recorded once, nothing lost or doubled
    last = servatus("status", str(state), "--json")
    document = json.loads(last.stdout)
    assert document["counts"] == {"SUCCEEDED": 6 + rounds}
    assert len(store.read(state).settlements) == 3 + rounds
    assert os.listdir(tmp_path / "logs")  # markers there; now purge them all
    for name in os.listdir(tmp_path / "logs"):
        if name.startswith("servatus-") and not name.startswith("servatus-clock"):
            os.unlink(tmp_path / "logs" / name)
    assert json.loads(servatus("status", str(state), "--json").stdout) == document
