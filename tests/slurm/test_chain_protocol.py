"""The chain link protocol's integrity (issue #35): what a link runs, removes and stops, with the
batch script run for real under ``dash`` and ``bash --posix`` and Slurm's commands stubbed.

Each case pins one behaviour an audit found no non-cluster test held: a slot runs only on a claim
that carries this job's own number; a ``SIGTERM`` after the pre-limit signal never removes the
rest of the chain; a step that starts after the early stop already fired is stopped at once.
"""

from __future__ import annotations

import os
import signal
import time

import pytest
from slurm_helpers import ALLOCATION, FakeCluster
from test_script import (
    EARLIER,
    SHELLS,
    chain_spec,
    chain_step,
    handoff,
    markers,
    over,
    removed,
    wait_exit,
    wait_for,
)

from servatus_slurm.script import GRACE, render

JOB = 4242
PREFIX = f"servatus-{ALLOCATION}.{JOB}."


def claim(cluster: FakeCluster, allocation: str, job: int, slot: int, content: str) -> None:
    """A claim on a handoff that someone else already made: ``content`` is what it holds."""
    (cluster.logs / f"servatus-{allocation}.{job}.taken.{slot}").write_text(content)


@pytest.mark.parametrize("shell", SHELLS, ids=lambda s: s[0])
def test_a_slot_runs_only_on_a_claim_that_holds_this_jobs_number(
    fake_cluster: FakeCluster, shell: tuple[str]
) -> None:
    """Three slots handed on by link 1. Slot 0's claim is free, so this link takes it and runs
    it. Slot 1's was withheld by ``reconcile`` (empty), slot 2's taken by another job (a second
    link on the same handoff): a claim file exists for both, but neither holds this job's
    number, so neither runs, and their claims are left as they were."""
    target = fake_cluster.target
    steps = [
        chain_step(target, 0, fake_cluster.step_args("free", "exit:0"), links=3),
        chain_step(target, 1, fake_cluster.step_args("withheld", "exit:0"), links=3),
        chain_step(target, 2, fake_cluster.step_args("other", "exit:0"), links=3),
    ]
    for slot in (0, 1, 2):
        handoff(fake_cluster, EARLIER[0], 17, slot)
    claim(fake_cluster, EARLIER[0], 17, 1, "")
    claim(fake_cluster, EARLIER[0], 17, 2, "5151\n")
    over(fake_cluster, EARLIER[0], 17)
    process = fake_cluster.start(render(chain_spec(target, steps, 2, 3)), shell=shell, job=JOB)
    process.communicate(timeout=30)
    assert (fake_cluster.out / "free.json").exists()
    assert not (fake_cluster.out / "withheld.json").exists()
    assert not (fake_cluster.out / "other.json").exists()
    assert len(os.listdir(fake_cluster.root / "srun")) == 1
    mine = {name for name in markers(fake_cluster) if name.startswith(PREFIX)}
    assert mine == {PREFIX + "start", PREFIX + "end.0.0"}
    taken = fake_cluster.logs / f"servatus-{EARLIER[0]}.17.taken."
    assert (taken.parent / (taken.name + "0")).read_text().strip() == str(JOB)
    assert (taken.parent / (taken.name + "1")).read_text() == ""
    assert (taken.parent / (taken.name + "2")).read_text() == "5151\n"


@pytest.mark.parametrize("shell", SHELLS, ids=lambda s: s[0])
def test_a_sigterm_after_the_signal_before_any_handoff_keeps_the_chain(
    fake_cluster: FakeCluster, shell: tuple[str]
) -> None:
    """The pre-limit signal came; the step still runs, so no handoff exists yet, when Slurm's
    (or a raw ``scancel``'s) ``SIGTERM`` reaches the batch shell. The step may still hand on
    (here the early stop ends it and it does), so the later links must stay queued: no
    ``scancel`` at all, and the link exits 0."""
    target = fake_cluster.target
    steps = [chain_step(target, 0, fake_cluster.step_args("runs-on", "sleep"), links=3)]
    script = render(chain_spec(target, steps, 1, 3, signal_before_end=GRACE + 2))
    process = fake_cluster.start(script, shell=shell, job=JOB)
    try:
        wait_for((fake_cluster.out / "runs-on.json").exists)
        process.send_signal(signal.SIGUSR1)
        wait_for((fake_cluster.logs / (PREFIX + "limit")).exists)
        process.send_signal(signal.SIGTERM)
        wait_for((fake_cluster.logs / (PREFIX + "stop")).exists)
        assert not (fake_cluster.logs / (PREFIX + "handoff.0")).exists()
        time.sleep(0.5)  # the trap has run: the stop marker is its own
        assert removed(fake_cluster) == []
    except BaseException:
        os.killpg(process.pid, signal.SIGKILL)
        raise
    out = wait_exit(process)
    assert "hands nothing on" not in out
    assert removed(fake_cluster) == []
    assert {PREFIX + "end.0.143", PREFIX + "handoff.0"} <= set(markers(fake_cluster))


@pytest.mark.parametrize("shell", SHELLS, ids=lambda s: s[0])
def test_a_step_that_starts_after_the_early_stop_fired_is_stopped_at_once(
    fake_cluster: FakeCluster, shell: tuple[str]
) -> None:
    """Link 2 waits for link 1's over file before it starts any step. The pre-limit signal
    comes meanwhile, and its early stop fires at once (``signal_before_end`` is the grace), so
    when the handoff shows up the early stop is already past. The step that then starts must be
    stopped as it starts (143, and handed on), not run until Slurm's kill at the limit."""
    target = fake_cluster.target
    steps = [chain_step(target, 0, fake_cluster.step_args("late", "sleep"), links=3)]
    script = render(chain_spec(target, steps, 2, 3, signal_before_end=GRACE))
    process = fake_cluster.start(script, shell=shell, job=JOB)
    wait_for((fake_cluster.logs / (PREFIX + "start")).exists)
    process.send_signal(signal.SIGUSR1)
    wait_for((fake_cluster.logs / (PREFIX + "stop")).exists)  # the early stop has fired
    assert not os.listdir(fake_cluster.root / "srun")
    handoff(fake_cluster, EARLIER[0], 17, 0)
    over(fake_cluster, EARLIER[0], 17)
    # Stopped as it starts: its srun may be killed before the step even records itself.
    ended = fake_cluster.logs / (PREFIX + "end.0.143")
    try:
        wait_for(ended.exists, seconds=10)
    finally:
        if not ended.exists():
            os.killpg(process.pid, signal.SIGKILL)
    wait_exit(process)
    assert (fake_cluster.logs / (PREFIX + "handoff.0")).exists()
    assert removed(fake_cluster) == []
