"""A campaign on a filesystem that is really full: a real 4 MiB tmpfs, filled with a real file.

Nothing already recorded may be lost, a record is either durable or reported as not written,
and a command says so in one line with exit 75 (exit 3 when Slurm already took a job).
"""

from __future__ import annotations

import errno
import os
import time
from pathlib import Path

import pytest
from store_helpers import make_tasks, run_servatus, write_jsonl

from servatus import Campaign
from servatus.campaign import append_state, create_state
from servatus.cli import main
from servatus.config import Profile
from servatus.engine.status_values import Execution
from servatus.errors import SubmissionInterrupted, Unavailable
from servatus.journal import codec, records, store
from servatus.operations.reconcile import RECONCILE_AFTER
from servatus.tasks import Task
from servatus.testing import FakeScheduler
from servatus.transport import CommandResult
from testkit import CPU_PROFILE


def fill(filesystem: Path, *, leave: int = 0) -> Path:
    """Write a filler file until the filesystem is full, then give back ``leave`` bytes."""
    filler = filesystem / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        chunk = b"\0" * 65536
        while True:
            try:
                os.write(fd, chunk)
            except OSError as exc:
                assert exc.errno == errno.ENOSPC
                break
    finally:
        os.close(fd)
    if leave:
        os.truncate(filler, max(0, filler.stat().st_size - leave))
    return filler


def test_a_full_disk_refuses_an_append_in_one_line_and_keeps_the_journal(
    small_tmpfs: Path, tmp_path: Path
) -> None:
    state = small_tmpfs / "state"
    first = write_jsonl(tmp_path / "first.jsonl", make_tasks("t", 3))
    assert run_servatus("ensure", str(state), str(first)).returncode == 0
    before = (state / "journal").read_bytes()
    more = write_jsonl(tmp_path / "more.jsonl", make_tasks("t", 400))
    filler = fill(small_tmpfs)

    refused = run_servatus("ensure", str(state), str(more))
    assert refused.returncode == 75, refused.stderr
    assert refused.stderr.count("\n") == 1 and "No space left on device" in refused.stderr
    assert "Traceback" not in refused.stderr and refused.stdout == ""
    assert (state / "journal").read_bytes() == before
    assert sorted(p.name for p in state.iterdir()) == ["journal", "lock"]
    assert [task.key for task in Campaign.open(state).tasks] == ["t-0", "t-1", "t-2"]

    filler.unlink()
    done = run_servatus("ensure", str(state), str(more))
    assert done.returncode == 0, done.stderr
    assert len(Campaign.open(state).tasks) == 400


def test_compaction_on_a_full_disk_keeps_the_durable_record(
    small_tmpfs: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The record that makes a compaction due is already synced: a compaction that finds no room
    must neither report that record as failed nor stop the writer; it is retried later."""
    state = small_tmpfs / "state"
    create_state(state, make_tasks("t", 300), appendable=True)
    monkeypatch.setattr(store, "COMPACT_RECORDS", 2)
    filler = fill(small_tmpfs, leave=3 * PAGE)  # room for appends, not for a 20 KB snapshot
    with store.writing(state) as writer:
        for index in range(40):
            writer.add(records.Appended((Task(f"u-{index}", ["/bin/true"]),)))
    assert sorted(p.name for p in state.iterdir()) == ["journal", "lock"]
    assert record_count(state) == 41  # nothing compacted, nothing lost
    assert len(Campaign.open(state).tasks) == 340

    filler.unlink()
    append_state(state, [Task("v", ["/bin/true"])])
    assert record_count(state) == 1  # the compaction that was due, once there is room
    assert len(Campaign.open(state).tasks) == 341


PAGE = 4096
"""tmpfs allocates whole pages: an append that fits in the last page's slack needs no space."""


def record_count(state: Path) -> int:
    return len(codec.scan((state / "journal").read_bytes(), "journal").payloads)


class _Scheduler(FakeScheduler):
    """Notes the journal's size when Slurm takes the first job, and may fill the campaign's
    filesystem meanwhile."""

    journal: Path | None = None
    size_at_sbatch: int | None = None
    fills: Path | None = None

    def _cmd_sbatch(self, argv: tuple[str, ...], stdin: bytes) -> CommandResult:
        answer = super()._cmd_sbatch(argv, stdin)
        taken = not {"--version", "--test-only"} & set(argv)
        if taken and self.size_at_sbatch is None and self.journal is not None:
            self.size_at_sbatch = self.journal.stat().st_size
            if self.fills is not None:
                fill(self.fills)
        return answer


def _campaign(state: Path, fake: _Scheduler, pad: int = 0) -> tuple[Campaign, Profile]:
    """Four Tasks; ``pad`` bytes more in the first one's args grow the first record by as much."""
    config = state.parent / "SERVATUS.toml"
    config.write_text(CPU_PROFILE)
    tasks = [Task(f"t{i}", ["/usr/bin/python3", "train.py"]) for i in range(4)]
    tasks[0] = Task("t0", ["/usr/bin/python3", "train.py", "x" * pad])
    fake.journal = state / "journal"
    return Campaign.ensure(state, tasks, connect=fake), Profile.load(config)


def test_no_room_for_the_first_submission_record_sends_nothing(
    small_tmpfs: Path, tmp_path: Path
) -> None:
    probe = _campaign(tmp_path / "probe", _Scheduler())[0].path / "journal"
    state = small_tmpfs / "state"
    fake = _Scheduler()
    # A wall-clock time in the first record varies its length by a byte or two.
    campaign, profile = _campaign(state, fake, pad=(-16 - probe.stat().st_size) % PAGE)
    assert -(state / "journal").stat().st_size % PAGE < 32  # too little slack for any record
    plan = campaign.plan(profile)
    before = (state / "journal").read_bytes()
    filler = fill(small_tmpfs)
    with pytest.raises(Unavailable, match="No space left on device") as caught:
        campaign.submit(plan)
    assert "0 of 2 allocations were accepted" in str(caught.value)
    assert fake.count("sbatch") == 0
    assert (state / "journal").read_bytes() == before
    filler.unlink()
    assert [receipt.job for receipt in campaign.submit(plan).receipts] == [1000, 1001]


def test_no_room_for_a_receipt_is_an_interruption_naming_the_job(
    small_tmpfs: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    probe = _Scheduler()
    campaign, profile = _campaign(tmp_path / "probe", probe)
    campaign.submit(campaign.plan(profile))
    assert probe.size_at_sbatch is not None
    # Pad so that the intent ends 40 bytes short of a page: the receipt (over 60) needs a new one.
    fake = _Scheduler()
    campaign, profile = _campaign(
        small_tmpfs / "state", fake, pad=(PAGE - 40 - probe.size_at_sbatch) % PAGE
    )
    plan = campaign.plan(profile)
    fake.fills = small_tmpfs
    with pytest.raises(SubmissionInterrupted) as caught:
        campaign.submit(plan)
    assert fake.size_at_sbatch is not None and -fake.size_at_sbatch % PAGE < 60
    message = str(caught.value)
    assert "accepted as job 1000" in message and "No space left on device" in message
    assert "reconcile" in message
    assert fake.count("sbatch") == 1
    (small_tmpfs / "filler").unlink()

    report = campaign.status()  # the second allocation was in the same batch, never answered
    assert {task.key: task.execution for task in report.tasks} == dict.fromkeys(
        ("t0", "t1", "t2", "t3"), Execution.UNRESOLVED
    )
    assert main(["reconcile", str(small_tmpfs / "state")], connect=fake) == 75
    assert "accepted as job 1000" in capsys.readouterr().out
    later = time.time() + RECONCILE_AFTER + 1
    monkeypatch.setattr(time, "time", lambda: later)
    assert main(["reconcile", str(small_tmpfs / "state")], connect=fake) == 0
    assert "recorded as not submitted" in capsys.readouterr().out
    again = campaign.plan(profile)
    assert again.decision.selected == ("t2", "t3")
    campaign.submit(again)
    assert [job.job for job in fake.jobs] == [1000, 1001]  # t0 and t1 were never sent twice
