"""``servatus report`` against FakeScheduler: what it reads, writes and refuses."""

from __future__ import annotations

from pathlib import Path

from servatus import Campaign, Task, store
from servatus.config import Profile
from servatus.testing import FakeScheduler


def tasks(n: int) -> list[Task]:
    return [Task(f"t{i}", ["/usr/bin/python3", "train.py"], stdin=b"%d" % i) for i in range(n)]


def test_submit_records_each_tasks_resources_with_its_intent(
    tmp_path: Path, profile: Profile
) -> None:
    fake = FakeScheduler()
    campaign = Campaign.ensure(tmp_path / "state", tasks(3), connect=fake)
    campaign.submit(campaign.plan(profile))
    asked = store.TaskResources(1, 500, 0)
    assert [intent.resources for intent in store.read(campaign.path).intents] == [asked, asked]
