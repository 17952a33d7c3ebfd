"""The lease script's own taking of orders raced against ``cancel``'s and ``reconcile``'s withdraw
(issue #35, item 6), in real processes on the real filesystem, under ``dash`` and ``bash``.

The withdraw is :func:`servatus.lease.withdraw_orders`, the very command ``cancel`` and
``reconcile`` run, through the local transport. The other side is the rendered lease script
itself, polling its orders directory. Each round offers a batch of orders and, as soon as the
lease has claimed the first few of them, withdraws them all in the opposite order, so the two meet
somewhere in the batch; whichever claims an order first, both must then read the same verdict:
never both (the lease runs a step the client was told is withdrawn), never neither.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest
from slurm_helpers import FakeCluster
from test_lease_script import (
    JOB,
    LEASE,
    SHELLS,
    Lease,
    lease_spec,
    make_orders,
    order_for,
    step_id,
    wait_for,
)

from servatus.lease import Verdict, claim_name, offer, withdraw_orders
from servatus_slurm.lease import render_lease
from servatus_slurm.transport import LocalTransport

ROUNDS = 8
BATCH = 16

FAST_SRUN = """#!/bin/sh
# A cheap srun for races: drop srun's options and become the step (the step writes its own
# step-start marker first, as in a real lease).
while [ "$#" -gt 0 ]; do
    case $1 in --*) shift ;; *) break ;; esac
done
exec "$@"
"""


def await_claims(orders: Path, steps: list[str], count: int, seconds: float = 10) -> None:
    """Spin until the lease has claimed ``count`` of ``steps``: it is then amid its pass."""
    names = {claim_name(step, JOB) for step in steps}
    deadline = time.monotonic() + seconds
    while len(names.intersection(os.listdir(orders))) < count:
        assert time.monotonic() < deadline, "the lease took nothing"
        time.sleep(0.001)


@pytest.mark.slow
@pytest.mark.parametrize("shell", SHELLS, ids=lambda s: s[0])
def test_the_lease_and_a_withdraw_decide_each_order_once(
    fake_cluster: FakeCluster, shell: tuple[str]
) -> None:
    srun = fake_cluster.root / "bin" / "srun"
    srun.write_text(FAST_SRUN)
    srun.chmod(0o755)
    orders = make_orders(fake_cluster)
    process = fake_cluster.start(
        render_lease(lease_spec(fake_cluster, poll_seconds=1)), shell=shell, job=JOB
    )
    lease = Lease(fake_cluster, process)
    transport = LocalTransport()
    seen = {Verdict.TAKEN: 0, Verdict.WITHDRAWN: 0}
    contested = 0
    try:
        wait_for(lease.marker(LEASE, "start").exists)
        for n in range(ROUNDS):
            steps = [step_id(1000 * (n + 1) + i) for i in range(BATCH)]
            texts = {step: order_for(fake_cluster, step, ["/bin/true"]) for step in steps}
            offer(transport, str(orders), JOB, texts)
            await_claims(orders, steps, 1 + n % 4)
            verdicts = withdraw_orders(transport, str(orders), JOB, steps[::-1]).verdicts
            # The lease removes each order once it has read the claim; then each taken step
            # ends (it runs /bin/true).
            wait_for(lambda steps=steps: not any((orders / s).exists() for s in steps))
            taken = [s for s in steps if verdicts[s] is Verdict.TAKEN]
            wait_for(lambda taken=taken: all(lease.ended(s) for s in taken))
            time.sleep(0.2)  # a step launched against its verdict would have started by now
            for step in steps:
                verdict = verdicts[step]
                assert verdict is not Verdict.UNDECIDED, (n, step)
                size = (orders / claim_name(step, JOB)).stat().st_size
                ran = lease.marker(step, "step-start").exists() or bool(lease.ended(step))
                assert (size > 0) == (verdict is Verdict.TAKEN), (n, step, size, verdict)
                assert ran == (verdict is Verdict.TAKEN), (n, step, "ran" if ran else "not run")
                seen[verdict] += 1
            contested += len({verdicts[s] for s in steps}) == 2
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    assert sum(seen.values()) == ROUNDS * BATCH
    assert contested >= ROUNDS // 2, (contested, seen)
