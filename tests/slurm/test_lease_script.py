"""A lease's batch script (ADR 0009), run under ``dash`` and ``bash --posix``.

The fake ``srun`` holds the job's slots (``FAKE_SRUN_SLOTS``), so a step beyond them waits as it
would inside a real lease, and a signal while it waits cancels it without starting it. Orders are
offered and withdrawn by the client itself (``servatus.lease``, through the local transport).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator, Mapping
from pathlib import Path

import attrs
import pytest
from slurm_helpers import INHERIT, FakeCluster, allocation_log

from servatus import lease as lease_client
from servatus.direct import DirectLauncher
from servatus.errors import ConfigurationError
from servatus.lease import claim_name, orders_directory
from servatus.script import BUDGET_VARIABLE, CHAIN_VARIABLES, LeaseOrder, LeaseSpec
from servatus_slurm.lease import render_lease, render_order
from servatus_slurm.script import RUNTIME_VARIABLES
from servatus_slurm.transport import LocalTransport

SHELLS = [("dash",), ("bash", "--posix")]
LEASE = "feedfacefeedfacefeedface"
JOB = 4242
TICKS = os.sysconf("SC_CLK_TCK")

WAITS_ON_POLLS = pytest.mark.slow
"""Cases that wait out the lease's 5 s polls and step timers in wall-clock time (3 to 10 s each,
under both shells): run once, in the trials, not under every Python."""


def step_id(n: int) -> str:
    return f"{n:024x}"


def lease_spec(cluster: FakeCluster, **changes: object) -> LeaseSpec:
    spec = LeaseSpec(
        allocation_id=LEASE,
        target=cluster.target,
        slots=2,
        cpus=1,
        memory_mib=100,
        gpus=0,
        time_limit=600,
        signal_before_end=2,
        inherit=INHERIT,
        poll_seconds=1,
    )
    return attrs.evolve(spec, **changes)


@attrs.frozen
class Lease:
    """A lease script running on the fake cluster, with its orders directory."""

    cluster: FakeCluster
    process: subprocess.Popen[bytes]

    @property
    def orders(self) -> Path:
        return self.cluster.logs / orders_directory(LEASE)

    def marker(self, identity: str, kind: str) -> Path:
        return self.cluster.logs / f"servatus-{identity}.{JOB}.{kind}"

    def claim(self, identity: str) -> Path:
        return self.orders / claim_name(identity, JOB)

    def ended(self, identity: str) -> list[str]:
        prefix = f"servatus-{identity}.{JOB}.end.0."
        return [name for name in os.listdir(self.cluster.logs) if name.startswith(prefix)]

    def finish(self) -> str:
        """End the lease as Slurm would at its limit, and return its log."""
        self.process.send_signal(signal.SIGTERM)
        self.process.communicate(timeout=30)
        said = allocation_log(self.cluster, JOB, LEASE)
        assert self.process.returncode == 0, said
        return said


def make_orders(cluster: FakeCluster) -> Path:
    orders = cluster.logs / orders_directory(LEASE)
    orders.mkdir(mode=0o700)
    orders.chmod(0o700)
    return orders


def order_for(
    cluster: FakeCluster,
    identity: str,
    args: list[str],
    *,
    stdin: bytes = b"",
    env: Mapping[str, str] | None = None,
    slot: tuple[int, int, int] = (1, 100, 0),
    run_time: int = 0,
    budget: int | None = None,
) -> str:
    """The text of the order of step ``identity``, as the client renders it."""
    target = cluster.target
    # As for a chain link's step, the launcher carries the reserved variables the order sets.
    carried = (*RUNTIME_VARIABLES, *CHAIN_VARIABLES, *([BUDGET_VARIABLE] if budget else []))
    command = DirectLauncher().command(target, args, dict(env or {}), inherit=carried, gpus=0)
    order = LeaseOrder(
        step_id=identity,
        lease_id=LEASE,
        task_key=f"task-{identity[-2:]}",
        command=command,
        stdin=stdin,
        cpus=slot[0],
        memory_mib=slot[1],
        gpus=slot[2],
        inherit=tuple(RUNTIME_VARIABLES),
        run_time=run_time,
        budget=budget,
    )
    return render_order(order, target)


def offer(
    cluster: FakeCluster,
    identity: str,
    args: list[str],
    *,
    stdin: bytes = b"",
    env: Mapping[str, str] | None = None,
    slot: tuple[int, int, int] = (1, 100, 0),
    run_time: int = 0,
    budget: int | None = None,
) -> None:
    text = order_for(
        cluster, identity, args, stdin=stdin, env=env, slot=slot, run_time=run_time, budget=budget
    )
    orders = cluster.logs / orders_directory(LEASE)
    answers = lease_client.offer(LocalTransport(), str(orders), JOB, {identity: text})
    assert answers == {identity: lease_client.OfferAnswer(lease_client.Offer.OFFERED)}


def withdraw(orders: Path, identity: str) -> None:
    """What ``cancel`` does: link an empty file of its own into the claim."""
    verdicts = lease_client.withdraw(LocalTransport(), str(orders), JOB, [identity])
    assert verdicts == {identity: lease_client.Verdict.WITHDRAWN}


def wait_for(predicate: object, seconds: float = 20) -> None:
    deadline = time.monotonic() + seconds
    while not predicate():  # type: ignore[operator]
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def ran(cluster: FakeCluster, name: str) -> dict[str, object]:
    return json.loads((cluster.out / f"{name}.json").read_text())


@pytest.fixture
def start_lease(fake_cluster: FakeCluster) -> Iterator[object]:
    started: list[subprocess.Popen[bytes]] = []
    (fake_cluster.root / "slots").mkdir()

    def start(shell: tuple[str, ...], spec: LeaseSpec | None = None) -> Lease:
        script = render_lease(spec or lease_spec(fake_cluster))
        process = fake_cluster.start(
            script,
            shell=shell,
            job=JOB,
            env={
                "FAKE_SRUN_SLOTS": str(fake_cluster.root / "slots"),
                "FAKE_SRUN_SLOT_COUNT": "2",
            },
        )
        started.append(process)
        lease = Lease(fake_cluster, process)
        wait_for(lambda: lease.marker(LEASE, "start").exists() or process.poll() is not None)
        return lease

    yield start
    for process in started:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


# -- rendering ----------------------------------------------------------------------------------


def test_the_lease_requests_its_slots_and_each_step_exactly_one(fake_cluster: FakeCluster) -> None:
    script = render_lease(lease_spec(fake_cluster, slots=3, cpus=4, memory_mib=1000))
    assert "#SBATCH --ntasks=3\n" in script and "#SBATCH --mem=3000M\n" in script
    assert "#SBATCH --signal=B:USR1@2\n" in script
    assert "--ntasks=1 --nodes=1 --exact --cpus-per-task=4 --mem=1000M --gres=none" in script
    assert "--overlap" not in script and "python" not in script
    gpus = attrs.evolve(fake_cluster.target, gpu_gres="gpu:l40s", max_gpus_per_allocation=8)
    script = render_lease(lease_spec(fake_cluster, target=gpus, gpus=2))
    assert "#SBATCH --gres=gpu:l40s:4\n" in script and "--gres=gpu:l40s:2'" in script
    assert script.isascii()


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"slots": 0}, "holds no slots"),
        ({"signal_before_end": 0}, "signal_before_end"),
        ({"poll_seconds": 0}, "polls every"),
        ({"allocation_id": "x"}, "not an allocation id"),
        ({"inherit": ("HOME",)}, "run-time variable"),
    ],
)
def test_unrunnable_leases_are_refused(
    fake_cluster: FakeCluster, changes: dict[str, object], message: str
) -> None:
    with pytest.raises(ConfigurationError, match=message):
        render_lease(lease_spec(fake_cluster, **changes))


# -- running ------------------------------------------------------------------------------------


@pytest.mark.parametrize("shell", SHELLS, ids=lambda s: s[0])
def test_an_order_written_before_the_lease_starts_runs_once_it_starts(
    fake_cluster: FakeCluster, start_lease: object, shell: tuple[str]
) -> None:
    make_orders(fake_cluster)
    identity = step_id(1)
    stdin = bytes(range(256)) * 5
    offer(
        fake_cluster,
        identity,
        fake_cluster.step_args("a", "exit:0", "it's", "new\nline", "caf\u00e9"),
        stdin=stdin,
        env={"ODD": "a\nb'c", "PLAIN": "x"},
    )
    lease = start_lease(shell)  # type: ignore[operator]
    wait_for(lambda: lease.ended(identity))
    record = ran(fake_cluster, "a")
    assert bytes.fromhex(str(record["stdin"])) == stdin
    argv = [bytes.fromhex(a) for a in record["argv"]]  # type: ignore[attr-defined]
    assert argv == [b"it's", b"new\nline", "caf\u00e9".encode()]
    env = {bytes.fromhex(k): bytes.fromhex(v) for k, v in record["env"].items()}  # type: ignore[attr-defined]
    assert env[b"ODD"] == b"a\nb'c" and env[b"PLAIN"] == b"x"
    assert env[b"SERVATUS_JOB_ID"] == str(JOB).encode()
    assert env[b"SERVATUS_JOB_END_TIME"] == b"1900000000"
    assert (env[b"SERVATUS_LINK"], env[b"SERVATUS_LINKS"], env[b"SERVATUS_RUN_TIME"]) == (
        b"1",
        b"1",
        b"0",
    )
    assert b"NOT_FOR_STEPS" not in env
    assert lease.ended(identity) == [f"servatus-{identity}.{JOB}.end.0.0"]
    started = lease.marker(identity, "step-start")
    assert started.stat().st_mtime <= lease.marker(identity, "end.0.0").stat().st_mtime
    assert started.stat().st_mode & 0o777 == 0o600
    assert lease.claim(identity).stat().st_size > 0
    assert not (lease.orders / identity).exists()
    (call,) = [json.loads(p.read_text()) for p in (fake_cluster.root / "srun").iterdir()]
    assert call["options"]["--gres"] == "none" and call["options"]["--exact"] is True
    assert call["options"]["--ntasks"] == "1" and call["options"]["--cpus-per-task"] == "1"
    log = fake_cluster.logs / f"servatus-{identity}-{JOB}.0.out"
    assert log.stat().st_mode & 0o777 == 0o600
    lease.finish()
    assert lease.marker(LEASE, "stop").exists()
    assert not lease.marker(identity, "stop").exists()  # it had ended


@WAITS_ON_POLLS
@pytest.mark.parametrize("shell", SHELLS, ids=lambda s: s[0])
def test_an_order_written_later_runs_within_one_poll(
    fake_cluster: FakeCluster, start_lease: object, shell: tuple[str]
) -> None:
    make_orders(fake_cluster)
    lease = start_lease(shell, lease_spec(fake_cluster, poll_seconds=5))  # type: ignore[operator]
    time.sleep(0.5)
    identity = step_id(2)
    offered = time.monotonic()
    offer(fake_cluster, identity, fake_cluster.step_args("b", "exit:3"))
    wait_for(lambda: lease.ended(identity), seconds=10)
    assert time.monotonic() - offered < 5 + 1.5
    assert lease.ended(identity) == [f"servatus-{identity}.{JOB}.end.0.3"]
    lease.finish()


@WAITS_ON_POLLS
@pytest.mark.parametrize("shell", SHELLS, ids=lambda s: s[0])
def test_two_slots_three_orders_the_third_waits_for_a_free_slot(
    fake_cluster: FakeCluster, start_lease: object, shell: tuple[str]
) -> None:
    make_orders(fake_cluster)
    first, second, third = step_id(1), step_id(2), step_id(3)
    offer(fake_cluster, first, fake_cluster.step_args("a", "wait:release"))
    offer(fake_cluster, second, fake_cluster.step_args("b", "wait:release"))
    lease = start_lease(shell)  # type: ignore[operator]
    wait_for(
        lambda: (fake_cluster.out / "a.json").exists() and (fake_cluster.out / "b.json").exists()
    )
    offer(fake_cluster, third, fake_cluster.step_args("c", "exit:0"))
    wait_for(lambda: lease.claim(third).exists())
    time.sleep(2.5)
    assert lease.claim(third).stat().st_size > 0  # taken, and waiting inside the lease
    assert not lease.marker(third, "step-start").exists()
    assert not (fake_cluster.out / "c.json").exists()
    (fake_cluster.out / "release.json").write_text("{}")
    wait_for(lambda: lease.ended(third))
    assert lease.ended(third) == [f"servatus-{third}.{JOB}.end.0.0"]
    freed = min(lease.marker(s, "end.0.0").stat().st_mtime for s in (first, second))
    assert lease.marker(third, "step-start").stat().st_mtime >= freed
    lease.finish()


@pytest.mark.parametrize("shell", SHELLS, ids=lambda s: s[0])
def test_a_claim_already_withdrawn_never_runs(
    fake_cluster: FakeCluster, start_lease: object, shell: tuple[str]
) -> None:
    orders = make_orders(fake_cluster)
    gone, kept = step_id(1), step_id(2)
    withdraw(orders, gone)  # cancel won before the order even existed
    offer(fake_cluster, gone, fake_cluster.step_args("gone", "exit:0"))
    offer(fake_cluster, kept, fake_cluster.step_args("kept", "exit:0"))
    lease = start_lease(shell)  # type: ignore[operator]
    wait_for(lambda: lease.ended(kept))
    wait_for(lambda: not (orders / gone).exists())
    time.sleep(1.5)
    assert not (fake_cluster.out / "gone.json").exists()
    assert not lease.marker(gone, "step-start").exists() and not lease.ended(gone)
    assert lease.claim(gone).stat().st_size == 0
    lease.finish()


@pytest.mark.parametrize("shell", SHELLS, ids=lambda s: s[0])
def test_an_unusable_order_is_withdrawn_by_the_lease(
    fake_cluster: FakeCluster, start_lease: object, shell: tuple[str]
) -> None:
    """An order for another slot, and one whose closing line is missing (torn, or still being
    written by hand) though its header is right for this lease: the lease takes neither, it
    withdraws both. The torn one is whole but for its trailer, so it would run if taken."""
    orders = make_orders(fake_cluster)
    other, partial = step_id(1), step_id(2)
    offer(fake_cluster, other, fake_cluster.step_args("other", "exit:0"), slot=(2, 100, 0))
    text = order_for(fake_cluster, partial, fake_cluster.step_args("partial", "exit:0"))
    head, trailer = text.rsplit("# servatus.order", 1)
    assert trailer == f"/1 end {partial}\n"
    (orders / partial).write_text(head)
    (orders / partial).chmod(0o600)
    lease = start_lease(shell)  # type: ignore[operator]
    wait_for(lambda: lease.claim(other).exists() and lease.claim(partial).exists())
    time.sleep(1.5)
    assert lease.claim(other).stat().st_size == 0 and lease.claim(partial).stat().st_size == 0
    assert not (fake_cluster.out / "other.json").exists()
    assert not (fake_cluster.out / "partial.json").exists()
    assert not lease.marker(partial, "step-start").exists() and not lease.ended(partial)
    assert not (orders / other).exists() and not (orders / partial).exists()
    assert "not whole or not for this lease's slot" in lease.finish()


@pytest.mark.parametrize("shell", SHELLS, ids=lambda s: s[0])
def test_a_budgeted_step_sees_its_run_time_so_far(
    fake_cluster: FakeCluster, start_lease: object, shell: tuple[str]
) -> None:
    """A step planned into a lease under a budget sees the Task's measured run time so far as
    ``SERVATUS_RUN_TIME`` (0 would tell it its whole budget is left), beside its budget."""
    make_orders(fake_cluster)
    spent, fresh = step_id(1), step_id(2)
    offer(
        fake_cluster, spent, fake_cluster.step_args("spent", "exit:0"), run_time=1234, budget=5000
    )
    offer(fake_cluster, fresh, fake_cluster.step_args("fresh", "exit:0"), run_time=0, budget=5000)
    lease = start_lease(shell)  # type: ignore[operator]
    wait_for(lambda: lease.ended(spent) and lease.ended(fresh))
    for name, run_time in (("spent", "1234"), ("fresh", "0")):
        env = {
            bytes.fromhex(k).decode(): bytes.fromhex(v).decode()
            for k, v in ran(fake_cluster, name)["env"].items()  # type: ignore[attr-defined]
        }
        assert env["SERVATUS_RUN_TIME"] == run_time, name
        assert env["SERVATUS_BUDGET"] == "5000", name
        assert env["SERVATUS_LINK"] == "1" and env["SERVATUS_LINKS"] == "1", name
    lease.finish()


@WAITS_ON_POLLS
@pytest.mark.parametrize("shell", SHELLS, ids=lambda s: s[0])
def test_a_stop_order_stops_a_running_step_usr1_then_term(
    fake_cluster: FakeCluster, start_lease: object, shell: tuple[str]
) -> None:
    orders = make_orders(fake_cluster)
    polite, stubborn = step_id(1), step_id(2)
    offer(fake_cluster, polite, fake_cluster.step_args("polite", "usr1"))
    offer(fake_cluster, stubborn, fake_cluster.step_args("stubborn", "sleep"))
    lease = start_lease(shell)  # type: ignore[operator]
    wait_for(lambda: lease.marker(polite, "step-start").exists())
    wait_for(lambda: lease.marker(stubborn, "step-start").exists())
    time.sleep(0.3)
    (orders / f"{polite}.stop").touch()
    (orders / f"{stubborn}.stop").touch()
    asked = time.monotonic()
    wait_for(lambda: lease.ended(polite) and lease.ended(stubborn))
    assert lease.ended(polite) == [f"servatus-{polite}.{JOB}.end.0.138"]
    assert json.loads((fake_cluster.out / "polite.usr1.json").read_text())["at"]
    assert lease.ended(stubborn) == [f"servatus-{stubborn}.{JOB}.end.0.143"]
    assert time.monotonic() - asked >= 2  # SIGTERM only after signal_before_end
    stop = lease.marker(stubborn, "stop").stat().st_mtime
    assert stop <= lease.marker(stubborn, "end.0.143").stat().st_mtime
    assert lease.marker(polite, "stop").exists()
    assert not lease.marker(LEASE, "stop").exists()  # the lease goes on
    again = step_id(3)
    offer(fake_cluster, again, fake_cluster.step_args("again", "exit:0"))
    wait_for(lambda: lease.ended(again))
    lease.finish()


@WAITS_ON_POLLS
@pytest.mark.parametrize("shell", SHELLS, ids=lambda s: s[0])
def test_a_stop_order_ends_a_waiting_step_without_starting_it(
    fake_cluster: FakeCluster, start_lease: object, shell: tuple[str]
) -> None:
    orders = make_orders(fake_cluster)
    busy = [step_id(1), step_id(2)]
    waiting = step_id(3)
    for n, identity in enumerate(busy):
        offer(fake_cluster, identity, fake_cluster.step_args(f"busy{n}", "wait:release"))
    lease = start_lease(shell)  # type: ignore[operator]
    wait_for(lambda: all(lease.marker(s, "step-start").exists() for s in busy))
    offer(fake_cluster, waiting, fake_cluster.step_args("waiting", "exit:0"))
    wait_for(lambda: lease.claim(waiting).exists())
    time.sleep(0.3)
    (orders / f"{waiting}.stop").touch()
    wait_for(lambda: lease.ended(waiting))
    assert lease.ended(waiting) == [f"servatus-{waiting}.{JOB}.end.0.1"]
    assert not lease.marker(waiting, "step-start").exists()
    (fake_cluster.out / "release.json").write_text("{}")
    lease.finish()
    assert not (fake_cluster.out / "waiting.json").exists()


@WAITS_ON_POLLS
@pytest.mark.parametrize("shell", SHELLS, ids=lambda s: s[0])
def test_the_pre_limit_signal_stops_taking_orders_and_relays(
    fake_cluster: FakeCluster, start_lease: object, shell: tuple[str]
) -> None:
    orders = make_orders(fake_cluster)
    running, late = step_id(1), step_id(2)
    offer(fake_cluster, running, fake_cluster.step_args("running", "usr1-then:0"))
    lease = start_lease(shell)  # type: ignore[operator]
    wait_for(lambda: lease.marker(running, "step-start").exists())
    time.sleep(0.3)
    lease.process.send_signal(signal.SIGUSR1)
    wait_for(lambda: lease.ended(running))
    assert lease.ended(running) == [f"servatus-{running}.{JOB}.end.0.0"]
    assert json.loads((fake_cluster.out / "running.usr1.json").read_text())["at"]
    assert lease.marker(LEASE, "limit").exists() and lease.marker(running, "limit").exists()
    offer(fake_cluster, late, fake_cluster.step_args("late", "exit:0"))
    time.sleep(2.5)
    assert (orders / late).exists() and not lease.claim(late).exists()  # stays QUEUED
    lease.finish()
    assert not (fake_cluster.out / "late.json").exists()


@WAITS_ON_POLLS
@pytest.mark.parametrize("shell", SHELLS, ids=lambda s: s[0])
def test_an_idle_lease_costs_almost_no_cpu(
    fake_cluster: FakeCluster, start_lease: object, shell: tuple[str]
) -> None:
    make_orders(fake_cluster)
    lease = start_lease(shell)  # type: ignore[operator]
    time.sleep(6)  # six polls
    fields = Path(f"/proc/{lease.process.pid}/stat").read_text().rsplit(")", 1)[1].split()
    used = sum(int(value) for value in fields[11:15]) / TICKS  # utime stime cutime cstime
    assert used < 1.0, f"{used} s of CPU in 6 s idle"
    lease.finish()


@pytest.mark.parametrize("shell", SHELLS, ids=lambda s: s[0])
@pytest.mark.parametrize("problem", ["missing", "open", "link"])
def test_a_lease_without_its_own_orders_directory_runs_nothing(
    fake_cluster: FakeCluster, start_lease: object, shell: tuple[str], problem: str
) -> None:
    orders = fake_cluster.logs / orders_directory(LEASE)
    if problem == "open":
        orders.mkdir()
        orders.chmod(0o755)
    elif problem == "link":
        real = fake_cluster.root / "elsewhere"
        real.mkdir(mode=0o700)
        orders.symlink_to(real)
    lease = start_lease(shell)  # type: ignore[operator]
    lease.process.communicate(timeout=30)
    assert lease.process.returncode == 1
    assert "not an owner-only directory" in allocation_log(fake_cluster, JOB, LEASE)
    assert not lease.marker(LEASE, "start").exists()


@WAITS_ON_POLLS
@pytest.mark.parametrize("shell", SHELLS, ids=lambda s: s[0])
def test_the_pre_limit_relay_ends_a_taken_step_still_waiting_without_starting_it(
    fake_cluster: FakeCluster, start_lease: object, shell: tuple[str]
) -> None:
    make_orders(fake_cluster)
    busy = [step_id(1), step_id(2)]
    waiting = step_id(3)
    for n, identity in enumerate(busy):
        offer(fake_cluster, identity, fake_cluster.step_args(f"busy{n}", "usr1-then:0"))
    lease = start_lease(shell)  # type: ignore[operator]
    wait_for(lambda: all(lease.marker(s, "step-start").exists() for s in busy))
    offer(fake_cluster, waiting, fake_cluster.step_args("waiting", "exit:0"))
    wait_for(lambda: lease.claim(waiting).exists())
    time.sleep(0.3)
    lease.process.send_signal(signal.SIGUSR1)
    wait_for(lambda: all(lease.ended(s) for s in (*busy, waiting)))
    assert lease.ended(waiting) == [f"servatus-{waiting}.{JOB}.end.0.1"]
    assert not lease.marker(waiting, "step-start").exists()
    assert lease.marker(waiting, "limit").exists()  # it reads STOPPED (never started), ADR 0009
    assert all(lease.ended(s) == [f"servatus-{s}.{JOB}.end.0.0"] for s in busy)
    lease.finish()
    assert not (fake_cluster.out / "waiting.json").exists()


# -- the wake-up ---------------------------------------------------------------------------------


def fake_scancel(cluster: FakeCluster, lease: Lease) -> str:
    """What ``scancel --batch --signal=URG JOB`` does for job ``JOB``: the signal to its batch
    shell alone; any other call is an error."""
    path = cluster.root / "bin" / "scancel"
    path.write_text(
        "#!/bin/sh\n"
        f'[ "$*" = "--batch --signal=URG {JOB}" ] || exit 1\n'
        f"kill -URG {lease.process.pid}\n"
    )
    path.chmod(0o755)
    return str(path)


def offer_waking(cluster: FakeCluster, identity: str, args: list[str], wake: str) -> None:
    text = order_for(cluster, identity, args)
    orders = cluster.logs / orders_directory(LEASE)
    answers = lease_client.offer(LocalTransport(), str(orders), JOB, {identity: text}, wake)
    assert answers == {identity: lease_client.OfferAnswer(lease_client.Offer.OFFERED)}


@pytest.mark.parametrize("shell", SHELLS, ids=lambda s: s[0])
def test_a_woken_lease_takes_an_order_at_once_not_at_its_next_poll(
    fake_cluster: FakeCluster, start_lease: object, shell: tuple[str]
) -> None:
    make_orders(fake_cluster)
    lease = start_lease(shell, lease_spec(fake_cluster, poll_seconds=60))  # type: ignore[operator]
    wake = fake_scancel(fake_cluster, lease)
    time.sleep(0.5)  # asleep in its first poll
    for n in range(1, 4):
        identity = step_id(n)
        offered = time.monotonic()
        offer_waking(fake_cluster, identity, fake_cluster.step_args(f"w{n}", "exit:0"), wake)
        wait_for(lambda: lease.marker(identity, "step-start").exists(), seconds=10)  # noqa: B023
        assert time.monotonic() - offered < 2, f"order {n} waited for the poll"
        wait_for(lambda: lease.ended(identity))  # noqa: B023
    lease.finish()
    for n in range(1, 4):
        assert ran(fake_cluster, f"w{n}")
        assert lease.ended(step_id(n)) == [f"servatus-{step_id(n)}.{JOB}.end.0.0"]


@pytest.mark.parametrize("shell", SHELLS, ids=lambda s: s[0])
def test_wake_ups_never_harm_a_lease_busy_or_idle(
    fake_cluster: FakeCluster, start_lease: object, shell: tuple[str]
) -> None:
    make_orders(fake_cluster)
    lease = start_lease(shell, lease_spec(fake_cluster, poll_seconds=1))  # type: ignore[operator]
    running = step_id(1)
    offer(fake_cluster, running, fake_cluster.step_args("running", "wait:release"))
    wait_for(lambda: lease.marker(running, "step-start").exists())
    for _ in range(200):  # a storm of wakes: of an idle loop and of one reading its orders
        os.kill(lease.process.pid, signal.SIGURG)
        time.sleep(0.002)
    time.sleep(0.5)
    assert lease.process.poll() is None
    late = step_id(2)
    offer(fake_cluster, late, fake_cluster.step_args("late", "exit:0"))  # no wake: the poll
    wait_for(lambda: lease.ended(late), seconds=10)
    naps = subprocess.run(
        ["pgrep", "-s", str(lease.process.pid), "-x", "sleep"], capture_output=True, text=True
    ).stdout.split()
    assert len(naps) <= 2, f"{len(naps)} poll sleeps left running"
    (fake_cluster.out / "release.json").write_text("{}")
    wait_for(lambda: lease.ended(running))
    lease.finish()
    assert lease.ended(running) == [f"servatus-{running}.{JOB}.end.0.0"]
    assert lease.ended(late) == [f"servatus-{late}.{JOB}.end.0.0"]
    assert not lease.marker(running, "stop").exists()
    for name in ("running", "late"):
        assert ran(fake_cluster, name)
