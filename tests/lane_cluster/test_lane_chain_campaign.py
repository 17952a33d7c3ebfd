"""Chains through the product on the real cluster: ``plan --budget``, ``submit``, ``status``,
``cancel`` and ``reconcile`` as a user runs them (issue #14, "Proof on the real cluster").

One module fixture plans and submits every chain at the start, in two lanes at once: on the login
node (the CLI inside the root) the spec's budget-counting application (``lane_budget_worker.py``)
and the two ``submit`` runs killed between two links' ``sbatch``; over SSH the protocol rows, a
packed chain and the cancellations. It then watches them together, polling ``status --json`` of
every campaign and keeping each Task's readings in order, cancels mid-chain when the markers say
the moment has come, and extends the budget chain once it succeeded. Links are 1 minute with
``signal_before_end`` 20 s, so the file costs about the budget chain plus its extension.

"Allocated" means the link got a ``start`` marker: a link Slurm removed under ``afterok`` never
ran, and its marker prefix is empty.
"""

from __future__ import annotations

import itertools
import json
import math
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest
from lane_helpers import FINAL, HERE, INNER_PYTHON, Lane, make_lane, wait_until
from lane_traps import Trap, kill_cases, wrap_sbatch

from cluster import prelude
from cluster.fixture import SlurmCluster

pytestmark = pytest.mark.cluster

BUDGET = "00:03:00"  # three 1-minute links
BUDGET_SECONDS = 180
PACKED_BUDGET = "00:02:00"

PROTOCOL = {  # key: chain_step.py modes per link, under BUDGET
    "s": "exit0",  # exit 0 on link 1
    "y": "exit75,exit75,exit0",  # exit 75 on a middle link
    "i": "ignore,exit0",  # ignores SIGUSR1
    "d": "die,exit0",  # dies of SIGUSR1 (138)
    "f": "exit3",  # nonzero before SIGUSR1
    "b": "exit75",  # 75 on every link, the last planned one included
    "ct": "exit75,ignore",  # cancel --task while link 2 runs
    "ca": "ignore,exit0",  # cancel --allocation <link 2> while link 1 runs
    "cs": "ignore,exit0",  # raw scancel of link 1 after its pre-limit signal
}
PACKED = {"p0": "exit0", "p1": "exit75,exit0"}
CAPPED_BUDGET = "00:05:00"  # five 1-minute links, capped at two: the chain stops short

# The SIGKILL at the second ``sbatch --parsable``: link 1 submitted and recorded, then killed
# at link 2's sbatch ("before") or after it answered ("after"); each arm is consumed by one call.
COUNTING_SBATCH = f"""\
#!/bin/sh
here=$(dirname "$0")
case " $* " in
*" --parsable "*) ;;
*) exec /usr/bin/sbatch "$@" ;;
esac
if [ -e "$here/mode" ]; then
    echo x >>"$here/calls"
    if [ "$(wc -l <"$here/calls")" -ge 2 ]; then
        mode=$(cat "$here/mode")
        rm -f "$here/mode" "$here/calls"
        # The script of the link never sent, for a late sbatch of it after reconcile.
        if [ "$mode" = before ]; then cat >"$here/late.sh"; fi
        case $mode in
{kill_cases("/usr/bin/sbatch", 1)}        esac
    fi
fi
exec /usr/bin/sbatch "$@"
"""


def rounded(span: float) -> int:
    return max(0, math.floor(span + 0.5))


def hms(seconds: int) -> str:
    return f"{seconds // 3600:02d}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


@attrs.define
class Campaign:
    """One campaign (state directory) in one lane and everything read of it while it ran."""

    lane: Lane
    state: str
    readings: dict[str, list[tuple[str, str | None, int | None, str | None]]] = attrs.field(
        factory=dict
    )
    """Each Task's distinct (execution, detail, exit, link) readings, in order."""
    last: dict[str, Any] = attrs.field(factory=dict)
    """The last ``status --json`` document."""
    notes: list[str] = attrs.field(factory=list)

    def poll(self) -> dict[str, Any]:
        document = self.lane.status(self.state)
        for task in document["tasks"]:
            link = task["link"]
            reading = (
                task["execution"],
                task["detail"],
                task["exit_code"],
                f"{link['position']}/{link['of']}" if link else None,
            )
            seen = self.readings.setdefault(task["key"], [])
            if not seen or seen[-1] != reading:
                seen.append(reading)
        self.last = document
        return document

    def settled(self) -> bool:
        return bool(self.last) and all(task["execution"] in FINAL for task in self.last["tasks"])

    def task(self, key: str) -> dict[str, Any]:
        [found] = [task for task in self.last["tasks"] if task["key"] == key]
        return found

    def links(self, key: str) -> list[tuple[str, int | None]]:
        """The key's allocations as recorded: (allocation id, job), in recording order (a chain's
        links in link order, then an extension's)."""
        attempts = [a for a in self.last["attempts"] if key in a["task_keys"]]
        return [(a["allocation_id"], a["job"]) for a in attempts]

    def kinds(self, key: str, position: int) -> set[str]:
        """The run markers of the key's link (``start``, ``end.0.75``, ...), job-prefix cut."""
        allocation, _job = self.links(key)[position - 1]
        return {kind.split(".", 1)[1] for kind in self.lane.marker_kinds(allocation) if "." in kind}

    def allocated(self, key: str) -> list[int]:
        """The positions of the key's links that got a start marker."""
        return [
            position
            for position in range(1, len(self.links(key)) + 1)
            if "start" in self.kinds(key, position)
        ]

    def link_executions(self, key: str) -> list[str]:
        """Each of the key's links' execution as ``status --json`` lists its attempts."""
        attempts = [a for a in self.last["attempts"] if key in a["task_keys"]]
        return [a["executions"][a["task_keys"].index(key)] for a in attempts]

    def marker(self, key: str, position: int, kind: str) -> Path | None:
        allocation, _job = self.links(key)[position - 1]
        found = sorted(Path(self.lane.log_root).glob(f"servatus-{allocation}.*.{kind}"))
        return found[0] if found else None

    def span(self, key: str, position: int, slot: int = 0) -> tuple[float, float]:
        start = self.marker(key, position, "start")
        ends = sorted(
            Path(self.lane.log_root).glob(
                f"servatus-{self.links(key)[position - 1][0]}.*.end.{slot}.*"
            )
        )
        assert start is not None and ends, (key, position)
        return start.stat().st_mtime, ends[0].stat().st_mtime

    def run(self, key: str, position: int) -> dict[str, Any] | None:
        job = self.links(key)[position - 1][1]
        path = self.lane.runs / f"{key}.{job}.json"
        return json.loads(path.read_text()) if path.exists() else None

    def text(self) -> list[str]:
        shown = self.lane.servatus("status", self.state)
        assert shown.returncode == 0, shown.stderr
        return shown.stdout.splitlines()

    def row(self, key: str) -> list[str]:
        [line] = [line for line in self.text() if line.split()[:1] == [key]]
        return line.split()

    def report(self, *keys: str) -> str:
        rows = []
        for key in keys:
            rows.append(f"{self.state}/{key}: readings {self.readings.get(key)}")
            for position in range(1, len(self.links(key)) + 1):
                link, kinds = self.links(key)[position - 1], sorted(self.kinds(key, position))
                rows.append(f"  link {position} {link}: {kinds}")
        return "\n".join(rows + self.notes)


@attrs.define
class Chains:
    local: Lane
    ssh: Lane
    budget: Campaign
    before: Campaign
    after: Campaign
    protocol: Campaign
    packed: Campaign
    killed: dict[str, Any]
    extension: dict[str, Any]
    cancels: dict[str, Any]
    capped: Campaign
    capped_retry: dict[str, Any]


def _planned(lane: Lane, state: str, tasks: dict[str, list[str]], *options: str) -> None:
    lane.ok(
        "ensure",
        state,
        lane.tasks_file(
            [{"key": key, "args": args} for key, args in tasks.items()], f"{state}.jsonl"
        ),
    )
    lane.ok("plan", state, *options, "--output", f"{state}.json")


def _step(modes: str) -> list[str]:
    return [INNER_PYTHON, "chain_step.py", modes]


def _cancel_cases(chains: Chains) -> None:
    """``cancel --task`` while ct's link 2 runs, ``cancel --allocation <link 2>`` while ca's
    link 1 runs, and a raw ``scancel`` of cs's link 1 two seconds after its ``limit``."""
    protocol, done = chains.protocol, chains.cancels
    lane = protocol.lane
    if "ct" not in done and len(protocol.links("ct")) == 3:
        start = protocol.marker("ct", 2, "start")
        if start is not None and time.time() >= start.stat().st_mtime + 3:
            done["ct"] = lane.servatus("cancel", "protocol", "--task", "ct")
    if "ca" not in done and len(protocol.links("ca")) == 3:
        start = protocol.marker("ca", 1, "start")
        if start is not None and time.time() >= start.stat().st_mtime + 3:
            middle = protocol.links("ca")[1][0]
            done["ca"] = lane.servatus("cancel", "protocol", "--allocation", middle)
            done["ca-before"] = protocol.task("ca")
    if "cs" not in done and len(protocol.links("cs")) == 3:
        limit = protocol.marker("cs", 1, "limit")
        if limit is not None and time.time() >= limit.stat().st_mtime + 2:
            job = protocol.links("cs")[0][1]
            done["cs"] = lane.cluster.login([f"{lane.cluster.slurm_bin}/scancel", str(job)])


def _retry_capped(chains: Chains) -> None:
    """Once the capped chain settled and Slurm forgot its links: ``plan --retry-failed`` with
    the same budget (held ``ACTIVE`` until then)."""
    capped, retry = chains.capped, chains.capped_retry
    if "plan" in retry or not capped.settled():
        return
    shown = capped.lane.servatus(
        "plan", "capped", "--retry-failed", "--budget", CAPPED_BUDGET, "--json"
    )
    assert shown.returncode == 0, shown.stderr
    document = json.loads(shown.stdout)
    retry.setdefault("held", []).append(document["decision"]["held"])
    if document["decision"]["selected"]:
        retry["plan"] = document
        retry["task"] = capped.task("cap")
        retry["row"] = capped.row("cap")


def _extend(chains: Chains) -> None:
    """Once the budget chain succeeded: one more link, with a budget one link past its run
    time; once that ran and Slurm forgot it, the same budget planned again."""
    budget, extension = chains.budget, chains.extension
    if budget.task("bud")["execution"] != "SUCCEEDED":
        return
    if "submitted" in extension:
        if len(budget.links("bud")) > extension["links"] and "again" not in extension:
            again = chains.local.servatus(
                "plan", "state", "--retry", "bud", "--budget", extension["budget"]
            )
            if "Slurm still lists its earlier work" not in again.stderr:
                extension["again"] = again
                total = budget.task("bud")["run_time"]["total"]
                spent = hms(math.ceil(total / 60) * 60)
                extension["spent"] = chains.local.servatus(
                    "plan", "state", "--retry", "bud", "--budget", spent
                )
        return
    run_time = budget.task("bud")["run_time"]
    if not run_time["complete"]:
        return
    # Larger than the budget the chain succeeded under (the same or a smaller one is SPENT): a
    # minute more leaves room for one or two 1-minute links; the worker, its result published,
    # exits 0 in the first, so Slurm removes any second one unallocated.
    larger = hms(BUDGET_SECONDS + 60)
    planned = chains.local.servatus(
        "plan", "state", "--retry", "bud", "--budget", larger, "--output", "extend.json"
    )
    if planned.returncode == 1 and "Slurm still lists its earlier work" in planned.stderr:
        extension["refused"] = planned.stderr  # until MinJobAge purges the last link's job
        return
    assert planned.returncode == 0, planned.stderr
    extension.update(total=run_time["total"], budget=larger, links=len(budget.links("bud")))
    extension["plan"] = planned.stdout
    extension["submitted"] = chains.local.servatus("submit", "state", "extend.json")


@prelude.scenario(seconds=182)
def watched_chains(cluster: SlurmCluster, base: Path) -> Iterator[Chains]:
    """Every campaign planned, submitted and watched to its end, beside the lane's other slow
    scenarios (``cluster.prelude``)."""
    local = make_lane(cluster, "local", base, "campaign")
    ssh = make_lane(cluster, "ssh", base, "campaign")
    try:
        for lane in (local, ssh):
            lane.put_chain_worker()
        local.put(Path(local.work_root) / "budget.py", (HERE / "lane_budget_worker.py").read_text())
        trap: Trap = wrap_sbatch(local, COUNTING_SBATCH)
        for lane in (local, ssh):
            lane.limit("00:01:00", "00:00:20")

        _planned(local, "state", {"bud": [INNER_PYTHON, "budget.py"]}, "--budget", BUDGET)
        _planned(local, "before", {"kb": _step("exit75,exit75,exit0")}, "--budget", BUDGET)
        _planned(local, "after", {"ka": _step("exit75,exit75,exit0")}, "--budget", BUDGET)
        _planned(
            ssh,
            "protocol",
            {k: _step(m) for k, m in PROTOCOL.items()},
            "--budget",
            BUDGET,
            "--tasks-per-allocation",
            "1",
        )
        _planned(
            ssh,
            "packed",
            {k: _step(m) for k, m in PACKED.items()},
            "--budget",
            PACKED_BUDGET,
            "--tasks-per-allocation",
            "2",
        )
        _planned(
            ssh, "capped", {"cap": _step("exit75")}, "--budget", CAPPED_BUDGET, "--max-links", "2"
        )
        ssh.ok("submit", "protocol", "protocol.json")
        ssh.ok("submit", "capped", "capped.json")
        ssh.ok("submit", "packed", "packed.json")
        local.ok("submit", "state", "state.json")
        killed: dict[str, Any] = {}
        for mode, state in (("before", "before"), ("after", "after")):
            trap.arm(mode)
            killed[mode] = local.servatus("submit", state, f"{state}.json")
            killed[f"{mode}-reconcile"] = local.servatus("reconcile", state)
        killed["answer"] = trap.answer

        watched = Chains(
            local,
            ssh,
            Campaign(local, "state"),
            Campaign(local, "before"),
            Campaign(local, "after"),
            Campaign(ssh, "protocol"),
            Campaign(ssh, "packed"),
            killed,
            {},
            {},
            Campaign(ssh, "capped"),
            {},
        )
        campaigns = [
            watched.budget,
            watched.before,
            watched.after,
            watched.protocol,
            watched.packed,
            watched.capped,
        ]
        started = time.monotonic()

        def settled() -> bool:
            for campaign in campaigns:
                campaign.poll()
                # After each poll, not each round of six: cs's scancel has an 8 s window (2 s
                # after its signal, before its stop 10 s after), and a round is slower when
                # the other scenarios run beside this one.
                if watched.protocol.last:
                    _cancel_cases(watched)
            _extend(watched)
            _retry_capped(watched)
            ready = "plan" in watched.capped_retry and all(
                c.settled() for c in campaigns if c not in (watched.before, watched.after)
            )
            # the killed campaigns keep an unresolved link until the 15-minute rule: their
            # Tasks settle once reconciled later, below
            for campaign in (watched.before, watched.after):
                ready = ready and not any(
                    t["execution"] in ("QUEUED", "RUNNING", "ENDING")
                    for t in campaign.last["tasks"]
                )
            return (
                ready
                and "again" in watched.extension
                and len(watched.cancels) >= 3
                and (len(watched.budget.links("bud")) > watched.extension["links"])
            )

        wait_until("every chain to settle", settled, seconds=12 * 60, every=3)
        for state, campaign in (("before", watched.before), ("after", watched.after)):
            killed[f"{state}-later"] = local.later("reconcile", state)
            campaign.poll()
        _late_link(watched, trap)
        watched.before.poll()  # kb read again once the late link ran nothing
        print(f"chains settled in {time.monotonic() - started:.0f} s")
        yield watched
    finally:
        local.cleanup()
        ssh.cleanup()


@pytest.fixture(scope="module")
def chains() -> Iterator[Chains]:
    with prelude.outcome(__name__) as seen:
        yield seen


def _late_link(chains: Chains, trap: Trap) -> None:
    """kb's link 2, which reconcile recorded as never submitted, reaches Slurm after all:
    its script sent by hand, after link 1's (long forgotten) job, as the lost sbatch would."""
    lane, killed = chains.local, chains.killed
    script = (trap.directory / "late.sh").read_text()
    first = chains.before.links("kb")[0][1]
    sent = lane.cluster.login(
        [f"{lane.cluster.slurm_bin}/sbatch", "--parsable", f"--dependency=afterany:{first}"],
        input=script,
    )
    killed["late"] = sent
    assert sent.returncode == 0, sent.stderr
    job = int(sent.stdout.strip().split(";")[0])
    killed["late-job"] = job

    def ended() -> bool:
        return not [
            row
            for row in lane.squeue()
            if row[0] == job and row[2] in ("PENDING", "RUNNING", "COMPLETING")
        ]

    time.sleep(2)
    wait_until("the late link to end", ended, seconds=120)
    killed["late-state"] = [row for row in lane.squeue() if row[0] == job]


def _run_times(campaign: Campaign, key: str, positions: list[int]) -> list[int]:
    """What SERVATUS_RUN_TIME each link should have said: the plan's 0 plus the earlier links'
    rounded marker spans."""
    expected, total = [], 0
    for position in positions:
        expected.append(total)
        start, end = campaign.span(key, position)
        total += rounded(end - start)
    return [*expected, total]


def test_the_budget_counting_application_runs_a_chain_end_to_end(chains: Chains) -> None:
    budget = chains.budget
    print(budget.report("bud"))
    links = budget.links("bud")[:3]
    assert len(links) == 3
    assert [budget.kinds("bud", j) for j in (1, 2)] == [
        {"start", "limit", "end.0.75", "handoff.0", "taken.0"}
    ] * 2
    assert budget.kinds("bud", 3) == {"start", "limit", "end.0.0"}
    # Links 1 and 2 left their over file after their handoffs, so links 2 and 3 found it at
    # once and did not wait for it; the chain's last link hands nothing on and makes none.
    logs = Path(budget.lane.log_root)
    overs = [sorted(logs.glob(f".servatus-{allocation}.{job}.over")) for allocation, job in links]
    assert [len(found) for found in overs] == [1, 1, 0], overs
    for allocation, job in links[1:]:
        assert "no over file" not in (logs / f"servatus-{allocation}-{job}.out").read_text()
    *expected, total = _run_times(budget, "bud", [1, 2, 3])
    for position, run_time in enumerate(expected, 1):
        run = budget.run("bud", position)
        assert run is not None
        assert (run["SERVATUS_LINK"], run["SERVATUS_LINKS"]) == (str(position), "3")
        assert run["SERVATUS_BUDGET"] == "180"
        assert run["SERVATUS_RUN_TIME"] == str(run_time), position
    assert chains.extension["total"] == total  # status's RUN TIME, read before the extension
    readings = budget.readings["bud"]
    assert ("SUCCEEDED", None, 0, "3/3") in readings
    assert [r for r in readings if r[0] == "LOST"] == []
    # Published once, from the third link, with the checkpoint resumed through all three.
    published = (chains.local.runs / "bud.published").read_text().split()
    assert published == [str(links[2][1])]
    checkpoint = json.loads((Path(chains.local.results) / "bud" / "checkpoint.json").read_text())
    assert checkpoint["links"] == [1, 2, 3]


def test_the_extension_runs_one_more_link_and_the_same_budget_is_spent(chains: Chains) -> None:
    budget, extension = chains.budget, chains.extension
    print(budget.report("bud"))
    print(extension["plan"])
    assert extension["submitted"].returncode == 0, extension["submitted"].stderr
    assert "extends SUCCEEDED" in extension["plan"]
    links = budget.links("bud")
    planned = len(links) - 3
    assert planned in (1, 2) and f"{planned} link" in extension["plan"]
    assert budget.allocated("bud") == [1, 2, 3, 4]  # exactly one more link ran
    run = budget.run("bud", 4)
    assert run is not None
    assert (run["SERVATUS_LINK"], run["SERVATUS_LINKS"]) == ("1", str(planned))
    assert run["SERVATUS_RUN_TIME"] == str(extension["total"])
    start, end = budget.span("bud", 4)
    task = budget.task("bud")
    assert task["execution"] == "SUCCEEDED"
    assert task["run_time"] == {
        "total": extension["total"] + rounded(end - start),
        "complete": True,
    }
    # The same budget again selects nothing: the extension's chain succeeded under it, so it
    # is SPENT whatever room its measured run time leaves (the worker, its result published,
    # exits at once); so is a budget its run time reached (to the minute).
    again, spent = extension["again"], extension["spent"]
    print(again.stdout, again.stderr, spent.stdout, spent.stderr)
    assert again.returncode == 0 and spent.returncode == 0, (again.stderr, spent.stderr)
    held = re.compile(r"^\s+bud\s+SPENT$", flags=re.MULTILINE)
    assert held.search(again.stdout), again.stdout
    assert held.search(spent.stdout), spent.stdout
    row = budget.row("bud")
    assert row[2:] == [
        "SUCCEEDED",
        "0",
        hms(task["run_time"]["total"]),
        "/",
        extension["budget"],
        f"1/{planned}",
        links[3][0],
    ]


def test_the_protocol_rows_read_as_the_spec_says(chains: Chains) -> None:
    protocol = chains.protocol
    print(protocol.report(*"sy idfb".replace(" ", "")))
    final = {key: protocol.task(key) for key in "syidfb"}
    shown = {
        k: (t["execution"], t["detail"], t["exit_code"], t["link"]["position"])
        for k, t in final.items()
    }
    assert shown == {
        "s": ("SUCCEEDED", None, 0, 1),
        "y": ("SUCCEEDED", None, 0, 3),
        "i": ("SUCCEEDED", None, 0, 2),
        "d": ("SUCCEEDED", None, 0, 2),
        "f": ("FAILED", None, 3, 1),
        "b": ("STOPPED", "budget spent", 75, 3),
    }
    allocated = {key: protocol.allocated(key) for key in "syidfb"}
    assert allocated == {
        "s": [1],
        "y": [1, 2, 3],
        "i": [1, 2],
        "d": [1, 2],
        "f": [1],
        "b": [1, 2, 3],
    }
    # Each link as status reads it (the Task itself reads its latest link, QUEUED between).
    links = {key: protocol.link_executions(key) for key in "syidfb"}
    print(links)
    assert links == {
        "s": ["SUCCEEDED", "STOPPED", "STOPPED"],
        "y": ["STOPPED", "STOPPED", "SUCCEEDED"],
        "i": ["STOPPED", "SUCCEEDED", "STOPPED"],
        "d": ["STOPPED", "SUCCEEDED", "STOPPED"],
        "f": ["FAILED", "STOPPED", "STOPPED"],
        "b": ["STOPPED", "STOPPED", "STOPPED"],
    }
    # The link's own early stop marks stop, as Slurm's limit would.
    assert protocol.kinds("i", 1) == {
        "start", "limit", "stop", "end.0.137", "handoff.0", "taken.0"
    }  # fmt: skip
    assert protocol.kinds("d", 1) == {"start", "limit", "end.0.138", "handoff.0", "taken.0"}
    for key in "syidfb":
        assert not [r for r in protocol.readings[key] if r[0] == "LOST"], key
        positions = protocol.allocated(key)
        *expected, total = _run_times(protocol, key, positions)
        for position, run_time in zip(positions, expected, strict=True):
            run = protocol.run(key, position)
            assert run is not None and run["SERVATUS_RUN_TIME"] == str(run_time), (key, position)
        assert final[key]["run_time"] == {"total": total, "complete": True}, key
    rows = {key: protocol.row(key) for key in "syidfb"}
    assert rows["b"][2:6] == ["STOPPED", "(budget", "spent)", "75"]
    assert rows["b"][-2] == "3/3" and rows["b"][-4:-2] == ["/", BUDGET]
    assert rows["s"][2:4] == ["SUCCEEDED", "0"] and rows["s"][-2] == "1/3"
    assert rows["f"][2:4] == ["FAILED", "3"] and rows["f"][-2] == "1/3"


def test_a_packed_chain_continues_with_the_task_that_yielded(chains: Chains) -> None:
    packed = chains.packed
    print(packed.report("p0", "p1"))
    assert packed.links("p0") == packed.links("p1")
    assert len(packed.links("p0")) == 2
    assert packed.kinds("p0", 1) == {"start", "end.0.0", "end.1.75", "handoff.1", "taken.1"}
    assert packed.kinds("p0", 2) == {"start", "end.1.0"}
    assert packed.run("p0", 2) is None  # the first never runs again
    run = packed.run("p1", 2)
    assert run is not None and run["SERVATUS_SLOT"] == "1"
    p0, p1 = packed.task("p0"), packed.task("p1")
    assert (p0["execution"], p0["exit_code"], p0["link"]["position"]) == ("SUCCEEDED", 0, 1)
    assert (p1["execution"], p1["exit_code"], p1["link"]["position"]) == ("SUCCEEDED", 0, 2)


def test_a_chain_capped_short_of_its_budget_yields_on_its_last_link_and_continues(
    chains: Chains,
) -> None:
    capped, retry = chains.capped, chains.capped_retry
    print(capped.report("cap"), retry.get("held"))
    assert len(capped.links("cap")) == 2
    assert capped.kinds("cap", 1) == {"start", "end.0.75", "handoff.0", "taken.0"}
    assert capped.kinds("cap", 2) == {"start", "end.0.75"}
    cap = retry["task"]
    assert (cap["execution"], cap["detail"], cap["exit_code"]) == ("STOPPED", "yielded", 75)
    assert cap["link"] == {"position": 2, "of": 2, "budget": 300}
    assert retry["row"][2:5] == ["STOPPED", "(yielded)", "75"]
    # Held only while Slurm listed the links, never SPENT; then selected with what is left.
    assert all(held in ([], [["cap", "ACTIVE"]]) for held in retry["held"]), retry["held"]
    plan = retry["plan"]
    assert plan["decision"]["selected"] == ["cap"]
    spent = plan["decision"]["spent"]["cap"]
    assert 0 <= spent < 60, spent  # two links that exited at once
    # 300 s less what ran: five full 1-minute links, or four and a rest lost to rounding
    assert len(plan["allocations"]) == (5 if spent == 0 else 4), plan["allocations"]


def test_cancellations_mid_chain(chains: Chains) -> None:
    protocol, cancels = chains.protocol, chains.cancels
    print(protocol.report("ct", "ca", "cs"))
    for name in ("ct", "ca", "cs"):
        print(name, cancels[name].returncode, cancels[name].stdout, cancels[name].stderr)
        assert cancels[name].returncode == 0, cancels[name].stderr
    print("ca before its cancel:", cancels["ca-before"])
    # cancel --task while link 2 runs: link 2 stops, link 3 never runs.
    assert protocol.allocated("ct") == [1, 2]
    assert "stop" in protocol.kinds("ct", 2) and "handoff.0" not in protocol.kinds("ct", 2)
    assert _reading(protocol, "ct") == ("STOPPED", None, 2)
    # cancel --allocation <link 2> while link 1 runs: link 1 untouched (it runs to its early
    # stop and hands on), links 2 and 3 go unallocated. The handed link 2 never started, so
    # the Task reads as link 1 left it: stopped at its time limit (ADR 0006, rule 3).
    assert cancels["ca-before"]["link"]["position"] == 1
    assert protocol.allocated("ca") == [1]
    assert protocol.kinds("ca", 1) == {"start", "limit", "stop", "end.0.137", "handoff.0"}
    assert _reading(protocol, "ca") == ("STOPPED", "time limit", 1)
    # A raw scancel after the signal: the slot hands on, Slurm calls the link CANCELLED, and
    # afterany releases link 2, which claims the handoff and runs the Task to its end (the
    # spec's "reads as a time limit, and the chain continues"); link 3 is removed unallocated.
    assert protocol.allocated("cs") == [1, 2]
    assert {"start", "limit", "stop", "handoff.0", "taken.0"} <= protocol.kinds("cs", 1)
    assert protocol.link_executions("cs")[:2] == ["STOPPED", "SUCCEEDED"]
    assert _reading(protocol, "cs") == ("SUCCEEDED", None, 2)
    for key in ("ct", "ca", "cs"):
        *_, total = _run_times(protocol, key, protocol.allocated(key))
        assert protocol.task(key)["run_time"] == {"total": total, "complete": True}, key
        assert not [r for r in protocol.readings[key] if r[0] == "LOST"], key


def _reading(campaign: Campaign, key: str) -> tuple[str, str | None, int]:
    task = campaign.task(key)
    print(key, "reads", task)
    return task["execution"], task["detail"], task["link"]["position"]


def _spans_disjoint_and_handed_on(campaign: Campaign, key: str) -> None:
    positions = [p for p in campaign.allocated(key) if campaign.kinds(key, p) != {"start"}]
    spans = [campaign.span(key, position) for position in positions]
    for (_, end), (start, _) in itertools.pairwise(spans):
        assert end <= start, (key, spans)
    for position in positions[1:]:
        handoff = campaign.marker(key, position - 1, "handoff.0")
        start = campaign.marker(key, position, "start")
        assert handoff is not None and start is not None, (key, position)
        assert handoff.stat().st_mtime <= start.stat().st_mtime


def test_a_submit_killed_between_two_links(chains: Chains) -> None:
    killed = chains.killed
    for mode in ("before", "after"):
        for step in ("", "-reconcile", "-later"):
            result = killed[mode + step]
            print(mode + step, result.returncode, result.stdout, result.stderr)
    before, after = chains.before, chains.after
    print(before.report("kb"))
    print(after.report("ka"))
    assert killed["before"].returncode == -9 and killed["after"].returncode == -9
    # before: link 1 recorded and run; link 2's sbatch never ran (link 2's start marker is the
    # late sbatch's, below, which ran nothing).
    assert before.allocated("kb") == [1, 2]
    assert "handoff.0" in before.kinds("kb", 1)
    # after: link 2 accepted by Slurm without a receipt; reconcile records it and it runs.
    [job] = re.findall(r"^([1-9][0-9]*)$", killed["answer"], flags=re.MULTILINE)
    assert after.links("ka")[1][1] == int(job)
    assert after.allocated("ka") == [1, 2]
    # One batch sent all three links' intents (ADR 0014). reconcile: the unsent links wait (75)
    # and 15 minutes on are recorded never submitted; the answered one is accepted at once, and
    # link 3 after it, never sent once servatus was killed, waits in the same way.
    unsent, third = before.links("kb")[1][0], before.links("kb")[2][0]
    assert killed["before-reconcile"].returncode == 75
    assert f"allocation {unsent}: no evidence yet" in killed["before-reconcile"].stdout
    assert f"allocation {third}: no evidence yet" in killed["before-reconcile"].stdout
    assert killed["before-later"].returncode == 0
    assert f"allocation {unsent}: recorded as not submitted" in killed["before-later"].stdout
    assert f"allocation {third}: recorded as not submitted" in killed["before-later"].stdout
    assert killed["after-reconcile"].returncode == 75
    accepted = f"allocation {after.links('ka')[1][0]}: accepted as job {job}"
    assert accepted in killed["after-reconcile"].stdout
    never = after.links("ka")[2][0]
    assert f"allocation {never}: no evidence yet" in killed["after-reconcile"].stdout
    assert killed["after-later"].returncode == 0
    assert killed["after-later"].stdout == f"allocation {never}: recorded as not submitted\n"
    assert len(before.links("kb")) == 3 and len(after.links("ka")) == 3
    # Both chains were cut short: reconcile says so once it decided, and status goes on saying
    # it with the plan that continues the Task.
    cut_after = (
        f"chain cut short: allocation {after.links('ka')[1][0]} (link 2/3) is the last link of "
        "its chain that reached Slurm; link 3 was never sent, so ka stops after it; once it has "
        "ended, continue with: servatus plan after --retry ka --budget 00:03:00 --output "
        "continue.json, and the profile it was planned with"
    )
    assert killed["after-later"].stderr == f"servatus: warning: {cut_after}\n"
    assert cut_after in after.last["warnings"]
    cut_before = (
        f"chain cut short: allocation {before.links('kb')[0][0]} (link 1/3) is the last link of "
        "its chain that reached Slurm; links 2-3 were never sent, so kb stops after it"
    )
    assert cut_before in killed["before-later"].stderr
    assert [w for w in before.last["warnings"] if w.startswith(cut_before)], before.last
    # kb's link 1 handed on to a link never sent; ka's link 2 yielded to a link never sent.
    assert ("UNRESOLVED", None, None, "3/3") in before.readings["kb"]  # the batch's last link
    assert _reading(before, "kb") == ("STOPPED", "yielded", 1)  # its link 2 was never sent
    assert _reading(after, "ka") == ("STOPPED", "yielded", 2)
    assert after.task("ka")["exit_code"] == 75
    # A late sbatch of kb's link 2 after reconcile decided it was never submitted: afterany on
    # the forgotten link 1 lets it start, but reconcile's empty claim holds the handoff, so it
    # runs nothing (its start marker alone) and the Task still reads as link 1 left it.
    print("late", killed["late"].stdout, killed["late"].stderr, killed["late-state"])
    late = killed["late-job"]
    assert before.kinds("kb", 2) == {"start"}
    print("kb's links once the late one ran:", before.links("kb"), before.link_executions("kb"))
    claim = before.marker("kb", 1, "taken.0")
    assert claim is not None and claim.stat().st_size == 0
    assert not [r for r in before.lane.run_records("kb") if f".{late}." in r]
    for campaign, key in ((before, "kb"), (after, "ka")):
        _spans_disjoint_and_handed_on(campaign, key)
        assert not [r for r in campaign.readings[key] if r[0] == "LOST"], key
