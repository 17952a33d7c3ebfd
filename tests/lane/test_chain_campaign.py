"""A chained campaign end to end against FakeScheduler: status reads every protocol row through
the Campaign, a settled chain reads the same once its markers are purged, --retry-failed takes
exactly the Tasks a chain left stopped, cancel goes newest first, and reconcile resolves an
interrupted chain's link without submitting the rest."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from chainkit import chain_campaign, link_id, link_script, sbatch

from servatus import Campaign
from servatus.config import Profile, target_identity
from servatus.engine.status_values import Execution, RunTime, StopReason, TaskLink, TaskStatus
from servatus.errors import ConfigurationError, StateWarning, Unavailable
from servatus.journal import records, store
from servatus.tasks import Task
from servatus.testing import FakeScheduler
from testkit import run


def tasks(campaign: Campaign) -> dict[str, TaskStatus]:
    return {task.key: task for task in campaign.status().tasks}


def scancelled(fake: FakeScheduler) -> list[str]:
    """The allocation ids ``scancel`` was given, in the order it was run."""
    return [
        word.removeprefix("--name=servatus-")
        for call in fake.calls
        if call[0].endswith("scancel")
        for word in call
        if word.startswith("--name=")
    ]


def test_status_follows_a_chain_link_by_link(tmp_path: Path, profile: Profile) -> None:
    clock = [1000.0]
    fake = FakeScheduler(clock=lambda: clock[0])
    campaign, [jobs] = chain_campaign(
        tmp_path / "s", fake, profile, [(("k0",), 3, [3])], budget=3600
    )
    first, second, third = jobs
    fake.start()
    clock[0] += 100
    k0 = tasks(campaign)["k0"]
    assert (k0.execution, k0.allocation_id, k0.link, k0.run_time) == (
        Execution.RUNNING,
        link_id(1, 1),
        TaskLink(1, 3, 3600),
        RunTime(100, complete=False),
    )
    fake.finish(first, 75)  # yields: link 2 is its work now, queued
    clock[0] += 50
    k0 = tasks(campaign)["k0"]
    assert (k0.execution, k0.link, k0.run_time) == (
        Execution.QUEUED,
        TaskLink(2, 3, 3600),
        RunTime(100),
    )
    fake.start()
    clock[0] += 60
    fake.signal_limit(second)
    clock[0] += 20
    fake.time_out(second)  # the shell's own stop after the signal: continues
    fake.start()
    clock[0] += 30
    fake.finish(third, 75)  # 75 on its last planned link
    fake.purge()
    k0 = tasks(campaign)["k0"]
    assert (k0.execution, k0.exit_code, k0.detail, k0.link, k0.run_time) == (
        Execution.STOPPED,
        75,
        StopReason.BUDGET_SPENT,
        TaskLink(3, 3, 3600),
        RunTime(100 + 80 + 30),
    )
    attempts = [(a.allocation_id, a.execution, a.detail) for a in campaign.status().attempts]
    assert attempts == [
        (link_id(1, 1), Execution.STOPPED, StopReason.YIELDED),
        (link_id(1, 2), Execution.STOPPED, StopReason.TIME_LIMIT),
        (link_id(1, 3), Execution.STOPPED, StopReason.BUDGET_SPENT),
    ]


def test_a_settled_chain_reads_the_same_once_its_markers_are_purged(
    tmp_path: Path, profile: Profile
) -> None:
    fake = FakeScheduler()
    chains = [(("k0", "k1"), 3, [3, 2]), (("k2",), 2, [2])]
    campaign, [packed, single] = chain_campaign(tmp_path / "s", fake, profile, chains)
    fake.finish(packed[0], 0, 75)  # k0 done on link 1; k1 hands on
    fake.finish(packed[1], 0, 0)  # link 2 runs k1 alone; k1 succeeds; nothing handed on
    fake.start(single[0])
    fake.signal_limit(single[0])
    fake.time_out(single[0])  # k2 stopped by the shell, handed on
    fake.run(["/usr/bin/scancel", "--me", f"--name=servatus-{link_id(2, 2)}"])  # never starts
    fake.purge()
    before = campaign.status()
    campaign.refresh()
    assert {s.allocation_id for s in campaign.state.settlements} == {
        link_id(1, 1),
        link_id(1, 2),
        link_id(1, 3),
        link_id(2, 1),
        link_id(2, 2),
    }
    handed = {s.allocation_id: s.handed for s in campaign.state.settlements}
    assert handed[link_id(1, 1)] == (1,) and handed[link_id(2, 1)] == (0,)
    fake.markers.clear()  # a scratch purge takes every marker
    after = campaign.status()
    assert after.tasks == before.tasks and after.attempts == before.attempts
    by_key = {task.key: task for task in after.tasks}
    assert (by_key["k0"].execution, by_key["k0"].link) == (Execution.SUCCEEDED, TaskLink(1, 3, 0))
    assert (by_key["k1"].execution, by_key["k1"].link) == (Execution.SUCCEEDED, TaskLink(2, 2, 0))
    assert (by_key["k2"].execution, by_key["k2"].detail, by_key["k2"].link) == (
        Execution.STOPPED,
        StopReason.TIME_LIMIT,  # its link 2 never started: it reads as link 1 left it
        TaskLink(1, 2, 0),
    )
    assert by_key["k2"].run_time == before.tasks[2].run_time
    retry = campaign.plan(profile, retry_failed=True)
    assert retry.decision.selected == ("k2",)  # never k0 or k1, whose later links were removed


def test_retry_failed_never_takes_a_task_whose_later_links_slurm_removed(
    tmp_path: Path, profile: Profile
) -> None:
    fake = FakeScheduler()
    campaign, [jobs] = chain_campaign(tmp_path / "s", fake, profile, [(("k0",), 4, [4])])
    fake.finish(jobs[0], 0)
    assert [job.state for job in fake.jobs] == ["FAILED", "CANCELLED", "CANCELLED", "CANCELLED"]
    held = campaign.plan(profile, retry_failed=True)
    assert held.decision.selected == ()
    fake.purge()
    k0 = tasks(campaign)["k0"]
    assert (k0.execution, k0.allocation_id) == (Execution.SUCCEEDED, link_id(1, 1))
    assert campaign.plan(profile, retry_failed=True).decision.selected == ()


@pytest.mark.parametrize("state", ["FAILED", "TIMEOUT", None])
def test_a_link_killed_outright_costs_one_empty_allocation_and_reads_lost(
    tmp_path: Path, profile: Profile, state: str | None
) -> None:
    """As the test cluster showed (``test_lane_chain_killed.py``): the killed link stays listed
    ``FAILED`` (its slurmstepd saw the shell die) or ``TIMEOUT`` (nothing on the node told
    slurmctld, so it ran on in Slurm to its limit), or is gone at once; the next link starts,
    runs nothing and removes the last; the Task reads ENDING, then LOST at link 1, held from
    ``--retry-failed`` and taken by ``--retry``."""
    clock = [1000.0]
    fake = FakeScheduler(clock=lambda: clock[0])
    campaign, [jobs] = chain_campaign(tmp_path / "s", fake, profile, [(("k0",), 3, [3])])
    fake.start(jobs[0])
    clock[0] += 5
    fake.vanish(jobs[0], state=state)
    k0 = tasks(campaign)["k0"]
    assert (k0.execution, k0.link) == (
        Execution.LOST if state is None else Execution.ENDING,
        TaskLink(1, 3, 0),
    )
    assert [job.state for job in fake.jobs[1:]] == ["PENDING", "PENDING"]  # link 1 removed none
    fake.start()
    assert [job.state for job in fake.jobs[1:]] == ["FAILED", "CANCELLED"]
    assert [job.allocated for job in fake.jobs] == [True, True, False]
    assert sorted(fake.markers) == [
        f"servatus-{link_id(1, 1)}.{jobs[0]}.start",
        f"servatus-{link_id(1, 2)}.{jobs[1]}.start",
    ]
    assert campaign.plan(profile, retry_failed=True).decision.selected == ()
    fake.purge()
    k0 = tasks(campaign)["k0"]
    assert (k0.execution, k0.exit_code, k0.link, k0.allocation_id) == (
        Execution.LOST,
        None,
        TaskLink(1, 3, 0),
        link_id(1, 1),
    )
    assert k0.run_time == RunTime(300, complete=False)  # counted at its whole limit
    held = campaign.plan(profile, retry_failed=True).decision
    assert (held.selected, dict(held.held)["k0"].value) == ((), "SUBMITTED")
    assert campaign.plan(profile, retry=["k0"]).decision.selected == ("k0",)


def test_cancel_task_goes_newest_first(tmp_path: Path, profile: Profile) -> None:
    fake = FakeScheduler()
    chains = [(("k0",), 3, [3]), (("k1",), 2, [2])]
    campaign, [jobs, _] = chain_campaign(tmp_path / "s", fake, profile, chains)
    fake.start(jobs[0])
    cancelled = campaign.cancel(tasks=["k0"]).allocations
    assert cancelled == (link_id(1, 3), link_id(1, 2), link_id(1, 1))
    assert scancelled(fake) == [link_id(1, 3), link_id(1, 2), link_id(1, 1)]
    states = [job.state for job in fake.jobs]
    assert states == ["CANCELLED", "CANCELLED", "CANCELLED", "PENDING", "PENDING"]
    assert not any(job.allocated for job in fake.jobs[1:3])


def test_cancel_task_takes_a_running_link_whose_handoff_it_cannot_see_yet(
    tmp_path: Path, profile: Profile
) -> None:
    """On NFS the login node may list a fresh handoff up to a minute late. A link Slurm runs is
    cancelled by ``--task`` even while, from what is listed, its slot reads never started: it
    may already have claimed the handoff and be running the Task the user stopped."""
    fake = FakeScheduler()
    campaign, [jobs] = chain_campaign(tmp_path / "s", fake, profile, [(("k0",), 3, [3])])
    fake.start(jobs[0])
    fake.signal_limit(jobs[0])
    fake.finish(jobs[0], 75)
    fake.start(jobs[1])
    for name in [name for name in fake.markers if link_id(1, 1) not in name or "handoff" in name]:
        del fake.markers[name]  # the listing shows neither the handoff nor link 2's markers
    assert [job.state for job in fake.jobs] == ["COMPLETED", "RUNNING", "PENDING"]
    cancelled = campaign.cancel(tasks=["k0"]).allocations
    assert cancelled == (link_id(1, 3), link_id(1, 2))
    assert scancelled(fake) == [link_id(1, 3), link_id(1, 2)]


def test_cancel_allocation_of_a_link_takes_every_later_link(
    tmp_path: Path, profile: Profile
) -> None:
    fake = FakeScheduler()
    campaign, [jobs] = chain_campaign(tmp_path / "s", fake, profile, [(("k0",), 4, [4])])
    fake.start(jobs[0])
    cancelled = campaign.cancel(allocations=[link_id(1, 2)]).allocations
    assert cancelled == (link_id(1, 4), link_id(1, 3), link_id(1, 2))
    assert scancelled(fake) == [link_id(1, 4), link_id(1, 3), link_id(1, 2)]
    assert [job.state for job in fake.jobs] == ["RUNNING", "CANCELLED", "CANCELLED", "CANCELLED"]
    fake.finish(jobs[0], 75)  # link 1 hands on to a link that is gone
    fake.purge()
    k0 = tasks(campaign)["k0"]
    assert (k0.execution, k0.detail, k0.allocation_id) == (
        Execution.STOPPED,
        StopReason.YIELDED,  # as link 1 left it: the links it handed on to are gone
        link_id(1, 1),
    )
    assert campaign.plan(profile, retry_failed=True).decision.selected == ("k0",)


@pytest.mark.parametrize("found_by", ["its name in squeue", "its markers"])
def test_reconcile_resolves_an_interrupted_chains_link_and_submits_nothing(
    tmp_path: Path, profile: Profile, found_by: str
) -> None:
    """submit lost sbatch's answer for link 2 of 3, so link 3 was never sent. reconcile finds
    link 2 (queued behind link 1, or run and forgotten); the chain is simply two links long."""
    fake = FakeScheduler()
    campaign, [jobs] = chain_campaign(
        tmp_path / "s", fake, profile, [(("k0",), 3, [3])], stop_after=1
    )
    with store.writing(campaign.path) as writer:
        target = writer.target(target_identity(profile.target))
        link = records.ChainLink(2, 3, link_id(1, 1), (3,), 0)
        writer.add(records.Intent(link_id(1, 2), ("k0",), "d", time.time(), target, 300, link))
    fake.lose_answer("sbatch")
    script = link_script(link_id(1, 2), 1, position=2, of=3, after=link_id(1, 1), task_links=[3])
    with pytest.raises(Unavailable):
        sbatch(fake, script, jobs[0])
    campaign.refresh()
    assert tasks(campaign)["k0"].execution is Execution.UNRESOLVED
    second = fake.jobs[1].job

    def run_link_2() -> None:
        fake.finish(jobs[0], 75)
        fake.start()
        fake.signal_limit(second)
        fake.finish(second, 138)  # hands on to a link 3 that was never sent
        fake.purge()

    if found_by == "its markers":
        run_link_2()
    sent = fake.count("sbatch")
    with pytest.warns(StateWarning, match=r"chain cut short: .* \(link 2/3\) .* --max-links 1 "):
        (decision,) = campaign.reconcile()
    assert (decision.allocation_id, decision.outcome, decision.job) == (
        link_id(1, 2),
        "accepted",
        second,
    )
    assert fake.count("sbatch") == sent  # nothing submits the rest of the chain
    if found_by != "its markers":
        run_link_2()
    k0 = tasks(campaign)["k0"]
    assert (k0.execution, k0.detail, k0.allocation_id) == (
        Execution.STOPPED,
        StopReason.TIME_LIMIT,
        link_id(1, 2),
    )
    assert campaign.plan(profile, retry_failed=True).decision.selected == ("k0",)


def test_the_cli_shows_link_and_budget_and_the_document_carries_them(
    tmp_path: Path, profile: Profile, capsys: pytest.CaptureFixture[str]
) -> None:
    clock = [1000.0]
    fake = FakeScheduler(clock=lambda: clock[0])
    campaign, [jobs] = chain_campaign(
        tmp_path / "s", fake, profile, [(("k0",), 3, [3])], budget=3 * 86400
    )
    fake.start()
    clock[0] += 3723
    fake.finish(jobs[0], 75)
    fake.start()
    clock[0] += 10
    state = str(campaign.path)
    code, out, _ = run(["status", state], fake, capsys)
    assert code == 0
    header, row = out.splitlines()[:2]
    assert header.split() == [
        "KEY",
        "RESULT",
        "EXECUTION",
        "EXIT",
        "RUN",
        "TIME",
        "LINK",
        "ALLOCATION",
    ]
    assert row.split() == [
        "k0",
        "UNOBSERVED",
        "RUNNING",
        "-",
        "~01:02:13",
        "/",
        "3-00:00:00",
        "2/3",
        link_id(1, 2),
    ]
    code, out, _ = run(["status", state, "--json"], fake, capsys)
    document = json.loads(out)
    (task,) = document["tasks"]
    assert task["link"] == {"position": 2, "of": 3, "budget": 3 * 86400}
    assert task["run_time"] == {"total": 3733, "complete": False}
    links = [attempt["link"] for attempt in document["attempts"]]
    assert links == [
        {"position": 1, "of": 3, "after": None},
        {"position": 2, "of": 3, "after": link_id(1, 1)},
        {"position": 3, "of": 3, "after": link_id(1, 2)},
    ]
    assert [a["observation"]["handed"] for a in document["attempts"]] == [[0], [], []]
    assert [a["executions"] for a in document["attempts"]] == [["STOPPED"], ["RUNNING"], ["QUEUED"]]


STOPPED, SUCCEEDED, FAILED = Execution.STOPPED, Execution.SUCCEEDED, Execution.FAILED
# row: (reading before the Task's last link, reading on its last link, continues?)
PROTOCOL = {
    "exit 0": ((SUCCEEDED, 0, None), (SUCCEEDED, 0, None), False),
    "exit 75": ((STOPPED, 75, StopReason.YIELDED), (STOPPED, 75, StopReason.BUDGET_SPENT), True),
    "signal, then nonzero": ((STOPPED, 138, StopReason.TIME_LIMIT), (FAILED, 138, None), True),
    "signal, then stopped at the limit": (
        (STOPPED, 143, StopReason.TIME_LIMIT),
        (STOPPED, None, StopReason.TIME_LIMIT),
        True,
    ),
    "nonzero before the signal": ((FAILED, 3, None), (FAILED, 3, None), False),
    "cancelled": ((STOPPED, None, None), (STOPPED, None, None), False),
}


def act(fake: FakeScheduler, row: str, job: int, allocation_id: str) -> None:
    """What the step of ``job`` does, through the fake's controls."""
    if row in ("signal, then nonzero", "signal, then stopped at the limit"):
        fake.signal_limit(job)
    if row == "signal, then stopped at the limit":
        fake.time_out(job)  # a middle link's own stop, Slurm's on the last
    elif row == "cancelled":
        fake.run(["/usr/bin/scancel", "--me", f"--name=servatus-{allocation_id}"])
    else:
        code = {"exit 0": 0, "exit 75": 75, "signal, then nonzero": 138}.get(row, 3)
        fake.finish(job, code)


@pytest.mark.parametrize("position", [1, 2, 3])
@pytest.mark.parametrize("row", sorted(PROTOCOL))
def test_every_protocol_row_on_every_link_through_the_fake(
    tmp_path: Path, profile: Profile, row: str, position: int
) -> None:
    fake = FakeScheduler()
    campaign, [jobs] = chain_campaign(tmp_path / "s", fake, profile, [(("k0",), 3, [3])])
    for earlier in range(position - 1):
        fake.finish(jobs[earlier], 75)
    fake.start(jobs[position - 1])
    act(fake, row, jobs[position - 1], link_id(1, position))
    fake.purge()
    middle, last, continues = PROTOCOL[row]
    mine = {a.allocation_id: a for a in campaign.status().attempts}[link_id(1, position)]
    assert (mine.execution, mine.exit_code, mine.detail) == (last if position == 3 else middle)
    later = [job.state for job in fake.jobs[position:]]
    k0 = tasks(campaign)["k0"]
    if continues and position < 3:
        assert later == ["PENDING"] * (3 - position)
        assert (k0.execution, k0.link) == (Execution.QUEUED, TaskLink(position + 1, 3, 0))
        fake.start()
        assert tasks(campaign)["k0"].execution is Execution.RUNNING
    else:
        assert later == ["CANCELLED"] * (3 - position)  # removed, never allocated
        assert not any(job.allocated for job in fake.jobs[position:])
        assert (k0.execution, k0.exit_code, k0.detail) == (last if position == 3 else middle)
        assert k0.link == TaskLink(position, 3, 0)
        retried = campaign.plan(profile, retry_failed=True).decision.selected
        assert retried == (() if row == "exit 0" else ("k0",))


def test_logs_of_a_chained_task_reads_its_current_link(tmp_path: Path, profile: Profile) -> None:
    """The spec: ``logs --task KEY`` reads the step log in the Task's current allocation. For a
    chain that is a later link once handed on, known only from the markers, not link 1."""
    from servatus_slurm.markers import step_log_name

    fake = FakeScheduler()
    campaign, [jobs] = chain_campaign(tmp_path / "s", fake, profile, [(("k0",), 3, [3])])
    first, second, _ = jobs
    fake.logs[step_log_name(link_id(1, 1), first, 0)] = b"link one\n"
    fake.logs[step_log_name(link_id(1, 2), second, 0)] = b"link two\n"
    fake.finish(first, 75)
    fake.start(second)
    assert campaign.logs(tasks=["k0"]).endswith(b"link two\n")
    plain = Campaign.create(tmp_path / "p", [Task("p0", ["/bin/true"])], connect=fake)
    asked = fake.count("squeue")
    with pytest.raises(ConfigurationError, match="no accepted allocation"):
        plain.logs(tasks=["p0"])
    assert fake.count("squeue") == asked  # a plain Task's logs still consult nothing


def test_the_links_own_stop_reads_stopped_for_a_packed_task_on_its_own_last_link(
    tmp_path: Path, profile: Profile
) -> None:
    """k1 has 2 links of the chain's 3. Link 2 is its own last, so it hands nothing on, but the
    link's early stop kills it with k0's step: a stop at the limit, as on an unpacked Task's
    last link, never FAILED 143 (which reads as a crash and says nothing was stopped)."""
    fake = FakeScheduler()
    campaign, [jobs] = chain_campaign(
        tmp_path / "s", fake, profile, [(("k0", "k1"), 3, [3, 2])], budget=7200
    )
    fake.finish(jobs[0], 75, 75)
    fake.start(jobs[1])
    fake.signal_limit(jobs[1])
    fake.time_out(jobs[1])  # both steps ran on: the link stops them itself
    fake.purge()
    k0, k1 = tasks(campaign)["k0"], tasks(campaign)["k1"]
    assert (k0.execution, k0.link) == (Execution.QUEUED, TaskLink(3, 3, 7200))
    assert (k1.execution, k1.detail, k1.link) == (
        Execution.STOPPED,
        StopReason.TIME_LIMIT,
        TaskLink(2, 2, 7200),
    )
