"""``benchmarks/soak``: the driver (seeded, its client kills real) on the fake-Slurm CLI lane,
the report's JSON schema and table, and the command line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import attrs
import pytest
import soakkit
from soak import commandlog, drive, evidence, invariants, report, schedule
from soak.schedule import Fault, FaultKind, FaultPlan

pytestmark = pytest.mark.slow  # the soak's own checks: once, in the trials, not per Python


SOAK = Path(__file__).resolve().parents[2] / "benchmarks" / "soak"
EVERY_MOVE = {"sweep": 2.0, "chain": 1.0, "status": 1.0, "cancel": 1.0, "reconcile": 1.0,
              "retry": 2.0, "stale": 1.0, "grow": 1.0}  # fmt: skip


def moves(root: Path, seed: int) -> list[tuple[str, ...]]:
    soakkit.make_lane(root)
    (root / "bin" / "failing").write_text("")
    s = soakkit.settings(root, seed=seed, actions=EVERY_MOVE, budget="00:08:00", max_commands=14)
    records = drive.drive(s)
    return [tuple(w.replace(str(root), "ROOT") for w in r.argv[3:]) for r in records]


def test_the_drive_replays_from_its_seed(tmp_path: Path) -> None:
    first = moves(tmp_path / "a", 7)
    again = moves(tmp_path / "b", 7)
    other = moves(tmp_path / "c", 8)
    assert first == again
    assert first != other
    assert len(first) >= 14


def test_a_client_killed_mid_submit_and_the_finale_reconciles_it(tmp_path: Path) -> None:
    soakkit.make_lane(tmp_path)
    (tmp_path / "bin" / "delay").write_text("4")
    s = soakkit.settings(tmp_path, finale=20.0, reconcile_every=1.0)
    faults = FaultPlan(
        seed=0,
        duration=60,
        rates=((FaultKind.KILL_CLIENT, 1.0),),
        nodes=("node1",),
        faults=(Fault(at=0.0, kind=FaultKind.KILL_CLIENT, hold=0.7),),
    )
    d = drive.Driver(s, faults, after=soakkit.publishing_worker(s.results))
    # The kill lands 0.7 of submit's usual length in: 2.8 s, inside the fake sbatch's 4 s and
    # well after the intent is written, however slowly a loaded machine starts Python.
    d.lengths["submit"] = [4.0]
    d.run("ensure", str(s.state), str(s.tasks), killable=False)
    plan = d.new_plan()
    d.run("plan", str(s.state), "--config", str(s.config), "--only", "k0", "--output", str(plan),
          plan=plan, killable=False)  # fmt: skip
    killed = d.run("submit", str(s.state), str(plan), plan=plan)
    assert killed.killed and killed.exit_code is None and d.kills == []
    between = evidence.read_journal(s.state).state
    assert between is not None and len(between.intents) == 1 and between.receipts == ()
    d.finale()  # sbatch took the job after the kill: its markers resolve the intent
    records = commandlog.read(s.log)
    assert [r.exit_code for r in records if r.verb == "reconcile"][-1] == 0
    found = soakkit.collect(s)
    assert {name: v for name, v in invariants.check(found).items() if v} == {}
    assert found.journal.state is not None and found.journal.state.receipts == ()
    [resolved] = found.journal.state.resolutions
    assert resolved.job == 1001
    assert soakkit.soak_fake_bin.submitted(tmp_path) == [(resolved.allocation_id, 1001)]
    document = report.build(faults, found, invariants.check(found))
    assert document["faults"] == {"kill-client": 1} == document["faults_planned"]
    assert document["commands"]["submit"] == {"killed": 1}


def test_a_kill_lands_inside_the_command_or_passes_to_the_next(tmp_path: Path) -> None:
    soakkit.make_lane(tmp_path)
    s = soakkit.settings(tmp_path)
    kill = Fault(at=0.0, kind=FaultKind.KILL_CLIENT, hold=0.5)
    faults = FaultPlan(0, 60, ((FaultKind.KILL_CLIENT, 1.0),), ("node1",), (kill,))
    d = drive.Driver(s, faults)
    d.lengths["status"] = [0.2, 9.0, 9.0]  # usually 9 s: the kill waits 4.5 s, status ends first
    assert d.usual_length("status") == 9.0 and d.usual_length("never-ran") == 1.0
    first = d.run("status", str(s.state))
    assert not first.killed and first.exit_code is not None
    assert len(d.kills) == 1  # passed on
    assert len(d.lengths["status"]) == 4  # and the status that ran to its end is counted
    d.lengths["ensure"] = [0.4]  # python alone takes longer to start
    second = d.run("ensure", str(s.state), str(s.tasks))
    assert second.killed and second.exit_code is None and d.kills == []
    assert 0.15 < second.ended - second.started < 2.0  # at half of its usual 0.4 s
    assert "ensure" in d.lengths and d.lengths["ensure"] == [0.4]  # a killed run is no length


def test_the_report_and_its_schema(tmp_path: Path) -> None:
    soakkit.make_lane(tmp_path)
    (tmp_path / "bin" / "failing").write_text("")
    s = soakkit.settings(tmp_path, actions={"sweep": 1.0, "retry": 1.0, "status": 1.0})
    drive.drive(s, after=soakkit.publishing_worker(s.results))
    plan = schedule.plan_faults(34, 300)
    found = soakkit.collect(s)
    clean = report.build(plan, found, invariants.check(found))
    assert report.validate(json.loads(json.dumps(clean))) == []
    assert clean["ok"] is True and clean["violations"] == []
    assert clean["seed"] == 34 and clean["faults_planned"] == plan.by_kind()
    assert clean["faults"] == dict.fromkeys(plan.by_kind(), 0)  # no injector, no client killed
    injected = report.build(plan, found, {}, injected=["kill-sshd", "kill-sshd", "kill-client"])
    assert injected["faults"]["kill-sshd"] == 2
    assert injected["faults"]["kill-client"] == 0  # counted from the commands the driver killed
    assert sum(sum(codes.values()) for codes in clean["commands"].values()) == len(found.commands)
    assert [e["name"] for e in clean["invariants"]] == [n for n, _ in invariants.INVARIANTS]
    assert clean["tasks"] == {"SUCCEEDED": 4}
    assert clean["lost_published"] == []
    last = found.statuses[-1]
    lost_k0 = tuple((k, "LOST" if k == "k0" else e, a) for k, e, a in last.tasks)
    lost = attrs.evolve(found, statuses=(*found.statuses[:-1], attrs.evolve(last, tasks=lost_k0)))
    assert report.build(plan, lost, {})["lost_published"] == ["k0"]
    # One violation: the report counts it, fails, and names it in its table.
    results = tuple(
        attrs.evolve(r, problems=("cut short",)) if r.key == "k0" else r for r in found.results
    )
    damaged = attrs.evolve(found, results=results)
    failing = report.build(plan, damaged, invariants.check(damaged))
    assert report.validate(failing) == []
    assert failing["ok"] is False
    assert failing["violations"] == [
        {"invariant": "results-whole", "subject": "k0", "reason": "published incomplete: cut short"}
    ]
    rows = [line.split() for line in report.table(failing).splitlines()]
    assert rows[0] == ["SECTION", "WHAT", "COUNT"]
    violation = "violation  results-whole: k0: published incomplete: cut short"
    assert violation.split() in rows
    assert ["invariant", "results-whole", "1"] in rows
    assert ["invariant", "journal-sound", "0"] in rows
    assert ["command", "submit", "exit", "0", "2"] in rows
    planned = plan.by_kind()["kill-client"]
    assert ["fault", "kill-client", "(of", str(planned), "planned)", "0"] in rows
    assert ["tasks", "SUCCEEDED", "4"] in rows
    assert ["tasks", "LOST", "that", "had", "published", "0"] in rows
    assert rows[-1] == ["verdict", "VIOLATIONS", "1"]
    # Broken documents are named.
    broken = [
        {k: v for k, v in clean.items() if k != "tasks"},
        dict(clean, ok=False),
        dict(clean, invariants=clean["invariants"][1:]),
        dict(clean, faults={"kill-everything": 1}),
        dict(clean, commands={"status": {"0": -1}}),
        dict(failing, violations=[]),
        dict(clean, seed="34"),
        dict(clean, lost_published=[1]),
    ]
    assert all(report.validate(document) for document in broken)


def test_the_command_line(tmp_path: Path) -> None:
    faults = subprocess.run(
        [sys.executable, str(SOAK), "faults", "--seed", "3", "--duration", "600"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert FaultPlan.from_json(json.loads(faults.stdout)) == schedule.plan_faults(
        3, 600, nodes=("node1",), quiet_tail=60.0
    )
    soakkit.make_lane(tmp_path)
    args = ["--state", str(tmp_path / "state"), "--config", str(tmp_path / "SERVATUS.toml"),
            "--work", str(tmp_path / "work"), "--results", str(tmp_path / "results")]  # fmt: skip
    ran = subprocess.run(
        [sys.executable, str(SOAK), "drive", "--seed", "5", "--duration", "3", "--finale", "5",
         "--tasks", str(tmp_path / "tasks.jsonl"), *args, "--json"],
        capture_output=True, text=True,
    )  # fmt: skip
    # Nothing published the results: every Task that succeeded misses its own.
    document = json.loads(ran.stdout)
    assert report.validate(document) == []
    assert ran.returncode == 1, ran.stderr
    assert {v["invariant"] for v in document["violations"]} == {"results-whole"}
    assert document["seed"] == 5 and document["duration"] == 3.0
    assert json.loads((tmp_path / "work" / "report.json").read_text()) == document
    checked = subprocess.run(
        [sys.executable, str(SOAK), "check", *args[:-2]], capture_output=True, text=True
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert checked.stdout.splitlines()[0].split() == ["SECTION", "WHAT", "COUNT"]
    assert "verdict    ok" in checked.stdout
    # The markers moved away (the cluster soak keeps a copy of its log_root's tmpfs): the same
    # report from the copy.
    (tmp_path / "logs").rename(tmp_path / "kept-logs")
    (tmp_path / "logs").mkdir()
    again = subprocess.run(
        [sys.executable, str(SOAK), "check", *args[:-2], "--log-root", str(tmp_path / "kept-logs")],
        capture_output=True, text=True,
    )  # fmt: skip
    assert (again.returncode, again.stdout) == (0, checked.stdout)
    assert any(p.name.startswith("servatus-") for p in (tmp_path / "kept-logs").iterdir())


def test_the_command_log_drops_only_a_last_line_cut_short(tmp_path: Path) -> None:
    log = tmp_path / "commands.jsonl"
    records = [
        commandlog.CommandRecord(
            index=i,
            argv=("servatus", "status", "state"),
            started=1.0 + i,
            ended=2.0 + i,
            exit_code=0,
            killed=False,
            stdout="",
            stderr="",
        )
        for i in range(3)
    ]
    commandlog.write(log, records)
    assert commandlog.read(log) == tuple(records)
    whole = log.read_bytes()
    log.write_bytes(whole[:-20])  # the driver killed while it wrote the third line
    assert commandlog.read(log) == tuple(records[:2])
    log.write_bytes(whole.replace(b'"index": 1', b'"index": ', 1))  # damage inside: refused
    with pytest.raises(ValueError, match="Expecting value"):
        commandlog.read(log)
