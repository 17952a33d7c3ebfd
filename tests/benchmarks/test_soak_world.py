"""The soak's driver against a Slurm that outlives each command (``fakeworld.py``): jobs run,
end and are forgotten, chains hand on, a lease takes steps, ``cancel`` cancels. Every move of the
driver, ``start`` into a lease included, and the invariants find nothing."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import attrs
import pytest
import soakkit
from soak import commandlog, drive, invariants, report
from soak.evidence import SoakEvidence

from testkit import CPU_PROFILE

pytestmark = pytest.mark.slow  # the soak's own checks: once, in the trials, not per Python


WORLD = Path(__file__).resolve().parent / "fakeworld.py"
MOVES = {"sweep": 2.0, "chain": 1.0, "status": 1.0, "cancel": 1.0, "reconcile": 1.0,
         "retry": 2.0, "stale": 0.5, "grow": 0.5, "start": 2.0}  # fmt: skip


def make_world(root: Path, seed: int, count: int = 6) -> drive.Settings:
    root.mkdir(exist_ok=True)
    config = root / "SERVATUS.toml"
    config.write_text(
        CPU_PROFILE.replace(
            'time_limit = "00:05:00"\n', 'time_limit = "00:05:00"\nsignal_before_end = "00:01:00"\n'
        )
    )
    (root / "tasks.jsonl").write_text(
        "".join(json.dumps({"key": f"k{i}", "args": ["/bin/true"]}) + "\n" for i in range(count))
    )
    (root / "results").mkdir()
    env = {"PATH": "/usr/bin:/bin", "WORLD_LOG_ROOT": str(root / "logs"), "WORLD_FAILING": "1"}
    return soakkit.settings(
        root,
        seed=seed,
        servatus=(sys.executable, str(WORLD), str(root / "world")),
        env=env,
        actions=MOVES,
        budget="00:08:00",
        max_commands=60,
        finale=5.0,
        reconcile_every=0.5,
    )


def test_every_move_against_a_world_of_queued_running_and_forgotten_jobs(tmp_path: Path) -> None:
    s = make_world(tmp_path, seed=3)
    hook = soakkit.publishing_worker(s.results)
    first = drive.Driver(s, after=hook)
    first.run("ensure", str(s.state), str(s.tasks), killable=False)
    lease_plan = first.new_plan()
    first.run("plan", str(s.state), "--config", str(s.config), "--hold", "2", "--output",
              str(lease_plan), plan=lease_plan)  # fmt: skip
    assert first.run("submit", str(s.state), str(lease_plan), plan=lease_plan).exit_code == 0
    lease = json.loads(lease_plan.read_text())["allocations"][0]["allocation_id"]
    # A cancel that lands: a Task submitted, then cancelled while Slurm runs it.
    doomed = first.new_plan()
    first.run("plan", str(s.state), "--config", str(s.config), "--only", "k5", "--output",
              str(doomed), plan=doomed)  # fmt: skip
    assert first.run("submit", str(s.state), str(doomed), plan=doomed).exit_code == 0
    cancelled = first.run("cancel", str(s.state), "--task", "k5")
    assert cancelled.exit_code == 0 and "cancelled allocation" in cancelled.stdout
    s = attrs.evolve(s, lease=lease)
    drive.drive(s, after=hook)
    found = soakkit.collect(s)
    checked = invariants.check(found)
    assert {name: v for name, v in checked.items() if v} == {}
    document = report.build(None, found, checked)
    assert report.validate(document) == []
    commands = document["commands"]
    # Every move ran, and did something.
    assert commands["start"].get("0", 0) >= 1
    # Each start brings a Task of its own, so the lease really takes it (not "nothing to start").
    started = [r for r in found.commands if r.verb == "start" and r.exit_code == 0]
    assert started and all("grown-3-" in r.stdout for r in started), started
    assert commands["cancel"].get("0", 0) >= 1
    assert commands["submit"].get("0", 0) >= 3
    assert commands["submit"].get("1", 0) >= 1  # a stale plan, refused
    assert any("--budget" in r.argv and r.exit_code == 0 for r in found.commands)
    assert any("--retry-failed" in r.argv and r.exit_code == 0 for r in found.commands)
    kinds = {m.kind.value for m in found.markers}
    assert {"start", "end", "step-start", "claim", "handoff", "taken"} <= kinds
    # Tasks were seen running, then ended; attempts listed, then settled once Slurm forgot them.
    seen = {e for snap in found.statuses for _, e, _ in snap.tasks}
    assert {"RUNNING", "SUCCEEDED", "FAILED"} <= seen
    listed = {(a, j) for snap in found.statuses for a, j, _, on in snap.attempts if on}
    forgotten = {(a, j) for a, j, _, on in found.statuses[-1].attempts if not on}
    assert len(listed & forgotten) >= 3
    assert found.journal.state is not None and found.journal.state.settlements


def test_a_chain_link_runs_a_task_only_on_the_handoff_it_took(tmp_path: Path) -> None:
    s = make_world(tmp_path, seed=1)
    s = attrs.evolve(s, env={**(s.env or {}), "WORLD_FAILING": ""})  # every step succeeds
    d = drive.Driver(s, after=soakkit.publishing_worker(s.results))
    d.run("ensure", str(s.state), str(s.tasks), killable=False)
    chain = d.new_plan()
    d.run("plan", str(s.state), "--config", str(s.config), "--only", "k0", "--budget",
          "00:08:00", "--max-links", "2", "--output", str(chain), plan=chain)  # fmt: skip
    assert d.run("submit", str(s.state), str(chain), plan=chain).exit_code == 0
    for _ in range(12):  # link 1 yields and hands on, link 2 runs k0, both are forgotten
        d.run("status", str(s.state))
    again = d.new_plan()
    d.run("plan", str(s.state), "--config", str(s.config), "--retry", "k0", "--only", "k0",
          "--output", str(again), plan=again)  # fmt: skip
    assert d.run("submit", str(s.state), str(again), plan=again).exit_code == 0
    for _ in range(8):
        d.run("status", str(s.state))
    found = soakkit.collect(s)
    assert {name: v for name, v in invariants.check(found).items() if v} == {}
    assert found.journal.state is not None
    first, second = (i for i in found.journal.state.intents if i.chain is not None)
    assert second.chain is not None and second.chain.after == first.allocation_id
    logs = tmp_path / "logs"
    [handoff] = logs.glob(f"servatus-{first.allocation_id}.*.taken.0")
    [link_end] = logs.glob(f"servatus-{second.allocation_id}.*.end.0.*")
    assert runs_of_k0(found) == [
        first.allocation_id, second.allocation_id, found.journal.state.intents[-1].allocation_id
    ]  # fmt: skip
    # Link 2 without the handoff (link 1's node died before it handed on): it started, ran
    # nothing and has no end marker. Not a run of k0, so no overlap with the rerun.
    handed = handoff.stat()
    handoff.unlink()
    link_end.unlink()
    found = soakkit.collect(s)
    assert runs_of_k0(found) == [
        first.allocation_id, found.journal.state.intents[-1].allocation_id
    ]  # fmt: skip
    assert invariants.one_allocation_at_a_time(found) == []
    # With the handoff taken and still no end marker, link 2 ran k0 and never ended: the
    # rerun beside it is a violation.
    handoff.write_bytes(b"1001")
    os.utime(handoff, ns=(handed.st_atime_ns, handed.st_mtime_ns))
    found = soakkit.collect(s)
    [violation] = invariants.one_allocation_at_a_time(found)
    assert violation.subject == "k0" and "never ended" in violation.reason
    assert second.allocation_id in violation.reason


def runs_of_k0(found: SoakEvidence) -> list[str]:
    """The allocations the spans show running k0, in the order they started."""
    spans = sorted((x for x in invariants.spans(found) if x.key == "k0"), key=lambda x: x.start)
    return [span.allocation_id for span in spans]


def test_start_into_a_lease_that_ended_brings_a_new_lease(tmp_path: Path) -> None:
    """The field soak's lease ended in its first half minute (slurmctld, killed just after it
    started the lease, reloaded it as pending and ran its batch script again, which refused to
    run twice); every later start said "no link can take steps". A user submits a new lease."""
    s = attrs.evolve(make_world(tmp_path, seed=5), lease_plan=("--hold", "2"))
    d = drive.Driver(s)
    d.run("ensure", str(s.state), str(s.tasks), killable=False)
    d.renew_lease(killable=False)
    first = d.lease
    assert first is not None
    d.run("cancel", str(s.state), f"--allocation={first}", killable=False)
    for _ in range(6):  # until the world forgets it and start has no link left
        d.run("status", str(s.state), killable=False)
    d.step("start")
    start, _, plan, _, submit, _ = commandlog.read(s.log)[-6:]  # each with its status snapshot
    assert (start.verb, start.exit_code) == ("start", 1)
    assert "no link can take steps" in start.stderr
    assert (plan.verb, plan.exit_code, submit.verb, submit.exit_code) == ("plan", 0, "submit", 0)
    assert d.lease is not None and d.lease != first
    d.step("start")
    assert commandlog.read(s.log)[-2].verb == "start"
    assert commandlog.read(s.log)[-2].exit_code == 0, commandlog.read(s.log)[-2].stderr
