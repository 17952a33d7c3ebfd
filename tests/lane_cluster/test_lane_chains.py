"""Chains of links on the real cluster (ADR 0005): markers, job states and what each step got.

One module fixture submits every chain at once through ``submit_allocations`` (``lane_chain.py``,
on the login node as alice) and watches them together, so the cases cost the slowest one (a
link run to its early stop, about two minutes), not their sum. Each link is 2 minutes with
``signal_before_end`` 40 s; ``chain_step.py`` (``lane_chain_worker.py``) behaves per link as its
modes say. While they run, the fixture polls ``squeue --states=all`` every second and keeps every
state each job was seen in, and runs the two raw ``scancel`` cases (before and after the
pre-limit signal; links wait with ``afterany`` and claim their handoffs). Status is not
asserted here: only markers, job states, the allocation logs and the environment each step
recorded.
"""

from __future__ import annotations

import json
import math
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest
from lane_helpers import HERE, INNER_PYTHON, Lane, limited, make_lane, wait_until

from cluster import prelude
from cluster.fixture import SlurmCluster

pytestmark = pytest.mark.cluster

MINUTES = 2
BEFORE = 40
SHORT = (1, 20)
"""The short chains' link minutes and signal_before_end: the other end of the ADR's range."""
GRACE = 10  # servatus_slurm.script.GRACE, which the test must not import (it runs outside)
BUDGET = 1000
SPENT = 100
FINAL = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "OUT_OF_MEMORY", "NODE_FAIL", "(forgotten)"}

CASES: dict[str, tuple[dict[str, str], int]] = {
    # chain: ({Task key: per-link modes}, links)
    "yields": ({"y": "exit75,exit75,exit0"}, 3),
    "ignores": ({"i": "ignore,exit0"}, 2),
    "dies": ({"d": "die,exit0"}, 2),
    "fails": ({"f": "exit3"}, 3),
    "succeeds": ({"s": "exit0"}, 3),
    "middle": ({"m": "exit75,exit3"}, 4),
    "packed": ({"p0": "exit0", "p1": "exit75,exit0"}, 2),
    "packed-save": ({"q0": "save8,exit0", "q1": "usr175,exit0"}, 2),
    "cancel-early": ({"ce": "ignore"}, 3),
    "cancel-late": ({"cl": "ignore,exit0"}, 2),
    "ignores-short": ({"is": "ignore,exit0"}, 2),
    "dies-short": ({"ds": "die,exit0"}, 2),
}
SHORT_CASES = ("ignores-short", "dies-short")
"""Submitted with a profile of SHORT links, in a campaign of their own."""


@attrs.define
class Chains:
    lane: Lane
    links: dict[str, list[tuple[str, int]]]
    """Each chain's links in order: (allocation id, job)."""
    seen: dict[int, list[str]]
    """Every state each job was listed in, in order."""
    ended: dict[int, float]
    """When each job was first seen in a final state (the poll's clock)."""
    end_times: dict[int, str]
    """``scontrol show job``'s EndTime of each job once final."""
    cancelled: dict[str, float]
    """When the raw scancel cases cancelled their first link."""

    def markers(self, chain: str, position: int) -> set[str]:
        allocation, job = self.links[chain][position - 1]
        prefix = f"{job}."
        return {
            kind.removeprefix(prefix)
            for kind in self.lane.marker_kinds(allocation)
            if kind.startswith(prefix)
        }

    def mtime(self, chain: str, position: int, kind: str) -> float:
        allocation, job = self.links[chain][position - 1]
        return (Path(self.lane.log_root) / f"servatus-{allocation}.{job}.{kind}").stat().st_mtime

    def state(self, chain: str, position: int) -> str:
        job = self.links[chain][position - 1][1]
        return self.seen.get(job, ["(never listed)"])[-1]

    def never_ran(self, chain: str, position: int) -> bool:
        allocation, job = self.links[chain][position - 1]
        ran = {"RUNNING", "COMPLETING", "COMPLETED"} & set(self.seen.get(job, []))
        return not ran and not self.lane.marker_kinds(allocation)

    def run(self, key: str, chain: str, position: int) -> dict[str, Any] | None:
        job = self.links[chain][position - 1][1]
        path = self.lane.runs / f"{key}.{job}.json"
        return json.loads(path.read_text()) if path.exists() else None

    def log(self, chain: str, position: int) -> str:
        allocation, job = self.links[chain][position - 1]
        return (Path(self.lane.log_root) / f"servatus-{allocation}-{job}.out").read_text()


def _toml(lane: Lane, minutes: int, before: int) -> str:
    return limited(lane.toml(), time_limit=f"00:0{minutes}:00", signal=f"00:00:{before}")


def _submit(lane: Lane, cases: list[str], toml: str, minutes: int, state: str) -> list[Any]:
    """One submission of ``cases`` through ``lane_chain.py``; its receipts, chain by chain."""
    tasks = [
        {"key": key, "args": [INNER_PYTHON, "chain_step.py", modes]}
        for name in cases
        for key, modes in CASES[name][0].items()
    ]
    chains = []
    for name in cases:
        keys, links = CASES[name]
        chains.append(
            {
                "keys": list(keys),
                "links": links,
                "minutes": minutes,
                "task_links": [links] * len(keys),
                "budget": BUDGET,
                "spent": {"y": SPENT} if "y" in keys else {},
            }
        )
    spec = {"toml": toml, "profile": "cpu", "state": state, "tasks": tasks, "chains": chains}
    lane.put(lane.launch / f"{state}.json", json.dumps(spec))
    submitted = lane.run([INNER_PYTHON, "lane_chain.py", f"{state}.json"], timeout=180)
    assert submitted.returncode == 0, submitted.stderr
    receipts: list[Any] = json.loads(submitted.stdout)
    return receipts


def _scancel(lane: Lane, job: int) -> None:
    done = lane.cluster.login([f"{lane.cluster.slurm_bin}/scancel", str(job)], timeout=30)
    assert done.returncode == 0, done.stderr


def _end_time(lane: Lane, job: int) -> str:
    shown = lane.cluster.login(
        [f"{lane.cluster.slurm_bin}/scontrol", "-o", "show", "job", str(job)]
    )
    found = re.search(r"\bEndTime=(\S+)", shown.stdout)
    return found[1] if found else "?"


@prelude.scenario(seconds=91)
def watched_chains(cluster: SlurmCluster, base: Path) -> Iterator[Chains]:
    """Every chain submitted and watched to its end, beside the lane's other slow scenarios
    (``cluster.prelude``)."""
    lane = make_lane(cluster, "local", base, "chains")
    try:
        lane.put(lane.launch / "SERVATUS.toml", _toml(lane, MINUTES, BEFORE))
        lane.put(lane.launch / "SERVATUS-short.toml", _toml(lane, *SHORT))
        lane.put(
            Path(lane.work_root) / "chain_step.py", (HERE / "lane_chain_worker.py").read_text()
        )
        lane.put(lane.launch / "lane_chain.py", (HERE / "lane_chain.py").read_text())
        short = list(SHORT_CASES)
        long = [name for name in CASES if name not in SHORT_CASES]
        receipts = [
            *_submit(lane, long, "SERVATUS.toml", MINUTES, "state"),
            *_submit(lane, short, "SERVATUS-short.toml", SHORT[0], "state-short"),
        ]
        links = {
            name: [(a, j) for a, j in chain]
            for name, chain in zip([*long, *short], receipts, strict=True)
        }
        watched = Chains(lane, links, {}, {}, {}, {})
        jobs = {job for chain in links.values() for _, job in chain}

        def settled() -> bool:
            listing = {job: state for job, _name, state in lane.squeue() if job in jobs}
            for job, states in watched.seen.items():
                if job not in listing and states[-1] not in FINAL:
                    states.append("(forgotten)")  # purged between two polls
            for job, state in listing.items():
                states = watched.seen.setdefault(job, [])
                if not states or states[-1] != state:
                    states.append(state)
                if state in FINAL and job not in watched.ended:
                    watched.ended[job] = time.time()
                    watched.end_times[job] = _end_time(lane, job)
            _cancel_cases(watched)
            listed = {job for job, states in watched.seen.items() if states[-1] not in FINAL}
            return not listed and len(watched.cancelled) == 2

        wait_until("every chain to settle", settled, seconds=10 * 60)
        time.sleep(3)
        settled()
        yield watched
    finally:
        lane.cleanup()


@pytest.fixture(scope="module")
def chains() -> Iterator[Chains]:
    with prelude.outcome(__name__) as seen:
        yield seen


def _cancel_cases(watched: Chains) -> None:
    """A raw ``scancel`` of a running first link, before and after the pre-limit signal."""
    lane = watched.lane
    for chain, marker, delay in (("cancel-early", "start", 5), ("cancel-late", "limit", 2)):
        if chain in watched.cancelled:
            continue
        allocation, job = watched.links[chain][0]
        path = Path(lane.log_root) / f"servatus-{allocation}.{job}.{marker}"
        if path.exists() and time.time() >= path.stat().st_mtime + delay:
            _scancel(lane, job)
            watched.cancelled[chain] = time.time()


def rounded(span: float) -> int:
    """One span of run time, as the script and status round it."""
    return max(0, math.floor(span + 0.5))


def report(chains: Chains, chain: str) -> str:
    """What the cluster did, for the ADR's record (shown with ``-s``)."""
    rows = []
    for position, (_allocation, job) in enumerate(chains.links[chain], 1):
        rows.append(
            f"{chain} link {position}: job {job} states {chains.seen.get(job)} "
            f"EndTime {chains.end_times.get(job)} markers {sorted(chains.markers(chain, position))}"
        )
    return "\n".join(rows)


def test_a_step_that_yields_continues_with_its_run_time(chains: Chains) -> None:
    print(report(chains, "yields"))
    for position in (1, 2):  # each handoff claimed by the next link (taken)
        assert chains.markers("yields", position) == {
            "start",
            "end.0.75",
            "handoff.0",
            "taken.0",
        }
        assert chains.state("yields", position) == "COMPLETED"
    assert chains.markers("yields", 3) == {"start", "end.0.0"}
    assert chains.state("yields", 3) == "COMPLETED"
    expected = SPENT
    for position in (1, 2, 3):
        run = chains.run("y", "yields", position)
        assert run is not None
        assert (run["SERVATUS_LINK"], run["SERVATUS_LINKS"]) == (str(position), "3")
        assert run["SERVATUS_BUDGET"] == str(BUDGET)
        assert run["SERVATUS_RUN_TIME"] == str(expected), position
        span = chains.mtime("yields", position, f"end.0.{75 if position < 3 else 0}")
        expected += rounded(span - chains.mtime("yields", position, "start"))


@pytest.mark.parametrize(
    ("chain", "key", "before"), [("ignores", "i", BEFORE), ("ignores-short", "is", SHORT[1])]
)
def test_a_step_that_ignores_the_signal_is_stopped_in_time_and_continues(
    chains: Chains, chain: str, key: str, before: int
) -> None:
    print(report(chains, chain))
    # The timer's stop marks stop first, as Slurm's own limit would.
    assert chains.markers(chain, 1) == {
        "start", "limit", "stop", "end.0.137", "handoff.0", "taken.0"
    }  # fmt: skip
    assert chains.state(chain, 1) == "COMPLETED"
    stopped = chains.mtime(chain, 1, "end.0.137") - chains.mtime(chain, 1, "limit")
    run = chains.run(key, chain, 1)
    assert run is not None
    end_time = int(run["SERVATUS_JOB_END_TIME"])
    lead = end_time - chains.mtime(chain, 1, "limit")
    margin = end_time - chains.mtime(chain, 1, "handoff.0")
    print(
        f"{chain}: signal {lead:.1f} s before SLURM_JOB_END_TIME, the timer's stop "
        f"{stopped:.2f} s after it, the handoff {margin:.1f} s before the end time"
    )
    # The earlier bound: signal + signal_before_end - G, or the end time - G if that is sooner.
    assert min(before, lead) - GRACE - 1 <= stopped <= min(before, lead) - GRACE + 2
    assert margin > GRACE - 2
    assert chains.markers(chain, 2) == {"start", "end.0.0"}
    assert chains.state(chain, 2) == "COMPLETED"


@pytest.mark.parametrize(("chain", "key"), [("dies", "d"), ("dies-short", "ds")])
def test_a_step_that_dies_of_the_signal_continues(chains: Chains, chain: str, key: str) -> None:
    print(report(chains, chain))
    markers = chains.markers(chain, 1)
    if "stop" in markers:
        # The early-stop timer fires signal_before_end - G after the signal: on a loaded machine
        # the dead step's srun can still be ending then (CI saw it once). A stop at any other
        # time would be the script taking a running job for an ended one.
        before = SHORT[1] if chain in SHORT_CASES else BEFORE
        late = chains.mtime(chain, 1, "stop") - chains.mtime(chain, 1, "limit")
        print(f"{chain}: stop {late:.1f} s after the signal")
        assert late >= before - GRACE - 1, late
        markers.discard("stop")
    assert markers == {"start", "limit", "end.0.138", "handoff.0", "taken.0"}
    assert chains.state(chain, 1) == "COMPLETED"
    assert chains.markers(chain, 2) == {"start", "end.0.0"}
    assert chains.state(chain, 2) == "COMPLETED"
    assert chains.run(key, chain, 2) is not None


def test_a_failure_before_the_signal_ends_the_chain_unallocated(chains: Chains) -> None:
    print(report(chains, "fails"))
    assert chains.markers("fails", 1) == {"start", "end.0.3"}
    assert chains.state("fails", 1) == "FAILED"
    assert "servatus: link 1/3 hands nothing on; it removes the rest of the chain" in (
        chains.log("fails", 1)
    )
    assert chains.never_ran("fails", 2) and chains.never_ran("fails", 3)


def test_a_success_on_the_first_link_ends_the_chain(chains: Chains) -> None:
    print(report(chains, "succeeds"))
    assert chains.markers("succeeds", 1) == {"start", "end.0.0"}
    assert chains.state("succeeds", 1) == "FAILED"  # nothing handed on: exit 1, by design
    assert chains.never_ran("succeeds", 2) and chains.never_ran("succeeds", 3)


def test_a_middle_link_that_hands_nothing_on_cascades_the_rest_away(chains: Chains) -> None:
    print(report(chains, "middle"))
    assert chains.markers("middle", 1) == {"start", "end.0.75", "handoff.0", "taken.0"}
    assert chains.markers("middle", 2) == {"start", "end.0.3"}
    assert chains.state("middle", 2) == "FAILED"
    assert chains.never_ran("middle", 3) and chains.never_ran("middle", 4)


def test_a_packed_chain_goes_on_with_the_task_that_yields(chains: Chains) -> None:
    print(report(chains, "packed"))
    assert chains.markers("packed", 1) == {
        "start",
        "end.0.0",
        "end.1.75",
        "handoff.1",
        "taken.1",
    }
    assert chains.state("packed", 1) == "COMPLETED"
    assert chains.markers("packed", 2) == {"start", "end.1.0"}
    assert chains.run("p0", "packed", 2) is None
    run = chains.run("p1", "packed", 2)
    assert run is not None and run["SERVATUS_SLOT"] == "1"


def test_a_packed_link_waits_for_a_task_still_saving_after_the_signal(chains: Chains) -> None:
    """Slot 1 exits 75 at the signal, slot 0 saves for 8 s first: the link waits for both
    watchers before it writes its over file and decides, so both hand on and both run in link 2.
    (The signal's trap once moved the wait loop on to the last watcher, and the link ended
    while slot 0 still saved: ``tests/slurm/test_script.py`` shows that in real shells.)"""
    print(report(chains, "packed-save"))
    assert chains.markers("packed-save", 1) == {
        "start", "limit", "end.0.75", "handoff.0", "taken.0", "end.1.75", "handoff.1", "taken.1"
    }  # fmt: skip
    saved = chains.mtime("packed-save", 1, "end.0.75") - chains.mtime("packed-save", 1, "limit")
    assert saved >= 7, saved
    assert chains.state("packed-save", 1) == "COMPLETED"
    assert chains.markers("packed-save", 2) == {"start", "end.0.0", "end.1.0"}
    for slot, key in enumerate(("q0", "q1")):
        run = chains.run(key, "packed-save", 2)
        assert run is not None and run["SERVATUS_SLOT"] == str(slot), (key, run)


def test_a_raw_scancel_before_the_signal_removes_the_rest_unallocated(chains: Chains) -> None:
    """ADR 0005, conflict 1 revisited: the link's TERM trap, before any handoff can exist,
    removes its later links while they still pend on it (afterany), so none is allocated."""
    print(report(chains, "cancel-early"))
    early = chains.markers("cancel-early", 1)
    assert {"start", "stop"} <= early and "handoff.0" not in early and "limit" not in early
    assert chains.state("cancel-early", 1) == "CANCELLED"
    assert chains.never_ran("cancel-early", 2) and chains.never_ran("cancel-early", 3)
    assert chains.state("cancel-early", 2) in ("CANCELLED", "(forgotten)")


def test_a_raw_scancel_after_the_signal_continues_the_chain(chains: Chains) -> None:
    """The spec's behaviour: the cancelled link is CANCELLED but handed its slot on; afterany
    releases the next link, which claims the handoff and runs the Task to its end."""
    print(report(chains, "cancel-late"))
    late = chains.markers("cancel-late", 1)
    assert {"start", "limit", "stop", "handoff.0", "taken.0"} <= late
    assert chains.state("cancel-late", 1) == "CANCELLED"
    assert chains.markers("cancel-late", 2) == {"start", "end.0.0"}
    assert chains.state("cancel-late", 2) == "COMPLETED"
    run = chains.run("cl", "cancel-late", 2)
    assert run is not None and run["SERVATUS_LINK"] == "2"
    claim = Path(chains.lane.log_root) / (
        f"servatus-{chains.links['cancel-late'][0][0]}.{chains.links['cancel-late'][0][1]}.taken.0"
    )
    assert claim.read_text().strip() == str(chains.links["cancel-late"][1][1])
