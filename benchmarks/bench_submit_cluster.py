"""``submit`` to the real test cluster over SSH, against a plain shell loop of the same ``sbatch``s.

Run ``python benchmarks/bench_submit_cluster.py [--allocations N] [--rounds R] [--profile]`` as
root on the test machine, with the cluster up (``python3 tests/cluster/harness.py up``). Each
round plans N allocations (default 200) of one tiny Task each (``/bin/true``; 1 CPU, 100 MiB,
``--time`` 1 min), renders their batch scripts with ``Campaign.scripts(plan)``, then times, over
the alias' one SSH master connection (opened first with ``ssh servatus-test true``):

* the baseline: a ``sh`` loop running ``ssh servatus-test /usr/bin/sbatch --parsable < script``
  once per script, the least any tool that submits over SSH must do;
* ``servatus submit STATE PLAN`` in this process, through the real ``ssh`` transport: the ping,
  the stale-plan check, then per allocation a synced intent, ``sbatch``, a synced receipt.

It prints both wall times and their ratio per round (default 2) and for the best of each. The
jobs are cancelled right after each run, so the 2-CPU cluster is free again for other sessions
within seconds: by job name, in one ``scancel``, never ``scancel --me``, because other sessions'
tests also run as alice. The whole run takes well under a minute.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import fcntl
import io
import json
import pstats
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

CHECKOUT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(CHECKOUT))

from tests.cluster import harness  # noqa: E402 - importable once the checkout is on sys.path

from servatus.campaign import Campaign  # noqa: E402
from servatus.cli import main as servatus  # noqa: E402
from servatus.config import Profile  # noqa: E402
from servatus.engine.plan_document import plan_to_document  # noqa: E402
from servatus.ids import job_name  # noqa: E402
from servatus.tasks import Task  # noqa: E402

ALIAS = harness.ALIAS
SBATCH = f"{harness.SLURM_BIN}/sbatch"

CONFIG = f"""\
default_profile = "tiny"

[target]
host = "{ALIAS}"
slurm_bin = "{harness.SLURM_BIN}"
work_root = "/scratch/{harness.USER}/sweep"
log_root = "/scratch/{harness.USER}/sweep/logs"
partitions = ["{harness.PARTITION}"]
max_tasks_per_allocation = 1
max_cpus_per_allocation = {harness.CPUS}
max_memory_mib_per_allocation = 1000
max_time_limit = "01:00:00"

[profiles.tiny.resources]
cpus = 1
memory_mib = 100
time_limit = "00:01:00"
"""

LOOP = 'for script in "$@"; do ssh {alias} {sbatch} --parsable < "$script" || exit 1; done\n'

SSH_FAILED = 255


def on_login_node(*argv: str) -> str:
    """Run a Slurm command as alice: over SSH, or straight in the root when sshd is down (another
    session's test may stop it for a moment), so the clean-up never leaves jobs behind."""
    done = subprocess.run(
        ["ssh", "-o", "BatchMode=yes", ALIAS, *argv],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if done.returncode == SSH_FAILED:
        done = harness.login(list(argv))
    if done.returncode != 0:
        print(f"warning: {' '.join(argv)}: {done.stderr.strip()[-300:]}", file=sys.stderr)
    return done.stdout


def listed(names: set[str], *options: str) -> list[str]:
    """Job numbers Slurm lists (with ``options``) under one of ``names``; words without spaces,
    since ssh joins the words of a remote command with spaces."""
    squeue = f"{harness.SLURM_BIN}/squeue"
    rows = on_login_node(squeue, "--me", "--noheader", "--format=%i:%j", *options).split()
    return [job for job, _, name in (row.partition(":") for row in rows) if name in names]


def cancel(names: set[str]) -> None:
    """Cancel our jobs, and only ours, with one ``scancel``."""
    jobs = listed(names)
    if jobs:
        on_login_node(f"{harness.SLURM_BIN}/scancel", *jobs)


@contextlib.contextmanager
def sharing_the_cluster() -> Iterator[None]:
    """Hold the test sessions' shared lock, so a pytest session that ends meanwhile leaves the
    cluster up: the fixture brings it down only when it can take that lock exclusively. It is
    taken under the sessions' gate, as the fixture takes it (``tests/cluster/fixture.py``)."""
    harness.CACHE_DIR.mkdir(parents=True, exist_ok=True)
    with (harness.CACHE_DIR / "sessions.lock").open("a") as sessions:
        with (harness.CACHE_DIR / "sessions.gate").open("a") as gate:
            fcntl.flock(gate, fcntl.LOCK_EX)
            fcntl.flock(sessions, fcntl.LOCK_SH)
        if not harness.environment()["running"]:
            raise SystemExit("the test cluster is down: python3 tests/cluster/harness.py up")
        yield


def prepare(
    work: Path, count: int, config: str = CONFIG
) -> tuple[Path, Path, list[Path], set[str]]:
    """A fresh campaign of ``count`` Tasks, its saved plan, its scripts as files, its job names;
    ``config`` (a ``SERVATUS.toml`` with one Task per allocation) may name other roots."""
    work.mkdir()
    (work / "SERVATUS.toml").write_text(config)
    profile = Profile.load(work / "SERVATUS.toml")
    state = work / "state"
    campaign = Campaign.create(state, [Task(f"bench-{i}", ["/bin/true"]) for i in range(count)])
    plan = campaign.plan(profile)
    assert len(plan.allocations) == count
    plan_file = work / "plan.json"
    plan_file.write_text(json.dumps(plan_to_document(plan)))
    scripts = []
    for index, script in enumerate(campaign.scripts(plan)):
        path = work / f"script-{index:05d}.sh"
        path.write_text(script)
        scripts.append(path)
    names = {job_name(allocation.allocation_id) for allocation in plan.allocations}
    return state, plan_file, scripts, names


def shell_loop(scripts: list[Path]) -> float:
    loop = LOOP.format(alias=ALIAS, sbatch=SBATCH)
    began = time.perf_counter()
    done = subprocess.run(
        ["sh", "-c", loop, "sh", *map(str, scripts)], capture_output=True, text=True, check=False
    )
    elapsed = time.perf_counter() - began
    if done.returncode != 0 or len(done.stdout.split()) != len(scripts):
        said = done.stderr.strip()[-500:] or f"{len(done.stdout.split())} job numbers printed"
        raise SystemExit(f"the sbatch loop exited {done.returncode}: {said}")
    return elapsed


def servatus_submit(state: Path, plan_file: Path, count: int, *, profile: bool) -> float:
    profiler = cProfile.Profile() if profile else None
    with contextlib.redirect_stdout(io.StringIO()) as printed:
        began = time.perf_counter()
        if profiler is not None:
            profiler.enable()
        code = servatus(["submit", str(state), str(plan_file), "--json"])
        if profiler is not None:
            profiler.disable()
        elapsed = time.perf_counter() - began
    if profiler is not None:
        pstats.Stats(profiler, stream=sys.stderr).sort_stats("cumulative").print_stats(30)
    if code != 0:
        raise SystemExit(f"servatus submit exited {code}")
    receipts = json.loads(printed.getvalue())["receipts"]
    if len(receipts) != count:
        raise SystemExit(f"servatus submit accepted {len(receipts)} of {count} allocations")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--allocations", type=int, default=200, metavar="N")
    parser.add_argument("--rounds", type=int, default=2, metavar="R")
    parser.add_argument("--profile", action="store_true", help="cProfile servatus submit")
    options = parser.parse_args()
    count = options.allocations
    rounds: list[tuple[float, float]] = []
    ours: set[str] = set()
    with sharing_the_cluster(), tempfile.TemporaryDirectory() as temporary:
        on_login_node("true")  # opens the master connection every run shares
        try:
            for index in range(options.rounds):
                state, plan_file, scripts, names = prepare(Path(temporary) / f"r{index}", count)
                ours |= names
                loop = shell_loop(scripts)
                cancel(names)
                submit = servatus_submit(state, plan_file, count, profile=options.profile)
                cancel(names)
                rounds.append((loop, submit))
        finally:
            cancel(ours)
        left = len(listed(ours, "--states=PENDING,RUNNING"))
    print(f"{count} allocations of 1 Task (/bin/true), over one SSH master connection to {ALIAS}")
    print(f"{'round':>5}  {'sh loop of ssh sbatch':>21}  {'servatus submit':>15}  {'ratio':>5}")
    for index, (loop, submit) in enumerate(rounds, 1):
        print(f"{index:>5}  {loop:>19.2f} s  {submit:>13.2f} s  {submit / loop:>5.2f}")
    loop, submit = min(r[0] for r in rounds), min(r[1] for r in rounds)
    print(f"{'best':>5}  {loop:>19.2f} s  {submit:>13.2f} s  {submit / loop:>5.2f}")
    print(
        f"per allocation (best): sh loop {loop / count * 1000:.1f} ms, "
        f"servatus {submit / count * 1000:.1f} ms"
    )
    print(f"our {2 * count * len(rounds)} jobs still pending or running after scancel: {left}")


if __name__ == "__main__":
    main()
