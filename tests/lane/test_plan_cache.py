"""``servatus plan`` from the status cache (ADR 0010) against FakeScheduler, through
``servatus.cli.main``: whatever is asked, it prints exactly what a plan from the whole journal
prints, and a plan it saves is one ``submit`` takes; what it cannot answer, the whole journal
does."""

from __future__ import annotations

import json
import shutil
import zlib
from pathlib import Path
from typing import NamedTuple

import pytest
from test_status_cache import assert_cached_same, cache_files, loads, mixed_sweep, sweep

from servatus import Campaign, Task
from servatus.cli import status_cache_file
from servatus.config import Profile
from servatus.journal import store
from servatus.testing import FakeScheduler
from testkit import CPU_PROFILE, run

__all__ = ["loads", "sweep"]  # fixtures

BUDGETED = CPU_PROFILE + 'signal_before_end = "00:01:00"\n'


def normal(shown: tuple[int, str, str]) -> tuple[int, object, str]:
    """A plan's output less what differs between two plans of the same state: the JSON
    document's creation time and digest."""
    code, out, err = shown
    if not out.startswith("{"):
        return code, out, err
    document = json.loads(out)
    for name in ("created_at", "digest"):
        document.pop(name, None)
    return code, document, err


def whole(
    state: Path, fake: FakeScheduler, capsys: pytest.CaptureFixture[str], args: list[str]
) -> tuple[int, object, str]:
    """The plan of a copy of ``state`` with no cache: the reference, as ``state`` prints it."""
    copy = cacheless(state, f"{state.name}-whole")
    return normal(named(run(["plan", str(copy), *args], fake, capsys), copy, state))


def named(shown: tuple[int, str, str], copy: Path, state: Path) -> tuple[int, str, str]:
    """What a command printed for ``copy``, as it prints it for ``state``: a warning names the
    campaign's directory in the command it gives (a chain cut short)."""
    code, out, err = shown
    return code, out.replace(str(copy), str(state)), err.replace(str(copy), str(state))


def cacheless(state: Path, name: str) -> Path:
    """A fresh copy of ``state`` beside it, named ``name``, with no status cache."""
    copy = state.parent / name
    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(state, copy)
    for path in cache_files(copy):
        path.unlink()
    return copy


def assert_planned_same(
    state: Path,
    fake: FakeScheduler,
    capsys: pytest.CaptureFixture[str],
    loads: list[int],
    args: list[str],
    *,
    cached: bool = True,
) -> tuple[int, object, str]:
    """``plan ARGS`` prints what the whole journal's plan prints; answered from the cache
    (no journal folded) when ``cached``, else from the whole journal."""
    reference = whole(state, fake, capsys, args)
    loads.clear()
    shown = normal(run(["plan", str(state), *args], fake, capsys))
    assert shown == reference, args
    assert (loads == []) is cached, (args, loads)
    return shown


def config(tmp_path: Path, text: str = CPU_PROFILE, name: str = "plan.toml") -> list[str]:
    path = tmp_path / name
    path.write_text(text)
    return ["--config", str(path)]


class Planner(NamedTuple):
    """The mixed sweep's campaign, its FakeScheduler, and what its tests plan with."""

    fake: FakeScheduler
    state: Path
    capsys: pytest.CaptureFixture[str]
    loads: list[int]
    config: list[str]
    tmp_path: Path

    def same(
        self, asked: list[str], *, cached: bool = True, text: str | None = None
    ) -> tuple[int, object, str]:
        """:func:`assert_planned_same` of ``plan --config ... ASKED`` (``text`` another
        SERVATUS.toml)."""
        chosen = self.config if text is None else config(self.tmp_path, text)
        args = [*chosen, *asked]
        return assert_planned_same(
            self.state, self.fake, self.capsys, self.loads, args, cached=cached
        )


@pytest.fixture
def planner(
    sweep: tuple[Campaign, FakeScheduler, Path],
    capsys: pytest.CaptureFixture[str],
    loads: list[int],
    tmp_path: Path,
) -> Planner:
    _campaign, fake, state = sweep
    return Planner(fake, state, capsys, loads, config(tmp_path), tmp_path)


@pytest.mark.parametrize(
    "asked",
    [
        ["--retry-failed"],
        ["--retry-failed", "--json"],
        [],  # a first plan: t8 and t9, never submitted; offline
        ["--json"],
        ["--retry", "t1"],  # failed, cached: its content is kept
        ["--retry", "t1", "--only", "t1", "--tasks-per-allocation", "1"],
        ["--retry-failed", "--only", "t1", "--only", "t9"],
        ["--retry-failed", "--max-links", "2"],
    ],
)
def test_a_plan_from_the_cache_is_the_whole_journals(planner: Planner, asked: list[str]) -> None:
    shown = planner.same(asked)
    assert shown[0] == 0, shown


def test_a_budget_plan_from_the_cache_is_the_whole_journals(planner: Planner) -> None:
    asked = ["--retry-failed", "--budget", "00:20:00", "--json"]
    code, document, _err = planner.same(asked, text=BUDGETED)
    assert code == 0 and isinstance(document, dict)
    assert document["decision"]["selected"] == ["t1", "t8", "t9"]  # t8, t9 never submitted


def test_refusals_from_the_cache_are_the_whole_journals(planner: Planner) -> None:
    journal = (planner.state / store.JOURNAL).read_bytes()
    for asked in (
        ["--retry", "nosuch"],
        ["--retry", "t6"],  # queued, still listed
        ["--retry-failed", "--budget", "00:20:00"],  # the profile has no signal_before_end
    ):
        code, _out, err = planner.same(asked)
        assert code != 0 and err.startswith("servatus: "), (asked, err)
    assert (planner.state / store.JOURNAL).read_bytes() == journal


def test_a_retry_of_a_cached_success_reads_the_whole_journal(planner: Planner) -> None:
    """The cache keeps the content only of the Tasks a plan may select unasked."""
    code, document, _ = planner.same(["--retry", "t0", "--json"], cached=False)
    assert code == 0 and isinstance(document, dict)
    assert document["decision"]["selected"] == ["t0", "t8", "t9"]


def test_a_plan_saved_from_the_cache_is_submitted(planner: Planner) -> None:
    fake, state, capsys = planner.fake, planner.state, planner.capsys
    saved = planner.tmp_path / "retry.json"
    planner.loads.clear()
    args = ["plan", str(state), *planner.config, "--retry-failed", "--output", str(saved)]
    assert run(args, fake, capsys)[0] == 0
    assert planner.loads == []
    code, out, err = run(["submit", str(state), str(saved)], fake, capsys)
    assert (code, err) == (0, ""), out
    first, *_, retried = [i for i in store.read(state).intents if "t1" in i.task_keys]
    assert retried.allocation_id in out and retried is not first


def test_nothing_cached_and_no_cache_plan_from_the_whole_journal(
    tmp_path: Path, profile: Profile, capsys: pytest.CaptureFixture[str], loads: list[int]
) -> None:
    campaign, fake = mixed_sweep(tmp_path, profile)
    args = [*config(tmp_path), "--retry-failed"]
    assert_planned_same(campaign.path, fake, capsys, loads, args, cached=False)
    assert_cached_same(campaign.path, fake, capsys, loads)
    for path in cache_files(campaign.path):
        if ".online." in path.name:
            path.unlink()  # a retry reads Slurm: only the online caches can answer it
    assert_planned_same(campaign.path, fake, capsys, loads, args, cached=False)
    assert_planned_same(campaign.path, fake, capsys, loads, config(tmp_path))  # offline


def test_a_resolved_cached_allocation_makes_a_first_plan_read_slurm(
    tmp_path: Path, profile: Profile, capsys: pytest.CaptureFixture[str], loads: list[int]
) -> None:
    """Once ``reconcile`` resolved a submission, every plan reads Slurm: a first plan too,
    answered then only from an online cache."""
    fake = FakeScheduler()
    tasks = [Task(f"t{i}", ["/bin/true"]) for i in range(4)]
    campaign = Campaign.ensure(tmp_path / "state", tasks, connect=fake)
    fake.lose_answer("sbatch")
    with pytest.raises(Exception, match=r"interrupted|no answer"):
        campaign.submit(campaign.plan(profile, only=["t0", "t1"]))
    campaign.reconcile()
    assert campaign.state.resolutions
    for job in fake.jobs:
        fake.start(job.job)
        fake.finish(job.job, 0, 1)
    fake.purge()
    state = campaign.path
    assert_cached_same(state, fake, capsys, loads)
    header = json.loads(
        (state / status_cache_file.file_name(offline=True, as_json=False))
        .read_bytes()
        .split(b"\n")[1]
    )
    assert header["resolved"] is True and header["cached_tasks"] == 2
    shown = assert_planned_same(state, fake, capsys, loads, [*config(tmp_path), "--json"])
    assert shown[0] == 0 and isinstance(shown[1], dict)
    assert shown[1]["decision"]["selected"] == ["t2", "t3"]
    for path in cache_files(state):
        if ".online." in path.name:
            path.unlink()
    assert_planned_same(state, fake, capsys, loads, config(tmp_path), cached=False)


def test_a_damaged_planning_part_plans_from_the_whole_journal(planner: Planner) -> None:
    """A planning part that does not fit its header (its checksum holding) is not read; the
    status it sits in still answers from its rows."""
    fake, state, capsys, loads = planner.fake, planner.state, planner.capsys, planner.loads
    for path in cache_files(state):
        if path.name.endswith(".json"):
            path.unlink()  # a plan would fall back to them
    cache = state / status_cache_file.file_name(offline=False, as_json=False)
    rest = cache.read_bytes().split(b"\n", 1)[1]
    for old, new in (
        (b'"of":[', b'"of":[0,'),  # one index too many
        (b'{"keys":["t0",', b'{"keys":["t2",'),  # a key twice
        (b'{"keys":["t0",', b'{"keys":[0,'),  # not a key
    ):
        head, body = rest.split(b"\n", 1)
        assert old in body, old
        header = json.loads(head)
        header["planning"] += len(new) - len(old)
        changed = json.dumps(header).encode() + b"\n" + body.replace(old, new, 1)
        cache.write_bytes(status_cache_file.FORMAT + b"%08x\n" % zlib.crc32(changed) + changed)
        planner.same(["--retry-failed"], cached=False)
        loads.clear()
        assert run(["status", str(state)], fake, capsys)[0] == 0
        assert loads == [], "the status did not answer from its rows"
        cache.write_bytes(status_cache_file.FORMAT + b"%08x\n" % zlib.crc32(rest) + rest)


def test_a_resolution_recorded_after_the_cache_makes_a_first_plan_read_slurm(
    tmp_path: Path, profile: Profile, capsys: pytest.CaptureFixture[str], loads: list[int]
) -> None:
    """The cache is written while nothing was resolved; then a submission's answer is lost and
    ``reconcile`` resolves it. The cache still holds (the records after it are folded on), but
    a first plan must now read Slurm, as the whole journal's does: a job recorded as never
    sent may be listed after all."""
    fake = FakeScheduler()
    tasks = [Task(f"t{i}", ["/bin/true"]) for i in range(4)]
    campaign = Campaign.ensure(tmp_path / "state", tasks, connect=fake)
    campaign.submit(campaign.plan(profile, only=["t0", "t1"]))
    for job in fake.jobs:
        fake.start(job.job)
        fake.finish(job.job, 0, 0)
    fake.purge()
    state = campaign.path
    assert_cached_same(state, fake, capsys, loads)
    fake.lose_answer("sbatch")
    with pytest.raises(Exception, match=r"interrupted|no answer"):
        campaign.submit(campaign.plan(profile, only=["t2"]))
    campaign.reconcile()
    assert campaign.state.resolutions
    for path in cache_files(state):
        header = json.loads(path.read_bytes().split(b"\n")[1])
        assert header["resolved"] is False, path.name  # written before the resolution
    args = [*config(tmp_path), "--json"]
    reference = whole(state, fake, capsys, args)
    listed = fake.count("squeue")
    loads.clear()
    shown = normal(run(["plan", str(state), *args], fake, capsys))
    assert fake.count("squeue") > listed, "the plan did not read Slurm"
    assert loads == [], "the cache did not answer"
    assert shown == reference
    assert isinstance(shown[1], dict) and shown[1]["decision"]["selected"] == ["t3"]
