"""``benchmarks/soak/invariants.py`` on real evidence: a small campaign driven through the
fake-Slurm CLI lane (real ``servatus`` processes, real journal, markers and published results),
clean, then with its artefacts tampered with the way each violation would show. Each test asserts
exactly the violations it made, and none of the other invariants'."""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import pytest
import soakkit
from soak import commandlog, drive, invariants, worker
from soak.evidence import SoakEvidence
from soak.invariants import Violation

pytestmark = pytest.mark.slow  # the soak's own checks: once, in the trials, not per Python


MOVES = {"sweep": 1.0, "retry": 1.0, "status": 1.0}


def run_small(root: Path, **changes: object) -> drive.Settings:
    """Four Tasks, every third job failing, driven for about a dozen commands, each Task's
    result published once it reads SUCCEEDED; the finale reconciles and reads status."""
    soakkit.make_lane(root)
    (root / "bin" / "failing").write_text("")
    fields: dict[str, object] = {"actions": MOVES}
    fields.update(changes)
    s = soakkit.settings(root, **fields)
    drive.drive(s, after=soakkit.publishing_worker(root / "results"))
    return s


def only(evidence: SoakEvidence) -> dict[str, list[Violation]]:
    return {name: list(found) for name, found in invariants.check(evidence).items() if found}


def test_a_clean_run_has_no_violation(tmp_path: Path) -> None:
    s = run_small(tmp_path)
    evidence = soakkit.collect(s)
    assert only(evidence) == {}
    verbs = [r.verb for r in evidence.commands]
    assert {"ensure", "plan", "submit", "status", "reconcile"} <= set(verbs)
    assert evidence.journal.state is not None and len(evidence.journal.state.intents) >= 3
    assert len(evidence.statuses) == verbs.count("status") - sum(
        1 for r in evidence.commands if r.verb == "status" and "--json" not in r.argv
    )
    final = {key: execution for key, execution, _ in evidence.statuses[-1].tasks}
    assert set(final) == {"k0", "k1", "k2", "k3"}
    published = {r.key for r in evidence.results if r.present}
    assert published == {key for key, e in final.items() if e == "SUCCEEDED"}
    assert len(evidence.markers) >= 6
    # Job 1002 failed (every third job does): its Tasks were retried, and that settled outcome
    # is one the invariant followed through every later snapshot.
    assert any("--retry-failed" in r.argv and r.exit_code == 0 for r in evidence.commands)
    failed = {
        (allocation, job)
        for snapshot in evidence.statuses
        for allocation, job, executions, listed in snapshot.attempts
        if "FAILED" in executions and not listed
    }
    assert len(failed) == 1


def test_a_task_in_two_allocations_at_once(tmp_path: Path) -> None:
    s = run_small(tmp_path, actions={"status": 1.0}, max_commands=1)
    d = drive.Driver(s, after=soakkit.publishing_worker(s.results))
    first = d.new_plan()
    d.run("plan", str(s.state), "--config", str(s.config), "--output", str(first), plan=first)
    d.run("submit", str(s.state), str(first), plan=first)
    again = d.new_plan()
    d.run("plan", str(s.state), "--config", str(s.config), "--only", "k1", "--retry", "k1",
          "--output", str(again), plan=again)  # fmt: skip
    assert d.run("submit", str(s.state), str(again), plan=again).exit_code == 0
    evidence = soakkit.collect(s)
    assert only(evidence) == {}  # a rerun after the first ended is no overlap
    runs = sorted(
        (span for span in invariants.spans(evidence) if span.key == "k1"), key=lambda x: x.start
    )
    assert len(runs) == 2
    # The first allocation's step of k1 really ended after the second began.
    logs = s.config.parent / "logs"
    assert evidence.journal.state is not None
    [intent] = [
        i for i in evidence.journal.state.intents if i.allocation_id == runs[0].allocation_id
    ]
    slot = intent.task_keys.index("k1")
    end = logs / f"servatus-{runs[0].allocation_id}.{runs[0].job}.end.{slot}.0"
    later = runs[1].start + 5
    os.utime(end, (later, later))
    found = only(soakkit.collect(s))
    assert list(found) == ["one-allocation-at-a-time"]
    [violation] = found["one-allocation-at-a-time"]
    assert violation.subject == "k1"
    assert runs[0].allocation_id in violation.reason and runs[1].allocation_id in violation.reason
    # Without any end marker the first run never ended: still a violation.
    end.unlink()
    [violation] = only(soakkit.collect(s))["one-allocation-at-a-time"]
    assert "never ended" in violation.reason


@pytest.mark.parametrize("damage", ["early", "incomplete", "missing", "overwritten"])
def test_a_published_result_damaged(tmp_path: Path, damage: str) -> None:
    s = run_small(tmp_path)
    results = tmp_path / "results"
    succeeded = sorted(p.name for p in results.iterdir())
    assert succeeded
    key = succeeded[0]
    if damage == "early":
        # A snapshot showed a Task SUCCEEDED before its result was there.
        records = commandlog.read(s.log)
        snapshot = next(r for r in records if "--json" in r.argv and r.results)
        seen = snapshot.results[0]
        key = seen.key
        soakkit.rewrite(s, snapshot.index, results=snapshot.results[1:])
        expected = [f"reads SUCCEEDED after command {snapshot.index}, nothing published then"]
        later = [r for r in records[snapshot.index + 1 :] if r.results]
        assert later and all(seen in r.results for r in later)
    elif damage == "incomplete":
        (results / key / worker.PAYLOAD).write_bytes(b"cut short")
        expected = ["published incomplete: payload digest differs"]
    elif damage == "missing":
        shutil.rmtree(results / key)
        expected = [
            "reads SUCCEEDED but nothing is published",
            "published earlier, gone after the end",
        ]
    else:
        shutil.rmtree(results / key)
        worker.publish_result(results, key, "another-writer")
        # The driver sees the new one after its next command.
        drive.Driver(s, after=soakkit.publishing_worker(s.results)).run("status", str(s.state))
        expected = ["overwritten: first inode"]
    found = only(soakkit.collect(s))
    assert list(found) == ["results-whole"]
    assert [v.subject for v in found["results-whole"]] == [key] * len(expected)
    for violation, reason in zip(found["results-whole"], expected, strict=True):
        assert violation.reason.startswith(reason), violation


def test_a_settled_outcome_that_changed(tmp_path: Path) -> None:
    s = run_small(tmp_path)
    records = commandlog.read(s.log)
    last = max(r.index for r in records if r.verb == "status" and "--json" in r.argv)
    document = json.loads(records[last].stdout)
    attempt = next(a for a in document["attempts"] if set(a["executions"]) == {"SUCCEEDED"})
    attempt["executions"] = ["FAILED"] * len(attempt["executions"])
    soakkit.rewrite(s, last, stdout=json.dumps(document))
    found = only(soakkit.collect(s))
    assert list(found) == ["settled-outcomes-stay"]
    [violation] = found["settled-outcomes-stay"]
    assert violation.subject == f"{attempt['allocation_id']} job {attempt['job']}"
    assert "settled as SUCCEEDED" in violation.reason
    assert violation.reason.endswith(f"after command {last}")


def test_lost_then_an_outcome_is_no_change_of_a_settled_one(tmp_path: Path) -> None:
    """``LOST`` never settles (ADR 0004): a job Slurm forgot may still end, and its end then
    shows. Read LOST, then SUCCEEDED, is no violation; SUCCEEDED, then anything else, is."""
    s = run_small(tmp_path)
    records = commandlog.read(s.log)
    shown = [r.index for r in records if r.verb == "status" and "--json" in r.argv]
    last = max(shown)
    attempt = next(
        a for a in json.loads(records[last].stdout)["attempts"]
        if set(a["executions"]) == {"SUCCEEDED"} and not a.get("listed")
    )  # fmt: skip
    for index in shown[:-1]:
        document = json.loads(records[index].stdout)
        for earlier in document["attempts"]:
            if earlier["allocation_id"] == attempt["allocation_id"]:
                earlier["executions"] = ["LOST"] * len(earlier["executions"])
                earlier["listed"] = False
        soakkit.rewrite(s, index, stdout=json.dumps(document))
    assert "settled-outcomes-stay" not in only(soakkit.collect(s))


def test_an_intent_left_unresolved(tmp_path: Path) -> None:
    s = run_small(tmp_path, actions={"status": 1.0}, max_commands=1)
    bindir = tmp_path / "bin"
    (bindir / "delay").write_text("4")
    (bindir / "refuse").write_text("")
    (tmp_path / "bin" / "failing").unlink()
    d = drive.Driver(s, after=soakkit.publishing_worker(s.results))
    # SIGKILL the submit while sbatch waits, 2.8 s in (0.7 of its 4 s usual length): intent
    # durable, no receipt, however slowly a loaded machine starts Python.
    d.kills = [(0.0, 0.7)]
    d.lengths["submit"] = [4.0]
    d.run("ensure", str(s.state), str(soakkit.grow_roster(tmp_path)), killable=False)
    plan = d.new_plan()
    d.run("plan", str(s.state), "--config", str(s.config), "--only", "fresh", "--output",
          str(plan), plan=plan, killable=False)  # fmt: skip
    killed = d.run("submit", str(s.state), str(plan), plan=plan)
    assert killed.killed and killed.exit_code is None
    d.finale()  # reconcile: the intent is younger than 15 minutes, nothing shows it: exit 75
    found = only(soakkit.collect(s))
    assert list(found) == ["intents-resolved"]
    [violation] = found["intents-resolved"]
    assert violation.reason == "intent unresolved at the end; the last reconcile exited 75"


def test_a_traceback_and_an_exit_code_outside_the_table(tmp_path: Path) -> None:
    s = run_small(tmp_path, actions={"status": 1.0}, max_commands=1)
    crash = soakkit.settings(tmp_path, servatus=(sys.executable, "-c", "raise RuntimeError('x')"))
    odd = soakkit.settings(tmp_path, servatus=(sys.executable, "-c", "raise SystemExit(4)"))
    hang = soakkit.settings(
        tmp_path, servatus=(sys.executable, "-c", "import time; time.sleep(30)"), timeout=0.5
    )
    first = drive.Driver(crash).run("status", killable=False)
    second = drive.Driver(odd).run("status", killable=False)
    third = drive.Driver(hang).run("status", killable=False)
    assert (first.exit_code, second.exit_code, third.exit_code) == (1, 4, -9)
    assert third.timed_out and not third.killed
    found = only(soakkit.collect(s))
    assert list(found) == ["commands-in-table"]
    assert [(v.subject.split()[1], v.reason) for v in found["commands-in-table"]] == [
        (str(first.index), "printed a traceback"),
        (str(second.index), "exit code 4 not in the table"),
        (str(third.index), "hung: killed at the driver's timeout"),
    ]


def test_a_stale_plan_refused_then_one_executed(tmp_path: Path) -> None:
    s = run_small(tmp_path, actions={"stale": 1.0}, max_commands=4)
    records = commandlog.read(s.log)
    submits = [r for r in records if r.verb == "submit"]
    assert submits and all(r.exit_code == 1 and "plan again" in r.stderr for r in submits)
    assert only(soakkit.collect(s)) == {}  # Servatus refused every stale plan
    # A run in which one went through anyway: its submit began after the campaign moved on.
    d = drive.Driver(s, after=soakkit.publishing_worker(s.results))
    plan = d.new_plan()
    d.run("plan", str(s.state), "--config", str(s.config), "--output", str(plan), plan=plan)
    sent = d.run("submit", str(s.state), str(plan), plan=plan)
    assert sent.exit_code == 0 and sent.revision_after != sent.revision_before
    assert only(soakkit.collect(s)) == {}
    assert sent.revision_before is not None
    soakkit.rewrite(s, sent.index, revision_before=sent.revision_before + 1)
    found = only(soakkit.collect(s))
    assert list(found) == ["no-stale-plan"]
    [violation] = found["no-stale-plan"]
    assert violation.subject == f"command {sent.index}"
    # And intents of a plan the driver never saved.
    soakkit.rewrite(s, sent.index, revision_before=sent.revision_before)
    digest = json.loads(plan.read_text())["digest"]
    plan.unlink()
    found = only(soakkit.collect(s))
    assert [(v.subject, v.reason) for v in found["no-stale-plan"]] == [
        (digest, "intents of a plan the driver never saved")
    ]


@pytest.mark.parametrize("damage", ["checksum", "revision"])
def test_a_journal_that_fails(tmp_path: Path, damage: str) -> None:
    s = run_small(tmp_path)
    if damage == "checksum":
        journal = s.state / "journal"
        data = bytearray(journal.read_bytes())
        data[-10] ^= 0x01  # one bit of the last record's payload
        journal.write_bytes(bytes(data))
    else:
        records = commandlog.read(s.log)
        submit = next(r for r in records if r.verb == "submit" and r.exit_code == 0)
        assert submit.revision_after is not None
        soakkit.rewrite(s, submit.index + 1, revision_before=submit.revision_after - 1)
    found = only(soakkit.collect(s))
    if damage == "checksum":
        # The other invariants read the journal too: without it, only this one can speak.
        assert list(found) == ["journal-sound"]
        [violation] = found["journal-sound"]
        assert violation.reason.startswith("CorruptState: ") and "checksum" in violation.reason
    else:
        assert list(found) == ["journal-sound"]
        [violation] = found["journal-sound"]
        assert violation.reason.startswith(f"revision went back to {submit.revision_after - 1}")
