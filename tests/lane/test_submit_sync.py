"""The order of effects ``submit`` promises: each intent written and synced before its ``sbatch``
(a batch's intents in one write, ADR 0014), the receipt written and synced as soon as its answer
arrives, before the next ``sbatch``.

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

from servatus import Campaign, Task, batch
from servatus.config import Profile
from servatus.errors import SubmissionInterrupted
from servatus.evidence import MAX_JOB
from servatus.journal import store
from servatus.testing import FakeScheduler

_TAG = re.compile(rb'"type":"(\w+)"')
_ID = re.compile(rb"[0-9a-f]{24}")
_NAME = re.compile(rb"--job-name=servatus-([0-9a-f]{24})")


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
        kinds = {kind.decode() for kind in _TAG.findall(data)}
        log.append(("write", "/".join(sorted(kinds)), fd, set(_ID.findall(data))))
        write_all(fd, data, offset)

    def counted_sync(fd: int) -> None:
        log.append(("sync", fd))
        sync(fd)

    def counted_run(argv: Sequence[str], **kwargs: Any) -> Any:
        if argv[0].endswith("/sbatch") and "--parsable" in argv:
            name = _NAME.search(kwargs["stdin"])
            log.append(("sbatch", name[1] if name else None))
        return run(argv, **kwargs)

    monkeypatch.setattr(store, "write_all", counted_write)
    monkeypatch.setattr(store, "sync", counted_sync)
    monkeypatch.setattr(fake, "run", counted_run)
    receipts = campaign.submit(plan).receipts

    calls = [index for index, event in enumerate(log) if event[0] == "sbatch"]
    assert len(calls) == len(receipts) == 2
    for at in calls:
        allocation = log[at][1]
        assert allocation is not None, log
        intents = [
            start
            for start in range(at - 1)
            if synced_write(log[start : start + 2]) == ("intent", True)
            and allocation in log[start][3]
        ]
        assert intents, log
        assert synced_write(log[at + 1 : at + 3]) == ("receipt", True), log
        assert allocation in log[at + 1][3], log


def synced_write(events: list[tuple[Any, ...]]) -> tuple[str, bool] | None:
    """The record kind when ``events`` are one journal write of one kind and then a sync of
    that file, with True."""
    if len(events) == 2 and events[0][0] == "write" and events[1] == ("sync", events[0][2]):
        return events[0][1], True
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


class _Budgeted(FakeScheduler):
    """Each batch program's time budget runs out after its first ``sbatch``, as a slow Slurm
    would make it (``@stop 1.``)."""

    def stream(self, argv: Sequence[str], **options: Any) -> Any:
        if argv[-1] != batch.LABEL:
            return super().stream(argv, **options)
        sbatch, items = batch.read_program(options.pop("stdin"))
        shown = super().stream(argv, stdin=batch.program(sbatch, items[:1]), **options)
        if len(items) > 1:
            options["on_stdout"](batch.stop_line(1))
        return shown


def test_a_batch_its_budget_ended_goes_on_in_the_next_without_a_second_intent(
    tmp_path: Path, profile: Profile
) -> None:
    tasks = [Task(key, ["/usr/bin/true"]) for key in "abc"]
    fake = _Budgeted()
    campaign = Campaign.ensure(tmp_path / "state", tasks, connect=fake)
    plan = campaign.plan(profile, tasks_per_allocation=1)
    receipts = campaign.submit(plan).receipts
    assert [r.job for r in receipts] == [1000, 1001, 1002]
    state = store.read(tmp_path / "state")
    assert [i.allocation_id for i in state.intents] == [a.allocation_id for a in plan.allocations]
    assert fake.count("sbatch") == 3 and state.resolutions == ()
