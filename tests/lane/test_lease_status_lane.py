"""A campaign holding a lease and its steps, as the journal records them (ADR 0009), read by
``status`` and ``logs`` through FakeScheduler's ``squeue``, ``find`` and ``tail``. The lease and
step records are written here directly: submitting a lease is another piece's work."""

from __future__ import annotations

from pathlib import Path

from servatus import Campaign
from servatus.config import target_identity
from servatus.engine.status_values import Execution, StopReason
from servatus.evidence import MarkerKind
from servatus.journal import records, store
from servatus.tasks import Task
from servatus.testing import FakeScheduler
from servatus_slurm.markers import marker_name, step_log_name
from testkit import make_target

LEASE = "1e1e1e1e1e1e1e1e1e1e1e1e"
STEP = "5e5e5e5e5e5e5e5e5e5e5e5e"
TERMS = records.LeaseTerms("l40s", 2, 1, 1024, 0, 60)


def leased(tmp_path: Path, fake: FakeScheduler) -> tuple[Campaign, int]:
    """A campaign with one accepted lease link whose job the fake lists, and one step in it."""
    campaign = Campaign.create(tmp_path / "s", [Task("a", ["x"]), Task("b", ["y"])], connect=fake)
    target = make_target(tmp_path)
    job = 41234
    with store.writing(campaign.path) as writer:
        key = writer.target(target_identity(target))
        writer.commit(records.Intent(LEASE, (), "d", 2.0, key, 3600, lease=TERMS))
        writer.commit(records.Receipt(LEASE, job))
        writer.commit(records.Intent(STEP, ("a",), "e", 3.0, key, 3600, within=LEASE))
        writer.commit(records.Receipt(STEP, job))
    return campaign, job


def test_logs_of_a_step_reads_its_own_step_log_in_its_lease(tmp_path: Path) -> None:
    """``servatus-<step id>-<lease job>.0.out`` (ADR 0009), not the lease's log."""
    fake = FakeScheduler()
    campaign, job = leased(tmp_path, fake)
    fake.logs[step_log_name(STEP, job, 0)] = b"the step's own output\n"
    fake.logs[f"servatus-{LEASE}-{job}.out"] = b"the lease's log\n"
    assert campaign.logs(tasks=["a"]) == b"the step's own output\n"
    assert campaign.logs(allocations=[LEASE]) == b"the lease's log\n"


def listings(fake: FakeScheduler) -> list[tuple[str, ...]]:
    return [call for call in fake.calls if "find" in call and "-printf" not in call[:2]]


def test_a_withdrawn_step_reads_never_started_settles_and_its_lease_is_no_longer_listed(
    tmp_path: Path,
) -> None:
    """The listing names the lease's orders directory while its step is unsettled; the claim
    (empty: withdrawn) decides at once, the step settles, and is read from the record after."""
    fake = FakeScheduler()
    campaign, job = leased(tmp_path, fake)
    orders = f"{make_target(tmp_path).log_root}/servatus-{LEASE}.orders"
    fake.markers[f"servatus-{STEP}.{job}.claim"] = 5.0  # the fake lists every marker with size 0
    a = campaign.status().tasks[0]
    assert (a.execution, a.detail, a.allocation_id) == (
        Execution.STOPPED, StopReason.NEVER_STARTED, STEP,
    )  # fmt: skip
    assert orders in listings(fake)[-1]
    campaign.refresh()
    settled = {s.allocation_id: s.claim for s in campaign.state.settlements}
    assert settled == {STEP: False, LEASE: None}  # the lease never started: final too
    del fake.markers[f"servatus-{STEP}.{job}.claim"]
    before = len(listings(fake))
    again = campaign.status().tasks[0]
    assert (again.execution, again.detail) == (Execution.STOPPED, StopReason.NEVER_STARTED)
    assert len(listings(fake)) == before  # everything settled: no marker listing at all


def test_a_step_that_ran_reads_by_its_own_markers_once_the_lease_is_gone(tmp_path: Path) -> None:
    fake = FakeScheduler()
    campaign, job = leased(tmp_path, fake)
    fake.markers[marker_name(LEASE, job, MarkerKind.START)] = 10.0
    fake.markers[marker_name(STEP, job, MarkerKind.STEP_START)] = 100.0
    fake.markers[marker_name(STEP, job, MarkerKind.END, slot=0, exit_code=0)] = 160.0
    a = campaign.status().tasks[0]
    assert (a.execution, a.run_time, a.allocation_id) == (Execution.SUCCEEDED, (60, True), STEP)
    campaign.refresh()
    assert {s.allocation_id for s in campaign.state.settlements} == {STEP}
