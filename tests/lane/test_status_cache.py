"""The status cache (ADR 0010) against FakeScheduler, through ``servatus.cli.main``: whatever
the campaign holds, ``status`` prints byte for byte what it prints without a cache, in every
mode and form; a cache that does not hold for the journal is never used."""

from __future__ import annotations

import json
import shutil
import time
import zlib
from collections.abc import Iterator
from pathlib import Path

import pytest
from chainkit import chain_campaign
from test_lease_steps import CONTAINED, leased, write

from servatus import Campaign, Task
from servatus.cli import status_cache, status_cache_file
from servatus.config import Profile
from servatus.journal import codec, folding, records, store
from servatus.testing import FakeScheduler
from testkit import run

MODES = [[], ["--json"], ["--offline"], ["--json", "--offline"]]


@pytest.fixture
def loads(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """Caches of any size; counts the folds of a whole journal (a status the cache answered
    folds none)."""
    monkeypatch.setattr(status_cache, "MIN_CACHED", 1)
    monkeypatch.setattr(status_cache, "MIN_SHARE", 0.0)
    counted: list[int] = []
    whole = codec.fold_journal

    def load(data: bytes, name: str) -> tuple[folding.Fold, codec.Scan]:
        counted.append(len(data))
        return whole(data, name)

    monkeypatch.setattr(codec, "fold_journal", load)
    yield counted


def cache_files(state: Path) -> list[Path]:
    return sorted(path for path in state.iterdir() if path.name.startswith(store.STATUS_CACHE))


def uncached(
    state: Path, fake: FakeScheduler, capsys: pytest.CaptureFixture[str], args: list[str]
) -> tuple[int, str, str]:
    """``status`` with no cache to read and none written: the reference."""
    name = status_cache_file.file_name(offline="--offline" in args, as_json="--json" in args)
    (state / name).unlink(missing_ok=True)
    saved = status_cache.MIN_CACHED
    status_cache.MIN_CACHED = 10**9
    try:
        return run(["status", str(state), *args], fake, capsys)
    finally:
        status_cache.MIN_CACHED = saved


def assert_cached_same(
    state: Path, fake: FakeScheduler, capsys: pytest.CaptureFixture[str], loads: list[int]
) -> None:
    """In each mode: the reference, then a status that writes the cache, then two it answers;
    all four print the same."""
    for args in MODES:
        reference = uncached(state, fake, capsys, args)
        assert run(["status", str(state), *args], fake, capsys) == reference, args
        name = status_cache_file.file_name(offline="--offline" in args, as_json="--json" in args)
        assert (state / name).exists(), (args, "no cache written")
        for _ in range(2):
            loads.clear()
            assert run(["status", str(state), *args], fake, capsys) == reference, args
            assert loads == [], (args, "the cache did not answer")


def still_fake() -> FakeScheduler:
    """A FakeScheduler whose clock (the file server's) stands still at the moment it is made.

    A running Task's run time is counted to the clock its listing reads, so on a moving clock it
    grows between two statuses (``~00:00:00``, then ``~00:00:01`` once half a second passed on
    a loaded machine): what the tests compare would differ with no cache involved."""
    now = time.time()
    return FakeScheduler(clock=lambda: now)


def tasks(n: int) -> list[Task]:
    return [Task(f"t{i}", ["/usr/bin/python3", "train.py"], stdin=b"%d" % i) for i in range(n)]


def mixed_sweep(tmp_path: Path, profile: Profile) -> tuple[Campaign, FakeScheduler]:
    """Eleven Tasks: two allocations ended and forgotten (t1 failed), one running, one queued,
    one ended but still listed, two Tasks never submitted; and a key wider than the rest that is
    still running, on a clock that stands still."""
    fake = still_fake()
    campaign = Campaign.ensure(tmp_path / "state", tasks(8), connect=fake)
    campaign.submit(campaign.plan(profile))  # 1000..1003: two Tasks each
    campaign.append([Task("a-much-longer-key-than-the-rest", ["/bin/true"])])
    campaign.submit(campaign.plan(profile, only=["a-much-longer-key-than-the-rest"]))  # 1004
    campaign.append(tasks(10)[8:])  # t8, t9: never submitted
    fake.finish(1000, 0, 3)
    fake.finish(1001, 0, 0)
    fake.start(1002)
    fake.start(1004)
    fake.purge()
    fake.finish(1002, 0, 0)  # ended, but Slurm lists it still
    return campaign, fake


@pytest.fixture
def sweep(
    tmp_path: Path, profile: Profile, capsys: pytest.CaptureFixture[str], loads: list[int]
) -> tuple[Campaign, FakeScheduler, Path]:
    """The mixed sweep, proven to answer the same from its caches in every mode and form, and
    its campaign's path."""
    campaign, fake = mixed_sweep(tmp_path, profile)
    assert_cached_same(campaign.path, fake, capsys, loads)
    return campaign, fake, campaign.path


def test_a_mixed_sweep_answers_the_same_from_the_cache(
    sweep: tuple[Campaign, FakeScheduler, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    campaign, fake, _state = sweep
    assert run(["status", str(campaign.path)], fake, capsys)[0] == 0
    [header] = [
        json.loads(path.read_bytes().split(b"\n")[1])
        for path in cache_files(campaign.path)
        if path.name.endswith("online.table")
    ]
    assert header["cached_tasks"] == 4  # t0..t3: their allocations are settled
    assert header["counts"] == {"SUCCEEDED": 3, "FAILED": 1}


def test_a_running_tasks_run_time_is_counted_when_the_cache_answers(
    sweep: tuple[Campaign, FakeScheduler, Path],
    capsys: pytest.CaptureFixture[str],
    loads: list[int],
) -> None:
    """The cache holds settled Tasks only: a minute later, the running Task's run time is a
    minute longer from the cache as without it (the cache was written at ~00:00:00)."""
    _campaign, fake, state = sweep
    later = fake.clock() + 61
    fake.clock = lambda: later
    for args in (["--json"], []):
        loads.clear()
        shown = run(["status", str(state), *args], fake, capsys)
        assert loads == [], (args, "the cache did not answer")
        assert shown == uncached(state, fake, capsys, args), args
    [row] = [line.split() for line in shown[1].splitlines() if line.startswith("a-much-longer")]
    assert row[2:5] == ["RUNNING", "-", "~00:01:01"], row


def test_what_settles_after_the_cache_is_recorded_and_shown(
    sweep: tuple[Campaign, FakeScheduler, Path],
    capsys: pytest.CaptureFixture[str],
    loads: list[int],
) -> None:
    _campaign, fake, state = sweep
    fake.purge()  # 1002 leaves the queue: the cached status settles it
    before = store.read(state)
    loads.clear()
    code, out, err = run(["status", str(state)], fake, capsys)
    assert (code, err, loads) == (0, "", [])
    after = store.read(state)
    settled = {item.allocation_id for item in after.settlements}
    assert len(after.settlements) == len(before.settlements) + 1
    assert before.intents[2].allocation_id in settled
    journal = (state / store.JOURNAL).read_bytes()
    assert len(codec.scan(journal, "journal").payloads) > 1
    # the record was appended to the journal the cache covers, not written as a compaction
    assert uncached(state, fake, capsys, []) == (code, out, err)
    assert_cached_same(state, fake, capsys, loads)


def test_a_retry_of_a_cached_task_reads_the_whole_journal(
    sweep: tuple[Campaign, FakeScheduler, Path],
    profile: Profile,
    capsys: pytest.CaptureFixture[str],
    loads: list[int],
) -> None:
    campaign, fake, state = sweep
    assert run(["status", str(state)], fake, capsys)[0] == 0  # writes the online table's cache
    campaign.submit(campaign.plan(profile, retry_failed=True))  # t1 again, in job 1005
    loads.clear()
    shown = run(["status", str(state)], fake, capsys)
    assert len(loads) == 1  # the cache holds t1 as FAILED: the whole journal is read
    reference = uncached(state, fake, capsys, [])
    assert shown == reference
    [t1] = [line.split() for line in reference[1].splitlines() if line.startswith("t1 ")]
    assert t1[2] == "QUEUED"
    assert_cached_same(state, fake, capsys, loads)


def test_a_cache_that_does_not_hold_is_never_used(
    sweep: tuple[Campaign, FakeScheduler, Path],
    capsys: pytest.CaptureFixture[str],
    loads: list[int],
) -> None:
    _campaign, fake, state = sweep
    reference = uncached(state, fake, capsys, [])
    assert run(["status", str(state)], fake, capsys) == reference  # writes the cache again
    cache = state / status_cache_file.file_name(offline=False, as_json=False)
    good = cache.read_bytes()

    def sealed(rest: bytes) -> bytes:  # a file whose checksum holds, what it says or not
        return status_cache_file.FORMAT + b"%08x\n" % zlib.crc32(rest) + rest

    rest = good.split(b"\n", 1)[1]
    damaged = [
        good[: len(good) // 2],  # torn
        good[:-1] + bytes([good[-1] ^ 1]),  # a flipped bit in a row
        good.replace(b'"counts":{', b'"counts":{"LOST":1,', 1),  # a header changed
        sealed(rest.replace(b'"rules":"', b'"rules":"0', 1)),  # other rules
        sealed(rest.replace(b'"tasks":[', b'"tasks":[1,', 1)),  # runs that do not fit
        sealed(rest.replace(b'"length":', b'"length":1', 1)),  # another prefix
        sealed(rest.replace(b'"length":', b'"extra":1,"length":', 1)),  # an unknown field
        sealed(rest.replace(b'"widths":[', b'"widths":[9,', 1)),  # widths that do not fit
        sealed(rest.replace(b'"succeeded":false', b'"succeeded":true', 1)),  # counts say no
        b"",
        b"servatus.status-cache/9 00000000\n{}\n",
    ]
    for content in damaged:
        cache.write_bytes(content)
        loads.clear()
        assert run(["status", str(state)], fake, capsys) == reference
        assert len(loads) == 1, "a cache that fails its checks answered"
        assert cache.read_bytes() != content  # written anew
    with store.writing(state) as writer:
        writer.compact()  # the journal's bytes change, its records do not
    loads.clear()
    assert run(["status", str(state)], fake, capsys) == reference
    assert len(loads) == 1


def test_slurm_unreachable_fails_as_without_a_cache_and_records_nothing(
    sweep: tuple[Campaign, FakeScheduler, Path],
    capsys: pytest.CaptureFixture[str],
    loads: list[int],
) -> None:
    _campaign, fake, state = sweep
    assert run(["status", str(state)], fake, capsys)[0] == 0
    journal = (state / store.JOURNAL).read_bytes()
    fake.unavailable("squeue")
    failed = run(["status", str(state)], fake, capsys)
    assert failed == (75, "", "servatus: Unavailable: FakeScheduler: no answer from squeue\n")
    fake.unavailable("squeue")
    assert uncached(state, fake, capsys, []) == failed
    assert (state / store.JOURNAL).read_bytes() == journal


def test_an_append_after_the_cache_reads_the_whole_journal(
    sweep: tuple[Campaign, FakeScheduler, Path],
    capsys: pytest.CaptureFixture[str],
    loads: list[int],
) -> None:
    campaign, fake, state = sweep
    campaign.append([Task("zz-new", ["/bin/true"])])
    loads.clear()
    assert run(["status", str(state)], fake, capsys) == uncached(state, fake, capsys, [])
    assert len(loads) == 2
    assert_cached_same(state, fake, capsys, loads)


def test_chains_answer_the_same_from_the_cache(
    tmp_path: Path, profile: Profile, capsys: pytest.CaptureFixture[str], loads: list[int]
) -> None:
    fake = still_fake()  # the second chain's second link runs
    chains = [(("c0", "c1"), 3, (3, 2)), (("c2",), 3, (3,)), (("c3",), 2, (2,))]
    campaign, jobs = chain_campaign(tmp_path / "state", fake, profile, chains, budget=7200)
    for job in jobs[0]:  # the first chain ran to its end: c1 handed on once, c0 twice
        fake.start(job)
        fake.finish(job, 75, 75 if job == jobs[0][0] else 0)
    fake.start(jobs[1][0])
    fake.finish(jobs[1][0], 75)  # the second chain runs its second link
    fake.start(jobs[1][1])
    for job in jobs[2]:
        fake.start(job)
        fake.finish(job, 75 if job == jobs[2][0] else 0)
    fake.purge()
    assert_cached_same(campaign.path, fake, capsys, loads)


def test_leases_answer_the_same_from_the_cache(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    loads: list[int],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    (tmp_path / "SERVATUS.toml").write_text(CONTAINED)
    monkeypatch.chdir(tmp_path)
    fake = FakeScheduler()
    state, (first,) = leased(tmp_path, capsys, fake)
    fake.start()
    tasks_file = write(tmp_path / "t.jsonl", "train-a", "eval-1", "eval-2")
    assert run(["start", state, tasks_file, "--lease", first], fake, capsys)[0] == 0
    steps = [i.allocation_id for i in store.read(state).intents if i.within == first]
    fake.finish_step(steps[0], 0)
    fake.finish_step(steps[1], 1)
    [job] = [job.job for job in fake.jobs if job.allocation_id == first]
    fake.time_out(job)  # a lease holds its slots until its time limit
    fake.purge()
    assert run(["plan", state, "--hold", "1", "--output", "second.json"], fake, capsys)[0] == 0
    assert run(["submit", state, "second.json"], fake, capsys)[0] == 0  # a lease still queued
    assert_cached_same(Path(state), fake, capsys, loads)


def test_a_cache_that_many_settled_since_is_written_again(
    sweep: tuple[Campaign, FakeScheduler, Path],
    capsys: pytest.CaptureFixture[str],
    loads: list[int],
) -> None:
    _campaign, fake, state = sweep
    assert run(["status", str(state)], fake, capsys)[0] == 0  # writes the online table's cache
    fake.finish(1003, 0, 0)
    fake.finish(1004, 0)
    fake.purge()  # three allocations end: more than a quarter of the four Tasks cached
    loads.clear()
    shown = run(["status", str(state)], fake, capsys)
    assert loads == [] and len(store.read(state).settlements) == 5  # recorded from the cache
    loads.clear()
    assert run(["status", str(state)], fake, capsys) == shown
    assert len(loads) == 1  # too many settled since: the whole journal, and a new cache
    loads.clear()
    assert run(["status", str(state)], fake, capsys) == shown
    assert loads == []
    assert uncached(state, fake, capsys, []) == shown


def test_a_cache_is_read_only_in_the_mode_and_form_it_was_made_for(
    sweep: tuple[Campaign, FakeScheduler, Path],
    capsys: pytest.CaptureFixture[str],
    loads: list[int],
) -> None:
    _campaign, fake, state = sweep
    online = state / status_cache_file.file_name(offline=False, as_json=False)
    assert run(["status", str(state)], fake, capsys)[0] == 0
    for args in MODES[1:]:
        reference = uncached(state, fake, capsys, args)
        name = status_cache_file.file_name(offline="--offline" in args, as_json="--json" in args)
        shutil.copy(online, state / name)  # the online table's cache, under another's name
        loads.clear()
        assert run(["status", str(state), *args], fake, capsys) == reference, args
        assert len(loads) == 1, args


def test_a_journal_the_whole_fold_refuses_is_refused_with_a_cache(
    sweep: tuple[Campaign, FakeScheduler, Path],
    capsys: pytest.CaptureFixture[str],
    loads: list[int],
) -> None:
    """A record after the cached prefix that reuses a cached allocation's id (no servatus
    writer makes one; a hand edit can) is CorruptState, as without the cache."""
    _campaign, fake, state = sweep
    assert run(["status", str(state)], fake, capsys)[0] == 0
    recorded = store.read(state)
    cached = recorded.intents[0]  # t0 and t1's: settled
    again = records.Intent(cached.allocation_id, ("t9",), "d", time.time(), cached.target)
    with open(state / store.JOURNAL, "ab") as journal:
        journal.write(codec.frame(codec.encode(again)))
    code, out, err = run(["status", str(state)], fake, capsys)
    assert (code, out) == (1, "") and "already has an intent" in err
    assert uncached(state, fake, capsys, []) == (code, out, err)


def test_a_chain_link_after_no_recorded_allocation_is_never_cached(
    tmp_path: Path, profile: Profile, capsys: pytest.CaptureFixture[str], loads: list[int]
) -> None:
    """The fold takes a chain link whose ``after`` names nothing recorded (only a hand edit
    writes one); status prints it as without a cache, and caches the rest."""
    campaign, fake = mixed_sweep(tmp_path, profile)
    state = campaign.path
    target = store.read(state).intents[0].target
    link = records.ChainLink(2, 2, "cd" * 12, (2,), 0)
    with store.writing(state) as writer:
        writer.add(records.Intent("ab" * 12, ("t9",), "d", time.time(), target, 300, link))
    assert_cached_same(state, fake, capsys, loads)


def rewritten(data: bytes, old: bytes, new: bytes) -> bytes:
    """The journal ``data`` with the first record holding ``old`` holding ``new`` instead (as
    long), each record framed and checksummed anew: a valid journal of the same length."""
    payloads = codec.scan(data, "journal").payloads
    assert codec.MAGIC + b"".join(map(codec.frame, payloads)) == data
    at = next(i for i, payload in enumerate(payloads) if old in payload)
    changed = [*payloads[:at], payloads[at].replace(old, new, 1), *payloads[at + 1 :]]
    out = codec.MAGIC + b"".join(map(codec.frame, changed))
    assert len(out) == len(data) and out != data
    return out


@pytest.mark.parametrize("longer", [False, True], ids=["same length", "longer"])
def test_a_journal_rewritten_under_the_cache_is_read_whole(
    sweep: tuple[Campaign, FakeScheduler, Path],
    capsys: pytest.CaptureFixture[str],
    loads: list[int],
    longer: bool,
) -> None:
    """The cache's prefix rewritten (t1's exit code 3 recorded as 4), the journal as long as
    before or longer: the cached rows no longer say what the journal does, so its digest, not
    its length, must refuse the cache."""
    _campaign, fake, state = sweep
    journal = state / store.JOURNAL
    assert run(["status", str(state)], fake, capsys)[0] == 0
    cache = state / status_cache_file.file_name(offline=False, as_json=False)
    length = json.loads(cache.read_bytes().split(b"\n")[1])["length"]
    data = journal.read_bytes()
    assert length == len(data)
    ends = b"[3,"  # t1, slot 1 of job 1000, failed with 3
    data = rewritten(data, ends, b"[4,")
    journal.write_bytes(data)
    if longer:  # job 1002 leaves the queue; the API (which never reads a cache) settles it
        fake.purge()
        Campaign(state, connect=fake).status()
        assert len(journal.read_bytes()) > length
    loads.clear()
    shown = run(["status", str(state)], fake, capsys)
    assert len(loads) == 1, "the cache answered for a journal it was not written over"
    reference = uncached(state, fake, capsys, [])
    assert shown == reference
    [t1] = [line.split() for line in reference[1].splitlines() if line.startswith("t1 ")]
    assert t1[2:4] == ["FAILED", "4"], t1
