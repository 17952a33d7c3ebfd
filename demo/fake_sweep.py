"""The demo sweep without root: the same 3 Tasks through plan, submit and status, with
:class:`servatus.testing.FakeScheduler` standing in for Slurm.

``demo/run`` runs this when it cannot start the local cluster (which needs root for its chroot).
Nothing here is Slurm: the fake accepts each ``sbatch``, and this script itself starts each job,
runs its workers on this machine (``demo/train.py``, which checkpoints in its Workspace and
publishes its result atomically), and tells the fake their exit codes, as a compute node would
leave them in its run markers. Servatus' own commands, journal and status are the real ones.
At the end it writes the markers the fake kept into the demo's ``log_root``, and its
``slurm_bin`` holds a ``squeue`` that lists no jobs, so ``servatus status state`` goes on
working after the demo, as on a cluster that has forgotten the ended jobs.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from sweep import LIMITS, list_results, write_tasks

from servatus.cli import main as servatus
from servatus.testing import FakeScheduler
from servatus_slurm.markers import step_log_name

HERE = Path(__file__).resolve().parent


def show(fake: FakeScheduler, *args: str) -> None:
    print(f"\n$ servatus {' '.join(args)}", flush=True)
    code = servatus(list(args), connect=fake)
    sys.stdout.flush()
    if code != 0:
        raise SystemExit(f"demo: servatus {args[0]} exited {code}")


def launch(task: dict[str, str], work_root: Path, demo: Path, log: Path) -> subprocess.Popen[bytes]:
    """One Task's own args, started here as its step would start on a node: in work_root, its
    stdin from its file, its key in SERVATUS_TASK_KEY, its output in its step log (where
    ``servatus logs`` reads it)."""
    env = {**os.environ, "SERVATUS_TASK_KEY": task["key"]}
    with open(demo / task["stdin_file"], "rb") as stdin, open(log, "wb") as out:
        return subprocess.Popen(
            task["args"],
            cwd=work_root,
            stdin=stdin,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
        )


def main() -> None:
    demo = Path.cwd() / "servatus-demo"
    if (demo / "state").exists():
        raise SystemExit(
            f"demo: {demo}/state exists from an earlier run; `cd {demo} && "
            f"{Path(sys.executable).parent / 'servatus'} status state` shows it. Remove {demo} "
            "to run the demo again."
        )
    work_root, log_root, slurm_bin = demo / "work", demo / "logs", demo / "slurm"
    for directory in (work_root / "results", log_root, slurm_bin):
        directory.mkdir(parents=True, exist_ok=True)
    squeue = slurm_bin / "squeue"
    squeue.write_text("#!/bin/sh\n# The demo's Slurm after the demo: it has forgotten every job.\n")
    squeue.chmod(0o755)
    shutil.copyfile(HERE / "train.py", work_root / "demo_train.py")
    tasks = write_tasks(demo, sys.executable, 0.25)
    (demo / "SERVATUS.toml").write_text(
        f"""default_profile = "cpu"

[target]                                    # no host: FakeScheduler answers for Slurm
slurm_bin = "{slurm_bin}"   # after the demo, its squeue lists no jobs
work_root = "{work_root}"
log_root = "{log_root}"
partitions = ["debug"]
{LIMITS}"""
    )
    print(f"demo: campaign, tasks and SERVATUS.toml in {demo}", flush=True)
    print("demo: FakeScheduler stands in for Slurm; the workers run on this machine", flush=True)
    os.chdir(demo)
    fake = FakeScheduler()
    show(fake, "ensure", "state", "tasks.jsonl")
    show(fake, "plan", "state", "--output", "plan.json")
    show(fake, "submit", "state", "plan.json")
    by_key = {task["key"]: task for task in tasks}
    allocations = json.loads(Path("plan.json").read_text())["allocations"]
    keys = {item["allocation_id"]: item["task_keys"] for item in allocations}
    for job in list(fake.jobs):
        fake.start(job.job)
        show(fake, "status", "state")
        steps = [
            launch(
                by_key[key],
                work_root,
                demo,
                log_root / step_log_name(job.allocation_id, job.job, slot),
            )
            for slot, key in enumerate(keys[job.allocation_id])
        ]
        fake.finish(job.job, *(step.wait() for step in steps))
    show(fake, "status", "state")
    list_results(work_root / "results", tasks)
    leave_markers(fake, log_root)
    servatus_command = Path(sys.executable).parent / "servatus"
    print(
        "\ndemo: done, against FakeScheduler. As root, demo/run does the same on a real Slurm "
        "24.11 over SSH.\n"
        "demo: RESULT reads UNOBSERVED because the demo names no result probe (a function that "
        "checks what a Task wrote; see docs/status.md)\n"
        "demo: the fake's jobs have ended and been forgotten, their run markers are in "
        f"{log_root}, so status reads them there.\n"
        f"demo: go on with: cd {demo} && {servatus_command} status state\n"
        f"demo: and a Task's output: cd {demo} && {servatus_command} logs state --task "
        f"{tasks[0]['key']}",
        flush=True,
    )


def leave_markers(fake: FakeScheduler, log_root: Path) -> None:
    """Let Slurm forget the ended jobs and write the run markers the fake kept in memory into
    ``log_root``, each with its mtime, as batch scripts would have left them: ``servatus
    status`` then reads the same outcomes after the demo, from ``slurm/squeue`` (no jobs) and
    the markers."""
    fake.purge()
    for name, at in fake.markers.items():
        marker = log_root / name
        marker.touch()
        os.utime(marker, (at, at))


if __name__ == "__main__":
    main()
