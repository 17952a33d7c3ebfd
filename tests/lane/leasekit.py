"""A campaign with a lease and steps in it, its journal built from store records directly, for
the tests of ``cancel`` and ``reconcile`` of steps (ADR 0009).

Slurm is FakeScheduler; the orders directory is real, under ``log_root`` in a temp tree, and the
client's ``sh`` (withdraw, stop) runs there through the local transport. The lease's side of an
order is what its script does: ``ln`` the order into the claim, then read the claim's size.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

import attrs

from servatus import Campaign, Task
from servatus.config import Target, target_identity
from servatus.ids import target_key
from servatus.journal import records, store
from servatus.lease import STOP_SCRIPT, WITHDRAW_SCRIPT, claim_name, orders_directory
from servatus.testing import FakeScheduler
from servatus.transport import COMMAND_TIMEOUT, CommandResult, Transport
from servatus_slurm.transport import LocalTransport
from testkit import make_target

TERMS = records.LeaseTerms("cpu", 2, 1, 500, 0, 60)
LIMIT = 600
TAKE = (
    'ln "$1" "$2" 2>/dev/null; case $(wc -c <"$2" 2>/dev/null) in'
    " *[1-9]*) echo taken ;; *0*) echo withdrawn ;; *) echo undecided ;; esac"
)


def ident(n: int) -> str:
    return f"{n:024x}"


class Mixed:
    """FakeScheduler for Slurm and the marker listing; the local transport for the client's
    lease ``sh``. ``calls`` logs both, in order (``"lease-sh"`` for the local ones)."""

    def __init__(self, fake: FakeScheduler, calls: list[tuple[str, ...]]) -> None:
        self.fake = fake
        self.calls = calls
        self.local = LocalTransport()

    def run(
        self, argv: Sequence[str], *, stdin: bytes = b"", timeout: float = COMMAND_TIMEOUT
    ) -> CommandResult:
        if len(argv) > 2 and argv[2] in (WITHDRAW_SCRIPT, STOP_SCRIPT):
            self.calls.append(("lease-sh", "withdraw" if argv[2] == WITHDRAW_SCRIPT else "stop"))
            return self.local.run(argv, stdin=stdin, timeout=timeout)
        self.calls.append(tuple(argv))
        return self.fake.run(argv, stdin=stdin, timeout=timeout)

    def close(self) -> None:
        self.local.close()


@attrs.define
class LeaseCampaign:
    """A campaign of Tasks ``keys`` with lease links recorded, and their fake jobs."""

    root: Path
    target: Target
    fake: FakeScheduler
    campaign: Campaign
    calls: list[tuple[str, ...]]
    jobs: dict[str, int] = attrs.field(factory=dict)

    def connect(self, target: Target) -> Transport:
        return Mixed(self.fake, self.calls)

    @property
    def key(self) -> str:
        return target_key(target_identity(self.target))

    def orders(self, lease: str) -> Path:
        return Path(self.target.log_root) / orders_directory(lease)

    def lease(self, lease: str, *, after: str | None = None, of: int = 1, position: int = 1) -> int:
        """Record a lease link (intent and receipt), queue its fake job, make its directory."""
        chain = records.ChainLink(position, of, after or "", (), 0) if of > 1 else None
        script = f"#!/bin/sh\n#SBATCH --job-name=servatus-{lease}\n#SBATCH --ntasks=2\n"
        result = self.fake.run([f"{self.target.slurm_bin}/sbatch"], stdin=script.encode())
        job = int(result.stdout)
        self.jobs[lease] = job
        with store.writing(self.campaign.path) as writer:
            key = writer.target(target_identity(self.target))
            writer.add(records.Intent(lease, (), "d", 1.0, key, LIMIT, chain, TERMS))
            writer.add(records.Receipt(lease, job))
        directory = self.orders(lease)
        directory.mkdir(mode=0o700)
        directory.chmod(0o700)
        return job

    def step(
        self, step: str, key: str, lease: str, *, receipt: bool = True, at: float | None = None
    ) -> None:
        """Record a step (its intent, at ``at`` or now, and unless ``receipt`` is False its
        receipt) and offer its order. Now, so that no 15-minute rule decides it."""
        at = time.time() if at is None else at
        with store.writing(self.campaign.path) as writer:
            writer.add(records.Intent(step, (key,), "e", at, self.key, LIMIT, within=lease))
            if receipt:
                writer.add(records.Receipt(step, self.jobs[lease]))
        order = self.orders(lease) / step
        order.write_text(f"# servatus.order/1 {step} lease={lease} slot=1/500/0\n:\n")
        order.chmod(0o600)

    def take(self, lease: str, step: str) -> str:
        """The lease's take of an order, in a process of its own."""
        directory = self.orders(lease)
        claim = directory / claim_name(step, self.jobs[lease])
        done = subprocess.run(
            ["dash", "-c", TAKE, "sh", str(directory / step), str(claim)],
            capture_output=True,
            text=True,
            check=True,
        )
        return done.stdout.strip()

    def claim_size(self, lease: str, step: str) -> int | None:
        claim = self.orders(lease) / claim_name(step, self.jobs[lease])
        return claim.stat().st_size if claim.exists() else None

    def stop_requested(self, lease: str, step: str) -> bool:
        return (self.orders(lease) / f"{step}.stop").exists()

    def scancelled(self) -> list[str]:
        return [
            arg.removeprefix("--name=servatus-")
            for call in self.calls
            if call and call[0].endswith("/scancel")
            for arg in call
            if arg.startswith("--name=")
        ]


def lease_campaign(root: Path, keys: str) -> LeaseCampaign:
    target = make_target(root)
    Path(target.log_root).mkdir(parents=True)
    fake = FakeScheduler()
    calls: list[tuple[str, ...]] = []
    tasks = [Task(key, ["/bin/true", key]) for key in keys.split()]
    made = LeaseCampaign(root, target, fake, None, calls)  # type: ignore[arg-type]
    made.campaign = Campaign.ensure(root / "state", tasks, connect=made.connect)
    return made
