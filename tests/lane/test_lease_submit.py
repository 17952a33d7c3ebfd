"""Submitting a lease (``plan --hold`` then ``submit``/``validate``) through the CLI against
FakeScheduler (ADR 0009): each link's intent with its lease terms, its orders directory made
between the intent and the ``sbatch``, ``afterany`` between links, and the refusals."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_cli_budget import L40S, create

from servatus.journal import store
from servatus.journal.records import ChainLink, LeaseTerms
from servatus.testing import FakeScheduler
from testkit import run

ORDERS = "/scratch/alice/train/logs/servatus-{}.orders"


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "SERVATUS.toml").write_text(L40S)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def held(project: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> tuple[str, list[str]]:
    state = create(project, "train-a")
    args = ["plan", state, "--hold", "2", *extra, "--output", "lease.json"]
    assert run(args, FakeScheduler(), capsys)[0] == 0
    document = json.loads((project / "lease.json").read_text())
    return state, [a["allocation_id"] for a in document["allocations"]]


def test_submit_of_a_lease_records_its_terms_then_makes_its_directory_then_sbatches(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state, (lease,) = held(project, capsys)
    fake = FakeScheduler()
    code, out, err = run(["submit", state, "lease.json"], fake, capsys)
    assert (code, err) == (0, "")
    assert out == "submitted lease " + lease + ": job 1000\n"
    names = [call[3] if call[1] == "-c" else call[0].rsplit("/", 1)[1] for call in fake.calls]
    assert names == ["sbatch", "mkdir", "sbatch"]  # the ping, the directory, the lease
    assert fake.calls[1][4] == ORDERS.format(lease)
    assert ORDERS.format(lease) in fake.orders
    (job,) = fake.jobs
    assert (job.slots, job.lease is not None, job.after) == (2, True, None)
    (intent,) = store.read(state).intents
    assert intent.task_keys == () and intent.chain is None
    assert intent.lease == LeaseTerms("l40s", 2, 32, 64000, 1, 600)
    assert intent.time_limit == 16 * 3600
    assert [r.job for r in store.read(state).receipts] == [1000]


def test_lease_links_wait_for_each_other_with_afterany(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state, (first, second) = held(project, capsys, "--max-links", "2")
    fake = FakeScheduler()
    code, out, _ = run(["submit", state, "lease.json"], fake, capsys)
    assert code == 0
    assert out.splitlines() == [
        f"submitted lease {first}: job 1000",
        f"submitted lease {second}: job 1001",
    ]
    sbatches = [call for call in fake.calls if call[0].endswith("sbatch") and "--parsable" in call]
    assert [c[2:] for c in sbatches] == [(), ("--dependency=afterany:1000",)]
    assert set(fake.orders) == {ORDERS.format(first), ORDERS.format(second)}
    intents = store.read(state).intents
    assert [i.chain for i in intents] == [
        ChainLink(1, 2, "", (), 0),
        ChainLink(2, 2, first, (), 0),
    ]
    assert all(i.lease is not None and i.lease.slots == 2 for i in intents)
    fake.start()
    assert [j.state for j in fake.jobs] == ["RUNNING", "PENDING"]
    fake.time_out(1000)  # a lease that reached its limit: the next link starts all the same
    fake.start()
    assert [j.state for j in fake.jobs] == ["TIMEOUT", "RUNNING"]


def test_a_foreign_orders_directory_refuses_the_lease_before_its_sbatch(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state, (lease,) = held(project, capsys)
    fake = FakeScheduler()
    fake.foreign_directories.add(ORDERS.format(lease))
    code, out, err = run(["submit", state, "lease.json"], fake, capsys)
    assert (code, out) == (1, "")
    assert f"lease {lease} was not sent" in err and "owner-only" in err
    assert fake.count("sbatch") == 0 and fake.count("mkdir") == 1
    assert [r.job for r in store.read(state).resolutions] == [None]


def test_no_answer_while_making_the_directory_leaves_the_lease_unresolved(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state, (lease,) = held(project, capsys)
    fake = FakeScheduler()
    fake.unavailable("mkdir")
    code, _, err = run(["submit", state, "lease.json"], fake, capsys)
    assert code == 3 and "UNRESOLVED" in err and lease in err
    assert fake.count("sbatch") == 0
    recorded = store.read(state)
    assert [i.allocation_id for i in recorded.intents] == [lease]
    assert recorded.receipts == () and recorded.resolutions == ()


def test_a_refused_lease_sbatch_is_recorded_as_not_submitted(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state, (first, _) = held(project, capsys, "--max-links", "2")
    fake = FakeScheduler()
    fake.fail("sbatch", stderr="sbatch: error: Invalid account\n")
    code, _, err = run(["submit", state, "lease.json"], fake, capsys)
    assert code == 1 and "Invalid account" in err and "none of its later links" in err
    assert [(r.allocation_id, r.job) for r in store.read(state).resolutions] == [(first, None)]


def test_validate_test_submits_the_lease_script(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state, _ = held(project, capsys)
    fake = FakeScheduler()
    code, out, err = run(["validate", state, "lease.json"], fake, capsys)
    assert (code, err) == (0, "")
    assert out.startswith("2 Tasks per allocation for 16:00:00: accepted")
    (checked,) = [call for call in fake.calls if "--test-only" in call]
    assert checked == ("/usr/bin/sbatch", "--test-only")
    assert fake.jobs == [] and fake.orders == {}
    assert store.read(state).intents == ()
