"""The report at scale: run ``python benchmarks/bench_report.py [--tasks N] [--attempts A]``.

A campaign of N Tasks (default 10,000), one per allocation, each submitted A times (default 3):
every attempt but the last fails and is retried with ``plan --retry-failed``, and each job's
start and end markers are spread over a day on FakeScheduler's clock. Then, in this process
through ``servatus.cli.main``, it measures:

* ``report --json`` (the data) and ``report --output FILE`` (the page): CPU and wall time, the
  remote commands each ran, and the bytes written;
* the page in Debian's Chromium, headless and offline (``tests/browserkit.py``): the wall time of
  ``--dump-dom`` (start to DOM printed) and the page's own ``data-render-ms``
  (``performance.now()`` once it drew: parsing the data, packing lanes, drawing the lanes in
  view). Skipped, with the reason printed, where chromium is missing.

Targets: the page a few MB at 10,000 Tasks x 3 attempts; the report under a few seconds; the
browser's render about a second.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import random
import re
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from benchkit import CONFIG, roster

from servatus import Campaign
from servatus.cli import main
from servatus.config import Profile
from servatus.testing import FakeScheduler


class Clock:
    def __init__(self) -> None:
        self.at = time.time() - 86400

    def __call__(self) -> float:
        return self.at


def campaign(root: Path, tasks: int, attempts: int) -> tuple[Campaign, FakeScheduler]:
    config = root / "SERVATUS.toml"
    config.write_text(CONFIG.format(per=1, memory=100))
    profile = Profile.load(config)
    clock = Clock()
    fake = FakeScheduler(clock=clock)
    chance = random.Random(16)
    made = Campaign.ensure(root / "state", roster(tasks), connect=fake)
    plan = made.plan(profile)
    for round_ in range(attempts):
        made.submit(plan)
        last = round_ == attempts - 1
        for job in fake.jobs[-len(plan.allocations) :]:
            clock.at += chance.uniform(0, 2)
            fake.start(job.job)
            clock.at += chance.uniform(0, 2)
            fake.finish(job.job, 0 if last and chance.random() > 0.05 else 1)
        fake.purge()
        made.status()  # settles them
        if not last:
            plan = made.plan(profile, retry_failed=True)
    return made, fake


def measured(args: list[str], fake: FakeScheduler) -> tuple[float, float, int, str]:
    calls = len(fake.calls)
    out = io.StringIO()
    cpu, wall = time.process_time(), time.perf_counter()
    with contextlib.redirect_stdout(out):
        code = main(args, connect=fake)
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    assert code == 0, code
    return cpu, wall, len(fake.calls) - calls, out.getvalue()


def main_(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=10_000)
    parser.add_argument("--attempts", type=int, default=3)
    options = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="servatus-bench-report-") as directory:
        root = Path(directory)
        began = time.perf_counter()
        made, fake = campaign(root, options.tasks, options.attempts)
        print(
            f"campaign: {options.tasks:,} Tasks x {options.attempts} attempts, built in "
            f"{time.perf_counter() - began:.1f} s"
        )
        state = str(made.path)
        cpu, wall, calls, out = measured(["report", state, "--json"], fake)
        print(
            f"report --json:   {cpu:6.2f} s CPU {wall:6.2f} s wall, {calls} remote commands, "
            f"{len(out.encode()) / 1e6:.1f} MB"
        )
        page = root / "report.html"
        cpu, wall, calls, _ = measured(["report", state, "--output", str(page)], fake)
        print(
            f"report --output: {cpu:6.2f} s CPU {wall:6.2f} s wall, {calls} remote commands, "
            f"{page.stat().st_size / 1e6:.1f} MB page"
        )
        from browserkit import CHROMIUM, dump_dom

        if CHROMIUM is None:
            print("browser: skipped, Debian's chromium is not installed")
            return
        for _ in range(2):  # the first run also warms the browser's own files
            dom, seconds = dump_dom(page)
        found = re.search(r'data-render-ms="([0-9]+)"', dom)
        lanes = dom.count('<g class="lane"')
        print(
            f"browser: --dump-dom {seconds:.2f} s wall; the page drew in "
            f"{found.group(1) if found else '?'} ms ({lanes} lanes in view of "
            f"{options.tasks:,})"
        )


if __name__ == "__main__":
    main_()
