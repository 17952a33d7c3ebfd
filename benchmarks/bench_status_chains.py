"""Status of chained Tasks, or of steps in a lease, against the same Tasks without either:
``python benchmarks/bench_status_chains.py [--tasks N] [--links K] [--lease] [--profile]``.

N Tasks (default 10,000), one per allocation (the worst case), either each in its own chain of K
links (default 5: K·N intents, receipts, jobs) or each in one plain allocation. Both campaigns
are written straight into a journal (one snapshot, as compaction leaves it), and their jobs are
``sbatch``-ed into one FakeScheduler each, the links with their ``afterok`` dependencies, so the
fake runs them as Slurm would. ``servatus status`` then runs in this process through
``servatus.cli.main`` (output to /dev/null), in three moments of the chains' lives:

* ``queued``: link 1 running, links 2..K queued behind it; the plain allocations running;
* ``mid-chain``: links 1 and 2 yielded (75, handed on) and forgotten by Slurm, link 3 running,
  the rest queued. The first ``status`` settles links 1 and 2 (it records them), the second
  answers from the record; the plain allocations still running;
* ``ended``: every chain spent its budget on link K (75), every plain allocation succeeded, all
  forgotten: the first ``status`` settles everything, the second reads only the journal.

Each row is Servatus' CPU time (``time.process_time`` less the time inside ``FakeScheduler.run``,
the cluster's side) for the chained campaign, for the plain one, and their ratio. A chained
campaign holds K times the allocations, so a ratio near K is what the bigger record costs; the
chain rules themselves add the rest.

With ``--lease`` the other campaign holds one lease link (2 slots) and N steps in it, one Task
each (ADR 0009), against the same N plain one-Task allocations. Each step's taken claim (a
non-empty file, as the lease's ``ln`` leaves it) and its ``step-start`` are in the listing, and
the lease's orders directory is a start point of it. The moments are the same: ``queued``, every
step running in the running lease; ``mid-chain``, every step ended (exit 0) while the lease
runs on, so nothing settles; ``ended``, the lease forgotten, so everything settles. Both hold N
Task allocations, so a ratio near 1 is the goal.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import json
import os
import pstats
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchkit import CONFIG, roster

from servatus.cli import main as servatus
from servatus.config import Profile, target_identity
from servatus.ids import target_key
from servatus.journal import codec, records, store
from servatus.tasks import as_roster
from servatus.testing import FakeScheduler
from servatus.transport import CommandResult

START = 1_796_000_000.0
BUDGET = 5 * 60 * 60


LEASE = "1e" * 12
TERMS = records.LeaseTerms("small", 2, 1, 100, 0, 60)


class Lane:
    """One campaign and its FakeScheduler; ``status`` timed apart from the fake's own work.
    ``links`` -1 is a lease holding every Task as a step."""

    def __init__(self, work: Path, count: int, links: int, *, profile: bool) -> None:
        self.work, self.count, self.links, self.profile = work, count, links, profile
        self.clock = [START]
        self.fake = FakeScheduler(clock=lambda: self.clock[0])
        self.in_fake = 0.0
        answer = self.fake.run

        def timed(argv: Sequence[str], **options: Any) -> CommandResult:
            began = time.process_time()
            try:
                return answer(argv, **options)
            finally:
                self.in_fake += time.process_time() - began

        self.fake.run = timed  # type: ignore[method-assign]
        self.state = self._build()

    def _build(self) -> str:
        self.work.mkdir(parents=True)
        config = self.work / "SERVATUS.toml"
        config.write_text(CONFIG.format(per=1, memory=100))
        identity = target_identity(Profile.load(config).target)
        key = target_key(identity)
        tasks = roster(self.count)
        intents, receipts, scripts = [], [], []
        job = 1000  # the fake numbers its jobs from 1000, in sbatch order
        if self.links < 0:
            intents.append(records.Intent(LEASE, (), "0" * 64, START, key, 3600, lease=TERMS))
            receipts.append(records.Receipt(LEASE, job))
            scripts.append((LEASE, 1, "", None))
            for index, task in enumerate(tasks):
                step = self.step_id(index)
                intents.append(
                    records.Intent(step, (task.key,), "0" * 64, START, key, 3600, within=LEASE)
                )
                receipts.append(records.Receipt(step, job))
            tasks_done = True
        else:
            tasks_done = False
        for index, task in enumerate(() if tasks_done else tasks):
            after = ""
            for position in range(1, max(self.links, 1) + 1):
                allocation_id = f"{index:016x}{position:08x}"
                link = None
                if self.links:
                    link = records.ChainLink(position, self.links, after, (self.links,), BUDGET)
                intents.append(
                    records.Intent(allocation_id, (task.key,), "0" * 64, START, key, 3600, link)
                )
                receipts.append(records.Receipt(allocation_id, job))
                scripts.append((allocation_id, position, after, job - 1 if after else None))
                after = allocation_id
                job += 1
        state = records.CampaignState(
            campaign_id="c" * 32,
            created_at=START,
            sealed=True,
            tasks=as_roster(tasks),
            intents=tuple(intents),
            receipts=tuple(receipts),
            revision=2 * len(intents) + 2,
            targets=(records.TargetSeen(key, identity),),
        )
        payload = json.dumps(
            json.loads(codec.encode(records.Snapshot(state))),
            ensure_ascii=False,
            separators=(",", ":"),
        ).encode()
        campaign = self.work / "state"
        campaign.mkdir(mode=0o700)
        (campaign / store.JOURNAL).write_bytes(codec.MAGIC + codec.frame(payload))
        (campaign / store.JOURNAL).chmod(0o600)
        for allocation_id, position, after, depends in scripts:
            lines = [f"#SBATCH --job-name=servatus-{allocation_id}", "#SBATCH --ntasks=1"]
            if self.links > 0:
                lines += [f"servatus_link={position}", f"servatus_links={self.links}"]
                lines += [f"servatus_after={after}"] if after else []
                lines += ["# slot 0", f"# slot 0 links {self.links}"]
            argv = ["/usr/bin/sbatch", "--parsable"]
            if self.links < 0:
                lines = lines[:1]  # a lease holds no Task slots
            if depends is not None:
                argv += [f"--dependency=afterok:{depends}", "--kill-on-invalid-dep=yes"]
            self.fake.run(argv, stdin="\n".join(lines).encode())
        return str(campaign)

    @staticmethod
    def step_id(index: int) -> str:
        return f"{index:016x}5e5e5e5e"

    def steps(self, *kinds: str, exit_code: int = 0) -> None:
        """Every step's markers of ``kinds`` (``claim`` taken: a non-empty file, listed with
        its size), stamped now."""
        at = self.clock[0]
        for index in range(self.count):
            prefix = f"servatus-{self.step_id(index)}.1000."
            for kind in kinds:
                if kind == "claim":
                    self.fake.logs[prefix + "claim"] = b"# servatus.order/1"
                elif kind == "end":
                    self.fake.markers[f"{prefix}end.0.{exit_code}"] = at
                else:
                    self.fake.markers[prefix + kind] = at

    def status(self) -> float:
        """Servatus' CPU seconds for one ``servatus status``."""
        self.in_fake = 0.0
        profiler = cProfile.Profile() if self.profile else None
        with open(os.devnull, "w") as sink, contextlib.redirect_stdout(sink):
            cpu = time.process_time()
            if profiler is not None:
                profiler.enable()
            code = servatus(["status", self.state], connect=self.fake)
            if profiler is not None:
                profiler.disable()
            cpu = time.process_time() - cpu
        if code != 0:
            raise SystemExit(f"servatus status exited {code}")
        if profiler is not None:
            stats = pstats.Stats(profiler, stream=sys.stderr)
            stats.sort_stats("cumulative").print_stats(25)
            stats.sort_stats("tottime").print_stats(20)
        return cpu - self.in_fake

    def step(self, seconds: float) -> None:
        self.clock[0] += seconds

    def jobs(self, position: int) -> list[int]:
        """The job of link ``position`` of every Task (every plain allocation for 0 links)."""
        every = max(self.links, 1)
        return [item.job for item in self.fake.jobs[position - 1 :: every]]


def scenario(work: Path, count: int, links: int, *, profile: bool) -> dict[str, float]:
    """Servatus' CPU per moment (see the module docstring) for one campaign."""
    lane = Lane(work, count, links, profile=profile)
    times: dict[str, float] = {}
    lane.fake.start()
    lane.step(600)
    times["queued"] = lane.status()
    if links:
        for position in (1, 2):
            for job in lane.jobs(position):
                lane.fake.finish(job, 75)
            lane.step(60)
            lane.fake.start()
            lane.step(600)
        lane.fake.purge()
    times["mid-chain (settling)"] = lane.status()
    times["mid-chain (settled)"] = lane.status()
    for position in range(3 if links else 1, max(links, 1) + 1):
        for job in lane.jobs(position):
            lane.fake.finish(job, 75 if links else 0)
        lane.step(60)
        lane.fake.start()
        lane.step(600)
    lane.fake.purge()
    times["ended (settling)"] = lane.status()
    times["ended (settled)"] = lane.status()
    return times


def lease_scenario(work: Path, count: int, *, profile: bool) -> dict[str, float]:
    """Servatus' CPU per moment (see the module docstring) for a lease of ``count`` steps."""
    lane = Lane(work, count, -1, profile=profile)
    times: dict[str, float] = {}
    lane.fake.start()
    lane.step(5)
    lane.steps("claim", "step-start")
    lane.step(600)
    times["queued"] = lane.status()
    lane.steps("end")
    lane.step(60)
    times["mid-chain (settling)"] = lane.status()
    times["mid-chain (settled)"] = lane.status()
    for job in lane.fake.jobs:
        lane.fake.finish(job.job, 0)
    lane.step(60)
    lane.fake.purge()
    times["ended (settling)"] = lane.status()
    times["ended (settled)"] = lane.status()
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=10_000, metavar="N")
    parser.add_argument("--links", type=int, default=5, metavar="K")
    parser.add_argument("--lease", action="store_true", help="steps in one lease, not chains")
    parser.add_argument("--profile", action="store_true", help="cProfile each status")
    options = parser.parse_args()
    with tempfile.TemporaryDirectory() as temporary:
        root = Path(temporary)
        scenario(root / "warm", 10, options.links, profile=False)  # imports, plugins
        lease_scenario(root / "warm-lease", 10, profile=False)
        plain = scenario(root / "plain", options.tasks, 0, profile=options.profile)
        if options.lease:
            chained = lease_scenario(root / "leased", options.tasks, profile=options.profile)
        else:
            chained = scenario(
                root / "chained", options.tasks, options.links, profile=options.profile
            )
    if options.lease:
        print(
            f"status of {options.tasks} Tasks: as steps of one 2-slot lease against "
            f"{options.tasks} plain one-Task allocations"
        )
    else:
        print(
            f"status of {options.tasks} Tasks, one per allocation: {options.links}-link chains "
            f"({options.tasks * options.links} allocations) against plain ({options.tasks})"
        )
    column = "leased" if options.lease else "chained"
    print(f"{'moment':<22}  {column:>9}  {'plain':>9}  {'ratio':>6}")
    for moment, mine in chained.items():
        theirs = plain[moment]
        print(f"{moment:<22}  {mine:>7.3f} s  {theirs:>7.3f} s  {mine / theirs:>5.2f}x")


if __name__ == "__main__":
    main()
