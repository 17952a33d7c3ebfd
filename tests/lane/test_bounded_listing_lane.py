"""The marker listing asks only for what can still change an answer: by name for the campaign's
unsettled allocations, by the file server's mtime past a recorded horizon beyond MAX_NAMED,
nothing once everything settled; two campaigns sharing a log_root each read only their own."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from servatus import Campaign, Task
from servatus.config import Profile
from servatus.engine.settlement import MARGIN
from servatus.engine.status_values import Execution
from servatus.journal import store
from servatus.testing import FakeScheduler
from servatus_slurm import evidence


def tasks(prefix: str, n: int) -> list[Task]:
    return [Task(f"{prefix}{i}", ["/usr/bin/python3", "train.py"]) for i in range(n)]


def listings(fake: FakeScheduler) -> list[tuple[str, ...]]:
    return [call for call in fake.calls if "find" in call]


def named(call: tuple[str, ...]) -> set[str]:
    """The allocation ids a listing names (``servatus-<id>.*``)."""
    return {word[9:33] for i, word in enumerate(call) if i and call[i - 1] == "-name"} - {"?" * 24}


def listed_names(fake: FakeScheduler, call: tuple[str, ...]) -> list[str]:
    out = fake.run(call).stdout.decode().splitlines()
    return [line.split(" ")[0] for line in out[1:]]  # the first row is the clock's


def test_only_unsettled_allocations_are_listed_and_none_once_all_settled(
    tmp_path: Path, profile: Profile
) -> None:
    fake = FakeScheduler()
    campaign = Campaign.ensure(tmp_path / "state", tasks("t", 4), connect=fake)
    first = campaign.submit(campaign.plan(profile)).receipts
    fake.finish(1000, 0, 0)
    fake.finish(1001, 0, 3)
    fake.purge()
    fake.calls.clear()
    campaign.status()  # settles both
    assert [named(call) for call in listings(fake)] == [{r.allocation_id for r in first}]
    fake.calls.clear()
    report = campaign.status()
    assert listings(fake) == [] and fake.count("squeue") == 1  # nothing left to list
    assert [t.execution for t in report.tasks].count(Execution.SUCCEEDED) == 3
    campaign.append(tasks("u", 1))
    (later,) = campaign.submit(campaign.plan(profile, only=["u0"])).receipts
    fake.start()
    fake.calls.clear()
    assert campaign.status().tasks[-1].execution is Execution.RUNNING
    (call,) = listings(fake)
    assert named(call) == {later.allocation_id}
    assert all(
        name.startswith(f"servatus-{later.allocation_id}.") for name in listed_names(fake, call)
    )


def test_two_campaigns_sharing_a_log_root_each_list_only_their_own(
    tmp_path: Path, profile: Profile
) -> None:
    fake = FakeScheduler()  # one scheduler, one log_root: both campaigns' markers in it
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    one = Campaign.ensure(tmp_path / "a" / "state", tasks("a", 2), connect=fake)
    two = Campaign.ensure(tmp_path / "b" / "state", tasks("b", 2), connect=fake)
    (mine,) = one.submit(one.plan(profile)).receipts
    (theirs,) = two.submit(two.plan(profile)).receipts
    fake.finish(mine.job, 0, 0)
    fake.finish(theirs.job, 3, 3)
    fake.purge()
    for campaign, receipt, want in (
        (one, mine, Execution.SUCCEEDED),
        (two, theirs, Execution.FAILED),
    ):
        fake.calls.clear()
        assert {t.execution for t in campaign.status().tasks} == {want}
        (call,) = listings(fake)
        assert named(call) == {receipt.allocation_id}
        names = listed_names(fake, call)
        assert len(names) == 3 and all(receipt.allocation_id in name for name in names)


def test_beyond_the_named_bound_a_horizon_bounds_the_listing_by_mtime(
    tmp_path: Path, profile: Profile, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(evidence, "MAX_NAMED", 1)
    clock = [1000.0]
    fake = FakeScheduler(clock=lambda: clock[0])
    campaign = Campaign.ensure(tmp_path / "state", tasks("t", 6), connect=fake)
    wave = campaign.submit(campaign.plan(profile, only=["t0", "t1", "t2", "t3"])).receipts
    fake.finish(wave[0].job, 0, 0)
    fake.start(wave[1].job)
    fake.purge()
    clock[0] = 10_000.0
    fake.calls.clear()
    campaign.status()  # two unsettled, more than MAX_NAMED, and no horizon: everything
    (call,) = listings(fake)
    assert named(call) == set() and "-newermt" not in call
    state = store.read(campaign.path)
    assert [s.allocation_id for s in state.settlements] == [wave[0].allocation_id]
    assert [(h.intents, h.at) for h in state.horizons] == [(2, 10_000.0)]
    clock[0] = 20_000.0
    fresh = campaign.submit(campaign.plan(profile, only=["t4", "t5"])).receipts
    fake.start()
    fake.calls.clear()
    campaign.status()  # wave[1] is older than the horizon: everything again
    (call,) = listings(fake)
    assert "-newermt" not in call
    fake.finish(wave[1].job, 0, 0)
    fake.purge()
    clock[0] = 30_000.0
    campaign.status()  # wave[1] settles; only the fresh allocation is left, named
    fake.finish(fresh[0].job, 0, 0)
    campaign.append(tasks("u", 2))
    more = campaign.submit(campaign.plan(profile, only=["u0", "u1"])).receipts
    fake.start()
    fake.calls.clear()
    report = campaign.status()  # fresh (listed) and more: two, past the horizon before them
    (call,) = listings(fake)
    since = call[call.index("-newermt") + 1]
    assert since == f"@{math.floor(10_000.0 - MARGIN)}"
    ids = {name[9:33] for name in listed_names(fake, call)}
    # Every wanted marker, and the recent ones of a settled allocation (ignored); never the
    # first allocation's, written before the horizon less the margin.
    assert ids - {wave[1].allocation_id} == {fresh[0].allocation_id, more[0].allocation_id}
    assert [t.execution for t in report.tasks[-2:]] == [Execution.RUNNING, Execution.RUNNING]


def test_a_plan_that_settles_records_a_horizon_before_later_intents(
    tmp_path: Path, profile: Profile
) -> None:
    clock = [5000.0]
    fake = FakeScheduler(clock=lambda: clock[0])
    campaign = Campaign.ensure(tmp_path / "state", tasks("t", 2), connect=fake)
    campaign.submit(campaign.plan(profile))
    fake.finish(1000, 0, 3)
    fake.purge()
    retry = campaign.plan(profile, retry_failed=True)  # settles, with the listing's time
    assert [(h.intents, h.at) for h in store.read(campaign.path).horizons] == [(1, 5000.0)]
    clock[0] = 7000.0
    campaign.submit(retry)  # all settled: its rebuilt plan lists no marker, records nothing
    state = store.read(campaign.path)
    assert [(h.intents, h.at) for h in state.horizons] == [(1, 5000.0)]  # before the retry
    assert len(state.intents) == 2
