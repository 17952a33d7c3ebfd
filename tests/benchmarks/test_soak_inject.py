"""``benchmarks/soak/inject.py`` against recording actions, the report's left-out kinds, and the
soak Task's program (``task.py``) run here as a step would run it on the cluster."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from soak import report, worker
from soak.inject import FILE_SERVER_CLOCK, Injector, Skipped
from soak.schedule import Fault, FaultKind, FaultPlan

pytestmark = pytest.mark.slow  # the soak's own checks: once, in the trials, not per Python

SOAK = Path(__file__).resolve().parents[2] / "benchmarks" / "soak"


class Recording:
    """Actions that record what they were asked, with the injector's clock reading."""

    def __init__(self, injector_clock: list[Injector]) -> None:
        self.calls: list[tuple[str, float]] = []
        self.holder = injector_clock
        self.down: set[str] = set()

    def _note(self, what: str) -> str:
        self.calls.append((what, round(self.holder[0].elapsed(), 2)))
        return what

    def kill(self, daemon: str, node: str | None) -> str:
        if daemon == "slurmd" and node != "vm":
            raise Skipped(f"no slurmd for {node}")
        self.down.add(daemon)
        return self._note(f"kill {daemon}")

    def restart(self, daemon: str, node: str | None) -> str:
        self.down.discard(daemon)
        return self._note(f"restart {daemon}")

    def drop_master(self) -> str:
        raise Skipped("no master connection")

    def fill(self) -> str:
        raise OSError(28, "No space left on device")

    def free(self) -> str:
        return self._note("free")

    def step_clock(self, by: float) -> str:
        return self._note(f"clock {by:+.0f}")


def plan(*faults: Fault) -> FaultPlan:
    kinds = sorted({f.kind for f in faults}, key=lambda k: k.value)
    return FaultPlan(7, 10.0, tuple((k, 1.0) for k in kinds), ("vm",), faults)


def test_each_fault_lands_is_undone_after_its_hold_and_stop_undoes_the_rest(
    tmp_path: Path,
) -> None:
    faults = plan(
        Fault(0.1, FaultKind.KILL_SLURMCTLD, hold=0.3),
        Fault(0.2, FaultKind.KILL_SLURMD, hold=0.1, node="n2"),
        Fault(0.2, FaultKind.KILL_CLIENT, hold=1.0),
        Fault(0.25, FaultKind.KILL_SSHD, hold=30.0),
        Fault(0.3, FaultKind.DROP_MASTER),
        Fault(0.35, FaultKind.FILL_LOG_ROOT, hold=0.1),
        Fault(0.5, FaultKind.STEP_CLIENT_CLOCK, hold=0.1, step=60.0),
        Fault(50.0, FaultKind.KILL_SLURMCTLD, hold=1.0),
    )
    holder: list[Injector] = []
    actions = Recording(holder)
    log = tmp_path / "injected.jsonl"
    injector = Injector(faults, actions, log=log)
    holder.append(injector)
    injector.start()
    time.sleep(0.8)
    records = injector.stop()

    by_kind = {(r.kind, r.planned_at): r for r in records}
    assert "kill-client" not in {r.kind for r in records}  # the driver's own
    killed = by_kind[("kill-slurmctld", 0.1)]
    assert killed.outcome == "injected" and killed.detail == "kill slurmctld"
    assert killed.undone == "restart slurmctld"
    assert killed.undone_at is not None and 0.35 < killed.undone_at < 0.7
    assert by_kind[("kill-slurmd", 0.2)].outcome == "skipped"
    assert "n2" in by_kind[("kill-slurmd", 0.2)].detail
    # Down for longer than the soak: stop() brings it back at once.
    sshd = by_kind[("kill-sshd", 0.25)]
    assert sshd.outcome == "injected" and sshd.undone == "restart sshd"
    assert sshd.undone_at is not None and sshd.undone_at < 1.5
    assert actions.down == set()
    assert by_kind[("drop-master", 0.3)].outcome == "skipped"
    fill = by_kind[("fill-log-root", 0.35)]
    assert fill.outcome == "failed" and "No space left" in fill.detail
    assert fill.undone == "free"  # a fill that broke half-way is freed all the same
    clock = by_kind[("step-client-clock", 0.5)]
    assert clock.outcome == "injected" and clock.detail == "clock +60"
    assert clock.undone == "clock +0"  # stepped back at its hold's end
    assert by_kind[("kill-slurmctld", 50.0)].outcome == "skipped"
    assert "ended before" in by_kind[("kill-slurmctld", 50.0)].detail
    assert injector.injected_kinds() == ["kill-slurmctld", "kill-sshd", "step-client-clock"]
    order = [what for what, _ in actions.calls]
    assert order == [
        "kill slurmctld", "kill sshd", "restart slurmctld", "free", "clock +60", "clock +0",
        "restart sshd",
    ]  # fmt: skip
    written = [json.loads(line) for line in log.read_text().splitlines()]
    assert [w["outcome"] for w in written] == [r.outcome for r in records]


class SlowRestart(Recording):
    """slurmctld takes a second to come back; nothing else waits."""

    def restart(self, daemon: str, node: str | None) -> str:
        if daemon == "slurmctld":
            time.sleep(1.0)
        return super().restart(daemon, node)


def test_a_slow_restart_holds_back_no_other_kind() -> None:
    faults = plan(
        Fault(0.05, FaultKind.KILL_SLURMCTLD, hold=0.05),
        Fault(0.3, FaultKind.KILL_SSHD, hold=0.1),
        Fault(0.6, FaultKind.KILL_SLURMCTLD, hold=0.1),
    )
    holder: list[Injector] = []
    actions = SlowRestart(holder)
    injector = Injector(faults, actions, log=None)
    holder.append(injector)
    injector.start()
    time.sleep(1.5)
    records = injector.stop()
    calls = dict(actions.calls)
    assert calls["kill sshd"] < 0.5 and calls["restart sshd"] < 0.7  # not after the second
    first, sshd, second = sorted(records, key=lambda r: r.planned_at)
    assert first.undone == "restart slurmctld" and first.undone_at is not None
    assert second.at is not None and second.at >= first.undone_at  # a kind keeps its order
    assert second.undone == "restart slurmctld"
    assert sshd.outcome == "injected" and actions.down == set()


def test_the_client_clock_a_command_starts_with(tmp_path: Path) -> None:
    from soak import clock

    from servatus.operations.reconcile import RECONCILE_AFTER

    offset = tmp_path / "client-clock"
    assert clock.shift(str(offset)) == 0.0  # never stepped
    offset.write_text("-600.0\n")
    assert clock.shift(str(offset)) == -600.0
    assert clock.shift("later") == RECONCILE_AFTER + 60
    shown = subprocess.run(
        [sys.executable, "-c", f"import clock, time; clock.install({str(offset)!r}); "
         "import servatus.cli; print(time.time())"],
        cwd=SOAK, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert shown.returncode == 0, shown.stderr
    assert abs(float(shown.stdout) - (time.time() - 600.0)) < 30


def test_the_report_names_the_kinds_left_out() -> None:
    from soak.evidence import JournalEvidence, SoakEvidence
    from soak.invariants import INVARIANTS

    empty = SoakEvidence(
        journal=JournalEvidence(state=None, error=None), markers=(), commands=(), statuses=(),
        plans=(), results=(), expect_results=False, collected_at=0.0,
    )  # fmt: skip
    checked: dict[str, tuple[()]] = {name: () for name, _ in INVARIANTS}
    why = {FaultKind.STEP_CLOCK.value: FILE_SERVER_CLOCK}
    document = report.build(None, empty, checked, injected=["kill-sshd"], left_out=why)
    assert report.validate(json.loads(json.dumps(document))) == []
    assert document["faults_left_out"] == why
    assert document["faults"]["kill-sshd"] == 1
    assert "step-clock left out (not run here)" in report.table(document)
    assert report.build(None, empty, checked)["faults_left_out"] == {}
    assert report.validate(dict(document, faults_left_out={"step-clock": ""}))
    assert report.validate(dict(document, faults_left_out={"warp": "why"}))


def _work_root(tmp_path: Path) -> Path:
    """A work_root laid out as the cluster soak lays it out: the program, a copy of the worker."""
    work = tmp_path / "work"
    (work / "soak").mkdir(parents=True)
    (work / "results").mkdir()
    (work / "soak" / "__init__.py").write_text("")
    shutil.copy(SOAK / "worker.py", work / "soak" / "worker.py")
    shutil.copy(SOAK / "task.py", work / "soak_task.py")
    return work


def _step(work: Path, key: str, *args: str, **extra: str) -> subprocess.Popen[str]:
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "SERVATUS_TASK_KEY": key,
        "SERVATUS_ALLOCATION_ID": "a" * 24,
        "SERVATUS_JOB_ID": "4242",
        "SERVATUS_SLOT": "1",
        **extra,
    }
    return subprocess.Popen(
        [sys.executable, "soak_task.py", *args], cwd=work, env=env, text=True,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip


def test_the_task_publishes_fails_once_when_flaky_and_yields_on_the_signal(
    tmp_path: Path,
) -> None:
    work = _work_root(tmp_path)
    done = _step(work, "plain", "0.2")
    assert done.wait(30) == 0, done.communicate()
    writer, problems = worker.check_result(work / "results" / "plain", "plain")
    assert (writer, problems) == (f"{'a' * 24}.4242.1", ())
    again = _step(work, "plain", "0")
    assert again.wait(30) == 0 and "already published" in again.communicate()[0]

    first = _step(work, "flaky", "0", "flaky")
    assert first.wait(30) == 1
    assert not (work / "results" / "flaky").exists()
    second = _step(work, "flaky", "0", "flaky")
    assert second.wait(30) == 0
    assert worker.check_result(work / "results" / "flaky", "flaky")[1] == ()

    # A chain's first link works until the pre-limit signal and yields; a later link publishes.
    link = _step(work, "chained", "0", SERVATUS_BUDGET="300", SERVATUS_LINK="1")
    time.sleep(1.0)
    assert link.poll() is None
    link.send_signal(signal.SIGUSR1)
    assert link.wait(30) == 75
    assert not (work / "results" / "chained").exists()
    later = _step(work, "chained", "0", SERVATUS_BUDGET="300", SERVATUS_LINK="2")
    assert later.wait(30) == 0
    assert worker.check_result(work / "results" / "chained", "chained")[1] == ()
    assert sorted(p.name for p in (work / "runs").iterdir() if "failed" not in p.name) == [
        "chained.4242.1", "flaky.4242.1", "plain.4242.1"
    ]  # fmt: skip


def test_before_finale_runs_between_the_moves_and_the_finale(tmp_path: Path) -> None:
    import soakkit
    from soak import drive

    soakkit.make_lane(tmp_path)
    s = soakkit.settings(tmp_path, actions={"sweep": 1.0}, max_commands=4)
    seen: list[int] = []

    def between(driver: drive.Driver) -> None:
        seen.append(driver.index)
        driver.run("status", str(s.state), "--json", killable=False)

    records = drive.drive(s, before_finale=between)
    [index] = seen
    assert records[index].verb == "status"  # logged, right after the last move
    assert all(r.verb != "reconcile" for r in records[:index])
    assert [r.verb for r in records[index + 1 :]][:1] == ["reconcile"]


class Breaking(Recording):
    """The first restart of sshd raises: the kind's thread must live on for the next fault."""

    def restart(self, daemon: str, node: str | None) -> str:
        if daemon == "sshd" and not getattr(self, "broke", False):
            self.broke = True
            raise RuntimeError("restart broke")
        return super().restart(daemon, node)


def test_kinds_write_one_log_at_a_time_and_a_broken_action_stops_no_kind(tmp_path: Path) -> None:
    faults = plan(
        *(Fault(0.002 * i, FaultKind.KILL_SLURMCTLD, hold=0.0) for i in range(200)),
        *(Fault(0.002 * i, FaultKind.FILL_LOG_ROOT, hold=0.0) for i in range(200)),
        *(Fault(0.002 * i, FaultKind.STEP_CLIENT_CLOCK, hold=0.0, step=5.0) for i in range(200)),
        Fault(0.1, FaultKind.KILL_SSHD, hold=0.05),
        Fault(0.4, FaultKind.KILL_SSHD, hold=0.05),
    )
    holder: list[Injector] = []
    actions = Breaking(holder)
    log = tmp_path / "injected.jsonl"
    injector = Injector(faults, actions, log=log)
    holder.append(injector)
    injector.start()
    time.sleep(1.0)
    records = injector.stop()
    sshd = [r for r in records if r.kind == "kill-sshd"]
    assert [r.outcome for r in sshd] == ["injected", "injected"]  # the second still landed
    assert sshd[0].undone is not None and sshd[0].undone.startswith("FAILED RuntimeError")
    assert sshd[1].undone == "restart sshd"
    assert len(log.read_text().splitlines()) == len(records)
    assert not list(tmp_path.glob(".*.tmp"))
