"""From ``servatus start`` returning to the step's own ``step-start`` marker, through the CLI.

Run ``python benchmarks/bench_lease_start.py [--starts N]`` as root with the test cluster up.
One one-slot lease (``plan --hold 1``, ``submit``, over SSH) takes N starts (default 20), one at
a time: ``start`` one fresh Task (``/bin/true``) in this process, note when it returned, watch
``log_root`` (this machine is the file server) until the step's ``step-start`` appears, and wait
for its end before the next. A random pause of up to one poll before each spreads the starts
over the lease's 5 s poll. ``bench_lease_latency.py`` measures the same from the client's
``offer`` returning; this one is what a user waits for, the planning and its Slurm reading not
included (``start`` has returned by then). With ``--delay-ms D`` every command goes through
``slowlink.py``'s alias, the cluster's sshd behind ``relay.py`` at a round trip of D ms, as from a
laptop; ``start``'s own time then shows the link's cost.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

CHECKOUT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(CHECKOUT))

from bench_lease_throughput import cli, config  # noqa: E402
from bench_submit_cluster import cancel, on_login_node, sharing_the_cluster  # noqa: E402
from slowlink import Link, slow_alias  # noqa: E402
from tests.cluster import harness  # noqa: E402 - importable once the checkout is on sys.path

from servatus.ids import job_name  # noqa: E402


def wait_for(path_glob: str, directory: Path, seconds: float) -> Path:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        found = sorted(directory.glob(path_glob))
        if found:
            return found[0]
        time.sleep(0.05)
    raise SystemExit(f"no {path_glob} after {seconds:.0f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--starts", type=int, default=20, metavar="N")
    parser.add_argument("--delay-ms", type=float, metavar="D", help="through a D ms round trip")
    options = parser.parse_args()
    slow: contextlib.AbstractContextManager[Link | None] = (
        contextlib.nullcontext() if options.delay_ms is None else slow_alias(options.delay_ms)
    )
    base = f"/scratch/{harness.USER}/bench-start-{uuid.uuid4().hex[:8]}"
    logs = Path(base) / "logs"
    latencies: list[float] = []
    took: list[float] = []
    ssh_per_start: list[int] = []
    ours: set[str] = set()
    with sharing_the_cluster(), tempfile.TemporaryDirectory() as temporary, slow as link:
        alias = harness.ALIAS
        if link is not None:
            alias = link.alias
            os.environ["PATH"] = link.env["PATH"]  # the transport runs the ssh on PATH
        on_login_node("mkdir", "-m", "700", "-p", str(logs))
        here = Path.cwd()
        os.chdir(temporary)
        try:
            host = f'host = "{harness.ALIAS}"'
            Path("SERVATUS.toml").write_text(config(base).replace(host, f'host = "{alias}"'))
            Path("first.jsonl").write_text(
                json.dumps({"key": "s000", "args": ["/bin/true"]}) + "\n"
            )
            cli("ensure", "state", "first.jsonl")
            cli("plan", "state", "--hold", "1", "--output", "lease.json")
            [receipt] = cli("submit", "state", "lease.json")["receipts"]
            lease, job = receipt["allocation_id"], receipt["job"]
            ours.add(job_name(lease))
            wait_for(f"servatus-{lease}.{job}.start", logs, 120)
            for index in range(1, options.starts + 1):
                time.sleep(random.uniform(0, 5))
                name = f"s{index:03d}.jsonl"
                Path(name).write_text(
                    json.dumps({"key": f"s{index:03d}", "args": ["/bin/true"]}) + "\n"
                )
                counted = 0 if link is None else link.count()
                asked = time.time()
                [step] = cli("start", "state", name, "--lease", lease)["receipts"]
                returned = time.time()
                if link is not None:
                    ssh_per_start.append(link.count() - counted)
                step_id = step["allocation_id"]
                began = wait_for(f"servatus-{step_id}.{job}.step-start", logs, 60)
                latencies.append(began.stat().st_mtime - returned)
                took.append(returned - asked)
                wait_for(f"servatus-{step_id}.{job}.end.0.*", logs, 60)
        finally:
            os.chdir(here)
            cancel(ours)
    print(
        f"start returned -> step-start, {len(latencies)} starts into a 1-slot lease (poll 5 s), "
        f"over {alias}" + ("" if link is None else f" ({link.round_trip_ms:g} ms round trip)")
    )
    print(
        f"  median {statistics.median(latencies):.2f} s, max {max(latencies):.2f} s, "
        f"min {min(latencies):.2f} s"
    )
    print(f"  start itself: median {statistics.median(took):.2f} s, max {max(took):.2f} s")
    if ssh_per_start:
        print(f"  ssh processes per start: {min(ssh_per_start)} to {max(ssh_per_start)}")


if __name__ == "__main__":
    main()
