"""What a budget costs a plan: ``python benchmarks/bench_plan_budget.py [--tasks N] [--links K]``.

A fresh campaign of N Tasks (default 10,000, shaped as in ``bench_lane.py``) is planned in this
process through ``servatus.cli.main`` with ``connect=FakeScheduler()`` (human output to
/dev/null, the plan saved with ``--output``), twice: without a budget, then with
``--budget`` worth exactly K full links (default 32, the most a chain has), so each of the N/P
allocations (P Tasks per allocation, ``--per-allocation``, default 1: the worst case) becomes a
chain of K links. For each it prints the CPU time (``time.process_time``), the wall time and the
saved document's size, and the ratio of the budgeted plan to the plain one, both measured in
this run. A first plan asks Slurm nothing, with a budget too; the run exits 1 if either plan ran
a remote command. ``--profile`` prints the top cProfile entries of each.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import os
import pstats
import sys
import tempfile
import time
from pathlib import Path

from benchkit import CONFIG, roster

from servatus.campaign import create_state
from servatus.cli import main as servatus
from servatus.config import format_duration
from servatus.testing import FakeScheduler

LINK = 600
"""Each link's time limit (seconds): the budget is K of them."""

CHAIN_PROFILE = """
[profiles.chain.resources]
cpus = 1
memory_mib = 100
time_limit = "00:10:00"
signal_before_end = "00:01:00"
"""
"""A profile with the pre-limit signal a budget needs, beside benchkit's ``one``."""


def measure(
    label: str, args: list[str], saved: Path, fake: FakeScheduler, *, profile: bool
) -> tuple[float, float, int]:
    profiler = cProfile.Profile() if profile else None
    with open(os.devnull, "w") as sink, contextlib.redirect_stdout(sink):
        cpu, wall = time.process_time(), time.perf_counter()
        if profiler is not None:
            profiler.enable()
        code = servatus([*args, "--output", str(saved)], connect=fake)
        if profiler is not None:
            profiler.disable()
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    if code != 0:
        raise SystemExit(f"servatus {' '.join(args)} exited {code}")
    if fake.calls:
        raise SystemExit(f"{label} ran {len(fake.calls)} remote commands; a first plan runs none")
    if profiler is not None:
        print(f"--- cProfile: {label} ---", file=sys.stderr)
        pstats.Stats(profiler, stream=sys.stderr).sort_stats("cumulative").print_stats(30)
    return cpu, wall, saved.stat().st_size


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--tasks", type=int, default=10_000)
    parser.add_argument("--links", type=int, default=32)
    parser.add_argument("--per-allocation", type=int, default=1)
    parser.add_argument("--profile", action="store_true", help="print cProfile entries")
    options = parser.parse_args()
    per, links = options.per_allocation, options.links
    with tempfile.TemporaryDirectory(prefix="bench-plan-budget-") as directory:
        work = Path(directory)
        config = work / "SERVATUS.toml"
        config.write_text(CONFIG.format(per=per, memory=100 * per) + CHAIN_PROFILE)
        state = str(work / "state")
        create_state(state, roster(10))  # a warm-up campaign: loads the plugins
        with open(os.devnull, "w") as sink, contextlib.redirect_stdout(sink):
            servatus(["plan", state, "--config", str(config)], connect=FakeScheduler())
        state = str(work / "big")
        create_state(state, roster(options.tasks))
        base = ["plan", state, "--config", str(config), "--profile", "chain"]
        budget = format_duration(links * LINK)
        rows = [
            ("plan", *measure("plan", base, work / "plain.json", FakeScheduler(),
                              profile=options.profile)),
            (f"plan --budget {budget}", *measure(
                "plan --budget", [*base, "--budget", budget], work / "budget.json",
                FakeScheduler(), profile=options.profile,
            )),
        ]  # fmt: skip
    allocations = -(-options.tasks // per)
    print(
        f"{options.tasks} Tasks, {per} per allocation: {allocations} allocations plain, "
        f"{allocations * links} links with the budget ({links} per chain)"
    )
    width = max(len(row[0]) for row in rows)
    print(f"{'command'.ljust(width)}  {'CPU s':>7}  {'wall s':>7}  {'plan bytes':>11}")
    for label, cpu, wall, size in rows:
        print(f"{label.ljust(width)}  {cpu:7.2f}  {wall:7.2f}  {size:11d}")
    (_, plain_cpu, _, plain_size), (_, cpu, _, size) = rows
    print(
        f"ratio budget/plain: CPU {cpu / plain_cpu:.1f}x, plan bytes {size / plain_size:.1f}x "
        f"(per link: CPU {cpu / plain_cpu / links:.2f}x, bytes {size / plain_size / links:.2f}x)"
    )


if __name__ == "__main__":
    main()
