"""``plan --hold N [--max-links K]`` through the CLI against FakeScheduler (ADR 0009): the spec's
``lease:`` lines, the saved plan/4 document and what reads it back, capacity and ceilings, and
every combination the spec forbids. Submitting one is in ``test_lease_submit.py``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_cli_budget import L40S, create

from servatus import Campaign, Task
from servatus.engine.plan_document import _Canonical, plan_from_document
from servatus.errors import StalePlan
from servatus.testing import FakeScheduler
from testkit import run


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "SERVATUS.toml").write_text(L40S)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_the_spec_hold_example(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    state, fake = create(project, "train-a"), FakeScheduler()
    code, out, err = run(["plan", state, "--hold", "2", "--output", "lease.json"], fake, capsys)
    assert (code, err) == (0, "")
    document = json.loads((project / "lease.json").read_text())
    (lease,) = document["allocations"]
    assert out.splitlines()[:4] == [
        "profile l40s (direct launcher)",
        "lease: 2 slots of 32 CPUs, 64000 MiB, 1 GPUs, 16:00:00",
        f"  {lease['allocation_id']}  64 CPUs, 128000 MiB, 2 GPUs, 16:00:00",
        "requests at most 1024.0 CPU-hours, 32.0 GPU-hours, 2000.0 GiB-hours",
    ]
    assert len(out.splitlines()) == 5 and "lease.json" in out.splitlines()[4]
    assert document["hold"] == {"slots": 2, "links": 1}
    assert lease["task_keys"] == [] and "link" not in lease
    assert document["decision"]["selected"] == [] and document["decision"]["held"] == []
    plan = plan_from_document(document, where="lease.json")
    assert plan.hold is not None and plan.hold.slots == 2
    assert fake.calls == []  # planning a lease asks Slurm nothing


def test_hold_with_max_links_queues_k_leases_one_after_the_other(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state, fake = create(project, "a"), FakeScheduler()
    code, out, err = run(["plan", state, "--hold", "1", "--max-links", "3", "--json"], fake, capsys)
    assert (code, err) == (0, "")
    document = json.loads(out)
    ids = [a["allocation_id"] for a in document["allocations"]]
    assert len(set(ids)) == 3
    assert [a["after"] for a in document["allocations"]] == [None, *ids[:-1]]
    assert [a["link"] for a in document["allocations"]] == [
        {"position": i, "of": 3, "time_limit": 16 * 3600} for i in range(1, 4)
    ]
    assert document["totals"]["gpu_hours"] == 48.0
    assert document["hold"] == {"slots": 1, "links": 3}
    code, out, _ = run(["plan", state, "--hold", "1", "--max-links", "3"], fake, capsys)
    assert [line.split()[-2:] for line in out.splitlines()[2:5]] == [
        ["link", f"{i}/3"] for i in range(1, 4)
    ]


def test_the_same_campaign_holds_the_same_lease_ids(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state, fake = create(project, "a"), FakeScheduler()
    first = json.loads(run(["plan", state, "--hold", "2", "--json"], fake, capsys)[1])
    again = json.loads(run(["plan", state, "--hold", "2", "--json"], fake, capsys)[1])
    other = json.loads(run(["plan", state, "--hold", "1", "--json"], fake, capsys)[1])
    assert first["allocations"] == again["allocations"] != other["allocations"]


@pytest.mark.parametrize(
    "extra",
    [
        ["--retry", "a"],
        ["--retry-failed"],
        ["--only", "a"],
        ["--tasks-per-allocation", "1"],
        ["--budget", "1-00:00:00"],
        ["--show-scripts"],
    ],
)
def test_hold_refuses_what_selects_packs_or_budgets_tasks(
    project: Path, capsys: pytest.CaptureFixture[str], extra: list[str]
) -> None:
    state = create(project, "a")
    code, out, err = run(["plan", state, "--hold", "2", *extra], FakeScheduler(), capsys)
    assert (code, out) == (2, "")
    assert f"--hold plans a lease, which takes no {extra[0]}" in err
    assert len(err.strip().splitlines()) <= 2 and "Traceback" not in err


def test_hold_beyond_capacity_or_without_signal_before_end_is_bad_input(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state = create(project, "a")
    code, out, err = run(["plan", state, "--hold", "3"], FakeScheduler(), capsys)
    assert (code, out) == (1, "")
    assert "--hold 3: profile l40s fits at most 2 slots in one allocation" in err
    code, out, err = run(
        ["plan", state, "--hold", "1", "--profile", "bare"], FakeScheduler(), capsys
    )
    assert (code, out) == (1, "")
    assert "profile bare has no signal_before_end; a lease needs it" in err
    code, out, err = run(["plan", state, "--hold", "0"], FakeScheduler(), capsys)
    assert code == 2 and "Invalid value for '--hold'" in err


def test_a_lease_plan_that_was_tampered_with_is_not_usable(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state = create(project, "a")
    args = ["plan", state, "--hold", "2", "--max-links", "2", "--output", "lease.json"]
    assert run(args, FakeScheduler(), capsys)[0] == 0
    saved = json.loads((project / "lease.json").read_text())

    def sealed(change: dict[str, object]) -> dict[str, object]:
        body = {**saved, **change}
        body["digest"] = _Canonical(body).digest()
        return body

    plan_from_document(sealed({}), where="p")
    for change, message in [
        ({"hold": {"slots": 9, "links": 2}}, "fits at most 2 slots"),
        ({"hold": {"slots": 2, "links": 3}}, "a lease of 3 links has 2 allocations"),
        ({"decision": {**saved["decision"], "selected": ["a"]}}, "a lease plans no Tasks"),
        ({"hold": None}, "an allocation of Tasks holds none"),
    ]:
        with pytest.raises(StalePlan, match=message):
            plan_from_document(sealed(change), where="p")
    without = sealed({})
    del without["hold"]
    without["digest"] = _Canonical(without).digest()
    with pytest.raises(StalePlan, match="an allocation of Tasks holds none"):
        plan_from_document(without, where="p")


def test_validate_refuses_another_campaigns_lease_plan_as_submit_does(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state = create(project, "a")
    assert (
        run(["plan", state, "--hold", "2", "--output", "lease.json"], FakeScheduler(), capsys)[0]
        == 0
    )
    other = project / "other"
    Campaign.create(other, [Task("b", ["/bin/true"])])
    for command in ("validate", "submit"):
        fake = FakeScheduler()
        code, out, err = run([command, str(other), "lease.json"], fake, capsys)
        assert (code, out) == (1, ""), command
        assert "another campaign" in err or "not of this campaign" in err, err
        assert not [call for call in fake.calls if "sbatch" in call[0]], fake.calls
