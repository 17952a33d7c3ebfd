"""``plan --budget`` and ``--max-links`` through the CLI against FakeScheduler: the spec's example
output, the refusals and their exit codes, SPENT and extensions after a measured run, and submit
passing a chain's budget and run times on to its scripts and intents."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, ClassVar

import pytest

from servatus.campaign import Campaign
from servatus.journal import store
from servatus.journal.records import ChainLink
from servatus.plugins import Hooks
from servatus.script import ScriptSpec
from servatus.tasks import read_jsonl
from servatus.testing import FakeScheduler
from testkit import run

L40S = """\
default_profile = "l40s"

[target]
slurm_bin = "/usr/bin"
work_root = "/scratch/alice/train"
log_root = "/scratch/alice/train/logs"
partitions = ["l40s"]
max_tasks_per_allocation = 2
max_cpus_per_allocation = 64
max_memory_mib_per_allocation = 128000
max_time_limit = "3-00:00:00"
gpu_gres = "gpu:l40s"
max_gpus_per_allocation = 2

[profiles.l40s.resources]
cpus = 32
memory_mib = 64000
gpus = 1
time_limit = "16:00:00"
signal_before_end = "00:10:00"   # required for continuation

[profiles.bare.resources]
cpus = 32
memory_mib = 64000
gpus = 1
time_limit = "16:00:00"
"""

HOUR = 3600


class Clock:
    """The fake file server's clock, moved by hand: run time is the span between marker mtimes."""

    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "SERVATUS.toml").write_text(L40S)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def create(project: Path, *keys: str) -> str:
    tasks = project / "tasks.jsonl"
    tasks.write_text("".join(json.dumps({"key": k, "args": ["/usr/bin/python3", "train.py"]}) + "\n"
                             for k in keys))  # fmt: skip
    state = str(project / "state")
    assert Campaign.create(state, read_jsonl(str(tasks))).tasks.keys == keys
    return state


def plan_json(
    state: str, fake: FakeScheduler, capsys: pytest.CaptureFixture[str], *args: str
) -> Any:
    code, out, err = run(["plan", state, *args, "--json"], fake, capsys)
    assert code == 0, err
    return json.loads(out)


def test_the_spec_budget_example(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    state, fake = create(project, "az-small"), FakeScheduler()
    document = plan_json(state, fake, capsys, "--budget", "3-00:00:00")
    ids = [allocation["allocation_id"] for allocation in document["allocations"]]
    code, out, err = run(["plan", state, "--profile", "l40s", "--budget", "3-00:00:00"], fake,
                         capsys)  # fmt: skip
    assert (code, err) == (0, "")
    assert out.splitlines() == [
        "profile l40s (direct launcher)",
        "continuation: lifetime budget 3-00:00:00 per Task",
        "  az-small  run time 00:00:00, budget left 3-00:00:00, 5 links",
        "selected: 1 Task in 5 allocations",
        f"  {ids[0]}  1 Task, 32 CPUs, 64000 MiB, 1 GPUs, 16:00:00, link 1/5",
        f"  {ids[1]}  1 Task, 32 CPUs, 64000 MiB, 1 GPUs, 16:00:00, link 2/5",
        f"  {ids[2]}  1 Task, 32 CPUs, 64000 MiB, 1 GPUs, 16:00:00, link 3/5",
        f"  {ids[3]}  1 Task, 32 CPUs, 64000 MiB, 1 GPUs, 16:00:00, link 4/5",
        f"  {ids[4]}  1 Task, 32 CPUs, 64000 MiB, 1 GPUs, 08:00:00, link 5/5",
        "    az-small",
        "requests at most 2304.0 CPU-hours, 72.0 GPU-hours, 4500.0 GiB-hours",
    ]
    assert document["totals"] == {
        "cpu_hours": 2304.0, "gpu_hours": 72.0, "memory_gib_hours": 4500.0,
    }  # fmt: skip
    assert document["extensions"] == []
    assert document["decision"]["continuation"] == {"budget": 3 * 86400, "max_links": None}
    assert document["decision"]["spent"] == {"az-small": 0}
    assert [a["link"] for a in document["allocations"]] == [
        *({"position": i, "of": 5, "time_limit": 16 * HOUR} for i in range(1, 5)),
        {"position": 5, "of": 5, "time_limit": 8 * HOUR},
    ]
    assert [a["after"] for a in document["allocations"]] == [None, *ids[:-1]]
    assert {tuple(a["task_links"]) for a in document["allocations"]} == {(5,)}
    assert fake.calls == []  # a first plan asks Slurm nothing, with a budget too


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--budget", "3 days"], "Invalid value for '--budget': invalid budget '3 days'"),
        (["--budget", "00:00:00"], "Invalid value for '--budget': invalid budget '00:00:00'"),
        (["--max-links", "0"], "Invalid value for '--max-links': 0 is not in the range 1<=x<=32"),
        (["--max-links", "33"], "Invalid value for '--max-links': 33 is not in the range"),
    ],
)
def test_a_bad_budget_or_link_count_is_a_usage_error(
    project: Path, capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    state = create(project, "a")
    code, out, err = run(["plan", state, *args], FakeScheduler(), capsys)
    assert (code, out) == (2, "")
    assert message in err


def test_a_budget_longer_than_a_campaign_records_is_a_usage_error(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The journal holds durations below 2**36 s. A longer budget used to be planned and
    submitted, its links queued in Slurm, and the campaign then refused by every read
    (CorruptState): the longest it records is still planned, submitted and read back."""
    state, fake = create(project, "a"), FakeScheduler()
    code, out, err = run(["plan", state, "--budget", "99999999-00:00:00"], fake, capsys)
    assert (code, out) == (2, "")
    assert err == (
        "servatus: Invalid value for '--budget': invalid budget '99999999-00:00:00': longer "
        "than a campaign records (at most 795364-07:32:00) (see 'servatus plan --help')\n"
    )
    assert fake.calls == []
    args = ["--budget", "795364-07:32:00", "--max-links", "1", "--output", "longest.json"]
    assert run(["plan", state, *args], fake, capsys)[0] == 0
    code, _, err = run(["submit", state, "longest.json"], fake, capsys)
    assert (code, err) == (0, "")
    (intent,) = store.read(state).intents
    assert intent.chain is not None and intent.chain.budget == 2**36 - 16
    assert run(["status", state], fake, capsys)[0] == 0


def test_thirty_two_links_is_the_most(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    state = create(project, "a")
    document = plan_json(state, FakeScheduler(), capsys, "--max-links", "32")
    assert len(document["allocations"]) == 32
    assert document["decision"]["continuation"] == {"budget": None, "max_links": 32}


def test_a_budget_without_signal_before_end_is_refused_in_one_line(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state = create(project, "a")
    code, out, err = run(["plan", state, "--profile", "bare", "--budget", "1-00:00:00"],
                         FakeScheduler(), capsys)  # fmt: skip
    assert (code, out) == (1, "")
    assert err == (
        "servatus: ConfigurationError: profile 'bare': --budget needs "
        "resources.signal_before_end: a link's steps must be told before its limit so that "
        "they can save their work and hand on\n"
    )


def ran_for(
    state: str, fake: FakeScheduler, clock: Clock, capsys: pytest.CaptureFixture[str],
    seconds: int, exit_code: int = 0,
) -> None:  # fmt: skip
    """Plan and submit the campaign as plain allocations, run each for ``seconds`` with
    ``exit_code``, and let Slurm forget the jobs."""
    plan = str(Path(state).parent / f"plain-{len(fake.jobs)}.json")
    again = ["--retry-failed"] if fake.jobs else []
    assert run(["plan", state, *again, "--output", plan], fake, capsys)[0] == 0
    assert run(["submit", state, plan], fake, capsys)[0] == 0
    for job in fake.jobs:
        if job.state == "PENDING":
            fake.start(job.job)
    clock.now += seconds
    for job in fake.jobs:
        if job.state == "RUNNING":
            fake.finish(job.job, *(exit_code,) * job.slots)
    fake.purge()


def test_the_same_budget_again_selects_nothing_and_a_larger_one_extends(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    clock = Clock()
    fake = FakeScheduler(clock=clock)
    state = create(project, "az-small")
    ran_for(state, fake, clock, capsys, 16 * HOUR)
    for args in (
        ["--budget", "16:00:00"],
        ["--retry", "az-small", "--budget", "16:00:00"],
        ["--retry-failed", "--budget", "16:00:00"],
    ):
        document = plan_json(state, fake, capsys, *args)
        assert document["decision"]["selected"] == [], args
        assert document["decision"]["held"] == [["az-small", "SPENT"]], args
    code, out, _ = run(["plan", state, "--budget", "16:00:00"], fake, capsys)
    assert code == 0 and "held: 1 Task\n  az-small  SPENT\n" in out
    # Room left, but a finished Task is extended only by naming it.
    document = plan_json(state, fake, capsys, "--budget", "1-00:00:00")
    assert document["decision"]["held"] == [["az-small", "SUBMITTED"]]
    code, out, err = run(["plan", state, "--retry", "az-small", "--budget", "1-00:00:00"],
                         fake, capsys)  # fmt: skip
    assert (code, err) == (0, "")
    assert out.splitlines()[1:4] == [
        "continuation: lifetime budget 1-00:00:00 per Task",
        "  az-small  run time 16:00:00, budget left 08:00:00, 1 link, extends SUCCEEDED",
        "selected: 1 Task in 1 allocation",
    ]
    assert out.splitlines()[4].endswith("1 Task, 32 CPUs, 64000 MiB, 1 GPUs, 08:00:00, link 1/1")
    document = plan_json(state, fake, capsys, "--retry", "az-small", "--budget", "1-00:00:00")
    assert document["extensions"] == [{"key": "az-small", "extends": "SUCCEEDED"}]
    assert document["decision"]["extensions"] == document["extensions"]
    assert document["decision"]["spent"] == {"az-small": 16 * HOUR}
    # Without --budget, --retry reruns a success as before: no extension, no chain.
    document = plan_json(state, fake, capsys, "--retry", "az-small")
    assert document["extensions"] == [] and document["allocations"][0]["link"] is None


def test_retry_failed_with_a_budget_takes_only_tasks_with_room(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    clock = Clock()
    fake = FakeScheduler(clock=clock)
    state = create(project, "a", "b")
    ran_for(state, fake, clock, capsys, 10 * HOUR, exit_code=1)
    document = plan_json(state, fake, capsys, "--retry-failed", "--budget", "10:00:00")
    assert document["decision"]["held"] == [["a", "SPENT"], ["b", "SPENT"]]
    document = plan_json(state, fake, capsys, "--retry-failed", "--budget", "1-00:00:00")
    assert document["decision"]["selected"] == ["a", "b"]
    assert document["decision"]["spent"] == {"a": 10 * HOUR, "b": 10 * HOUR}
    # 14 hours left each: one link of 14:00:00, both Tasks in it.
    assert [a["link"] for a in document["allocations"]] == [
        {"position": 1, "of": 1, "time_limit": 14 * HOUR}
    ]


PROBE_ID = "0" * 24


class _Recording(Hooks):
    """The real hooks, keeping every spec rendered: what submit passes a chain's scripts."""

    specs: ClassVar[list[ScriptSpec]] = []

    def batch_script(self, spec: ScriptSpec) -> str:
        if spec.allocation_id != PROBE_ID:  # planning's size probes are not the plan's links
            type(self).specs.append(spec)
        return super().batch_script(spec)


def test_submit_passes_each_link_its_chain_budget_and_run_times(
    project: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = Clock()
    fake = FakeScheduler(clock=clock)
    state = create(project, "a")
    ran_for(state, fake, clock, capsys, HOUR, exit_code=1)
    plan = str(project / "chain.json")
    code, _, err = run(["plan", state, "--retry-failed", "--budget", "1-00:00:00", "--output",
                        plan], fake, capsys)  # fmt: skip
    assert code == 0, err
    real = Campaign._hooks
    monkeypatch.setattr(Campaign, "_hooks", lambda self: _Recording(real(self).pm))
    _Recording.specs = []
    assert run(["submit", state, plan], fake, capsys)[0] == 0
    links = [spec for spec in _Recording.specs if spec.link is not None]
    ids = [spec.allocation_id for spec in links]
    assert [spec.time_limit for spec in links] == [16 * HOUR, 7 * HOUR]
    assert [spec.earlier for spec in links] == [(), (ids[0],)]
    assert {spec.budget for spec in links} == {86400}
    assert {(step.links, step.run_time) for spec in links for step in spec.steps} == {(2, HOUR)}
    intents = store.read(state).intents[-2:]
    assert [intent.chain for intent in intents] == [
        ChainLink(1, 2, "", (2,), 86400),
        ChainLink(2, 2, ids[0], (2,), 86400),
    ]
    assert [intent.time_limit for intent in intents] == [16 * HOUR, 7 * HOUR]
    assert fake.jobs[-2].allocation_id == ids[0] and fake.jobs[-1].allocation_id == ids[1]


def test_the_library_plans_a_budget_as_the_spec_names_it(project: Path) -> None:
    import servatus
    from servatus import (
        MAX_LINKS,
        YIELD_EXIT,
        Continuation,
        Extension,
        Link,
        RunTime,
        StopReason,
        continuation,
        status,
    )

    assert (MAX_LINKS, YIELD_EXIT) == (32, 75)
    assert Extension is continuation.Extension and RunTime is status.RunTime
    assert RunTime(5).total == 5 and StopReason("budget spent") is StopReason.BUDGET_SPENT
    assert {"Continuation", "Extension", "Link", "RunTime", "StopReason"} <= set(servatus.__all__)
    state = create(project, "az-small")
    campaign = Campaign.open(state, connect=FakeScheduler())
    plan = campaign.plan(
        servatus.Profile.load("SERVATUS.toml"), continuation=Continuation(budget="3-00:00:00")
    )
    assert [a.link for a in plan.allocations][-1] == Link(5, 5, 8 * HOUR)
    assert plan.extensions == () and isinstance(plan.extensions, tuple)


def test_show_scripts_renders_each_link_as_submit_would(
    project: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    state = create(project, "a")
    real = Campaign._hooks
    monkeypatch.setattr(Campaign, "_hooks", lambda self: _Recording(real(self).pm))
    _Recording.specs = []
    code, out, err = run(["plan", state, "--budget", "20:00:00", "--show-scripts"],
                         FakeScheduler(), capsys)  # fmt: skip
    assert code == 0, err
    links = [spec for spec in _Recording.specs if spec.link is not None]
    assert [(spec.link.label, spec.time_limit) for spec in links if spec.link] == [
        ("link 1/2", 16 * HOUR),
        ("link 2/2", 4 * HOUR),
    ]
    assert [spec.earlier for spec in links] == [(), (links[0].allocation_id,)]
    assert {spec.budget for spec in links} == {20 * HOUR}
    assert out.count("# --- batch script of allocation ") == 2
    assert out.count("servatus_link=") == 2 and f"servatus_after={links[0].allocation_id}" in out


def test_a_budget_too_short_for_any_link_holds_spent_with_the_dropped_rest_warning(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A Task that never ran, under a budget at most a minute longer than signal_before_end: the
    whole budget is a rest too short for a link, dropped with a warning, not held in silence."""
    state = create(project, "a", "b")
    code, out, err = run(["plan", state, "--budget", "00:11:00"], FakeScheduler(), capsys)
    assert code == 0
    assert "held: 2 Tasks\n  a  SPENT\n  b  SPENT\n" in out
    warning = (
        "2 Tasks (a, b): the last 00:11:00 of the budget is too short for a link, which must be "
        "more than a minute longer than signal_before_end (00:10:00); it is not planned"
    )
    assert err == f"servatus: warning: {warning}\n"
    document = plan_json(state, FakeScheduler(), capsys, "--budget", "00:11:00")
    assert document["warnings"] == [warning]


def _run_links(fake: FakeScheduler, clock: Clock, seconds: int, *exits: int) -> None:
    """Run every queued link in turn, each for ``seconds`` with ``exits`` (per slot), until
    nothing is left pending; then let Slurm forget the jobs."""
    while pending := [job for job in fake.jobs if job.state == "PENDING"]:
        fake.start(pending[0].job)
        clock.now += seconds
        fake.finish(pending[0].job, *exits)
    fake.purge()


@pytest.mark.parametrize(
    ("options", "links"),
    [
        (["--budget", "3-00:00:00", "--max-links", "2"], 2),  # capped at K
        (["--budget", "22-00:00:00"], 32),  # capped at MAX_LINKS: 33 links of 16 hours
    ],
)
def test_a_chain_stopping_short_of_its_budget_yields_on_its_last_link_and_continues(
    project: Path, capsys: pytest.CaptureFixture[str], options: list[str], links: int
) -> None:
    clock = Clock()
    fake = FakeScheduler(clock=clock)
    state = create(project, "a")
    plan = str(project / "chain.json")
    assert run(["plan", state, *options, "--output", plan], fake, capsys)[0] == 0
    assert run(["submit", state, plan], fake, capsys)[0] == 0
    chains = [intent.chain for intent in store.read(state).intents]
    assert [(c.position, c.short) for c in chains if c] == [(j, (0,)) for j in range(1, links + 1)]
    _run_links(fake, clock, HOUR, 75)  # 75 on every link, the last one included
    code, out, _ = run(["status", state, "--json"], fake, capsys)
    [task] = json.loads(out)["tasks"]
    assert (task["execution"], task["detail"], task["exit_code"]) == ("STOPPED", "yielded", 75)
    assert task["link"]["position"] == task["link"]["of"] == links
    budget = options[1]
    document = plan_json(state, fake, capsys, "--retry-failed", *options)
    assert document["decision"]["selected"] == ["a"]
    assert document["decision"]["spent"] == {"a": links * HOUR}
    # The same budget planned again reaches its end (each link measured at an hour), and 75 on
    # that chain's last link says the budget is spent, though measured run time leaves room.
    again = str(project / "again.json")
    code, _, err = run(["plan", state, "--retry-failed", "--budget", budget, "--output", again],
                       fake, capsys)  # fmt: skip
    assert code == 0, err
    assert run(["submit", state, again], fake, capsys)[0] == 0
    _run_links(fake, clock, HOUR, 75)
    code, out, _ = run(["status", state, "--json"], fake, capsys)
    [task] = json.loads(out)["tasks"]
    assert (task["execution"], task["detail"]) == ("STOPPED", "budget spent"), task
    document = plan_json(state, fake, capsys, "--retry-failed", "--budget", budget)
    assert document["decision"]["held"] == [["a", "SPENT"]]


def test_a_chain_that_reaches_its_budget_records_no_short_slot(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fake = FakeScheduler()
    state = create(project, "a", "b")
    plan = str(project / "chain.json")
    assert run(["plan", state, "--budget", "1-08:00:00", "--output", plan], fake, capsys)[0] == 0
    assert run(["submit", state, plan], fake, capsys)[0] == 0
    chains = [intent.chain for intent in store.read(state).intents]
    assert [(c.position, c.of, c.short) for c in chains if c] == [(1, 2, ()), (2, 2, ())]


class _TestOnlyScripts(FakeScheduler):
    """Keeps the ``#SBATCH --time`` of each script sent to ``sbatch --test-only``."""

    def __init__(self) -> None:
        super().__init__()
        self.tested: list[str] = []

    def run(self, argv: Any, *, stdin: bytes = b"", timeout: float = 30.0) -> Any:
        if "--test-only" in argv:
            (line,) = (x for x in stdin.decode().splitlines() if x.startswith("#SBATCH --time="))
            self.tested.append(line.removeprefix("#SBATCH --time="))
        return super().run(argv, stdin=stdin, timeout=timeout)


def test_validate_test_submits_a_chains_shorter_last_link(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Two Tasks packed into one chain of four 16-hour links and an 8-hour last one, and a third
    alone: three shapes (2 Tasks at 16 and 8 hours, 1 Task at 16 and 8 hours), each sent once."""
    state, fake = create(project, "a", "b", "c"), _TestOnlyScripts()
    code, _, err = run(
        ["plan", state, "--budget", "3-00:00:00", "--output", "chain.json"], fake, capsys
    )
    assert code == 0, err
    code, out, err = run(["validate", state, "chain.json"], fake, capsys)
    assert (code, err) == (0, "")
    said = "sbatch: Job 1000 to start at now using 1 processors"
    assert out.splitlines() == [
        f"1 Task per allocation for 08:00:00: accepted: {said}",
        f"1 Task per allocation for 16:00:00: accepted: {said}",
        f"2 Tasks per allocation for 08:00:00: accepted: {said}",
        f"2 Tasks per allocation for 16:00:00: accepted: {said}",
    ]
    assert fake.tested == ["480", "960", "480", "960"]
    code, out, _ = run(["validate", state, "chain.json", "--json"], fake, capsys)
    assert [(c["tasks"], c["time_limit"]) for c in json.loads(out)["checks"]] == [
        (1, 8 * HOUR), (1, 16 * HOUR), (2, 8 * HOUR), (2, 16 * HOUR),
    ]  # fmt: skip
    assert fake.jobs == []
