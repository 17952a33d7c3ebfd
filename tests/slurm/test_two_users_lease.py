"""A lease and its orders against another user of the project group (issue #30, attacks 1 and 7),
with two real Unix users and the real lease script under dash and bash.

The project's ``log_root`` is root's and group-writable, with no sticky bit (and setgid where a
test says so), as project directories often are: Mallory can rename anything in it. The lease is
the victim's process; the orders directory is made by the client's own ``mkdir`` script, as the
victim. Mallory renames the victim's orders directory aside and puts her own in its place,
holding an order for the lease's slot and a ready claim whose step writes ``id -u`` into a file
of hers. Nothing of hers may ever run as the victim, and the victim's own orders keep working
(or are refused, never sent to her).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from slurm_helpers import HERE, FakeCluster, job_env
from test_lease_script import LEASE, lease_spec, order_for

from servatus.lease import MKDIR_SCRIPT, OFFER_SCRIPT, claim_name, orders_directory
from servatus_slurm.lease import render_lease
from servatus_slurm.markers import allocation_log_name
from testkit import make_target
from userkit import User, owned, project_directory

SHELLS = [("dash",), ("bash", "--posix")]
JOB = 4242


def step_id(n: int) -> str:
    return f"{n:024x}"


class Scene:
    """The victim's lease on a project ``log_root``; Mallory's loot file and staging area."""

    def __init__(self, base: Path, victim: User, mallory: User, mode: int = 0o770) -> None:
        self.base, self.victim, self.mallory = base, victim, mallory
        bindir = base / "bin"
        bindir.mkdir()
        srun = bindir / "srun"
        srun.write_text("#!/usr/bin/python3\n" + (HERE / "fake_srun.py").read_text())
        srun.chmod(0o755)
        self.logs = project_directory(base / "logs", mode)
        for name in ("work", "slots", "record"):
            owned(base / name, victim, 0o755)
        self.loot = owned(base / "loot", mallory, 0o777) / "id"
        self.target = make_target(base)
        self.orders = self.logs / orders_directory(LEASE)
        self.processes: list[subprocess.Popen[bytes]] = []
        """What the test started, killed by group at its end (never every process of a user:
        the tox environments run side by side, with the same users)."""

    def order(self, identity: str, program: list[str]) -> str:
        """An order for this lease's slot, rendered as the client renders one."""
        return order_for(FakeCluster(self.base), identity, program)

    def make_orders(self) -> str:
        """The victim's client makes the orders directory (its own mkdir script)."""
        done = self.victim.run(["/bin/sh", "-c", MKDIR_SCRIPT, "mkdir", str(self.orders)])
        return done.stdout.decode().strip()

    def offer(self, identity: str, program: list[str]) -> str:
        """The victim's client offers one order (its own offer script, as ``start`` runs it)."""
        text = self.order(identity, program).encode()
        argv = [
            "/bin/sh", "-c", OFFER_SCRIPT, "offer", str(self.orders), str(JOB), "n0nce",
            "", identity, str(len(text)),
        ]  # fmt: skip
        return self.victim.run(argv, input=text).stdout.decode().strip()

    def start(self, shell: tuple[str, ...]) -> subprocess.Popen[bytes]:
        spec = lease_spec(FakeCluster(self.base))
        script = self.base / "lease.sh"
        script.write_text(render_lease(spec))
        script.chmod(0o644)
        process = self.victim.popen(
            [*shell, str(script)],
            cwd=self.base / "work",
            env={
                **job_env(self.base / "record", JOB),
                "FAKE_SRUN_SLOTS": str(self.base / "slots"),
                "FAKE_SRUN_SLOT_COUNT": "2",
            },
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.processes.append(process)
        return process

    def plant(self, identity: str, into: Path) -> None:
        """Mallory's directory ``into``: an order of this lease's slot whose step writes her
        victim's uid to her loot, and its claim already made (a hard link, as the lease's)."""
        staging = owned(self.base / f"staging-{identity}", self.mallory, 0o700)
        text = self.order(identity, ["/bin/sh", "-c", f"id -u >>{self.loot}"])
        (staging / identity).write_text(text)
        os.chown(staging / identity, self.mallory.uid, self.mallory.gid)
        claim = claim_name(identity, JOB)
        done = self.mallory.sh(
            f"mkdir -m 777 {into} && cp {staging}/{identity} {into}/{identity} && "
            f"ln {into}/{identity} {into}/{claim} && chmod 666 {into}/{identity}"
        )
        assert done.returncode == 0, done.stderr.decode()

    def swap(self, identity: str) -> None:
        """Mallory renames the victim's orders directory aside and plants her own."""
        done = self.mallory.sh(f"mv {self.orders} {self.logs}/aside-$$")
        assert done.returncode == 0, done.stderr.decode()
        self.plant(identity, self.orders)

    def started(self) -> bool:
        return (self.logs / f"servatus-{LEASE}.{JOB}.start").exists()

    def looted(self) -> str:
        return self.loot.read_text() if self.loot.exists() else ""


@pytest.fixture
def scene(shared: Path, users: tuple[User, User]) -> Iterator[Scene]:
    victim, mallory = users
    made = Scene(shared, victim, mallory)
    yield made
    for process in made.processes:  # each in a session of its own: its whole group goes
        if process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def stop(process: subprocess.Popen[bytes]) -> str:
    """End the lease as Slurm would at its limit; what it said (its output and its own log)."""
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
    try:
        out, _ = process.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        out, _ = process.communicate()
    logs = Path(process.args[-1]).parent / "logs"  # type: ignore[index]
    log = logs / allocation_log_name(LEASE, JOB)
    return out.decode(errors="replace") + (log.read_text(errors="replace") if log.exists() else "")


def wait_for(predicate: object, seconds: float = 20) -> None:
    deadline = time.monotonic() + seconds
    while not predicate():  # type: ignore[operator]
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_a_setgid_log_root_gives_a_usable_orders_directory(
    shared: Path, users: tuple[User, User]
) -> None:
    """Attack 7: on ``drwxrws---`` mkdir gives 2700; the client accepts it and so does the
    lease, which then runs an order."""
    scene = Scene(shared, *users, mode=0o2770)
    assert scene.make_orders() == "made"
    assert scene.orders.stat().st_mode & 0o7777 == 0o2700
    assert scene.make_orders() == "exists"
    identity = step_id(1)
    done = scene.base / "work" / "done"
    assert scene.offer(identity, ["/bin/sh", "-c", f"id -u >{done}"]) == f"offered {identity}"
    lease = scene.start(("dash",))
    try:
        wait_for(lambda: done.exists() and done.read_text().strip())  # written, not just made
    finally:
        log = stop(lease)
    assert done.read_text().strip() == str(scene.victim.uid), log


@pytest.mark.parametrize("shell", SHELLS, ids=lambda s: s[0])
def test_an_orders_directory_swapped_after_the_lease_checked_it_is_never_read(
    scene: Scene, shell: tuple[str, ...]
) -> None:
    """Attack 1: the lease polls the directory it checked, wherever its name now points; the
    victim's next offer goes nowhere near Mallory's directory."""
    assert scene.make_orders() == "made"
    lease = scene.start(shell)
    try:
        wait_for(scene.started)
        scene.swap(step_id(2))
        time.sleep(3.5)  # three polls of the lease
        assert scene.looted() == ""
        # The victim's own offer is refused at the planted directory, never written into it.
        assert scene.offer(step_id(3), ["/bin/true"]) == f"refused {step_id(3)} directory"
        assert sorted(os.listdir(scene.orders)) == sorted([claim_name(step_id(2), JOB), step_id(2)])
    finally:
        log = stop(lease)
    assert scene.looted() == "", log
    assert not (scene.logs / f"servatus-{step_id(2)}.{JOB}.step-start").exists()


@pytest.mark.parametrize("shell", SHELLS, ids=lambda s: s[0])
def test_a_lease_starting_on_a_swapped_directory_runs_nothing(
    scene: Scene, shell: tuple[str, ...]
) -> None:
    """Swapped before the lease starts: the lease refuses Mallory's directory and exits."""
    assert scene.make_orders() == "made"
    scene.swap(step_id(4))
    lease = scene.start(shell)
    log = stop(lease) if lease.wait(timeout=30) is not None else ""
    assert lease.returncode == 1
    assert "not an owner-only directory" in log
    assert scene.looted() == ""


@pytest.mark.slow
@pytest.mark.parametrize("shell", SHELLS, ids=lambda s: s[0])
def test_mallory_swapping_in_a_loop_never_gets_an_order_run(
    scene: Scene, shell: tuple[str, ...]
) -> None:
    """Many rounds in real processes: Mallory swaps the orders directory back and forth as
    fast as she can (hers, holding a claimed order, and the victim's) while the lease starts,
    polls every second and the victim offers orders. Nothing of hers runs; every order of the
    victim's that was offered runs exactly once, as the victim."""
    assert scene.make_orders() == "made"
    mine = owned(scene.base / "mine", scene.victim, 0o755)
    theirs = scene.logs / "hers"
    scene.plant(step_id(9), theirs)
    aside = scene.logs / "aside"
    # Her loop: the victim's directory aside, hers in, back again; counts its swaps.
    loop = (
        f"n=0; end=$(($(date +%s) + 25)); while [ $(date +%s) -lt $end ]; do "
        f"mv {scene.orders} {aside} 2>/dev/null && mv {theirs} {scene.orders} 2>/dev/null && "
        f"mv {scene.orders} {theirs} 2>/dev/null && mv {aside} {scene.orders} 2>/dev/null && "
        "n=$((n + 1)); done; echo $n"
    )
    lease = scene.start(shell)
    racer = None
    offered: list[str] = []
    try:
        # A lease that starts while her directory has the name refuses it and runs nothing
        # (test_a_lease_starting_on_a_swapped_directory_runs_nothing): here it starts first.
        wait_for(scene.started)
        racer = scene.mallory.popen(
            ["/bin/sh", "-c", loop], stdout=subprocess.PIPE, start_new_session=True
        )
        scene.processes.append(racer)
        for n in range(40):
            identity = step_id(100 + n)
            answer = scene.offer(identity, ["/bin/sh", "-c", f"echo {identity} >>{mine}/ran"])
            if answer == f"offered {identity}":
                offered.append(identity)
            time.sleep(0.5)
        swaps = int(racer.communicate(timeout=60)[0].decode().strip() or 0)
        time.sleep(2)  # two more polls
        assert scene.looted() == "", "an order of Mallory's ran as the victim"
        wait_for(lambda: len(ran_lines(mine)) >= len(offered), seconds=30)
        assert lease.poll() is None
    finally:
        log = stop(lease)
        if racer is not None and racer.poll() is None:
            racer.kill()
    assert scene.looted() == "", log
    assert swaps > 100, swaps
    assert sorted(ran_lines(mine)) == sorted(offered), log
    print(f"{shell[0]}: {swaps} swaps, {len(offered)} of 40 offers accepted and run once")


@pytest.mark.parametrize("shell", SHELLS, ids=lambda s: s[0])
def test_a_step_start_planted_as_a_link_keeps_the_step_from_running(
    scene: Scene, shell: tuple[str, ...]
) -> None:
    """Review of issue #30: her link at a step's ``step-start`` name (to ``/dev/null``, which
    ``set -C`` would open) is no start marker of the step's: the step exits 1 unrun."""
    assert scene.make_orders() == "made"
    identity = step_id(5)
    planted = scene.logs / f"servatus-{identity}.{JOB}.step-start"
    assert scene.mallory.sh(f"ln -s /dev/null {planted}").returncode == 0
    done = scene.base / "work" / "done"
    assert scene.offer(identity, ["/bin/sh", "-c", f": >{done}"]) == f"offered {identity}"
    lease = scene.start(shell)
    ended = scene.logs / f"servatus-{identity}.{JOB}.end.0.1"
    try:
        wait_for(ended.exists)
    finally:
        log = stop(lease)
    assert not done.exists(), log
    assert planted.is_symlink()


def ran_lines(mine: Path) -> list[str]:
    path = mine / "ran"
    return path.read_text().split() if path.exists() else []


def test_the_scene_needs_dash() -> None:
    assert shutil.which("dash"), "dash is /bin/sh on Debian clusters"
