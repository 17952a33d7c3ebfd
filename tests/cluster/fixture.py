"""pytest plugin: the session's real one-node Slurm cluster (harness.py,
docs/development/cluster.md).

Tests ask for ``slurm_cluster``; it is started once per session with wheels built from this
checkout installed inside, and brought down at the end unless ``SERVATUS_CLUSTER_KEEP=1``.
Tests marked ``cluster`` skip, with the reason, where the cluster cannot exist (not root, no
debootstrap).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import subprocess
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import pytest

from cluster import harness, prelude

KEEP_VARIABLE = "SERVATUS_CLUSTER_KEEP"

# Per-Task resources and ceilings that fit the one node (harness.CPUS, REAL_MEMORY_MIB, gpu:a100:2).
CPUS = 1
MEMORY_MIB = 500
TIME_LIMIT = "00:05:00"


def unavailable() -> str | None:
    """Why the cluster cannot run here, or None."""
    if os.geteuid() != 0:
        return "the real Slurm cluster needs root (namespaces, mounts, daemons)"
    if shutil.which("debootstrap") is None and not harness.root_dir().is_dir():
        return "the real Slurm cluster needs debootstrap (apt-get install debootstrap)"
    if shutil.which("ssh") is None:
        return "the real Slurm cluster needs the OpenSSH client (apt-get install openssh-client)"
    return None


def profile_toml(
    *,
    host: str | None,
    work_root: str = "/scratch/alice/sweep",
    log_root: str | None = None,
    slurm_bin: str = harness.SLURM_BIN,
) -> str:
    """A SERVATUS.toml for this cluster: profiles ``cpu`` (default) and ``gpu``.

    ``host=None`` omits ``host``, the login-node case, where Slurm runs locally.
    """
    host_line = f'host = "{host}"\n' if host is not None else ""
    logs = log_root if log_root is not None else f"{work_root}/logs"
    return f"""\
default_profile = "cpu"

[target]
{host_line}slurm_bin = "{slurm_bin}"
work_root = "{work_root}"
log_root = "{logs}"
partitions = ["{harness.PARTITION}"]
max_tasks_per_allocation = {harness.CPUS}
max_cpus_per_allocation = {harness.CPUS}
max_memory_mib_per_allocation = {2 * MEMORY_MIB}
max_time_limit = "01:00:00"

[resources]
cpus = {CPUS}
memory_mib = {MEMORY_MIB}
time_limit = "{TIME_LIMIT}"

[profiles.cpu.resources]
cpus = {CPUS}

[profiles.gpu.target]
gpu_gres = "gpu:{harness.GPU_TYPE}"
max_gpus_per_allocation = {harness.GPU_COUNT}

[profiles.gpu.resources]
gpus = 1
"""


@dataclass(frozen=True)
class SlurmCluster:
    """What a test needs to drive the cluster, from the laptop (SSH) or the login node (local)."""

    root: Path
    """The built root; the login node and compute node in one."""
    alias: str
    """The ssh_config alias root outside reaches alice on the login node with."""
    slurm_bin: str
    """Where the Slurm 24.11 clients are, inside (and so on the login node)."""
    scratch: Path
    """Mounted at the same path inside and outside: one filesystem seen from both sides."""
    work_root: str
    log_root: str
    results: str
    user: str
    uid: int
    gid: int
    home: str
    venv_python: str
    """Python 3.13 inside the root with this checkout's wheels installed."""
    servatus_cli: str
    wheels: Path
    """The wheels installed inside, built from this checkout for this session."""

    @property
    def ssh_toml(self) -> str:
        """SERVATUS.toml for the laptop case: Slurm over ``ssh servatus-test``."""
        return profile_toml(host=self.alias, work_root=self.work_root, log_root=self.log_root)

    @property
    def local_toml(self) -> str:
        """SERVATUS.toml for the login-node case: no host, Slurm runs where servatus runs."""
        return profile_toml(host=None, work_root=self.work_root, log_root=self.log_root)

    def profile_toml(
        self, *, ssh: bool, work_root: str | None = None, log_root: str | None = None
    ) -> str:
        """SERVATUS.toml with other roots, e.g. a per-test directory from `make_dirs`."""
        return profile_toml(
            host=self.alias if ssh else None,
            work_root=work_root or self.work_root,
            log_root=log_root,
        )

    @property
    def min_job_age(self) -> int:
        return self._settings().min_job_age

    @property
    def proctrack(self) -> str:
        return self._settings().proctrack

    def _settings(self) -> harness.Settings:
        state = harness.read_state()
        if state is None:
            raise harness.HarnessError("the cluster is not up")
        return state.settings

    def outside(self, inner: str) -> Path:
        """Where a path inside the root is from outside (scratch is the same path on both)."""
        if inner == str(self.scratch) or inner.startswith(f"{self.scratch}/"):
            return Path(inner)
        return self.root / inner.lstrip("/")

    def make_dirs(self, *inner: str, mode: int = 0o700) -> list[Path]:
        """Create directories inside (usually under scratch) owned by alice, as she would."""
        made = []
        for path in inner:
            target = self.outside(path)
            if target.is_relative_to(self.scratch) and not harness.mounted(self.scratch):
                # Never write into the outside directory the cluster's scratch is mounted on.
                raise harness.HarnessError(f"{self.scratch} is not mounted: the cluster is down")
            missing = [target, *target.parents]
            for directory in reversed([p for p in missing if not p.exists()]):
                directory.mkdir(mode=mode)
                os.chown(directory, self.uid, self.gid)
            made.append(target)
        return made

    def login(
        self,
        argv: Sequence[str],
        *,
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
        input: str | None = None,
        timeout: float = 120,
    ) -> subprocess.CompletedProcess[str]:
        """Run argv as alice on the login node with a fresh login environment."""
        return harness.login(argv, cwd=cwd, env=env, input=input, timeout=timeout)

    @property
    def second_user(self) -> str:
        """Mallory: another user of the login node, in alice's primary group and nothing more."""
        return harness.SECOND_USER

    def second_ids(self) -> tuple[int, int]:
        """Mallory's uid and gid (inside the root; her files on scratch read so outside too)."""
        uid, gid, _groups = harness.second_user_ids(self.root, self.gid)
        return uid, gid

    def as_second_user(
        self,
        argv: Sequence[str],
        *,
        cwd: str | None = None,
        input: str | None = None,
        timeout: float = 120,
    ) -> subprocess.CompletedProcess[str]:
        """Run argv as mallory on the login node, as :meth:`login` runs it as alice."""
        return harness.login(argv, cwd=cwd, input=input, timeout=timeout, user=harness.SECOND_USER)

    def ssh(
        self, command: str | Sequence[str], *, input: str | None = None, timeout: float = 60
    ) -> subprocess.CompletedProcess[str]:
        """Run a command over ``ssh servatus-test`` exactly as Servatus's transport does."""
        return harness.ssh(command, input=input, timeout=timeout)

    def restart(self, *, min_job_age: int | None = None, proctrack: str | None = None) -> None:
        """Restart slurmctld/slurmd with other settings (nothing happens if they are the same).

        The restart clears Slurm's job state, so do it between jobs.
        """
        harness.up(min_job_age=min_job_age, proctrack=proctrack)

    @contextlib.contextmanager
    def configured(
        self, *, min_job_age: int | None = None, proctrack: str | None = None
    ) -> Iterator[None]:
        """Run a block with other settings and restore the previous ones afterwards."""
        before = self._settings()
        self.restart(min_job_age=min_job_age, proctrack=proctrack)
        try:
            yield
        finally:
            self.restart(min_job_age=before.min_job_age, proctrack=before.proctrack)

    def stop_sshd(self) -> None:
        """Make the login node unreachable over SSH (the master connection too)."""
        harness.stop_sshd()

    def start_sshd(self) -> None:
        harness.start_sshd()

    @contextlib.contextmanager
    def sshd_stopped(self) -> Iterator[None]:
        self.stop_sshd()
        try:
            yield
        finally:
            self.start_sshd()

    @property
    def nodes(self) -> tuple[str, ...]:
        """The extra nodes (n1, n2, n3), each its own slurmd, in partition :attr:`nodes_partition`
        and with its own name as a feature (``constraint = "n2"`` places work on n2)."""
        return harness.NODES

    @property
    def nodes_partition(self) -> str:
        return harness.NODES_PARTITION

    def fail_node(self, node: str, reason: str = "servatus-test node failure") -> dict[int, str]:
        """Kill ``node`` for real (its slurmd, its slurmstepd daemons and every process under
        them), then mark it DOWN; its jobs end NODE_FAIL. What was killed, pid to command."""
        return harness.fail_node(node, reason)

    def return_node(self, node: str) -> None:
        """Start the node's slurmd again and RESUME it; returns once it is idle."""
        harness.return_node(node)

    def drain_node(self, node: str, reason: str = "servatus-test drain") -> None:
        harness.drain_node(node, reason)

    def undrain_node(self, node: str) -> None:
        harness.undrain_node(node)

    def node_states(self) -> dict[str, str]:
        """Each node's ``sinfo -N`` state, e.g. ``{"n1": "idle", "n3": "down", ...}``."""
        return harness.node_states(self.root)

    def scancel_all(self) -> None:
        """Cancel every job alice has, so a test leaves the node free: only for a test marked
        ``cluster_alone``, since the others run beside the concurrent scenarios."""
        harness.login([f"{self.slurm_bin}/scancel", "--user", self.user])


REQUIRED_VARIABLE = "SERVATUS_CLUSTER_REQUIRED"
"""Set to 1 (``.ci/run`` does) to fail, not skip, where the cluster cannot exist."""


def _unavailable_here(reason: str) -> None:
    if os.environ.get(REQUIRED_VARIABLE) == "1":
        pytest.fail(f"{REQUIRED_VARIABLE}=1 but the cluster cannot run here: {reason}")
    pytest.skip(reason)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    if item.get_closest_marker("cluster") is not None:
        reason = unavailable()
        if reason is not None:
            _unavailable_here(reason)
    if prelude.alone(item):
        # Before any of its fixtures: none of them may overlap a scenario either.
        prelude.settle()


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Concurrent scenarios first, ``cluster_alone`` tests last (:func:`prelude.ordered`); after
    any other reordering (pytest-randomly's), so that nothing undoes it."""
    items[:] = prelude.ordered(items)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    took = prelude.timings()
    if took:
        terminalreporter.write_line("concurrent cluster scenarios: " + ", ".join(took))


@pytest.fixture(scope="session")
def slurm_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SlurmCluster]:
    """The running cluster, started once per session with this checkout's wheels inside."""
    reason = unavailable()
    if reason is not None:
        _unavailable_here(reason)
    started = time.monotonic()
    wheels = harness.build_wheels(tmp_path_factory.mktemp("cluster-wheels"))
    # Every session holds a shared lock; only a session alone with the cluster cleans it at the
    # start and brings it down at the end, so two sessions at once do not pull it from each other.
    harness.CACHE_DIR.mkdir(parents=True, exist_ok=True)
    sessions = (harness.CACHE_DIR / "sessions.lock").open("a")
    with gate():
        alone = try_lock(sessions, fcntl.LOCK_EX)
        state = harness.up(
            min_job_age=harness.DEFAULT_MIN_JOB_AGE,
            proctrack=harness.DEFAULT_PROCTRACK,
            wheels=wheels,
        )
        if alone:
            reset_work_root(state)
        fcntl.flock(sessions, fcntl.LOCK_SH)
    harness.log(f"cluster ready for tests in {time.monotonic() - started:.1f} s")
    env = harness.environment()
    cluster = SlurmCluster(
        root=Path(state.root),
        alias=harness.ALIAS,
        slurm_bin=harness.SLURM_BIN,
        scratch=harness.SCRATCH,
        work_root=str(env["work_root"]),
        log_root=str(env["log_root"]),
        results=str(env["results"]),
        user=harness.USER,
        uid=state.uid,
        gid=state.gid,
        home=str(env["home"]),
        venv_python=str(env["venv_python"]),
        servatus_cli=str(env["servatus_cli"]),
        wheels=wheels,
    )
    try:
        yield cluster
    finally:
        with gate():
            if os.environ.get(KEEP_VARIABLE) == "1":
                harness.log(f"{KEEP_VARIABLE}=1: leaving the cluster up")
            elif try_lock(sessions, fcntl.LOCK_EX):
                harness.down()
            else:
                harness.log("another test session still uses the cluster: leaving it up")
            sessions.close()


@contextlib.contextmanager
def gate() -> Iterator[None]:
    """Serialise sessions' start and end: flock(2) turns a shared lock into an exclusive one (and
    back) by dropping it first, and without this a second session could take the exclusive lock
    in that gap, think itself alone and empty work_root under the first."""
    with (harness.CACHE_DIR / "sessions.gate").open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield


def try_lock(handle: IO[str], kind: int) -> bool:
    try:
        fcntl.flock(handle, kind | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def reset_work_root(state: harness.State) -> None:
    """Start each session from an empty work_root holding only logs/ and results/."""
    work_root = Path(state.root) / "scratch" / harness.USER / "sweep"
    for entry in work_root.iterdir():
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink()
    for name in ("logs", "results"):
        (work_root / name).mkdir(mode=0o700)
        os.chown(work_root / name, state.uid, state.gid)
