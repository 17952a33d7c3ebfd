"""Run every benchmark, one after another: ``python benchmarks/run_all.py [--skip-cluster]``.

Each runs in its own process with this Python, its output passed through. The cluster benchmarks
(``submit`` over SSH, directly and through a slow link, and the lease's latency and idle cost)
need root and the test cluster up (``python3 tests/cluster/harness.py up``); without them they
are skipped, saying why. Exit status 1 if any benchmark failed. ``benchmarks/README.md`` says
what each one measures.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
BENCHMARKS = (
    ("bench_store.py",),
    ("bench_lane.py",),  # one Task per allocation: the worst case for status
    ("bench_lane.py", "--per-allocation", "8"),
    ("bench_plan_budget.py",),
    ("bench_status_chains.py",),
    ("bench_status_cpu.py",),  # issue #33: the client's CPU in status, plan --retry-failed
    ("bench_report.py",),
    ("bench_publish.py",),
)
CLUSTER = (
    ("bench_submit_cluster.py",),
    ("bench_round_trips.py",),  # issue #33: 1,000 allocations at 50 ms, then at 0 ms
    ("bench_lease_latency.py",),
    ("bench_lease_start.py",),
    ("bench_lease_throughput.py",),
    ("bench_lease_idle.py", "--seconds", "120"),  # the 10 minutes: run it alone
)


def cluster_unavailable() -> str | None:
    """Why the cluster benchmarks cannot run now, or None."""
    if os.geteuid() != 0:
        return "it needs root"
    harness = HERE.parent / "tests" / "cluster" / "harness.py"
    done = subprocess.run(
        [sys.executable, str(harness), "env"], capture_output=True, text=True, check=False
    )
    if done.returncode != 0 or not json.loads(done.stdout or "{}").get("running"):
        return "the test cluster is down (python3 tests/cluster/harness.py up)"
    return None


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--skip-cluster", action="store_true", help="skip the cluster benchmarks")
    options = parser.parse_args()
    runs = list(BENCHMARKS)
    reason = "--skip-cluster" if options.skip_cluster else cluster_unavailable()
    if reason is None:
        runs += CLUSTER
    failed = []
    for name, *arguments in runs:
        shown = " ".join([name, *arguments])
        print(f"=== {shown} ===", flush=True)
        began = time.perf_counter()
        command = [sys.executable, str(HERE / name), *arguments]
        code = subprocess.run(command, check=False).returncode
        elapsed = time.perf_counter() - began
        print(f"=== {shown}: exit {code} after {elapsed:.0f} s ===\n", flush=True)
        if code != 0:
            failed.append(shown)
    if reason is not None:
        names = ", ".join(name for name, *_ in CLUSTER)
        print(f"=== {names}: skipped: {reason} ===")
    if failed:
        raise SystemExit(f"failed: {', '.join(failed)}")


if __name__ == "__main__":
    main()
