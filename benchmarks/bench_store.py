"""How the campaign store scales: run ``python benchmarks/bench_store.py``.

For campaigns of 1,000, 10,000 and 100,000 Tasks it measures the bytes the journal grows by
when ``servatus append`` records one more Task (it must not grow with the campaign), the wall
time of that command in a fresh process, the wall time of opening the campaign, and of one
compaction (lock, read, rewrite, sync, rename), which runs at most once per 1,024 records.
Targets: constant bytes per append, and under 1 s for the append and the open at 100,000 Tasks.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchkit import roster

from servatus.campaign import Campaign, create_state
from servatus.journal import store

SIZES = (1_000, 10_000, 100_000)
REPEATS = 3


def servatus(*args: str) -> float:
    began = time.perf_counter()
    command = [sys.executable, "-m", "servatus", *args]
    done = subprocess.run(command, capture_output=True, check=False)
    elapsed = time.perf_counter() - began
    if done.returncode != 0:
        raise SystemExit(done.stderr.decode())
    return elapsed


def measure(count: int, work: Path) -> dict[str, float]:
    state = work / f"state-{count}"
    create_state(state, roster(count, "python"), appendable=True)
    growth: list[int] = []
    append_times: list[float] = []
    for repeat in range(REPEATS):
        one = work / f"one-{count}-{repeat}.jsonl"
        one.write_text(f'{{"key": "extra-{repeat}", "args": ["python", "train.py"]}}\n')
        inode, before = (state / store.JOURNAL).stat().st_ino, store.journal_size(state)
        append_times.append(servatus("append", str(state), str(one)))
        if (state / store.JOURNAL).stat().st_ino != inode:
            raise SystemExit("an append rewrote the journal")
        growth.append(store.journal_size(state) - before)
    open_times = []
    for _ in range(REPEATS):
        began = time.perf_counter()
        campaign = Campaign.open(state)
        open_times.append(time.perf_counter() - began)
        assert len(campaign.tasks) == count + REPEATS
    began = time.perf_counter()
    with store.writing(state) as writer:
        writer.compact()
    compact = time.perf_counter() - began
    return {
        "compact": compact,
        "journal": store.journal_size(state),
        "bytes": statistics.median(growth),
        "append": statistics.median(append_times),
        "open": statistics.median(open_times),
    }


def main() -> None:
    with tempfile.TemporaryDirectory() as temporary:
        work = Path(temporary)
        startup = statistics.median(servatus("--version") for _ in range(REPEATS))
        print(f"python -m servatus --version (start-up alone): {startup:.3f} s")
        print(
            f"{'Tasks':>8}  {'journal bytes':>13}  {'bytes/append':>12}  "
            f"{'servatus append':>15}  {'open':>7}  {'compact':>7}"
        )
        for count in SIZES:
            row = measure(count, work)
            print(
                f"{count:>8}  {row['journal']:>13.0f}  {row['bytes']:>12.0f}  "
                f"{row['append']:>13.3f} s  {row['open']:>5.3f} s  {row['compact']:>5.3f} s"
            )


if __name__ == "__main__":
    main()
