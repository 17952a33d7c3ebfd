"""The demo sweep without root: the same 3 Tasks through plan, submit and status, with
:class:`servatus.testing.FakeScheduler` standing in for Slurm.

``demo/run`` runs this when it cannot start the local cluster (which needs root for its chroot).
Nothing here is Slurm: the fake accepts each ``sbatch``, and this script itself starts each job,
runs its workers on this machine (``demo/train.py``, which checkpoints in its Workspace and
publishes its result atomically), and tells the fake their exit codes, as a compute node would
leave them in its run markers. Servatus' own commands, journal and status are the real ones.
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

HERE = Path(__file__).resolve().parent


def show(fake: FakeScheduler, *args: str) -> None:
    print(f"\n$ servatus {' '.join(args)}", flush=True)
    code = servatus(list(args), connect=fake)
    sys.stdout.flush()
    if code != 0:
        raise SystemExit(f"demo: servatus {args[0]} exited {code}")


def launch(task: dict[str, str], work_root: Path, demo: Path) -> subprocess.Popen[bytes]:
    """One Task's own args, started here as its step would start on a node: in work_root, its
    stdin from its file, its key in SERVATUS_TASK_KEY."""
    env = {**os.environ, "SERVATUS_TASK_KEY": task["key"]}
    with open(demo / task["stdin_file"], "rb") as stdin:
        return subprocess.Popen(
            task["args"],
            cwd=work_root,
            stdin=stdin,
            env=env,
        )


def main() -> None:
    demo = Path.cwd() / "servatus-demo"
    if (demo / "state").exists():
        raise SystemExit(
            f"demo: {demo}/state exists from an earlier run; remove {demo} to run the demo again."
        )
    work_root, log_root = demo / "work", demo / "logs"
    for directory in (work_root / "results", log_root):
        directory.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(HERE / "train.py", work_root / "demo_train.py")
    tasks = write_tasks(demo, sys.executable, 0.25)
    (demo / "SERVATUS.toml").write_text(
        f"""default_profile = "cpu"

[target]                                    # no host: FakeScheduler answers for Slurm
slurm_bin = "/usr/bin"
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
        steps = [launch(by_key[key], work_root, demo) for key in keys[job.allocation_id]]
        fake.finish(job.job, *(step.wait() for step in steps))
    show(fake, "status", "state")
    list_results(work_root / "results", tasks)
    print(
        "\ndemo: done, against FakeScheduler. As root, demo/run does the same on a real Slurm "
        "24.11 over SSH.",
        flush=True,
    )


if __name__ == "__main__":
    main()
