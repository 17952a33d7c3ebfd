"""``python benchmarks/soak run``: one soak on the real test cluster (tests/cluster/harness.py),
as root, with the cluster up.

It sets up one campaign the way a user would over SSH (``servatus-test``): a directory of its own
under alice's work_root (``soak-<seed>-<stamp>/``: ``work/`` with the Task program and
``results/``, and ``logs/``, the log_root, a small tmpfs of its own), a SERVATUS.toml and a
roster of Tasks in the run's directory outside, ``ensure``, then a lease (``plan --hold 2`` of
profile ``lease``, submitted). Then the driver (:func:`soak.drive.drive`) runs the user's moves
with the :class:`~soak.inject.Injector` beside it for the soak's minutes; then the finale: the
injector stops (whatever it holds down comes back), every allocation still queued or running is
cancelled with ``servatus cancel --allocation``, the run waits until Slurm lists none of them,
and the driver's ``reconcile`` loop runs until it exits 0 or its time is up. Last the evidence
is read (log_root through the cluster's namespace), the invariants checked, ``report.json`` and
``injected.jsonl`` written, the table printed, and log_root copied to ``log_root/`` of the run
directory before its tmpfs is unmounted.

The tmpfs: the cluster's mount namespace is private, so a mount made on this machine is not seen
inside it; the mount is made inside (``harness.in_root``), and this side reads and fills it
through ``/proc/<namespace holder>/root``, where the holder's mount namespace resolves the path.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import random
import shutil
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import attrs

from soak import drive, evidence, invariants, report, schedule
from soak.drive import Driver, Settings
from soak.inject import FILE_SERVER_CLOCK, Injector, Skipped
from soak.schedule import FaultKind

CHECKOUT = Path(__file__).resolve().parents[2]
sys.path.append(str(CHECKOUT / "tests"))  # after benchmarks/: tests/lane's leasekit stays hidden

from cluster import harness  # noqa: E402

INNER_PYTHON = f"{harness.VENV}/bin/python"
TASK_SECONDS = (3.0, 45.0)
"""How long a plain Task works, drawn per Task from the seed."""
FLAKY_SHARE = 0.25
"""Tasks that fail their first run (for ``plan --retry-failed``)."""
LOG_ROOT_SIZE = "16m"
LOG_ROOT_INODES = 4096
"""The log_root tmpfs: small, so filling it (blocks, then inodes: markers are empty files) takes
well under a second; big enough for a soak's markers and step logs."""
WAIT_CANCELLED = 240.0
"""Seconds the finale waits for Slurm to list none of the cancelled allocations."""
LEFT_OUT: Mapping[FaultKind, str] = {FaultKind.STEP_CLOCK: FILE_SERVER_CLOCK}
RUN_RATES: Mapping[FaultKind, float] = {
    kind: rate for kind, rate in schedule.DEFAULT_RATES.items() if kind not in LEFT_OUT
}
PARTITION = harness.NODES_PARTITION
NODES = harness.NODES
"""The soak's work runs on n1..n3, each its own slurmd: the nodes whose slurmd it kills."""
CLOCK = Path(__file__).resolve().parent / "clock.py"
MASTER_WAIT = 10.0
"""Seconds a drop-master waits for a master connection to drop."""


# ---------------------------------------------------------------- the actions on the cluster


class ClusterActions:
    """The injector's actions on the harness's cluster. ``log_root`` is the path inside."""

    def __init__(self, root: Path, holder: int, log_root: str, client_clock: Path) -> None:
        self.root = root
        self.holder = holder
        self.log_root = log_root
        self.client_clock = client_clock
        """The seconds the driver's commands add to their clock (``clock.py``)."""
        self.fill_dir = self.outside(log_root) / ".soak-fill"
        self.argv: dict[tuple[str, str | None], list[bytes]] = {}
        """Each killed daemon's command line, to start it again as it ran."""

    def outside(self, inner: str) -> Path:
        """Where a path of the cluster's namespace is from this side."""
        return Path(f"/proc/{self.holder}/root") / inner.lstrip("/")

    def _pid(self, daemon: str, node: str | None) -> int | None:
        if daemon != "slurmd":
            return harness.pid_of(self.root, daemon)
        # One slurmd per node: /run/slurmd-<node>.pid where the harness runs several (SlurmdPidFile
        # with %n), /run/slurmd.pid where it runs one, named after the host.
        name = node or harness.node_name()
        files = [f"run/slurmd-{name}.pid"]
        if name == harness.node_name():
            files.append("run/slurmd.pid")
        for file in files:
            try:
                pid = int((self.outside("/") / file).read_text().split()[0])
            except (OSError, ValueError, IndexError):
                continue
            if not harness.zombie(pid) and "slurmd" in harness.command_line(pid):
                return pid
        if not any((self.outside("/") / file).exists() for file in files):
            raise Skipped(f"no slurmd pid file for node {name}")
        return None

    def kill(self, daemon: str, node: str | None) -> str:
        pid = self._pid(daemon, node)
        if pid is None:
            raise Skipped(f"{daemon} is not running")
        self.argv[(daemon, node)] = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[:-1]
        os.kill(pid, 9)
        began = time.monotonic()
        while not harness.zombie(pid):  # gone, or a zombie no longer holding its ports
            if time.monotonic() - began > 20:
                raise RuntimeError(f"{daemon} pid {pid} still alive 20 s after SIGKILL")
            time.sleep(0.05)
        return f"SIGKILL {daemon} pid {pid}, gone after {time.monotonic() - began:.2f} s"

    def restart(self, daemon: str, node: str | None) -> str:
        failures: list[str] = []
        for attempt in range(6):
            try:
                if daemon == "slurmd":
                    self._start_slurmd(node)
                else:
                    # keep_state: slurmctld reloads the jobs it saved, as a restarted one does.
                    harness.start_daemon(self.root, daemon, keep_state=True)
            except (harness.HarnessError, OSError) as exc:
                failures.append(str(exc)[-200:])
                time.sleep(1.0 + attempt)
                continue
            pid = self._pid(daemon, node)
            tried = f" after {len(failures)} failed tries ({failures[-1]})" if failures else ""
            return f"{daemon} restarted: pid {pid}{tried}{self.resume_drained()}"
        raise RuntimeError(f"{daemon} would not restart: {failures[-1]}")

    def _start_slurmd(self, node: str | None) -> None:
        """slurmd again as it ran (its own command line: ``-N NODE`` where there are several)."""
        if self._pid("slurmd", node) is not None:
            return
        argv = [a.decode() for a in self.argv.get(("slurmd", node), [b"/usr/sbin/slurmd"])]
        state = harness.read_state()
        if state is None:
            raise harness.HarnessError("the cluster is not up")
        harness.run([*harness.enter_argv(state), *argv], env=harness.ROOT_ENV, timeout=60)
        harness.wait_for(lambda: self._pid("slurmd", node) is not None, 20, "slurmd's pid file")

    def resume_drained(self) -> str:
        """Resume the soak's nodes Slurm drained, as a site's admin does: a job whose processes
        could not be killed while its node's slurmd was down drains the node ("Kill task
        failed"), and nothing runs there again until someone resumes it. What was resumed is
        said in the fault's record."""
        resumed = []
        try:
            listed = drained(self.root)
        except (harness.HarnessError, OSError, subprocess.SubprocessError) as exc:
            return f"; nodes not read: {str(exc)[-120:]}"
        for line in listed:
            node, state, reason = [*line.split("|"), "", ""][:3]
            if "drain" in state:
                try:
                    harness.scontrol_node(self.root, node, "RESUME")
                except (harness.HarnessError, OSError, subprocess.SubprocessError) as exc:
                    resumed.append(f"not {node} ({state}: {reason}): {str(exc)[-120:]}")
                    continue
                resumed.append(f"{node} ({state}: {reason})")
        return f"; resumed {', '.join(resumed)}" if resumed else ""

    def drop_master(self) -> str:
        """End the master connection; when none runs (the last one dropped, no command since),
        wait up to ``MASTER_WAIT`` seconds for the next command to open one, so the drop lands."""
        deadline = time.monotonic() + MASTER_WAIT
        while not self._master() and time.monotonic() < deadline:
            time.sleep(0.2)
        ended = subprocess.run(
            ["ssh", "-O", "exit", harness.ALIAS],
            capture_output=True, text=True, timeout=20, stdin=subprocess.DEVNULL, check=False,
        )  # fmt: skip
        said = (ended.stderr or ended.stdout).strip()
        if ended.returncode != 0:
            raise Skipped(f"no master connection to end: {said}")
        return f"ssh -O exit: {said}"

    @staticmethod
    def _master() -> bool:
        checked = subprocess.run(
            ["ssh", "-O", "check", harness.ALIAS],
            capture_output=True, timeout=20, stdin=subprocess.DEVNULL, check=False,
        )  # fmt: skip
        return checked.returncode == 0

    def fill(self) -> str:
        """Fill log_root's tmpfs: its blocks with one file, then its inodes with empty files (a
        run marker is an empty file, so a filesystem out of blocks alone still takes them)."""
        self.fill_dir.mkdir(mode=0o700, exist_ok=True)
        written = 0
        chunk = b"\0" * (1 << 20)
        fd = os.open(self.fill_dir / "blocks", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            while True:
                try:
                    written += os.write(fd, chunk)
                except OSError as exc:
                    if exc.errno != errno.ENOSPC:
                        raise
                    if len(chunk) <= 4096:
                        break
                    chunk = chunk[: len(chunk) // 2]
        finally:
            os.close(fd)
        files = 0
        while True:
            try:
                (self.fill_dir / f"i{files}").touch()
            except OSError as exc:
                if exc.errno != errno.ENOSPC:
                    raise
                break
            files += 1
        left = os.statvfs(self.outside(self.log_root))
        return (
            f"log_root filled: {written} bytes and {files} files; "
            f"{left.f_bavail} blocks and {left.f_favail} inodes left"
        )

    def step_clock(self, by: float) -> str:
        """Step the client's clock: every servatus command started from now on reads ``by``
        seconds more (or less) than the time. A command running meanwhile keeps its clock."""
        temporary = self.client_clock.with_name(f".{self.client_clock.name}.tmp")
        temporary.write_text(f"{by}\n")
        temporary.replace(self.client_clock)
        return f"client clock {by:+.0f} s" if by else "client clock right"

    def free(self) -> str:
        shutil.rmtree(self.fill_dir)
        left = os.statvfs(self.outside(self.log_root))
        return f"log_root freed: {left.f_bavail} blocks and {left.f_favail} inodes free"


# ---------------------------------------------------------------- the campaign


def profile_toml(work_root: str, log_root: str, lease_minutes: int) -> str:
    """The soak's SERVATUS.toml: profile ``cpu`` (default: 1 CPU, 100 MiB, 2 minutes, SIGUSR1 a
    minute before the limit, up to 4 Tasks per allocation) and ``lease`` (the same slots, held
    for the whole soak)."""
    return f"""\
default_profile = "cpu"

[target]
host = "{harness.ALIAS}"
slurm_bin = "{harness.SLURM_BIN}"
work_root = "{work_root}"
log_root = "{log_root}"
partitions = ["{PARTITION}"]
max_tasks_per_allocation = 4
max_cpus_per_allocation = 8
max_memory_mib_per_allocation = 1600
max_time_limit = "01:00:00"

[resources]
cpus = 1
memory_mib = 100
time_limit = "00:02:00"
signal_before_end = "00:01:00"

[profiles.cpu.resources]
cpus = 1

[profiles.lease.resources]
time_limit = "00:{lease_minutes:02d}:00"
"""


def roster(seed: int, count: int) -> list[dict[str, Any]]:
    """The soak's Tasks: each works a seeded while, a quarter fail their first run."""
    rng = random.Random(f"servatus-soak-tasks/{seed}")
    tasks = []
    for index in range(count):
        seconds = round(rng.uniform(*TASK_SECONDS), 1)
        args = [INNER_PYTHON, "soak_task.py", str(seconds)]
        if rng.random() < FLAKY_SHARE:
            args.append("flaky")
        tasks.append({"key": f"s{seed}-{index:02d}", "args": args})
    return tasks


def make_dirs(uid: int, gid: int, *paths: Path) -> None:
    for path in paths:
        path.mkdir(mode=0o700, parents=False, exist_ok=False)
        os.chown(path, uid, gid)


def put(path: Path, text: str, uid: int, gid: int) -> None:
    path.write_text(text)
    os.chown(path, uid, gid)


def mount_log_root(root: Path, holder: int, log_root: str, uid: int, gid: int) -> None:
    options = f"size={LOG_ROOT_SIZE},nr_inodes={LOG_ROOT_INODES},mode=0700,uid={uid},gid={gid}"
    harness.in_root(root, ["mount", "-t", "tmpfs", "-o", options, "soak-log-root", log_root])
    inside = Path(f"/proc/{holder}/mountinfo").read_text().splitlines()
    mounted = [line.split()[4] for line in inside]
    if log_root not in mounted:
        raise harness.HarnessError(f"the tmpfs at {log_root} is not in the cluster's namespace")
    if harness.mounted(Path(log_root)):
        raise harness.HarnessError(f"the tmpfs at {log_root} leaked out of the namespace")


def unmount_log_root(root: Path, log_root: str) -> None:
    harness.in_root(root, ["umount", log_root], check=False)


@contextlib.contextmanager
def session_lock() -> Iterator[None]:
    """The test sessions' shared lock, as bench_submit_cluster.py holds it: a pytest session
    that ends meanwhile leaves the cluster up."""
    harness.CACHE_DIR.mkdir(parents=True, exist_ok=True)
    with (harness.CACHE_DIR / "sessions.lock").open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_SH)
        yield


def listed_allocations(driver: Driver) -> list[str]:
    """The allocations a logged ``status --json`` shows Slurm listing (queued or running)."""
    shown = driver.run("status", str(driver.settings.state), "--json", killable=False)
    try:
        document = json.loads(shown.stdout)
    except ValueError:
        return []
    return [str(a["allocation_id"]) for a in document.get("attempts") or () if a.get("listed")]


def cancel_remaining(driver: Driver) -> None:
    """The finale's first half: cancel every allocation still listed; wait until none is."""
    listed = listed_allocations(driver)
    if listed:
        args = [f"--allocation={allocation}" for allocation in listed]
        driver.run("cancel", str(driver.settings.state), *args, killable=False)
    deadline = time.monotonic() + WAIT_CANCELLED
    while listed and time.monotonic() < deadline:
        time.sleep(5.0)
        listed = listed_allocations(driver)


def ensure_daemons(actions: ClusterActions) -> list[str]:
    """Every daemon the soak may have killed running again (never a clean slurmctld: it keeps
    the jobs it knew); slurmd as it ran."""
    started = []
    for daemon in ("munged", "slurmctld", "sshd"):
        if harness.pid_of(actions.root, daemon) is None:
            harness.start_daemon(actions.root, daemon, keep_state=True)
            started.append(daemon)
    for daemon, node in list(actions.argv):
        if daemon == "slurmd" and actions._pid(daemon, node) is None:
            actions._start_slurmd(node)
            started.append(f"slurmd {node}")
    return started


def drained(root: Path) -> list[str]:
    """``sinfo -R`` of the soak's partition: a node drained or down, with Slurm's reason. A
    job whose tasks could not be killed while its slurmd was down drains its node ("Kill task
    failed"), and every later job then waits: a soak on it runs nothing."""
    listed = harness.in_root(
        root,
        [f"{harness.SLURM_BIN}/sinfo", "-R", "-h", "-N", "-p", PARTITION, "-o", "%N|%T|%E"],
        check=False,
        timeout=20,
    )
    return [line for line in listed.stdout.splitlines() if line.strip()]


def run(
    *,
    minutes: float,
    seed: int,
    out: Path | None,
    finale: float,
    rates_x: float = 1.0,
    tasks: int = 8,
    per_kind: int | None = None,
    later: bool = False,
) -> int:
    """One soak on the cluster; 0 with no violation, 1 with any, 2 when it could not start.
    ``rates_x`` multiplies the cluster-side kinds' rates (a few minutes at the default rates
    see few faults); client kills keep theirs. ``per_kind`` instead plans that many of every
    kind (with a margin), with short outages (:func:`schedule.field_rates`). ``later``: when
    the finale's real ``reconcile`` still waits on reconcile's 15-minute rule at its end, one
    more runs with the client's clock past it (``clock.py later``)."""
    harness.require_root()
    state_file = harness.read_state()
    daemons = harness.status()["daemons"]
    assert isinstance(daemons, dict)
    down = [name for name in ("munged", "slurmctld", "sshd") if daemons.get(name) is None]
    if down or state_file is None or state_file.holder is None:
        print("the cluster is not up: python3 tests/cluster/harness.py up", file=sys.stderr)
        return 2
    root, holder = Path(state_file.root), state_file.holder
    before = drained(root)
    if before:
        print(f"soak: the partition's nodes are not up: {'; '.join(before)}", file=sys.stderr)
        return 2
    uid, gid = state_file.uid, state_file.gid
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    out = out or Path("/var/tmp/servatus-soak") / f"{seed}-{stamp}"
    out.mkdir(parents=True, exist_ok=True)
    duration = minutes * 60.0
    quiet_tail = min(60.0, duration / 4)
    holds = schedule.HOLD_RANGE
    if per_kind is not None:
        holds = schedule.FIELD_HOLDS
        kinds = list(RUN_RATES)
        rates = schedule.field_rates(per_kind, duration, quiet_tail=quiet_tail, kinds=kinds)
    else:
        rates = {
            kind: rate if kind is FaultKind.KILL_CLIENT else rate * rates_x
            for kind, rate in RUN_RATES.items()
        }
    plan = schedule.plan_faults(
        seed, duration, rates=rates, nodes=NODES, quiet_tail=quiet_tail, holds=holds
    )
    (out / "faults.json").write_text(json.dumps(plan.to_json(), indent=1) + "\n")

    base = Path(f"{harness.SCRATCH}/{harness.USER}/sweep/soak-{seed}-{stamp}")
    work_root, log_root = base / "work", base / "logs"
    make_dirs(uid, gid, base, work_root, work_root / "results", work_root / "runs", log_root)
    (work_root / "soak").mkdir(mode=0o755)
    here = Path(__file__).resolve().parent
    put(work_root / "soak" / "__init__.py", "", uid, gid)
    put(work_root / "soak" / "worker.py", (here / "worker.py").read_text(), uid, gid)
    put(work_root / "soak_task.py", (here / "task.py").read_text(), uid, gid)
    lease_minutes = min(59, int(minutes + finale / 60 + 5))
    (out / "SERVATUS.toml").write_text(profile_toml(str(work_root), str(log_root), lease_minutes))
    tasks_file = out / "tasks.jsonl"
    tasks_file.write_text("".join(json.dumps(t) + "\n" for t in roster(seed, tasks)))
    settings = Settings(
        state=out / "state",
        config=out / "SERVATUS.toml",
        tasks=tasks_file,
        work=out / "work",
        seed=seed,
        duration=duration,
        results=work_root / "results",
        budget="00:05:00",
        finale=finale,
        timeout=300.0,
        servatus=(sys.executable, str(CLOCK), str(out / "client-clock")),
        later=(sys.executable, str(CLOCK), "later") if later else None,
    )
    settings.work.mkdir(exist_ok=True)
    actions = ClusterActions(root, holder, str(log_root), out / "client-clock")
    injector = Injector(plan, actions, log=out / "injected.jsonl")
    print(f"soak: seed {seed}, {minutes} min, {len(plan.faults)} faults planned; in {out}")
    try:
        mount_log_root(root, holder, str(log_root), uid, gid)
        with session_lock():
            document = _soak(settings, plan, injector, actions, out)
    finally:
        injector.stop()
        copy = out / "log_root"
        if not copy.exists():
            with contextlib.suppress(OSError):
                shutil.copytree(actions.outside(str(log_root)), copy, symlinks=True)
        unmount_log_root(root, str(log_root))
        restarted = ensure_daemons(actions)
        if restarted:
            print(f"soak: restarted {', '.join(restarted)} at the end", file=sys.stderr)
        after = drained(root)
        if after:  # left as Slurm set it: ``scontrol update nodename=N state=resume``
            print(f"soak: nodes not up at the end: {'; '.join(after)}", file=sys.stderr)
    outcomes = Counter((r.kind, r.outcome) for r in injector.records)
    for (kind, outcome), count in sorted(outcomes.items()):
        print(f"injector: {kind} {outcome} {count}")
    print(report.table(document), end="")
    for problem in injector.broken:
        print(f"soak: the injector broke: {problem}", file=sys.stderr)
    return 0 if document["ok"] and not injector.broken else 1


def _soak(
    settings: Settings, plan: schedule.FaultPlan, injector: Injector, actions: ClusterActions,
    out: Path,
) -> dict[str, Any]:  # fmt: skip
    # Setup as a user would: the campaign, then a lease of two slots for ``start``.
    settings = attrs.evolve(settings, lease_plan=("--profile", "lease", "--hold", "2"))
    setup = Driver(settings)
    setup.run("ensure", str(settings.state), str(settings.tasks), killable=False)
    setup.renew_lease(killable=False)
    if setup.lease is None:
        print("soak: no lease (see commands.jsonl); start is left out", file=sys.stderr)
    settings = attrs.evolve(settings, lease=setup.lease)

    def finale(driver: Driver) -> None:
        injector.stop()
        cancel_remaining(driver)

    injector.start()
    drive.drive(settings, plan, before_finale=finale)
    injector.stop()
    found = evidence.collect(
        state=settings.state,
        log_root=actions.outside(actions.log_root),
        command_log=settings.log,
        results=settings.results,
        now=time.time(),
    )
    shutil.copytree(actions.outside(actions.log_root), out / "log_root", symlinks=True,
                    ignore=shutil.ignore_patterns(".soak-fill"))  # fmt: skip
    left_out = {kind.value: why for kind, why in LEFT_OUT.items()}
    document = report.build(
        plan, found, invariants.check(found), injected=injector.injected_kinds(), left_out=left_out
    )
    (out / "report.json").write_text(json.dumps(document, indent=1) + "\n")
    return document
