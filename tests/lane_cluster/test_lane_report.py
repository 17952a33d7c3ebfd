"""``servatus report`` of a real-cluster campaign (issue #16, "Proof"): one campaign over SSH
holding a chain, a lease and a failed retry, its report's numbers checked against ``status
--json`` read at the same moment, its page opened in a browser with no network.

The campaign, in one state: ``chain`` (``plan --budget --max-links 2``) whose first link waits
for the pre-limit signal and yields (75), so it hands on, and whose second exits 0; a lease of two
slots (``plan --hold 2``) into which ``start`` puts three steps, the third waiting for a slot,
cancelled (``cancel --allocation``) once they are over; ``fails``, which exits 3, and again once
``plan --retry-failed`` resubmits it; ``works``, which exits 0. Links are 1 minute with
``signal_before_end`` 20 s (Slurm may send it up to 60 s early, so a link hands on at any moment
of its first 40 s); the lease's profile is 5 minutes, which its steps never approach. One driver
polls ``status --json`` and acts when the campaign says the moment has come; the campaign is
quiescent once Slurm forgets the failed Task's retry and the cancelled lease (``MinJobAge``), and
settled about two minutes in. The tests judge what it saw.
"""

from __future__ import annotations

import json
import os
import stat
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest
from lane_helpers import FINAL, INNER_PYTHON, STEPPED, Lane, make_lane, task_of, wait_until

from browserkit import CHROMIUM, drawn_page, screenshot
from cluster import prelude
from cluster.fixture import SlurmCluster
from servatus.engine.report import disagreements
from servatus.journal import store

pytestmark = pytest.mark.cluster

TIME_LIMIT_SECONDS = 60
LEASE_LIMIT, LEASE_LIMIT_SECONDS = "00:05:00", 300
BUDGET = "00:02:00"  # two 1-minute links
STEPS = {"step-a": "10", "step-b": "15", "step-c": "5"}  # seconds each sleeps
PLAIN = ("fails", "works")


@attrs.define
class Seen:
    """What the driver saw of the campaign, for the tests to judge."""

    lane: Lane
    lease: str = ""
    lease_job: int = 0
    steps: dict[str, str] = attrs.field(factory=dict)
    """Each lease step's Task key by its step id, as ``start`` printed them."""
    retry: dict[str, Any] = attrs.field(factory=dict)
    """``plan --retry-failed --json``'s document, once it planned."""
    cancelled: str = ""
    """What ``cancel --allocation`` of the lease said, once its steps were over."""
    held: list[str | None] = attrs.field(factory=list)
    """Why each ``plan --retry-failed`` before it selected ``fails`` held it."""
    readings: dict[str, list[str]] = attrs.field(factory=dict)
    """Each Task's distinct executions, in order."""
    quiescent: tuple[dict[str, Any], dict[str, Any]] = ({}, {})
    """``report --json`` and ``status --json``, back to back, at the first quiescent status."""
    settled: tuple[dict[str, Any], dict[str, Any]] = ({}, {})
    """The same once every allocation is settled (Slurm forgot every job)."""
    offline: tuple[dict[str, Any], dict[str, Any]] = ({}, {})
    """``report --offline --json`` and ``status --offline --json`` of the settled campaign."""
    page: Path = Path()
    took: float = 0.0

    def reading(self, document: dict[str, Any]) -> None:
        for task in document["tasks"]:
            seen = self.readings.setdefault(task["key"], [])
            if not seen or seen[-1] != task["execution"]:
                seen.append(task["execution"])


def _json(lane: Lane, *args: str) -> dict[str, Any]:
    done = lane.ok(*args)
    document: dict[str, Any] = json.loads(done.stdout)
    return document


def _attempt(document: dict[str, Any], allocation: str) -> dict[str, Any]:
    [found] = [a for a in document["attempts"] if a["allocation_id"] == allocation]
    return found  # type: ignore[no-any-return]


def _of(document: dict[str, Any], key: str) -> list[dict[str, Any]]:
    """The key's attempts in ``status --json``, in recording order."""
    return [a for a in document["attempts"] if key in a["task_keys"]]


def _execution(attempt: dict[str, Any], key: str) -> str:
    """The key's execution in one attempt of ``status --json`` (an allocation packs several)."""
    return str(attempt["executions"][attempt["task_keys"].index(key)])


def _unsettled(lane: Lane) -> set[str]:
    """Accepted allocations the journal holds no settlement of yet."""
    state = store.read(lane.launch / "state")
    accepted = {r.allocation_id for r in state.receipts} | {
        r.allocation_id for r in state.resolutions if r.job is not None
    }
    return accepted - {s.allocation_id for s in state.settlements}


def _retry(lane: Lane, seen: Seen) -> None:
    """``plan --retry-failed`` once ``fails`` failed: it holds the Task ACTIVE while Slurm still
    lists its job (until ``MinJobAge``), then selects it; that plan is saved and submitted."""
    planned = _json(lane, "plan", "state", "--retry-failed", "--json")
    if "fails" not in planned["decision"]["selected"]:
        seen.held.append(dict(planned["decision"]["held"]).get("fails"))
        return
    seen.retry = _json(lane, "plan", "state", "--retry-failed", "--json", "--output", "retry.json")
    lane.ok("submit", "state", "retry.json")


def drive(lane: Lane, seen: Seen) -> None:
    lane.put_worker()
    lane.put_chain_worker()
    lane.limit("00:01:00", "00:00:20")
    # The lease's own profile, longer: a 1-minute job may get its pre-limit signal at once
    # (Slurm sends it up to 60 s early), which would stop the steps before they end.
    toml = lane.launch / "SERVATUS.toml"
    lease_profile = f'\n[profiles.lease.resources]\ntime_limit = "{LEASE_LIMIT}"\n'
    lane.put(toml, toml.read_text() + lease_profile)
    tasks = [
        {"key": "chain", "args": [INNER_PYTHON, "chain_step.py", "usr175,exit0"]},
        lane.worker_task("fails", "exit", "3"),
        lane.worker_task("works", "exit", "0"),
    ]
    lane.ok("ensure", "state", lane.tasks_file(tasks))
    [(seen.lease, seen.lease_job)], _ = lane.lease("--hold", "2", profile="lease")
    only_chain = ("--only", "chain", "--budget", BUDGET, "--max-links", "2")
    lane.ok("plan", "state", *only_chain, "--output", "chain.json")
    lane.ok("submit", "state", "chain.json")
    lane.ok("plan", "state", "--only", "fails", "--only", "works", "--output", "plain.json")
    lane.ok("submit", "state", "plain.json")
    steps = lane.tasks_file(
        [lane.worker_task(key, "sleep", seconds) for key, seconds in STEPS.items()], "steps.jsonl"
    )

    def quiescent() -> dict[str, Any] | None:
        acted = bool(seen.cancelled and seen.retry)  # before this reading: it shows their work
        document = lane.status()
        seen.reading(document)
        lease = _attempt(document, seen.lease)["observation"]
        executions = {task["key"]: task["execution"] for task in document["tasks"]}
        if seen.steps and not seen.cancelled and all(executions[k] in FINAL for k in STEPS):
            seen.cancelled = lane.ok("cancel", "state", "--allocation", seen.lease).stdout
        if not seen.steps and lease is not None and lease["start"] is not None:
            started = lane.ok("start", "state", steps, "--lease", seen.lease).stdout
            seen.steps = {step: key for step, _job, key in STEPPED.findall(started)}
        if not seen.retry and executions["fails"] == "FAILED":
            _retry(lane, seen)
        return document if acted and document["quiescent"] else None

    wait_until("the campaign quiescent", quiescent, seconds=5 * 60, every=2)
    seen.quiescent = (_json(lane, "report", "state", "--json"), lane.status())

    def settled() -> bool:
        lane.status()  # records what settled
        return not _unsettled(lane)

    wait_until("every allocation settled", settled, seconds=120, every=3)
    seen.settled = (_json(lane, "report", "state", "--json"), lane.status())
    seen.offline = (
        _json(lane, "report", "state", "--offline", "--json"),
        _json(lane, "status", "state", "--offline", "--json"),
    )
    lane.ok("report", "state", "--output", "report.html")
    seen.page = lane.launch / "report.html"


@prelude.scenario(seconds=119)
def driven(cluster: SlurmCluster, base: Path) -> Iterator[Seen]:
    """The campaign driven to its end, beside the lane's other slow scenarios
    (``cluster.prelude``)."""
    lane = make_lane(cluster, "ssh", base, "report")
    seen = Seen(lane)
    began = time.monotonic()
    try:
        drive(lane, seen)
        seen.took = time.monotonic() - began
        print(f"the campaign settled in {seen.took:.0f} s")
        yield seen
    finally:
        lane.cleanup()


@pytest.fixture(scope="module")
def seen() -> Iterator[Seen]:
    with prelude.outcome(__name__) as done:
        yield done


def _lanes(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {lane["key"]: lane for lane in report["lanes"]}


def _running(lane: dict[str, Any]) -> list[dict[str, Any]]:
    return [s for s in lane["segments"] if s["span"] == "running"]


def _run_time(attempt: dict[str, Any], slot: int = 0) -> int:
    """An attempt's measured seconds, from status's observation, as status rounds them."""
    observation = attempt["observation"]
    end = observation["ends"][slot]
    return int(end["at"] - observation["start"] + 0.5)


def test_the_campaign_ran_a_chain_a_lease_and_a_failed_retry(seen: Seen) -> None:
    _, status = seen.settled
    print(seen.readings, "retry held as", seen.held, "cancel said", seen.cancelled)
    tasks = {t["key"]: (t["execution"], t["detail"], t["exit_code"]) for t in status["tasks"]}
    assert tasks == {
        "chain": ("SUCCEEDED", None, 0),
        "fails": ("FAILED", None, 3),
        "works": ("SUCCEEDED", None, 0),
        **{key: ("SUCCEEDED", None, 0) for key in STEPS},
    }
    assert task_of(status, "chain")["link"] == {"position": 2, "of": 2, "budget": 120}
    links = _of(status, "chain")
    assert [link["link"]["position"] for link in links] == [1, 2]
    assert links[0]["executions"] == ["STOPPED"] and 0 in links[0]["observation"]["handed"]
    assert links[0]["observation"]["limit"] is not None
    assert links[0]["observation"]["ends"][0]["exit_code"] == 75
    # --retry-failed selected the failed Task alone: the chain was never STOPPED between links.
    assert seen.retry["decision"]["selected"] == ["fails"]
    assert [a["task_keys"] for a in seen.retry["allocations"]] == [["fails"]]
    assert set(seen.held) <= {"ACTIVE"}, seen.held  # only while Slurm listed the failed job
    assert [_execution(a, "fails") for a in _of(status, "fails")] == ["FAILED", "FAILED"]
    assert set(seen.steps.values()) == set(STEPS)
    for step, key in seen.steps.items():
        [attempt] = _of(status, key)
        assert (attempt["allocation_id"], attempt["within"]) == (step, seen.lease)
    lease = _attempt(status, seen.lease)
    assert lease["slots"] == 2 and lease["job"] == seen.lease_job
    assert lease["observation"]["stop"] is not None  # cancelled,
    assert lease["observation"]["limit"] is None  # long before its pre-limit signal
    assert {r[-1] for r in seen.readings.values()} <= FINAL
    assert not [key for key, r in seen.readings.items() if "LOST" in r], seen.readings


@pytest.mark.parametrize("moment", ["quiescent", "settled"])
def test_the_report_agrees_with_status_read_at_the_same_moment(seen: Seen, moment: str) -> None:
    report, status = getattr(seen, moment)
    assert status["quiescent"]
    assert disagreements(report, status) == []
    assert report["online"] is True
    assert not [s for lane in report["lanes"] for s in lane["segments"] if s["open"]]
    drawn = {s["allocation"] for lane in report["lanes"] for s in lane["segments"]}
    drawn |= {s["allocation"] for lease in report["leases"] for s in lease["segments"]}
    assert drawn == {a["allocation_id"] for a in status["attempts"]}


def test_the_chain_lane_has_a_running_segment_per_link_numbered_in_order(seen: Seen) -> None:
    report, status = seen.settled
    lane = _lanes(report)["chain"]
    links = _of(status, "chain")
    running = _running(lane)
    assert [s["link"] for s in running] == [1, 2]
    assert {s["link"] for s in lane["segments"]} == {1, 2}
    assert [s["allocation"] for s in running] == [link["allocation_id"] for link in links]
    assert [s["job"] for s in running] == [link["job"] for link in links]
    assert [(s["execution"], s["exit_code"]) for s in running] == [
        ("STOPPED (yielded)", 75),
        ("SUCCEEDED", 0),
    ]
    for segment, link in zip(running, links, strict=True):
        observation = link["observation"]
        assert segment["start"] == observation["start"]
        assert segment["end"] == observation["ends"][0]["at"]
    # One limit point, at link 1's pre-limit signal (link 2 ended long before its own).
    assert lane["points"] == [
        {
            "kind": "limit",
            "at": links[0]["observation"]["limit"],
            "allocation": links[0]["allocation_id"],
        }
    ]
    assert lane["budget"] == 120
    [chain] = report["summary"]["chains"]
    total = sum(_run_time(link) for link in links)
    assert chain == {
        "key": "chain", "run_time": total, "complete": True, "budget": 120, "link": 2, "links": 2,
    }  # fmt: skip
    assert task_of(status, "chain")["run_time"] == {"total": total, "complete": True}


def test_the_lease_lane_lists_its_steps_and_holds_busy_and_idle_slot_hours(seen: Seen) -> None:
    report, status = seen.settled
    [lease] = report["leases"]
    attempt = _attempt(status, seen.lease)
    observation = attempt["observation"]
    assert (lease["allocation"], lease["job"], lease["slots"]) == (seen.lease, seen.lease_job, 2)
    assert lease["steps"] == list(seen.steps)
    assert [s["span"] for s in lease["segments"]] == ["queued", "running"]
    held = lease["segments"][1]
    assert (held["start"], held["end"]) == (observation["start"], observation["stop"])
    assert lease["points"] == []
    expected = (observation["stop"] - observation["start"]) * 2 / 3600
    assert lease["held_slot_hours"] == pytest.approx(expected)
    assert lease["held_slot_hours"] > 0 and lease["idle_slot_hours"] >= 0
    assert lease["busy_slot_hours"] > 0
    assert lease["held_slot_hours"] == pytest.approx(
        lease["busy_slot_hours"] + lease["idle_slot_hours"]
    )
    # Three steps into two slots: two busy at once, never three; then none.
    counts = [count for _, count in lease["busy"]]
    assert max(counts) == 2 and counts[-1] == 0, lease["busy"]
    # Busy slot time is the steps' running spans: no step outran the lease.
    lanes = _lanes(report)
    spans = [s for key in STEPS for s in _running(lanes[key])]
    busy = sum(s["end"] - s["start"] for s in spans) / 3600
    assert lease["busy_slot_hours"] == pytest.approx(busy)
    for key, seconds in STEPS.items():
        [segment] = _running(lanes[key])
        assert segment["within"] == seen.lease and segment["job"] == seen.lease_job
        assert segment["end"] - segment["start"] >= int(seconds)


def test_the_retried_lane_draws_both_failed_attempts(seen: Seen) -> None:
    report, status = seen.settled
    lane = _lanes(report)["fails"]
    attempts = _of(status, "fails")
    assert [s["span"] for s in lane["segments"]] == ["queued", "running"] * 2
    running = _running(lane)
    assert [s["allocation"] for s in running] == [a["allocation_id"] for a in attempts]
    assert [s["job"] for s in running] == [a["job"] for a in attempts]
    assert running[0]["job"] != running[1]["job"]
    assert [(s["execution"], s["exit_code"]) for s in running] == [("FAILED", 3), ("FAILED", 3)]
    assert lane["exit_code"] == 3 and lane["allocation"] == attempts[1]["allocation_id"]
    # The retry was planned after the first attempt ended: its queued span starts after that.
    assert lane["segments"][2]["start"] >= running[0]["end"] - 5  # two clocks, one machine


def test_the_summary_counts_and_costs_what_status_shows(seen: Seen) -> None:
    report, status = seen.settled
    summary = report["summary"]
    assert summary["tasks"] == status["counts"] == {"SUCCEEDED": 5, "FAILED": 1}
    counted = Counter(e for a in status["attempts"] for e in a["executions"])
    assert summary["attempts"] == dict(counted) == {"SUCCEEDED": 5, "FAILED": 2, "STOPPED": 1}
    assert summary["unknown_resources"] == 0
    # Each attempt outside the lease asks 1 CPU and 100 MiB for 1 minute (two links, two plain
    # Tasks, one retry); the lease 2 slots of them for its 5 minutes; the steps nothing more.
    asked = (5 * TIME_LIMIT_SECONDS + 2 * LEASE_LIMIT_SECONDS) / 3600
    assert summary["requested"]["cpu_hours"] == pytest.approx(asked)
    assert summary["requested"]["memory_gib_hours"] == pytest.approx(asked * 100 / 1024)
    outside = [a for a in status["attempts"] if a["task_keys"] and not a["within"]]
    seconds = sum(_run_time(a, slot) for a in outside for slot in range(len(a["task_keys"])))
    lease = _attempt(status, seen.lease)["observation"]
    used = (seconds + (lease["stop"] - lease["start"]) * 2) / 3600
    assert summary["used"]["cpu_hours"] == pytest.approx(used)
    assert summary["used"]["gpu_hours"] == 0
    assert summary["run_time"]["count"] == summary["queue_wait"]["count"] == 8


def test_the_offline_report_of_the_settled_campaign_agrees_with_the_online_one(
    seen: Seen,
) -> None:
    online, _ = seen.settled
    offline, offline_status = seen.offline
    print(json.dumps(offline["leases"], indent=1))
    assert offline["online"] is False
    assert disagreements(offline, offline_status) == []
    for ours, theirs in zip(offline["lanes"], online["lanes"], strict=True):
        assert ours["key"] == theirs["key"]
        assert (ours["segments"], ours["points"]) == (theirs["segments"], theirs["points"])
    assert offline["leases"] == online["leases"]
    for part in ("attempts", "requested", "used", "queue_wait", "run_time"):
        assert offline["summary"][part] == online["summary"][part], part
    # A chain's budget line is its Task's, and the Task keeps status --offline's word, as its
    # lane does (docs/report.md): the link and run time status --offline knows.
    [chain] = offline["summary"]["chains"]
    task = task_of(offline_status, "chain")
    run_time = task["run_time"] and task["run_time"]["total"]
    assert (chain["link"], chain["run_time"]) == (task["link"]["position"], run_time)


def test_the_page_is_owner_only_and_draws_a_lane_per_task_and_the_lease(
    seen: Seen, tmp_path: Path
) -> None:
    assert stat.S_IMODE(os.stat(seen.page).st_mode) == 0o600
    if CHROMIUM is None:
        pytest.skip("Debian's chromium is not installed (apt-get install chromium)")
    report, _ = seen.settled
    drawn = drawn_page(seen.page)
    assert drawn.lanes == {
        lane["key"]: [s["span"] for s in lane["segments"]] for lane in report["lanes"]
    }
    assert set(drawn.lanes) == {"chain", *PLAIN, *STEPS}
    assert drawn.leases == {seen.lease: ["queued", "running"]}
    assert sorted(drawn.steps[seen.lease]) == sorted(STEPS)  # each step inside the lease's lane
    image = tmp_path / "report.png"
    screenshot(seen.page, image)
    print(f"screenshot: {image}")
