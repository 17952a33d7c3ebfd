"""A lease on the real cluster by hand, before the CLI builds one: ``sbatch`` of ``render_lease``,
orders through ``servatus.lease.offer``, markers and claims read back with ``find``.

Everything goes through one :class:`~servatus.transport.Transport` (the SSH one in the tests and
benchmarks), as the client would: making the orders directory ``0700`` first (ADR 0009: submit
makes it before the lease's ``sbatch``), the ``sbatch`` itself, offers, withdrawals, stop
requests, ``squeue`` and the listing. Only step logs are read through the shared ``/scratch``.
Imports nothing of the test fixtures, so the benchmarks use it too.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TypeVar

import attrs

from servatus import lease as client
from servatus.config import Target
from servatus.launcher import StepCommand
from servatus.lease import claim_name, orders_directory
from servatus.script import LeaseOrder, LeaseSpec
from servatus.transport import Transport
from servatus_slurm.lease import render_lease, render_order
from servatus_slurm.script import RUNTIME_VARIABLES

T = TypeVar("T")

STEP = r"""
mode=$1 seconds=$2
now() { date +%s.%N; }
echo "began $(now) gpus_on_node=${SLURM_GPUS_ON_NODE-unset} step_gpus=${SLURM_STEP_GPUS-unset}" \
    "cuda=${CUDA_VISIBLE_DEVICES-unset} job=${SERVATUS_JOB_ID-unset}"
trap 'echo "usr1 $(now)"; case $mode in exit*) exit "${mode#exit}" ;; esac' USR1
trap 'echo "term $(now)"; exit 143' TERM
end=$(($(date +%s) + seconds))
while [ "$(date +%s)" -lt "$end" ]; do sleep 1 & wait $!; done
echo "done $(now)"
""".lstrip("\n")
"""A step that says when it began (and what GPUs it was given), runs ``seconds``, and on
``SIGUSR1`` says so and then carries on (``ignore``) or exits (``exit<code>``). It sleeps in the
background and ``wait``s, so its traps run at once."""

STOP_REQUEST = 'umask 077 && set -C && : >"$1"'
"""ADR 0009's stop request: ``<step id>.stop`` in the orders directory, owner-only; an existing
one is fine (``set -C`` refuses to truncate it, and the lease acts on it once)."""


def new_id() -> str:
    return secrets.token_hex(12)


def wait_until(
    what: str, probe: Callable[[], T | None], *, seconds: float, every: float = 0.5
) -> T:
    """Poll ``probe`` until it returns something truthy; fail naming ``what`` at the deadline."""
    deadline = time.monotonic() + seconds
    while True:
        found = probe()
        if found:
            return found
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {seconds:.0f} s waiting for {what}")
        time.sleep(every)


@attrs.frozen
class Entry:
    mtime: float
    size: int


@attrs.frozen
class Lease:
    """One lease job submitted by hand, and what a client can do to it."""

    transport: Transport
    spec: LeaseSpec
    job: int
    script: str

    @property
    def id(self) -> str:
        return self.spec.allocation_id

    @property
    def log_root(self) -> str:
        return self.spec.target.log_root

    @property
    def orders(self) -> str:
        return f"{self.log_root}/{orders_directory(self.id)}"

    def _run(self, argv: Sequence[str], stdin: bytes = b"") -> str:
        result = self.transport.run(list(argv), stdin=stdin)
        assert result.returncode == 0, (argv, result.stderr)
        return result.stdout.decode()

    def order(self, step: str, mode: str = "ignore", seconds: int = 0) -> str:
        command = StepCommand(argv=("/bin/sh", "-c", STEP, "step", mode, str(seconds)))
        spec = self.spec
        return render_order(
            LeaseOrder(
                step_id=step,
                lease_id=self.id,
                task_key=f"k-{step[:6]}",
                command=command,
                stdin=b"",
                cpus=spec.cpus,
                memory_mib=spec.memory_mib,
                gpus=spec.gpus,
                inherit=tuple(RUNTIME_VARIABLES),
            ),
            spec.target,
        )

    def offer(self, orders: Mapping[str, str]) -> float:
        """Offer the orders in one transport command; when it returned (``time.time``)."""
        answers = client.offer(self.transport, self.orders, self.job, orders)
        done = time.time()
        offered = client.OfferAnswer(client.Offer.OFFERED)
        assert answers == dict.fromkeys(orders, offered), answers
        return done

    def withdraw(self, steps: Sequence[str]) -> dict[str, client.Verdict]:
        return client.withdraw(self.transport, self.orders, self.job, steps)

    def stop(self, step: str) -> float:
        self._run(["/bin/sh", "-c", STOP_REQUEST, "sh", f"{self.orders}/{step}.stop"])
        return time.time()

    def listing(self) -> dict[str, Entry]:
        """Every file at the top of ``log_root`` and of the orders directory: name to mtime
        and size, one ``find`` as status lists markers. The lease removes orders while ``find``
        reads the directory; without a name test before ``-type f`` (status's listing has one)
        a vanished order is an error, so GNU find is told to ignore that race."""
        out = self._run(
            [
                "find",
                self.log_root,
                self.orders,
                "-ignore_readdir_race",
                "-mindepth",
                "1",
                "-maxdepth",
                "1",
                "-type",
                "f",
                "-printf",
                "%f %T@ %s\n",
            ]
        )
        rows = {}
        for line in out.splitlines():
            name, mtime, size = line.split(" ")
            rows[name] = Entry(float(mtime), int(size))
        return rows

    def markers(
        self, identity: str, listing: Mapping[str, Entry] | None = None
    ) -> dict[str, Entry]:
        """The run markers of ``identity`` (a step or the lease) with this lease's job, by kind
        (``step-start``, ``end.0.0``, ``stop``, ``limit``, ``start``)."""
        prefix = f"servatus-{identity}.{self.job}."
        rows = self.listing() if listing is None else listing
        return {
            name.removeprefix(prefix): entry
            for name, entry in rows.items()
            if name.startswith(prefix) and not name.endswith(".claim")
        }

    def claim(self, step: str, listing: Mapping[str, Entry] | None = None) -> Entry | None:
        rows = self.listing() if listing is None else listing
        return rows.get(claim_name(step, self.job))

    def ended(self, step: str, listing: Mapping[str, Entry] | None = None) -> str | None:
        """The step's ``end.0.<exit>`` kind, once written."""
        kinds = [k for k in self.markers(step, listing) if k.startswith("end.0.")]
        return kinds[0] if kinds else None

    def step_log(self, step: str) -> str | None:
        path = Path(self.log_root) / f"servatus-{step}-{self.job}.0.out"
        return path.read_text() if path.exists() else None

    def lease_log(self) -> str:
        path = Path(self.log_root) / f"servatus-{self.id}-{self.job}.out"
        return path.read_text() if path.exists() else ""

    def state(self) -> str:
        """The lease's ``squeue`` state, or ``(forgotten)``."""
        slurm_bin = self.spec.target.slurm_bin
        result = self.transport.run([f"{slurm_bin}/squeue", "-h", "-j", str(self.job), "-o", "%T"])
        listed = result.stdout.decode().strip()
        return listed if result.returncode == 0 and listed else "(forgotten)"

    def release(self) -> None:
        self._run([f"{self.spec.target.slurm_bin}/scontrol", "release", str(self.job)])

    def cancel(self) -> None:
        self.transport.run([f"{self.spec.target.slurm_bin}/scancel", str(self.job)])

    def step_start(self, step: str) -> Entry | None:
        return self.markers(step).get("step-start")


def submit(
    transport: Transport,
    target: Target,
    *,
    slots: int,
    time_limit: int = 600,
    signal_before_end: int = 30,
    gpus: int = 0,
    poll_seconds: int = 5,
    hold: bool = False,
) -> Lease:
    """Make the lease's orders directory (``umask 077``, ``mkdir -m 700``), then ``sbatch`` its
    rendered script on stdin, as submit will."""
    spec = LeaseSpec(
        allocation_id=new_id(),
        target=target,
        slots=slots,
        cpus=1,
        memory_mib=100,
        gpus=gpus,
        time_limit=time_limit,
        signal_before_end=signal_before_end,
        inherit=tuple(RUNTIME_VARIABLES),
        poll_seconds=poll_seconds,
    )
    orders = f"{target.log_root}/{orders_directory(spec.allocation_id)}"
    made = transport.run(["/bin/sh", "-c", 'umask 077 && mkdir -m 700 "$1"', "sh", orders])
    assert made.returncode == 0, made.stderr
    script = render_lease(spec)
    argv = [f"{target.slurm_bin}/sbatch", "--parsable", *(["--hold"] if hold else [])]
    answer = transport.run(argv, stdin=script.encode())
    assert answer.returncode == 0, answer.stderr
    return Lease(transport, spec, int(answer.stdout.decode().split(";")[0]), script)


def said(log: str | None, word: str) -> list[float]:
    """The times a step's log says it did ``word`` (``began``, ``usr1``, ``done``, ``term``)."""
    return [
        float(line.split(" ")[1])
        for line in (log or "").splitlines()
        if line.startswith(f"{word} ")
    ]
