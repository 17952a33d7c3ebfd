"""The soak's driver: a seeded loop of the commands a user runs (plan and submit of plain sweeps
and budgeted chains, status, cancel, reconcile, plan --retry-failed, start into a lease, and a
plan left to go stale), each a fresh ``servatus`` process, recorded in the command log
(:mod:`soak.commandlog`) with the snapshots the invariants need. The client kills of the fault
plan (``KILL_CLIENT``) are the driver's to do: once one is due, the next command is SIGKILLed
``hold`` of the way through its usual length (the median of that verb's last runs), so the kill
lands anywhere from start-up to the last write; a command that ends first passes the kill on.
Every other fault kind is the injector's.

After every command it runs ``status --json`` (never killed) and reads the journal's revision
and the published results; at the end it runs ``reconcile`` until it exits 0 or the finale's
time is up, then a last ``status --json``.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import attrs

from soak import commandlog, evidence
from soak.commandlog import CommandRecord
from soak.schedule import FaultKind, FaultPlan

ACTIONS: Mapping[str, float] = {
    "sweep": 3.0,
    "chain": 1.0,
    "status": 2.0,
    "cancel": 1.0,
    "reconcile": 1.0,
    "retry": 2.0,
    "stale": 0.5,
    "grow": 0.5,
    "start": 1.0,
}
"""Relative weights of the user's moves. ``grow`` appends new Tasks; ``stale`` saves a plan,
grows the campaign, then submits the plan (Servatus must refuse it)."""


@attrs.frozen
class Settings:
    """One drive. ``work`` receives the command log (``commands.jsonl``) and saved plans
    (``plans/``); ``results`` is where the Tasks publish (None: they publish nothing);
    ``budget`` enables chains (``plan --budget``), ``lease`` enables ``start`` into that lease.
    """

    state: Path
    config: Path
    tasks: Path
    work: Path
    seed: int
    duration: float
    results: Path | None = None
    servatus: tuple[str, ...] = (sys.executable, "-m", "servatus")
    budget: str | None = None
    max_links: int = 2
    lease: str | None = None
    actions: Mapping[str, float] = ACTIONS
    max_commands: int | None = None
    finale: float = 60.0
    reconcile_every: float = 5.0
    timeout: float = 600.0
    env: Mapping[str, str] | None = None
    lease_plan: tuple[str, ...] = ()
    """``plan`` options of a new lease (``--profile lease --hold 2``): when ``start`` finds the
    lease can take no step (it ended: cancelled, failed, its node lost), the driver submits a
    new one as a user would, and starts into it from then on. Empty: it never does."""
    later: tuple[str, ...] | None = None
    """The CLI with its clock past reconcile's 15-minute rule (``clock.py later``): the finale
    runs ``reconcile`` through it when the real one still waits at the finale's end."""

    @property
    def log(self) -> Path:
        return self.work / "commands.jsonl"


class Driver:
    """Runs commands and records them; :func:`drive` is its loop."""

    def __init__(
        self,
        settings: Settings,
        faults: FaultPlan | None = None,
        after: Callable[[CommandRecord], None] | None = None,
    ) -> None:
        self.settings = settings
        self.rng = random.Random(f"servatus-soak-drive/{settings.seed}")
        self.kills = sorted(
            (f.at, f.hold)
            for f in (faults.faults if faults else ())
            if f.kind is FaultKind.KILL_CLIENT
        )
        self.lengths: dict[str, list[float]] = {}
        """The last seconds each verb took when it ran to its end: where a kill lands."""
        self.after = after
        self.lease = settings.lease
        """The lease ``start`` goes into (a new one once it ended, with ``lease_plan``)."""
        self.recent: list[str] = []
        """The Tasks of the last plan submitted: what ``cancel`` picks from."""
        self.began = time.monotonic()
        (settings.work / "plans").mkdir(parents=True, exist_ok=True)
        # A driver over an earlier one's work carries on its numbering: indices, plans, Tasks.
        earlier = commandlog.read(settings.log) if settings.log.exists() else ()
        self.index = max((r.index for r in earlier), default=-1) + 1
        self.plans = len(list((settings.work / "plans").glob("*.json")))
        grown = settings.work / "grown.jsonl"
        self.grown = len(grown.read_text().splitlines()) if grown.exists() else 0

    def elapsed(self) -> float:
        return time.monotonic() - self.began

    def run(
        self,
        *args: str,
        plan: Path | None = None,
        killable: bool = True,
        servatus: tuple[str, ...] | None = None,
    ) -> CommandRecord:
        """Run ``servatus ARGS`` (through ``servatus`` when given) and log it, then (unless it
        is itself a status snapshot) take the ``status --json`` snapshot."""
        delay: float | None = None
        if killable and self.kills and self.kills[0][0] <= self.elapsed():
            delay = self.kills[0][1] * self.usual_length(args[0])
        record = self._run(args, plan, delay, servatus)
        if record.killed:
            self.kills.pop(0)
        elif record.exit_code is not None and not record.timed_out:
            seen = self.lengths.setdefault(args[0], [])
            seen.append(record.ended - record.started)
            del seen[:-9]
        if killable:
            self._run(("status", str(self.settings.state), "--json"), None, None)
        return record

    def usual_length(self, verb: str) -> float:
        """The median of the verb's last runs; a second before it has run once."""
        seen = sorted(self.lengths.get(verb) or [1.0])
        return seen[len(seen) // 2]

    def _run(
        self,
        args: Sequence[str],
        plan: Path | None,
        kill_after: float | None,
        servatus: tuple[str, ...] | None = None,
    ) -> CommandRecord:
        s = self.settings
        argv = (*(servatus or s.servatus), *args)
        before = evidence.journal_revision(s.state)
        env = dict(os.environ) if s.env is None else dict(s.env)
        # Output goes to files, not pipes: a killed command's children (an sbatch in flight)
        # may hold its stdout open for as long as they run, and the driver must not wait on them.
        with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
            started = time.time()
            process = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=out, stderr=err, env=env,
                start_new_session=True,
            )  # fmt: skip
            killed = timed_out = False
            try:
                process.wait(timeout=kill_after if kill_after is not None else s.timeout)
            except subprocess.TimeoutExpired:
                process.send_signal(signal.SIGKILL)  # the process alone, as a client dies
                process.wait()
                killed = kill_after is not None
                timed_out = not killed
            ended = time.time()
            out.seek(0)
            err.seek(0)
            stdout = out.read().decode("utf-8", "replace")
            stderr = err.read().decode("utf-8", "replace")
        record = CommandRecord(
            index=self.index,
            argv=tuple(argv),
            started=started,
            ended=ended,
            exit_code=None if killed else process.returncode,
            killed=killed,
            timed_out=timed_out,
            stdout=stdout,
            stderr=stderr,
            plan=None if plan is None else str(plan),
            revision_before=before,
            revision_after=evidence.journal_revision(s.state),
        )
        if self.after is not None:  # before the results are read: it may publish some
            self.after(record)
        if s.results is not None:
            record = attrs.evolve(record, results=evidence.snapshot_results(s.results))
        self.index += 1
        commandlog.append(s.log, record)
        return record

    def new_plan(self) -> Path:
        self.plans += 1
        return self.settings.work / "plans" / f"{self.plans:04d}.json"

    def keys(self) -> list[str]:
        roster = self.settings.tasks.read_text().splitlines()
        grown = self.settings.work / "grown.jsonl"
        if grown.exists():
            roster += grown.read_text().splitlines()
        return [json.loads(line)["key"] for line in roster if line.strip()]

    def plan_and_submit(self, *extra: str, go_stale: bool = False) -> None:
        s = self.settings
        path = self.new_plan()
        args = ["plan", str(s.state), "--config", str(s.config), "--output", str(path), *extra]
        made = self.run(*args, plan=path)
        if made.exit_code != 0 or not path.exists():
            return
        if go_stale:
            self.grow()
        sent = self.run("submit", str(s.state), str(path), plan=path)
        if sent.exit_code == 0:
            planned = json.loads(path.read_text()).get("allocations") or []
            self.recent = [key for a in planned for key in a.get("task_keys") or ()] or self.recent

    def grow(self) -> str:
        """Append one new Task (a copy of the first's command under a fresh key); its key."""
        s = self.settings
        first = json.loads(s.tasks.read_text().splitlines()[0])
        self.grown += 1
        first["key"] = f"grown-{s.seed}-{self.grown}"
        grown = s.work / "grown.jsonl"
        with grown.open("a") as out:
            out.write(json.dumps(first) + "\n")
        self.run("ensure", str(s.state), str(grown))
        return str(first["key"])

    def step(self, action: str) -> None:
        s = self.settings
        if action == "sweep":
            self.plan_and_submit()
        elif action == "chain" and s.budget is not None:
            key = self.grow()  # a Task of its own, so the chain has one to run
            budget = ("--budget", s.budget, "--max-links", str(s.max_links))
            self.plan_and_submit(*budget, "--only", key)
        elif action == "status":
            self.run("status", str(s.state))
        elif action == "cancel":  # most often a Task just submitted, which may still run
            recent = self.recent or self.keys()
            self.run("cancel", str(s.state), "--task", self.rng.choice(recent))
        elif action == "reconcile":
            self.run("reconcile", str(s.state))
        elif action == "retry":
            self.plan_and_submit("--retry-failed")
        elif action == "stale":
            self.plan_and_submit(go_stale=True)
        elif action == "grow":
            self.grow()
        elif action == "start" and self.lease is not None:
            # A Task of its own, as a user starts new work into a lease: one picked from the
            # roster has most often run already, and start then has nothing to do.
            key = self.grow()
            grown = (s.work / "grown.jsonl").read_text().splitlines()
            one = s.work / "start.jsonl"
            one.write_text("".join(line + "\n" for line in grown if json.loads(line)["key"] == key))
            started = self.run("start", str(s.state), str(one), "--lease", self.lease)
            if started.exit_code == 1 and "no link can take steps" in started.stderr:
                self.renew_lease()

    def renew_lease(self, *, killable: bool = True) -> None:
        """Plan and submit a new lease (``lease_plan``); start goes into it once it is taken."""
        s = self.settings
        if not s.lease_plan:
            return
        path = self.new_plan()
        args = ["plan", str(s.state), "--config", str(s.config), *s.lease_plan]
        made = self.run(*args, "--output", str(path), plan=path, killable=killable)
        if made.exit_code != 0:
            return
        sent = self.run("submit", str(s.state), str(path), plan=path, killable=killable)
        for line in sent.stdout.splitlines():
            if line.startswith("submitted lease "):
                self.lease = line.split()[2].rstrip(":")

    def finale(self) -> None:
        """Reconcile until it exits 0 or the finale's time is up; then the last snapshot."""
        s = self.settings
        deadline = time.monotonic() + s.finale
        while True:
            done = self.run("reconcile", str(s.state), killable=False)
            if done.exit_code == 0 or time.monotonic() >= deadline:
                break
            time.sleep(min(s.reconcile_every, max(0.0, deadline - time.monotonic())))
        if done.exit_code != 0 and s.later is not None:
            done = self.run("reconcile", str(s.state), killable=False, servatus=s.later)
        self._run(("status", str(s.state), "--json"), None, None)


def drive(
    settings: Settings,
    faults: FaultPlan | None = None,
    after: Callable[[CommandRecord], None] | None = None,
    *,
    before_finale: Callable[[Driver], None] | None = None,
) -> tuple[CommandRecord, ...]:
    """Create (or extend) the campaign from ``settings.tasks``, run seeded user moves until
    ``duration`` seconds or ``max_commands`` commands, then the finale; returns the log.
    ``before_finale`` runs between the two (the cluster soak stops its injector there and
    cancels what is left, through the driver so those commands are logged too)."""
    s = settings
    driver = Driver(s, faults, after)
    driver.run("ensure", str(s.state), str(s.tasks), killable=False)
    moves = [a for a, w in s.actions.items() if w > 0]
    weights = [s.actions[a] for a in moves]
    while driver.elapsed() < s.duration and (
        s.max_commands is None or driver.index < s.max_commands
    ):
        driver.step(driver.rng.choices(moves, weights)[0])
    if before_finale is not None:
        before_finale(driver)
    driver.finale()
    return commandlog.read(s.log)
