"""100 one-second Tasks through a 2-slot lease, against the same Tasks in plain allocations.

Run ``python benchmarks/bench_lease_throughput.py [--tasks N] [--per-allocation K]`` as root
with the test cluster up (``python3 tests/cluster/harness.py up``). Both runs use the CLI over
SSH (the alias' master connection), with Tasks of ``/bin/sleep 1`` (1 CPU, 100 MiB each):

* **lease**: ``plan --hold 2``, ``submit``, and once the lease runs, one ``start`` of all N Tasks.
  Timed from ``start`` returning to the last step's end marker (the file server's mtimes, read
  on this machine, which is the file server).
* **plain**: ``plan --tasks-per-allocation K`` (default 2), ``submit``. Timed from ``submit``
  returning to the last end marker. The test node has 16 CPUs, so Slurm runs up to 16 of these
  Tasks at once where the lease runs 2: a plain allocation of all N Tasks, as issue 15 words the
  baseline, does not fit the node. So besides the wall times and their ratio, each run is given
  as slot efficiency: N seconds of work over (wall time x slots used at most).

Every job it made is cancelled at the end, by name. The whole run takes 2 to 4 minutes.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

CHECKOUT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(CHECKOUT))

from bench_submit_cluster import cancel, on_login_node, sharing_the_cluster  # noqa: E402
from tests.cluster import harness  # noqa: E402 - importable once the checkout is on sys.path

from servatus.cli import main as servatus  # noqa: E402
from servatus.ids import job_name  # noqa: E402

FINAL = {"SUCCEEDED", "FAILED", "STOPPED", "LOST", "NOT_SUBMITTED"}


def config(base: str) -> str:
    return f"""\
default_profile = "tiny"

[target]
host = "{harness.ALIAS}"
slurm_bin = "{harness.SLURM_BIN}"
work_root = "{base}"
log_root = "{base}/logs"
partitions = ["{harness.PARTITION}"]
max_tasks_per_allocation = {harness.CPUS}
max_cpus_per_allocation = {harness.CPUS}
max_memory_mib_per_allocation = 4000
max_time_limit = "01:00:00"

[profiles.tiny.resources]
cpus = 1
memory_mib = 100
time_limit = "00:15:00"
signal_before_end = "00:00:30"
"""


def cli(*argv: str) -> dict[str, Any]:
    """Run the CLI with ``--json`` in this process; exit unless it succeeds."""
    with contextlib.redirect_stdout(io.StringIO()) as printed:
        code = servatus([*argv, "--json"])
    if code != 0:
        raise SystemExit(f"servatus {' '.join(argv)} exited {code}")
    document: dict[str, Any] = json.loads(printed.getvalue() or "{}")
    return document


def until_final(state: str, seconds: float) -> dict[str, Any]:
    deadline = time.monotonic() + seconds
    while True:
        document = cli("status", state)
        if all(task["execution"] in FINAL for task in document["tasks"]):
            return document
        if time.monotonic() > deadline:
            counts = document["counts"]
            raise SystemExit(f"{state}: not every Task final after {seconds:.0f} s: {counts}")
        time.sleep(2)


def last_end(log_root: Path, allocations: set[str]) -> float:
    """The latest end marker's mtime among ``allocations`` (steps or plain allocations)."""
    ends = [
        path.stat().st_mtime
        for path in log_root.iterdir()
        if ".end." in path.name and path.name.split(".")[0].removeprefix("servatus-") in allocations
    ]
    return max(ends)


def lease_run(work: Path, base: str, count: int) -> tuple[float, set[str]]:
    (work / "tasks.jsonl").write_text(
        "".join(
            json.dumps({"key": f"t{i:03d}", "args": ["/bin/sleep", "1"]}) + "\n"
            for i in range(count)
        )
    )
    cli("ensure", "lease", "tasks.jsonl")
    cli("plan", "lease", "--hold", "2", "--output", "lease.json")
    [receipt] = cli("submit", "lease", "lease.json")["receipts"]
    lease, job = receipt["allocation_id"], receipt["job"]
    deadline = time.monotonic() + 120
    while (
        f"{job}:RUNNING"
        not in on_login_node(
            f"{harness.SLURM_BIN}/squeue", "--me", "--noheader", "--format=%i:%T"
        ).split()
    ):
        if time.monotonic() > deadline:
            raise SystemExit(f"lease job {job} never ran")
        time.sleep(1)
    cli("start", "lease", "tasks.jsonl", "--lease", lease)
    returned = time.time()
    document = until_final("lease", 900)
    steps = {a["allocation_id"] for a in document["attempts"] if a.get("within") == lease}
    bad = {t["key"]: t["execution"] for t in document["tasks"] if t["execution"] != "SUCCEEDED"}
    if bad:
        raise SystemExit(f"lease run: {len(bad)} Tasks did not succeed: {list(bad.items())[:5]}")
    took = last_end(Path(base) / "logs", steps) - returned
    cli("cancel", "lease", "--allocation", lease)
    return took, {job_name(lease)}


def plain_run(work: Path, base: str, count: int, per: int) -> tuple[float, set[str]]:
    (work / "plain.jsonl").write_text(
        "".join(
            json.dumps({"key": f"p{i:03d}", "args": ["/bin/sleep", "1"]}) + "\n"
            for i in range(count)
        )
    )
    cli("ensure", "plain", "plain.jsonl")
    cli("plan", "plain", "--tasks-per-allocation", str(per), "--output", "plain.json")
    receipts = cli("submit", "plain", "plain.json")["receipts"]
    returned = time.time()
    until_final("plain", 900)
    allocations = {r["allocation_id"] for r in receipts}
    took = last_end(Path(base) / "logs", allocations) - returned
    return took, {job_name(a) for a in allocations}


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--tasks", type=int, default=100, metavar="N")
    parser.add_argument("--per-allocation", type=int, default=2, metavar="K")
    options = parser.parse_args()
    count, per = options.tasks, options.per_allocation
    base = f"/scratch/{harness.USER}/bench-lease-{uuid.uuid4().hex[:8]}"
    ours: set[str] = set()
    with sharing_the_cluster(), tempfile.TemporaryDirectory() as temporary:
        on_login_node("mkdir", "-m", "700", "-p", f"{base}/logs")
        work = Path(temporary)
        (work / "SERVATUS.toml").write_text(config(base))
        here = Path.cwd()
        try:
            os.chdir(work)
            leased, names = lease_run(work, base, count)
            ours |= names
            plain, names = plain_run(work, base, count, per)
            ours |= names
        finally:
            os.chdir(here)
            cancel(ours)
    slots = min(harness.CPUS, count)
    print(f"{count} Tasks of /bin/sleep 1, over SSH to {harness.ALIAS} ({harness.CPUS} CPUs)")
    print(f"  lease of 2 slots:  {leased:7.1f} s  slot efficiency {count / (leased * 2):.2f}")
    print(
        f"  plain, {per} per allocation: {plain:7.1f} s  slot efficiency "
        f"{count / (plain * slots):.2f} (up to {slots} at once)"
    )
    print(f"  wall time, lease / plain: {leased / plain:.2f}")


if __name__ == "__main__":
    main()
