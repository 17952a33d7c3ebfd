"""``cancel`` of a step and of a lease (ADR 0009): a step is withdrawn by its claim or, once the
lease took it, asked to stop; a lease has its untaken orders withdrawn, then is cancelled with
its later links, newest first. Journals are built from store records (``leasekit``)."""

from __future__ import annotations

import json
import random
import threading
import time
from pathlib import Path

import pytest
from leasekit import LeaseCampaign, ident, lease_campaign

from servatus.cli import main
from servatus.errors import Unavailable

LEASE, NEXT = ident(0xA1), ident(0xA2)


@pytest.fixture
def lc(tmp_path: Path) -> LeaseCampaign:
    made = lease_campaign(tmp_path, "a b c")
    job = made.lease(LEASE)
    made.fake.start(job)
    return made


def cancel(lc: LeaseCampaign, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, dict]:
    capsys.readouterr()
    code = main(["cancel", str(lc.campaign.path), "--json", *args], connect=lc.connect)
    out = capsys.readouterr().out
    return code, json.loads(out) if code == 0 else {"err": out}


def test_cancel_of_an_untaken_step_withdraws_it_and_leaves_the_lease(
    lc: LeaseCampaign, capsys: pytest.CaptureFixture[str]
) -> None:
    step = ident(1)
    lc.step(step, "a", LEASE)
    code, document = cancel(lc, capsys, "--task", "a")
    assert code == 0
    assert document == {"cancelled": [], "withdrawn": [step], "stopping": []}
    assert lc.claim_size(LEASE, step) == 0
    assert not lc.stop_requested(LEASE, step)
    assert lc.take(LEASE, step) == "withdrawn"  # the lease, polling later, never runs it
    assert lc.scancelled() == []
    assert lc.fake.jobs[0].state == "RUNNING"


def test_cancel_of_a_taken_step_asks_the_lease_to_stop_it(
    lc: LeaseCampaign, capsys: pytest.CaptureFixture[str]
) -> None:
    step = ident(1)
    lc.step(step, "a", LEASE)
    assert lc.take(LEASE, step) == "taken"
    code, document = cancel(lc, capsys, "--task", "a")
    assert (code, document) == (0, {"cancelled": [], "withdrawn": [], "stopping": [step]})
    assert lc.stop_requested(LEASE, step)
    assert lc.claim_size(LEASE, step)  # still the lease's
    assert lc.scancelled() == [] and lc.fake.jobs[0].state == "RUNNING"
    assert [c for c in lc.calls if c[0] == "lease-sh"] == [
        ("lease-sh", "withdraw"),
        ("lease-sh", "stop"),
    ]


def test_cancel_by_the_step_id_is_cancel_of_its_task(
    lc: LeaseCampaign, capsys: pytest.CaptureFixture[str]
) -> None:
    taken, untaken = ident(1), ident(2)
    lc.step(taken, "a", LEASE)
    lc.step(untaken, "b", LEASE)
    lc.take(LEASE, taken)
    code, document = cancel(lc, capsys, "--allocation", taken, "--allocation", untaken)
    assert (code, document) == (0, {"cancelled": [], "withdrawn": [untaken], "stopping": [taken]})
    assert lc.scancelled() == []


def test_an_undecided_claim_exits_75_and_changes_nothing(
    lc: LeaseCampaign, capsys: pytest.CaptureFixture[str]
) -> None:
    step = ident(1)
    lc.step(step, "a", LEASE)
    (lc.orders(LEASE) / f"servatus-{step}.{lc.jobs[LEASE]}.claim").mkdir()  # unreadable
    capsys.readouterr()
    assert main(["cancel", str(lc.campaign.path), "--task", "a"], connect=lc.connect) == 75
    err = capsys.readouterr().err
    assert f"NOT cancelled: step {step} (its claim could not be read)" in err
    assert "Traceback" not in err
    assert not lc.stop_requested(LEASE, step) and lc.scancelled() == []


def test_a_step_seen_ending_or_in_a_lease_no_longer_listed_is_not_touched(
    lc: LeaseCampaign, capsys: pytest.CaptureFixture[str]
) -> None:
    ended, other = ident(1), ident(2)
    lc.step(ended, "a", LEASE)
    lc.take(LEASE, ended)
    lc.fake.markers[f"servatus-{ended}.{lc.jobs[LEASE]}.end.0.0"] = time.time()
    code, document = cancel(lc, capsys, "--task", "a")
    assert (code, document) == (0, {"cancelled": [], "withdrawn": [], "stopping": []})
    assert not lc.stop_requested(LEASE, ended)
    lc.step(other, "b", LEASE)
    lc.fake.finish(lc.jobs[LEASE])
    lc.fake.purge()
    code, document = cancel(lc, capsys, "--task", "b")
    assert (code, document) == (0, {"cancelled": [], "withdrawn": [], "stopping": []})
    assert lc.claim_size(LEASE, other) is None


def test_an_order_a_lease_that_ended_never_took_is_withdrawn_and_frees_its_task(
    lc: LeaseCampaign, capsys: pytest.CaptureFixture[str]
) -> None:
    """The lease ended before it took the order (Slurm lists it COMPLETED until it forgets
    it): the order holds its Task QUEUED, and cancel withdraws it, so the Task reads
    STOPPED (never started) and is free at once, without waiting for the purge."""
    step = ident(1)
    lc.step(step, "a", LEASE)
    lc.fake.finish(lc.jobs[LEASE])
    assert lc.fake.jobs[0].state == "COMPLETED" and lc.fake.jobs[0].listed

    def task_a() -> tuple[str, str | None, bool]:
        (task,) = (t for t in lc.campaign.status().tasks if t.key == "a")
        return task.execution.value, task.detail and task.detail.value, task.listed

    assert task_a() == ("QUEUED", None, True)
    code, document = cancel(lc, capsys, "--task", "a")
    assert (code, document) == (0, {"cancelled": [], "withdrawn": [step], "stopping": []})
    assert lc.claim_size(LEASE, step) == 0
    assert lc.take(LEASE, step) == "withdrawn"
    assert lc.scancelled() == []
    # The marker listing is the fake's: it now lists the empty claim the withdrawal wrote.
    claim = f"servatus-{step}.{lc.jobs[LEASE]}.claim"
    lc.fake.claims[claim] = (time.time(), (lc.orders(LEASE) / claim).read_bytes())
    assert task_a() == ("STOPPED", "never started", False)
    code, document = cancel(lc, capsys, "--task", "a")
    assert (code, document) == (0, {"cancelled": [], "withdrawn": [], "stopping": []})


def test_cancel_of_a_lease_withdraws_its_untaken_orders_then_cancels_newest_first(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lc = lease_campaign(tmp_path, "a b c")
    first = lc.lease(LEASE, of=2, position=1)
    lc.lease(NEXT, after=LEASE, of=2, position=2)
    lc.fake.start(first)
    taken, untaken, later = ident(1), ident(2), ident(3)
    lc.step(taken, "a", LEASE)
    lc.step(untaken, "b", LEASE)
    lc.step(later, "c", NEXT)
    lc.take(LEASE, taken)
    code, document = cancel(lc, capsys, "--allocation", LEASE)
    assert code == 0
    assert document == {"cancelled": [NEXT, LEASE], "withdrawn": [untaken, later], "stopping": []}
    assert lc.claim_size(LEASE, untaken) == 0 and lc.claim_size(NEXT, later) == 0
    assert lc.claim_size(LEASE, taken)  # taken: it ends with its job
    assert not lc.stop_requested(LEASE, taken)
    kinds = [c[0] if c[0] == "lease-sh" else c[0].rsplit("/", 1)[-1] for c in lc.calls]
    last_withdraw = max(i for i, c in enumerate(lc.calls) if c == ("lease-sh", "withdraw"))
    assert kinds.index("scancel") > last_withdraw  # every withdraw before any scancel
    assert lc.scancelled() == [NEXT, LEASE]
    assert {job.state for job in lc.fake.jobs} == {"CANCELLED"}


def test_the_python_api_cancels_a_step_as_in_the_spec(lc: LeaseCampaign) -> None:
    step = ident(7)
    lc.step(step, "c", LEASE)
    done = lc.campaign.cancel(tasks=["c"])
    assert (done.allocations, done.withdrawn, done.stopping) == ((), (step,), ())


def test_a_lease_sh_without_an_answer_names_what_was_not_done(lc: LeaseCampaign) -> None:
    step = ident(1)
    lc.step(step, "a", LEASE)

    real = lc.connect

    def failing(target: object) -> object:
        transport = real(target)  # type: ignore[arg-type]
        inner = transport.run

        def run(argv: list[str], **kw: object) -> object:
            if len(argv) > 2 and "withdraw()" in argv[2]:
                raise Unavailable("no answer from the login node")
            return inner(argv, **kw)  # type: ignore[arg-type]

        transport.run = run  # type: ignore[method-assign,assignment]
        return transport

    lc.campaign.connect = failing  # type: ignore[assignment]
    with pytest.raises(Unavailable, match=f"NOT cancelled: step {step} \\(no answer"):
        lc.campaign.cancel(tasks=["a"])
    assert lc.claim_size(LEASE, step) is None


def test_cancel_racing_the_lease_decides_every_order_once_and_both_sides_agree(
    tmp_path: Path,
) -> None:
    """The real path (Campaign.cancel, the local transport) against a separate process doing
    the lease's take, a fresh order each round: taken and stopping, or withdrawn, never both,
    never neither, and the claim agrees."""
    lc = lease_campaign(tmp_path, " ".join(f"k{n}" for n in range(60)))
    lc.fake.start(lc.lease(LEASE))
    rng = random.Random(1509)
    seen = {"taken": 0, "withdrawn": 0}
    for n in range(60):
        step = ident(0x1000 + n)
        lc.step(step, f"k{n}", LEASE)
        lease_side: list[str] = []
        delay = rng.uniform(0, 0.06)

        def lease(step: str = step, delay: float = delay, into: list[str] = lease_side) -> None:
            time.sleep(delay)
            into.append(lc.take(LEASE, step))

        thread = threading.Thread(target=lease)
        thread.start()
        done = lc.campaign.cancel(allocations=[step])
        thread.join()
        client = {"withdrawn": done.withdrawn, "taken": done.stopping}
        assert sorted(k for k, v in client.items() if v) in (["taken"], ["withdrawn"]), n
        (word,) = [k for k, v in client.items() if v]
        assert client[word] == (step,)
        assert lease_side == [word], f"round {n}"
        assert ((lc.claim_size(LEASE, step) or 0) > 0) == (word == "taken")
        assert lc.stop_requested(LEASE, step) == (word == "taken")
        seen[word] += 1
    assert sum(seen.values()) == 60
    assert seen["taken"] and seen["withdrawn"], seen
    assert lc.scancelled() == []
