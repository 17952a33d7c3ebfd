"""The order of effects ``submit`` promises: each intent written and synced before its ``sbatch``,
the receipt written and synced after it answers.

No crash test can show a missing sync of the intent (a SIGKILL loses nothing the page cache
holds), so the calls themselves are counted: the store's journal writes and syncs, and the fake
Slurm's ``sbatch`` calls, in one log.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from servatus import Campaign, Task
from servatus.config import Profile
from servatus.errors import SubmissionInterrupted
from servatus.evidence import MAX_JOB
from servatus.journal import store
from servatus.testing import FakeScheduler

_TAG = re.compile(rb'"type":"(\w+)"')


def test_each_intent_is_synced_before_its_sbatch_and_the_receipt_after(
    tmp_path: Path, profile: Profile, monkeypatch: pytest.MonkeyPatch
) -> None:
    tasks = [Task(key, ["/usr/bin/python3", "train.py", key]) for key in "abc"]
    fake = FakeScheduler()
    campaign = Campaign.ensure(tmp_path / "state", tasks, connect=fake)
    plan = campaign.plan(profile)
    log: list[tuple[object, ...]] = []
    write_all, sync, run = store.write_all, store.sync, fake.run

    def counted_write(fd: int, data: bytes, offset: int) -> None:
        found = _TAG.search(data)
        log.append(("write", found[1].decode() if found else "?", fd))
        write_all(fd, data, offset)

    def counted_sync(fd: int) -> None:
        log.append(("sync", fd))
        sync(fd)

    def counted_run(argv: Sequence[str], **kwargs: Any) -> Any:
        if argv[0].endswith("/sbatch") and "--parsable" in argv:
            log.append(("sbatch",))
        return run(argv, **kwargs)

    monkeypatch.setattr(store, "write_all", counted_write)
    monkeypatch.setattr(store, "sync", counted_sync)
    monkeypatch.setattr(fake, "run", counted_run)
    receipts = campaign.submit(plan).receipts

    calls = [index for index, event in enumerate(log) if event == ("sbatch",)]
    assert len(calls) == len(receipts) == 2
    for at in calls:
        assert synced_write(log[at - 2 : at]) == "intent", log
        assert synced_write(log[at + 1 : at + 3]) == "receipt", log


def synced_write(events: list[tuple[object, ...]]) -> object:
    """The record kind when ``events`` are one journal write and then a sync of that file."""
    if len(events) == 2 and events[0][0] == "write" and events[1] == ("sync", events[0][-1]):
        return events[0][1]
    return None


def test_a_job_number_beyond_slurms_is_no_receipt(tmp_path: Path, profile: Profile) -> None:
    """Slurm's job numbers are 32-bit, and the journal refuses a receipt beyond them on every
    read: a larger number from sbatch is an answer without a job number (exit 3, the intent left
    for reconcile), never a receipt that would lock the campaign as CorruptState."""
    fake = FakeScheduler(first_job=MAX_JOB + 1)
    campaign = Campaign.ensure(tmp_path / "state", [Task("a", ["/usr/bin/true"])], connect=fake)
    with pytest.raises(SubmissionInterrupted, match="with no job number"):
        campaign.submit(campaign.plan(profile))
    recorded = store.read(tmp_path / "state")
    assert (len(recorded.intents), recorded.receipts) == (1, ())
