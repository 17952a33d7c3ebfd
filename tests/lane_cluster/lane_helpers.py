"""The Slurm lane on the real cluster: one test's directories, its CLI, and what it reads back.

A plain module rather than ``conftest.py`` (``tests/conftest.py`` owns that name). A :class:`Lane`
is one test's corner of the cluster's scratch: its own ``work_root`` and ``log_root``, so tests
never read each other's run markers, and a launch directory holding ``SERVATUS.toml`` and the
campaign. Over SSH the launch directory is outside (the laptop, root running ``ssh
servatus-test``); on the login node it is inside the root, and every command runs there as
alice through ``SlurmCluster.login``.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import uuid
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

import attrs
import lane_lease

from cluster.fixture import SlurmCluster

HERE = Path(__file__).resolve().parent
INNER_PYTHON = "/opt/servatus/bin/python"
"""The cluster's Python with this checkout's wheels; the direct launcher needs it absolute."""
OUTSIDE_PYTHON = sys.executable
TRANSPORTS = ("ssh", "local")
FINAL = frozenset({"SUCCEEDED", "FAILED", "STOPPED", "LOST", "NOT_SUBMITTED"})
"""The executions ``status`` never moves a Task out of on its own."""
LEASED = re.compile(r"^submitted lease ([0-9a-f]{24}): job ([0-9]+)$", re.MULTILINE)
"""``submit``'s line for each lease link: its id and job."""
STEPPED = re.compile(
    r"^submitted allocation ([0-9a-f]{24}): job ([0-9]+) \(([^)]*)\)$", re.MULTILINE
)
"""``start``'s line for each step: its id, its lease's job and its Task."""

T = TypeVar("T")

LATER = """\
import sys
import time

from servatus.operations.reconcile import RECONCILE_AFTER

real = time.time
time.time = lambda: real() + RECONCILE_AFTER + 60
from servatus.cli import main

sys.exit(main(sys.argv[1:]))
"""
"""The CLI with a clock running ``RECONCILE_AFTER`` + 60 s ahead: the 15-minute rule without the
wait. Everything else it does (journal, Slurm, markers) is real."""


def limited(text: str, *, time_limit: str, signal: str) -> str:
    """A lane's SERVATUS.toml for short runs: 100 MiB Tasks (more fit the allocation ceiling),
    the profile's ``time_limit``, and the ``signal_before_end`` that chains and leases need."""
    text = text.replace("memory_mib = 500\n", "memory_mib = 100\n", 1)
    return text.replace(
        'time_limit = "00:05:00"\n',
        f'time_limit = "{time_limit}"\nsignal_before_end = "{signal}"\n',
        1,
    )


def wait_until(
    what: str, probe: Callable[[], T | None], *, seconds: float, every: float = 1.0
) -> T:
    """:func:`lane_lease.wait_until` (the one polling loop), polling every second by default:
    these probes run whole servatus commands, the lease lane's only read files."""
    return lane_lease.wait_until(what, probe, seconds=seconds, every=every)


@attrs.define
class Lane:
    """One test's directories on the cluster and the commands that act on them."""

    cluster: SlurmCluster
    ssh: bool
    base: str
    """Inner path of this test's directory under the cluster's work_root."""
    launch: Path
    """Where SERVATUS.toml and the campaign live: outside for SSH, inside for the login node."""
    extra_path: list[str] = attrs.field(factory=list)
    """Directories put first on PATH for outside commands (wrapper ``ssh`` programs)."""

    # -- paths ----------------------------------------------------------------------------------

    @property
    def work_root(self) -> str:
        return f"{self.base}/work"

    @property
    def log_root(self) -> str:
        return f"{self.base}/logs"

    @property
    def results(self) -> str:
        return f"{self.work_root}/results"

    @property
    def runs(self) -> Path:
        """Where the test worker leaves one file per run (seen from outside: scratch is shared)."""
        return Path(self.work_root) / "runs"

    @property
    def launch_inner(self) -> str:
        """The launch directory as commands see it (inside for the login node)."""
        if self.ssh or self.launch.is_relative_to(self.cluster.scratch):
            return str(self.launch)
        return "/" + str(self.launch.relative_to(self.cluster.root))

    @property
    def name(self) -> str:
        return "ssh" if self.ssh else "local"

    def toml(self, *, slurm_bin: str | None = None, log_root: str | None = None) -> str:
        text = self.cluster.profile_toml(
            ssh=self.ssh, work_root=self.work_root, log_root=log_root or self.log_root
        )
        if slurm_bin is not None:
            text = text.replace(
                f'slurm_bin = "{self.cluster.slurm_bin}"', f'slurm_bin = "{slurm_bin}"'
            )
        return text

    def limit(self, time_limit: str, signal: str) -> None:
        """Rewrite this lane's SERVATUS.toml as :func:`limited` (roots and ceilings as they are,
        a wrapper ``slurm_bin`` included)."""
        path = self.launch / "SERVATUS.toml"
        text = path.read_text()
        path.unlink()
        self.put(path, limited(text, time_limit=time_limit, signal=signal))

    # -- files ----------------------------------------------------------------------------------

    def put(self, path: Path | str, text: str, mode: int = 0o644) -> Path:
        """Write a file as alice would own it (inside) or as the laptop user (outside)."""
        target = Path(path)
        target.write_text(text)
        target.chmod(mode)
        if target.is_relative_to(self.cluster.scratch) or target.is_relative_to(self.cluster.root):
            os.chown(target, self.cluster.uid, self.cluster.gid)
        return target

    def put_worker(self, name: str = "step.py") -> None:
        """The test worker (``lane_worker.py``) into work_root, where every step starts."""
        self.put(Path(self.work_root) / name, (HERE / "lane_worker.py").read_text())

    def put_chain_worker(self) -> None:
        """The chain tests' worker (``lane_chain_worker.py``), as ``chain_step.py``."""
        self.put(
            Path(self.work_root) / "chain_step.py", (HERE / "lane_chain_worker.py").read_text()
        )

    def tasks_file(self, tasks: Sequence[Mapping[str, Any]], name: str = "tasks.jsonl") -> str:
        lines = "".join(json.dumps(task, sort_keys=True) + "\n" for task in tasks)
        self.put(self.launch / name, lines)
        return name

    def later(self, *args: str) -> subprocess.CompletedProcess[str]:
        """The CLI 15 minutes in the future (:data:`LATER`), run where the launcher runs."""
        self.put(self.launch / "later.py", LATER)
        return self.run([self.python, "later.py", *args])

    def worker_task(self, key: str, *args: str) -> dict[str, Any]:
        return {"key": key, "args": [INNER_PYTHON, "step.py", *args]}

    # -- running commands -----------------------------------------------------------------------

    def run(
        self, argv: Sequence[str], *, timeout: float = 120, input: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        """Run a command where the launcher runs: outside as root, or inside as alice."""
        if self.ssh:
            return subprocess.run(
                list(argv),
                cwd=self.launch,
                env=self.environment(),
                capture_output=True,
                text=True,
                timeout=timeout,
                input=input,
            )
        return self.cluster.login(list(argv), cwd=self.launch_inner, timeout=timeout, input=input)

    def environment(self) -> dict[str, str]:
        """The outside commands' environment: this process's, with wrapper directories first."""
        env = dict(os.environ)
        env["PATH"] = os.pathsep.join([*self.extra_path, env.get("PATH", "/usr/bin:/bin")])
        return env

    @property
    def python(self) -> str:
        return OUTSIDE_PYTHON if self.ssh else INNER_PYTHON

    def servatus(
        self, *args: str, timeout: float = 120, input: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        """The real ``servatus`` CLI in a subprocess."""
        if self.ssh:
            return self.run([OUTSIDE_PYTHON, "-m", "servatus", *args], timeout=timeout, input=input)
        return self.run([self.cluster.servatus_cli, *args], timeout=timeout, input=input)

    def start(self, *args: str) -> subprocess.Popen[str]:
        """The real ``servatus`` CLI over SSH, started and left running (to be killed, or held
        while the test stops sshd), its output piped."""
        assert self.ssh, "only the laptop's CLI runs where the test can signal it"
        return subprocess.Popen(
            [OUTSIDE_PYTHON, "-m", "servatus", *args],
            cwd=self.launch,
            env=self.environment(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def ok(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        result = self.servatus(*args, timeout=timeout)
        assert result.returncode == 0, f"servatus {' '.join(args)}: {result.stderr}"
        return result

    def submitted(self, tasks: Sequence[Mapping[str, Any]], *plan_options: str) -> None:
        """``ensure`` the campaign ``state`` of ``tasks``, plan it with ``plan_options`` into
        plan.json and submit that, each exiting 0."""
        self.ok("ensure", "state", self.tasks_file(tasks))
        self.ok("plan", "state", *plan_options, "--output", "plan.json")
        self.ok("submit", "state", "plan.json")

    def lease(
        self, *hold: str, state: str = "state", profile: str = "cpu"
    ) -> tuple[list[tuple[str, int]], str]:
        """Plan ``--hold`` (with ``hold``'s options) into lease.json and submit it: each link's
        (id, job), and the plan's text."""
        planned = self.ok("plan", state, "--profile", profile, *hold, "--output", "lease.json")
        submitted = self.ok("submit", state, "lease.json")
        links = [(lease, int(job)) for lease, job in LEASED.findall(submitted.stdout)]
        return links, planned.stdout

    def status(self, state: str = "state") -> dict[str, Any]:
        result = self.servatus("status", state, "--json")
        assert result.returncode == 0, f"status: {result.returncode} {result.stderr}"
        document: dict[str, Any] = json.loads(result.stdout)
        return document

    def executions(self, state: str = "state") -> dict[str, tuple[str, int | None]]:
        return {
            task["key"]: (task["execution"], task["exit_code"])
            for task in self.status(state)["tasks"]
        }

    def wait_for(
        self,
        what: str,
        done: Callable[[dict[str, Any]], bool],
        *,
        seconds: float = 120,
        state: str = "state",
    ) -> dict[str, Any]:
        """Poll ``status --json`` until ``done`` holds for it."""
        seen: list[str] = []

        def probe() -> dict[str, Any] | None:
            document = self.status(state)
            seen[:] = [f"{t['key']}={t['execution']}/{t['exit_code']}" for t in document["tasks"]]
            return document if done(document) else None

        try:
            return wait_until(what, probe, seconds=seconds, every=1.5)
        except AssertionError as exc:
            raise AssertionError(f"{exc}; last seen: {', '.join(seen)}") from None

    def journal(self, state: str = "state") -> bytes:
        return (self.launch / state / "journal").read_bytes()

    # -- evidence read back directly ------------------------------------------------------------

    def marker_kinds(self, allocation_id: str) -> list[str]:
        """What each run marker of an allocation records, e.g. ``2500.start``, ``2500.end.0.0``."""
        prefix = f"servatus-{allocation_id}."
        return sorted(
            p.name.removeprefix(prefix)
            for p in Path(self.log_root).iterdir()
            if p.name.startswith(prefix)
        )

    def run_records(self, key: str) -> list[str]:
        """One file per time the worker started for ``key`` (``<key>.<job>.<pid>``)."""
        if not self.runs.is_dir():
            return []
        return sorted(p.name for p in self.runs.iterdir() if p.name.startswith(f"{key}."))

    def squeue(self, *, all_states: bool = True) -> list[tuple[int, str, str]]:
        """alice's jobs as ``(job, name, state)``, read on the login node directly."""
        argv = [f"{self.cluster.slurm_bin}/squeue", "--me", "--noheader", "--format=%A|%j|%T"]
        if all_states:
            argv.append("--states=all")
        listed = self.cluster.login(argv, timeout=30)
        assert listed.returncode == 0, listed.stderr
        rows = []
        for line in listed.stdout.splitlines():
            job, name, state = line.strip().split("|")
            rows.append((int(job), name, state))
        return rows

    def job_state(self, job: int) -> str | None:
        """Slurm's state of one of alice's jobs, or None once Slurm forgot it."""
        for listed, _name, state in self.squeue():
            if listed == job:
                return state
        return None

    def cleanup(self) -> None:
        """Cancel every job this test's allocations still have."""
        try:
            names = {f"servatus-{a}" for a in allocation_ids(self)}
        except AssertionError:
            return  # an unreadable campaign has already failed its test
        for _job, name, state in self.squeue(all_states=False):
            if name in names and state in ("PENDING", "RUNNING"):
                self.cluster.login(
                    [f"{self.cluster.slurm_bin}/scancel", "--me", f"--name={name}"], timeout=30
                )


def task_of(document: Mapping[str, Any], key: str) -> dict[str, Any]:
    """The key's entry in a ``status --json`` document."""
    [found] = [task for task in document["tasks"] if task["key"] == key]
    return found  # type: ignore[no-any-return]


def steps_of(document: Mapping[str, Any], key: str) -> list[dict[str, Any]]:
    """The key's lease steps in a ``status --json`` document (one attempt each)."""
    return [a for a in document["attempts"] if key in a["task_keys"] and a.get("within")]


def allocation_ids(lane: Lane, state: str = "state") -> list[str]:
    """Every allocation the campaign recorded an intent for, in recording order (offline)."""
    if not (lane.launch / state).exists():
        return []
    result = lane.servatus("status", state, "--offline", "--json")
    assert result.returncode == 0, result.stderr
    return [attempt["allocation_id"] for attempt in json.loads(result.stdout)["attempts"]]


def make_lane(cluster: SlurmCluster, transport: str, tmp_path: Path, label: str) -> Lane:
    """A fresh test directory on scratch (work/, work/results/, logs/), plus a launch directory."""
    ssh = transport == "ssh"
    base = f"{cluster.work_root}/lane-{label}-{transport}-{uuid.uuid4().hex[:8]}"
    dirs = [base, f"{base}/work", f"{base}/work/results", f"{base}/work/runs", f"{base}/logs"]
    if ssh:
        cluster.make_dirs(*dirs)
        launch = tmp_path / f"launch-{transport}"
        launch.mkdir()
    else:
        cluster.make_dirs(*dirs, f"{base}/launch")
        launch = cluster.outside(f"{base}/launch")
    lane = Lane(cluster=cluster, ssh=ssh, base=base, launch=launch)
    lane.put(lane.launch / "SERVATUS.toml", lane.toml())
    return lane


def one_line_error(result: subprocess.CompletedProcess[str], kind: str) -> str:
    """The CLI's error convention: exactly one stderr line, ``servatus: <kind>: ...``."""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, f"expected one line, got: {result.stderr!r}"
    assert lines[0].startswith(f"servatus: {kind}: "), lines[0]
    return lines[0]
