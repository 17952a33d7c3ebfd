"""``submit``, ``status`` and ``plan --retry-failed`` over a slow link, against their floors.

Run ``python benchmarks/bench_round_trips.py [--delay-ms D] [--allocations N] [--checkout DIR]...
[--loop] [--no-zero]`` as root with the test cluster up (issue #33). The link is
:func:`slowlink.slow_alias`: the cluster's sshd behind :mod:`relay` delaying D/2 ms each way (D,
the round trip, default 50), with a master connection of its own. For each checkout (default
this one; ``--checkout`` again to compare several in one run, every row against the same
floors), on a campaign of N one-Task allocations (default 1000; ``/bin/true``, 1 CPU, 100 MiB,
a minute) under a directory of its own on ``/scratch`` (one per checkout and delay, so no
``status`` lists another row's markers):

* ``submit`` against one ``ssh ALIAS sh -s`` whose stdin runs the same N ``sbatch --parsable``,
  each script a here-document (the least any client must do: one round trip and N ``sbatch``);
  with ``--loop`` also against N ``ssh ALIAS sbatch --parsable < script`` one after another;
* ``status`` and then ``plan --retry-failed`` of that campaign, each against one
  ``ssh ALIAS head -c B /dev/zero``, B the bytes the command received (``ssh true`` plus moving
  its bytes, the issue's floor), and against one ``ssh ALIAS 'CMD1; CMD2'`` running the very
  commands it ran (so the remote commands' own time counts too); ``ssh true`` alone is shown too.

Then, unless ``--no-zero``, the same at 0 ms (the relay without delay), so "no slower than today
at 0 ms" reads off the same run. Each Servatus command runs in a fresh process of its checkout
(``cli_timer.py``) and is timed after its imports and a warm-up; the ``ssh`` column counts the
``ssh`` processes it started (one per remote command today). The jobs are cancelled right after
each submit, by name and in one ``scancel``, as ``bench_submit_cluster.py`` does.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
CHECKOUT = HERE.parent
sys.path.insert(0, str(CHECKOUT))

from bench_submit_cluster import (  # noqa: E402
    CONFIG,
    SBATCH,
    cancel,
    listed,
    on_login_node,
    prepare,
    sharing_the_cluster,
)
from cli_timer import checkout_option  # noqa: E402
from slowlink import Link, slow_alias  # noqa: E402
from tests.cluster import harness  # noqa: E402 - importable once the checkout is on sys.path

from servatus.ids import job_name  # noqa: E402

SOURCES = ("servatus_core", "servatus_slurm", "servatus_publish", "servatus_apptainer")


def config_for(alias: str, base: str) -> str:
    """``bench_submit_cluster``'s profile, at ``alias`` and under ``base``."""
    config = (
        CONFIG.replace(f'host = "{harness.ALIAS}"', f'host = "{alias}"')
        .replace(f"/scratch/{harness.USER}/sweep/logs", f"{base}/logs")
        .replace(f"/scratch/{harness.USER}/sweep", base)
    )
    if f'host = "{alias}"' not in config or f'log_root = "{base}/logs"' not in config:
        raise SystemExit("bench_submit_cluster.CONFIG changed shape: adapt config_for")
    return config


def fresh_root(base: str) -> str:
    """A work and log root of its own under ``base``, so no listing sees another row's markers."""
    on_login_node("mkdir", "-m", "700", "-p", f"{base}/logs")
    return base


def batch_program(scripts: list[Path]) -> bytes:
    """One ``sh`` program running every script's ``sbatch`` in order, stopping at a refusal."""
    end = f"BENCH_{secrets.token_hex(8)}"
    parts = [
        f"{SBATCH} --parsable <<'{end}' || exit 1\n{script.read_text()}\n{end}\n"
        for script in scripts
    ]
    return "".join(parts).encode()


def floor_submit(link: Link, scripts: list[Path], names: set[str]) -> float:
    program = batch_program(scripts)
    began = time.perf_counter()
    done = link.ssh("sh -s", input=program)
    elapsed = time.perf_counter() - began
    cancel(names)
    jobs = done.stdout.split()
    if done.returncode != 0 or len(jobs) != len(scripts):
        said = done.stderr.decode(errors="replace").strip()[-300:]
        raise SystemExit(f"sh -s of {len(scripts)} sbatch: exit {done.returncode}, {said}")
    return elapsed


def loop_submit(link: Link, scripts: list[Path], names: set[str]) -> float:
    began = time.perf_counter()
    try:
        for script in scripts:
            link.timed(f"{SBATCH} --parsable", input=script.read_bytes())
    finally:
        elapsed = time.perf_counter() - began
        cancel(names)
    return elapsed


def timed_cli(
    checkout: Path, link: Link, cwd: Path, timed: list[str], setup: list[list[str]] | None = None
) -> dict[str, Any]:
    """Run ``cli_timer.py`` with ``checkout``'s code, through ``link``; its answer."""
    env = {**os.environ, **link.env}
    env["PYTHONPATH"] = os.pathsep.join(str(checkout / part / "src") for part in SOURCES)
    spec = {"setup": setup or [], "timed": timed, "ssh_log": str(link.log)}
    done = subprocess.run(
        [sys.executable, str(HERE / "cli_timer.py"), json.dumps(spec)],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise SystemExit(f"servatus {' '.join(timed)} ({checkout}):\n{done.stderr[-2000:]}")
    answer: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])
    return answer


def ssh_true(link: Link, times: int = 5) -> float:
    return statistics.median(link.timed("true") for _ in range(times))


def moving(link: Link, received: int) -> float:
    """One ``ssh`` that brings ``received`` bytes back: ``ssh true`` plus moving them."""
    return min(link.timed(f"head -c {max(received, 1)} /dev/zero") for _ in range(3))


def replaying(link: Link, argvs: list[list[str]]) -> float:
    """One ``ssh`` running the same remote commands one after another, their output brought
    back: the remote work itself and one round trip. The program goes on the command line, as
    the transport sends its commands."""
    program = "; ".join(shlex.join(argv) for argv in argvs)
    return min(link.timed(program) for _ in range(3))


def measure_checkout(
    checkout: Path, link: Link, work: Path, base: str, count: int, ours: set[str]
) -> dict[str, dict[str, Any]]:
    """submit, status and plan --retry-failed of a fresh campaign of ``count`` allocations."""
    work.mkdir()
    (work / "SERVATUS.toml").write_text(config_for(link.alias, base))
    tag = uuid.uuid4().hex[:6]
    (work / "tasks.jsonl").write_text(
        "".join(
            json.dumps({"key": f"rt-{tag}-{i}", "args": ["/bin/true"]}) + "\n" for i in range(count)
        )
    )
    setup = [["ensure", "state", "tasks.jsonl"], ["plan", "state", "--output", "plan.json"]]
    rows: dict[str, dict[str, Any]] = {}
    receipts: list[dict[str, Any]] = []
    submit = timed_cli(checkout, link, work, ["submit", "state", "plan.json", "--json"], setup)
    try:
        receipts = json.loads(submit["stdout"])["receipts"]
        ours |= {job_name(receipt["allocation_id"]) for receipt in receipts}
    finally:
        cancel(ours)
    if submit["code"] != 0 or len(receipts) != count:
        raise SystemExit(f"submit exited {submit['code']} with {len(receipts)} of {count}")
    rows["submit"] = submit
    rows["status"] = timed_cli(checkout, link, work, ["status", "state"])
    rows["plan --retry-failed"] = timed_cli(
        checkout, link, work, ["plan", "state", "--retry-failed", "--output", "retry.json"]
    )
    for name in ("status", "plan --retry-failed"):
        if rows[name]["code"] not in (0, 1):
            raise SystemExit(f"{name} exited {rows[name]['code']}")
    return rows


def measure_link(
    delay_ms: float,
    options: argparse.Namespace,
    temporary: Path,
    base: str,
    ours: set[str],
) -> list[str]:
    """Every row at one delay, as printed lines."""
    count = options.allocations
    lines = []
    with slow_alias(delay_ms) as link:
        true = ssh_true(link)
        floor_dir = temporary / f"floor-{delay_ms:g}"
        floor_root = fresh_root(f"{base}/floor-{delay_ms:g}")
        _, _, scripts, names = prepare(floor_dir, count, config_for(link.alias, floor_root))
        ours |= names
        floor = floor_submit(link, scripts, names)
        loop = loop_submit(link, scripts, names) if options.loop else None
        lines.append(
            f"--- {delay_ms:g} ms round trip (relay {delay_ms / 2:g} ms each way), "
            f"{count} one-Task allocations; ssh {link.alias} true: {true:.3f} s (median of 5)"
        )
        lines.append(
            f"{'command':<22} {'checkout':<22} {'wall':>8} {'cpu':>7} {'ssh':>5} "
            f"{'received':>11} {'floor':>8} {'ratio':>7}  floor is"
        )
        for index, checkout in enumerate(options.checkout):
            work = temporary / f"c{index}-{delay_ms:g}"
            root = fresh_root(f"{base}/c{index}-{delay_ms:g}")
            rows = measure_checkout(checkout, link, work, root, count, ours)
            label = checkout.name or str(checkout)
            for name, row in rows.items():
                if name == "submit":
                    floors = [(floor, f"one ssh, sh -s running the same {count} sbatch")]
                    if loop is not None:
                        floors.append((loop, f"{count} x ssh sbatch, one after another"))
                else:
                    got = row["received"]
                    floors = [(moving(link, got), f"one ssh bringing {got:,} B (ssh true + bytes)")]
                    if row.get("argvs"):
                        same = f"one ssh running the same {len(row['argvs'])} commands"
                        floors.append((replaying(link, row["argvs"]), same))
                for at, (value, what) in enumerate(floors):
                    head = (
                        f"{name:<22} {label[:22]:<22} {row['elapsed']:>6.2f} s "
                        f"{row['cpu']:>5.2f} s {row['ssh']:>5} {row['received']:>9,} B"
                        if at == 0
                        else " " * 70
                    )
                    ratio = row["elapsed"] / value
                    lines.append(f"{head} {value:>6.2f} s {ratio:>6.1f}x  {what}")
                waited = row.get("waited", {})
                commands = ", ".join(
                    f"{name} x{times} ({waited.get(name, 0):.2f} s)"
                    for name, times in sorted(row["commands"].items())
                )
                lines.append(f"{'':<22} remote commands: {commands or 'none seen'}")
        print("\n".join(lines), flush=True)
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--delay-ms", type=float, default=50, help="round trip (default 50)")
    parser.add_argument("--allocations", type=int, default=1000, metavar="N")
    checkout_option(parser)
    parser.add_argument("--loop", action="store_true", help="also N ssh sbatch, one at a time")
    parser.add_argument("--no-zero", action="store_true", help="skip the 0 ms repetition")
    options = parser.parse_args()
    options.checkout = options.checkout or [CHECKOUT]
    for checkout in options.checkout:
        if not (checkout / "servatus_core" / "src" / "servatus").is_dir():
            raise SystemExit(f"{checkout}: not a Servatus checkout")
    delays = [options.delay_ms] + ([] if options.no_zero or options.delay_ms == 0 else [0.0])
    base = f"/scratch/{harness.USER}/bench-rt-{uuid.uuid4().hex[:8]}"
    ours: set[str] = set()
    with sharing_the_cluster(), tempfile.TemporaryDirectory() as temporary:
        on_login_node("mkdir", "-m", "700", "-p", base)
        try:
            for delay in delays:
                measure_link(delay, options, Path(temporary), base, ours)
        finally:
            cancel(ours)
            left = len(listed(ours, "--states=PENDING,RUNNING"))
            on_login_node("rm", "-rf", base)
    print(f"\nour jobs still pending or running after scancel: {left}")
    print(f"{shlex.join(sys.argv)}: done at {time.strftime('%H:%M:%S')}")


if __name__ == "__main__":
    main()
