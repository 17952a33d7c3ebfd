"""How the Slurm lane scales: run ``python benchmarks/bench_lane.py [--tasks N] [--profile]``.

Everything runs in this process through ``servatus.cli.main`` with ``connect=FakeScheduler()``,
so no cluster is involved and the times are Servatus' own (human output goes to /dev/null). With
N Tasks (default 100,000) and a profile that packs one Task per allocation (N allocations: N
intents and N receipts in the journal), it measures, in this order:

* ``plan`` of a fresh campaign (the first plan, saved with ``--output``);
* ``submit`` of that plan (one ping, then one intent, ``sbatch`` and receipt per allocation);
* ``status --offline`` (the journal alone);
* ``status`` against the fake after every job finished (one in ten failed), while Slurm still
  lists every job: N queue rows and 2N run markers to read;
* ``plan --retry-failed`` after Slurm forgot the ended jobs (it consults Slurm too).

For each: CPU time of this process (``time.process_time``), the part of it spent inside
``FakeScheduler.run`` (the fake's own work: answering ``sbatch``, generating the ``squeue`` and
``find`` listings, which a real cluster does on its side), Servatus' CPU time (the difference),
wall time, and the remote commands it ran (counted from ``FakeScheduler.calls``). Targets: every
command except ``submit`` under 1 s of Servatus CPU at 100,000 Tasks; ``status`` and a re-plan
run exactly 2 remote commands, ``submit`` of N allocations 1 ping + N ``sbatch``.

``--per-allocation K`` packs K Tasks per allocation (default 1, the worst case: as many intents,
receipts, queue rows and start markers as Tasks); N Tasks are N Attempts either way.
``--profile`` prints the top cProfile entries of each command.
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
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from benchkit import CONFIG, roster

from servatus.campaign import create_state
from servatus.cli import main as servatus
from servatus.testing import FakeScheduler
from servatus.transport import CommandResult

FAIL_EVERY = 10
TARGET = 1.0


class Bench:
    """Runs servatus commands in-process against one FakeScheduler and records each row."""

    def __init__(self, fake: FakeScheduler, *, profile: bool) -> None:
        self.fake = fake
        self.profile = profile
        self.rows: list[tuple[str, float, float, float, Counter[str]]] = []
        self.in_fake = 0.0
        self._depth = 0  # a batch program's stream runs each sbatch through run: count once
        fake.run = self._timed(fake.run)  # type: ignore[method-assign]
        fake.stream = self._timed(fake.stream)  # type: ignore[method-assign]

    def _timed(self, answer: Callable[..., CommandResult]) -> Callable[..., CommandResult]:
        def timed(argv: Sequence[str], **options: Any) -> CommandResult:
            began = time.process_time()
            self._depth += 1
            try:
                return answer(argv, **options)
            finally:
                self._depth -= 1
                if not self._depth:
                    self.in_fake += time.process_time() - began

        return timed

    def run(self, label: str, *args: str) -> None:
        self.fake.calls.clear()
        self.in_fake = 0.0
        profiler = cProfile.Profile() if self.profile else None
        with open(os.devnull, "w") as sink, contextlib.redirect_stdout(sink):
            cpu, wall = time.process_time(), time.perf_counter()
            if profiler is not None:
                profiler.enable()
            code = servatus(args, connect=self.fake)
            if profiler is not None:
                profiler.disable()
            wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        if code != 0:
            raise SystemExit(f"servatus {' '.join(args)} exited {code}")
        calls = Counter(_name(call) for call in self.fake.calls)
        self.rows.append((label, cpu, self.in_fake, wall, calls))
        if profiler is not None:
            print(f"--- cProfile: {label} ---", file=sys.stderr)
            stats = pstats.Stats(profiler, stream=sys.stderr)
            stats.sort_stats("cumulative").print_stats(40)
            stats.sort_stats("tottime").print_stats(15)


def _name(call: Sequence[str]) -> str:
    base = os.path.basename(call[0]) if call else ""
    if base == "sh" and len(call) > 3 and call[1] == "-c":
        base = call[3]  # the clock listing: sh -c SCRIPT find ...
    return "ping" if base == "sbatch" and "--version" in call else base


def _calls(calls: Counter[str]) -> str:
    total = sum(calls.values())
    if not total:
        return "0"
    return f"{total} ({', '.join(f'{n} {name}' for name, n in sorted(calls.items()))})"


def lane(count: int, work: Path, *, per: int, profile: bool) -> Bench:
    work.mkdir()
    config = work / "SERVATUS.toml"
    config.write_text(CONFIG.format(per=per, memory=100 * per))
    fake = FakeScheduler()
    bench = Bench(fake, profile=profile)
    state = str(work / "state")
    create_state(state, roster(count))
    first = str(work / "first.json")
    bench.run("plan (first)", "plan", state, "--config", str(config), "--output", first)
    bench.run("submit", "submit", state, first)
    bench.run("status --offline", "status", state, "--offline")
    for number, job in enumerate(fake.jobs):
        codes = [1 if (number * per + slot) % FAIL_EVERY == 0 else 0 for slot in range(job.slots)]
        fake.finish(job.job, *codes)
    bench.run("status (all listed)", "status", state)
    fake.purge()
    bench.run("plan --retry-failed", "plan", state, "--config", str(config), "--retry-failed")
    return bench


def warm_up(work: Path) -> None:
    """Load the plugins and import every module once, so no row pays for start-up."""
    lane(10, work, per=1, profile=False)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=100_000, metavar="N")
    parser.add_argument("--per-allocation", type=int, default=1, metavar="K")
    parser.add_argument("--profile", action="store_true", help="cProfile each command")
    options = parser.parse_args()
    with tempfile.TemporaryDirectory() as temporary:
        warm_up(Path(temporary) / "warm")
        began = time.perf_counter()
        per = options.per_allocation
        bench = lane(options.tasks, Path(temporary) / "lane", per=per, profile=options.profile)
        total = time.perf_counter() - began
    allocations = -(-options.tasks // per)
    print(
        f"{options.tasks} Tasks, {per} per allocation ({allocations} allocations), "
        "FakeScheduler in-process"
    )
    print(
        f"{'command':<22}  {'CPU':>8}  {'in fake':>8}  {'Servatus':>8}  {'wall':>8}  "
        f"{'target':>6}  remote commands"
    )
    for label, cpu, in_fake, wall, calls in bench.rows:
        own = cpu - in_fake
        verdict = "-" if label == "submit" else ("ok" if own < TARGET else "OVER")
        print(
            f"{label:<22}  {cpu:>6.3f} s  {in_fake:>6.3f} s  {own:>6.3f} s  {wall:>6.3f} s  "
            f"{verdict:>6}  {_calls(calls)}"
        )
    print(f"whole run (setup, finishing jobs and Python's own work included): {total:.1f} s")
    expected = {
        "plan (first)": Counter[str](),
        "submit": Counter({"ping": 1, "sbatch": allocations}),
        "status --offline": Counter[str](),
        "status (all listed)": Counter({"squeue": 1, "find": 1}),
        "plan --retry-failed": Counter({"squeue": 1, "find": 1}),
    }
    wrong = [label for label, _, _, _, calls in bench.rows if calls != expected[label]]
    print(f"remote commands as expected: {'yes' if not wrong else 'NO: ' + ', '.join(wrong)}")
    if wrong:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
