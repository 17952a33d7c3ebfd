"""``reconcile`` of a step (ADR 0009 "Recovery"): decided at once by its order's claim, whatever
the interrupted ``start`` reached; a missing orders directory waits while Slurm lists the lease,
then ADR 0003's rule decides. A lease link's own intent reconciles by its job name."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from leasekit import LIMIT, TERMS, LeaseCampaign, ident, lease_campaign

from servatus.cli import main
from servatus.config import target_identity
from servatus.journal import records, store
from servatus.operations.reconcile import RECONCILE_AFTER

LEASE = ident(0xA1)


@pytest.fixture
def lc(tmp_path: Path) -> LeaseCampaign:
    made = lease_campaign(tmp_path, "a b c d")
    made.fake.start(made.lease(LEASE))
    return made


def reconcile(lc: LeaseCampaign, capsys: pytest.CaptureFixture[str]) -> tuple[int, Any]:
    """Its exit code, and its resolutions (exit 0) or its one line on stderr."""
    capsys.readouterr()
    code = main(["reconcile", str(lc.campaign.path), "--json"], connect=lc.connect)
    out, err = capsys.readouterr()
    return code, json.loads(out)["resolutions"] if code == 0 else err


def resolved(lc: LeaseCampaign) -> dict[str, int | None]:
    return {r.allocation_id: r.job for r in store.read(lc.campaign.path).resolutions}


def test_a_taken_step_is_accepted_with_the_lease_job_and_an_untaken_one_withdrawn(
    lc: LeaseCampaign, capsys: pytest.CaptureFixture[str]
) -> None:
    taken, untaken, unwritten = ident(1), ident(2), ident(3)
    lc.step(taken, "a", LEASE, receipt=False)
    lc.step(untaken, "b", LEASE, receipt=False)
    lc.step(unwritten, "c", LEASE, receipt=False)
    (lc.orders(LEASE) / unwritten).unlink()  # start was killed before its order existed
    lc.take(LEASE, taken)
    code, resolutions = reconcile(lc, capsys)
    assert code == 0
    job = lc.jobs[LEASE]
    assert {(r["allocation_id"], r["outcome"], r["job"]) for r in resolutions} == {
        (taken, "accepted", job),
        (untaken, "not_submitted", None),
        (unwritten, "not_submitted", None),
    }
    assert resolved(lc) == {taken: job, untaken: None, unwritten: None}
    assert lc.take(LEASE, untaken) == "withdrawn"  # the lease, polling later, never runs it
    (lc.orders(LEASE) / unwritten).write_text("late")  # a stuck remote mv lands after all
    assert lc.take(LEASE, unwritten) == "withdrawn"


def test_a_step_an_earlier_cancel_withdrew_is_recorded_not_submitted(
    lc: LeaseCampaign, capsys: pytest.CaptureFixture[str]
) -> None:
    step = ident(1)
    lc.step(step, "a", LEASE, receipt=False)
    assert lc.campaign.cancel(allocations=[step]).withdrawn == (step,)
    code, resolutions = reconcile(lc, capsys)
    assert code == 0
    assert [(r["allocation_id"], r["outcome"]) for r in resolutions] == [(step, "not_submitted")]


def test_an_unreadable_claim_waits_and_exits_75(
    lc: LeaseCampaign, capsys: pytest.CaptureFixture[str]
) -> None:
    step = ident(1)
    lc.step(step, "a", LEASE, receipt=False)
    (lc.orders(LEASE) / f"servatus-{step}.{lc.jobs[LEASE]}.claim").mkdir()
    code, err = reconcile(lc, capsys)
    assert code == 75
    assert "1 allocation still waits for evidence" in err and "Traceback" not in err
    assert resolved(lc) == {}


def test_a_missing_directory_waits_while_the_lease_is_listed_then_adr_0003_decides(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lc = lease_campaign(tmp_path, "a b c")
    job = lc.lease(LEASE)
    lc.fake.start(job)
    now = time.time()
    marked, old, young = ident(1), ident(2), ident(3)
    lc.step(marked, "a", LEASE, receipt=False, at=now)
    lc.step(old, "b", LEASE, receipt=False, at=now - RECONCILE_AFTER - 1)
    lc.step(young, "c", LEASE, receipt=False, at=now)
    for path in lc.orders(LEASE).iterdir():
        path.unlink()
    lc.orders(LEASE).rmdir()
    code, _ = reconcile(lc, capsys)
    assert code == 75 and resolved(lc) == {}  # the lease is listed: it may hold the claims
    assert not lc.orders(LEASE).exists()  # a withdrawer never makes the directory
    lc.fake.markers[f"servatus-{marked}.{job}.step-start"] = now
    lc.fake.finish(job)
    lc.fake.purge()
    code, _ = reconcile(lc, capsys)
    assert code == 75  # the young one waits out its 15 minutes
    assert resolved(lc) == {marked: job, old: None}
    assert not lc.orders(LEASE).exists()


def test_a_lease_links_own_intent_reconciles_by_its_job_name_and_its_steps_follow(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lc = lease_campaign(tmp_path, "a")
    script = f"#!/bin/sh\n#SBATCH --job-name=servatus-{LEASE}\n#SBATCH --ntasks=2\n"
    job = int(lc.fake.run([f"{lc.target.slurm_bin}/sbatch"], stdin=script.encode()).stdout)
    lc.jobs[LEASE] = job
    with store.writing(lc.campaign.path) as writer:
        key = writer.target(target_identity(lc.target))
        writer.add(records.Intent(LEASE, (), "d", time.time(), key, LIMIT, None, TERMS))
    orders = lc.orders(LEASE)
    orders.mkdir(mode=0o700)
    orders.chmod(0o700)
    step = ident(1)
    lc.step(step, "a", LEASE, receipt=False)
    lc.take(LEASE, step)
    code, resolutions = reconcile(lc, capsys)
    assert code == 0
    assert [(r["allocation_id"], r["outcome"], r["job"]) for r in resolutions] == [
        (LEASE, "accepted", job),
        (step, "accepted", job),
    ]
