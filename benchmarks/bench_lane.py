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

For each: CPU time of this process (``time.process_time``), wall time, and the remote commands
it ran (counted from ``FakeScheduler.calls``). Targets: every command except ``submit`` under
1 s at 100,000 Tasks; ``status`` and a re-plan run exactly 2 remote commands, ``submit`` of N
allocations 1 ping + N ``sbatch``. ``--profile`` prints the top cProfile entries of each command.
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
from collections.abc import Sequence
from pathlib import Path

from servatus.campaign import create_state
from servatus.cli import main as servatus
from servatus.tasks import Task
from servatus.testing import FakeScheduler

CONFIG = """\
default_profile = "one"

[target]
slurm_bin = "/usr/bin"
work_root = "/scratch/alice/sweep"
log_root = "/scratch/alice/sweep/logs"
partitions = ["debug"]
max_tasks_per_allocation = 1
max_cpus_per_allocation = 2
max_memory_mib_per_allocation = 2000
max_time_limit = "01:00:00"

[profiles.one.resources]
cpus = 1
memory_mib = 100
time_limit = "00:01:00"
"""

FAIL_EVERY = 10
TARGET = 1.0


def roster(count: int) -> list[Task]:
    """Tasks shaped like the quickstart's (as in bench_store.py)."""
    return [
        Task(
            f"lr-{i % 7}e-4-seed-{i}",
            ["/usr/bin/python3", "train.py", "--epochs", "90"],
            stdin=b'{"lr": 0.0003, "seed": %d}' % i,
            env={"WANDB_MODE": "offline"} if i % 2 else None,
        )
        for i in range(count)
    ]


class Bench:
    """Runs servatus commands in-process against one FakeScheduler and records each row."""

    def __init__(self, fake: FakeScheduler, *, profile: bool) -> None:
        self.fake = fake
        self.profile = profile
        self.rows: list[tuple[str, float, float, Counter[str]]] = []

    def run(self, label: str, *args: str) -> None:
        self.fake.calls.clear()
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
        self.rows.append((label, cpu, wall, calls))
        if profiler is not None:
            print(f"--- cProfile: {label} ---", file=sys.stderr)
            stats = pstats.Stats(profiler, stream=sys.stderr)
            stats.sort_stats("cumulative").print_stats(40)
            stats.sort_stats("tottime").print_stats(15)


def _name(call: Sequence[str]) -> str:
    base = os.path.basename(call[0]) if call else ""
    return "ping" if base == "sbatch" and "--version" in call else base


def _calls(calls: Counter[str]) -> str:
    total = sum(calls.values())
    if not total:
        return "0"
    return f"{total} ({', '.join(f'{n} {name}' for name, n in sorted(calls.items()))})"


def lane(count: int, work: Path, *, profile: bool) -> Bench:
    work.mkdir()
    config = work / "SERVATUS.toml"
    config.write_text(CONFIG)
    fake = FakeScheduler()
    bench = Bench(fake, profile=profile)
    state = str(work / "state")
    create_state(state, roster(count))
    first = str(work / "first.json")
    bench.run("plan (first)", "plan", state, "--config", str(config), "--output", first)
    bench.run("submit", "submit", state, first)
    bench.run("status --offline", "status", state, "--offline")
    for index, job in enumerate(fake.jobs):
        fake.finish(job.job, 1 if index % FAIL_EVERY == 0 else 0)
    bench.run("status (all listed)", "status", state)
    fake.purge()
    bench.run("plan --retry-failed", "plan", state, "--config", str(config), "--retry-failed")
    return bench


def warm_up(work: Path) -> None:
    """Load the plugins and import every module once, so no row pays for start-up."""
    lane(10, work, profile=False)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=100_000, metavar="N")
    parser.add_argument("--profile", action="store_true", help="cProfile each command")
    options = parser.parse_args()
    with tempfile.TemporaryDirectory() as temporary:
        warm_up(Path(temporary) / "warm")
        began = time.perf_counter()
        bench = lane(options.tasks, Path(temporary) / "lane", profile=options.profile)
        total = time.perf_counter() - began
    print(f"{options.tasks} Tasks, 1 Task per allocation, FakeScheduler in-process")
    print(f"{'command':<22}  {'CPU':>8}  {'wall':>8}  {'target':>6}  remote commands")
    for label, cpu, wall, calls in bench.rows:
        verdict = "-" if label == "submit" else ("ok" if wall < TARGET else "OVER")
        print(f"{label:<22}  {cpu:>6.3f} s  {wall:>6.3f} s  {verdict:>6}  {_calls(calls)}")
    print(f"whole run (setup, finishing jobs and Python's own work included): {total:.1f} s")
    expected = {
        "plan (first)": Counter[str](),
        "submit": Counter({"ping": 1, "sbatch": options.tasks}),
        "status --offline": Counter[str](),
        "status (all listed)": Counter({"squeue": 1, "find": 1}),
        "plan --retry-failed": Counter({"squeue": 1, "find": 1}),
    }
    wrong = [label for label, _, _, calls in bench.rows if calls != expected[label]]
    print(f"remote commands as expected: {'yes' if not wrong else 'NO: ' + ', '.join(wrong)}")
    if wrong:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
