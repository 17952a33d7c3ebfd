"""Crash trials: SIGKILL a real process appending 10,000 Tasks (and compacting) at random moments.

After each kill a fresh process must see the old roster or the new one exactly, never a mix or
an error, and must be able to append again.
"""

from __future__ import annotations

import hashlib
import json
import random
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from store_helpers import make_tasks, write_jsonl

from servatus.campaign import create_state
from servatus.journal.codec import scan
from servatus.tasks import Task

TRIALS = 50
BASE = 1000
BATCH = 10000

WRITER = textwrap.dedent(
    """
    import sys
    from servatus.journal import store
    from servatus.campaign import append_state
    from servatus.tasks import read_jsonl

    state, jsonl, compact, slow = sys.argv[1:5]
    if slow == "1":  # a slow disk: the same bytes in small writes, so kills land mid-write
        import os, time

        def write_slowly(fd, data, offset):
            for start in range(0, len(data), 16384):
                time.sleep(0.001)
                os.pwrite(fd, data[start : start + 16384], offset + start)

        store.write_all = write_slowly
    tasks = read_jsonl(jsonl)
    print("ready", flush=True)
    append_state(state, tasks)
    if compact == "1":
        with store.writing(state) as writer:
            writer.compact()
    print("done", flush=True)
    """
)

VERIFIER = textwrap.dedent(
    """
    import hashlib, json, sys
    from servatus.campaign import Campaign
    from servatus.tasks import Task

    state, key = sys.argv[1:3]
    campaign = Campaign.open(state)
    seen = hashlib.sha256(repr(tuple(campaign.tasks)).encode()).hexdigest()
    count = len(campaign.tasks)
    campaign.append([Task(key, ["python", "after.py"])])
    again = Campaign.open(state)
    print(json.dumps({"count": count, "digest": seen,
                      "after": len(again.tasks), "last": again.tasks[-1].key}))
    """
)


def digest(tasks: list[Task]) -> str:
    return hashlib.sha256(repr(tuple(tasks)).encode()).hexdigest()


def start_writer(state: Path, jsonl: Path, compact: bool, slow: bool) -> subprocess.Popen[str]:
    flags = ["1" if compact else "0", "1" if slow else "0"]
    child = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(state), str(jsonl), *flags],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert child.stdout is not None and child.stdout.readline() == "ready\n"
    return child


def calibrate(template: Path, work: Path, jsonl: Path, compact: bool, slow: bool) -> float:
    """Seconds from ``ready`` to ``done`` for one uninterrupted run."""
    shutil.copytree(template, work)
    child = start_writer(work, jsonl, compact, slow)
    began = time.monotonic()
    assert child.stdout is not None and child.stdout.readline() == "done\n"
    elapsed = time.monotonic() - began
    assert child.wait(timeout=60) == 0
    shutil.rmtree(work)
    return elapsed


@pytest.mark.slow
def test_sigkill_during_append_and_compaction(tmp_path: Path) -> None:
    base, batch = make_tasks("base", BASE), make_tasks("new", BATCH)
    template = tmp_path / "template"
    create_state(template, base, appendable=True)
    jsonl = write_jsonl(tmp_path / "batch.jsonl", batch)
    old, new = digest(base), digest(base + batch)
    windows = {
        (compact, slow): calibrate(template, tmp_path / "calibrate", jsonl, compact, slow)
        for compact in (False, True)
        for slow in (False, True)
    }
    rng = random.Random(20261129)
    outcomes = dict.fromkeys(("old", "new", "torn", "mid-compaction"), 0)
    for trial in range(TRIALS):
        compact, slow = trial % 3 == 2, trial % 2 == 1
        state = tmp_path / f"trial-{trial}"
        shutil.copytree(template, state)
        child = start_writer(state, jsonl, compact, slow)
        time.sleep(rng.uniform(0, windows[compact, slow] * 1.1))
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=60)
        assert child.stdout is not None
        child.stdout.close()
        data = (state / "journal").read_bytes()
        if len(data) > scan(data, "journal").end:
            outcomes["torn"] += 1
        if (state / "journal.tmp").exists():
            outcomes["mid-compaction"] += 1
        checked = subprocess.run(
            [sys.executable, "-c", VERIFIER, str(state), f"after-{trial}"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert checked.returncode == 0, (trial, checked.stderr)
        seen = json.loads(checked.stdout)
        assert seen["digest"] in (old, new), (trial, seen)
        outcomes["old" if seen["digest"] == old else "new"] += 1
        assert seen["after"] == seen["count"] + 1 and seen["last"] == f"after-{trial}"
        shutil.rmtree(state)
    print(f"crash trials: {outcomes}, windows {windows}")
    assert outcomes["old"] > 0 and outcomes["new"] > 0, outcomes
    assert outcomes["torn"] + outcomes["mid-compaction"] > 0, outcomes
