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
import time
from pathlib import Path

from servatus.cli import main as servatus
from servatus.testing import FakeScheduler

HERE = Path(__file__).resolve().parent


def show(fake: FakeScheduler, *args: str) -> None:
    print(f"\n$ servatus {' '.join(args)}", flush=True)
    code = servatus(list(args), connect=fake)
    sys.stdout.flush()
    if code != 0:
        raise SystemExit(f"demo: servatus {args[0]} exited {code}")


def launch(task: dict[str, object], work_root: Path, demo: Path) -> subprocess.Popen[bytes]:
    """One Task's own args, started here as its step would start on a node: in work_root, its
    stdin from its file, its key in SERVATUS_TASK_KEY."""
    key = str(task["key"])
    env = {**os.environ, "SERVATUS_TASK_KEY": key}
    with open(demo / str(task["stdin_file"]), "rb") as stdin:
        return subprocess.Popen(
            [str(word) for word in task["args"]],  # type: ignore[attr-defined]
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
    for directory in (demo / "configs", work_root / "results", log_root):
        directory.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(HERE / "train.py", work_root / "demo_train.py")
    stamp = time.strftime("%Y%m%d-%H%M%S")
    tasks = []
    for lr in (0.1, 0.05, 0.01):
        key = f"demo-{stamp}-lr-{lr}"
        (demo / "configs" / f"{key}.json").write_text(
            json.dumps({"lr": lr, "steps": 12, "seconds_per_step": 0.25}, sort_keys=True)
        )
        tasks.append(
            {
                "key": key,
                "args": [sys.executable, "demo_train.py"],
                "stdin_file": f"configs/{key}.json",
            }
        )
    (demo / "tasks.jsonl").write_text("".join(json.dumps(task) + "\n" for task in tasks))
    (demo / "SERVATUS.toml").write_text(
        f"""default_profile = "cpu"

[target]                                    # no host: FakeScheduler answers for Slurm
slurm_bin = "/usr/bin"
work_root = "{work_root}"
log_root = "{log_root}"
partitions = ["debug"]
max_tasks_per_allocation = 2
max_cpus_per_allocation = 2
max_memory_mib_per_allocation = 4000
max_time_limit = "00:30:00"

[profiles.cpu.resources]
cpus = 1
memory_mib = 500
time_limit = "00:05:00"
"""
    )
    print(f"demo: campaign, tasks and SERVATUS.toml in {demo}", flush=True)
    print("demo: FakeScheduler stands in for Slurm; the workers run on this machine", flush=True)
    os.chdir(demo)
    fake = FakeScheduler()
    show(fake, "ensure", "state", "tasks.jsonl")
    show(fake, "plan", "state", "--output", "plan.json")
    show(fake, "submit", "state", "plan.json")
    by_key = {str(task["key"]): task for task in tasks}
    allocations = json.loads(Path("plan.json").read_text())["allocations"]
    keys = {item["allocation_id"]: item["task_keys"] for item in allocations}
    for job in list(fake.jobs):
        fake.start(job.job)
        show(fake, "status", "state")
        steps = [launch(by_key[key], work_root, demo) for key in keys[job.allocation_id]]
        fake.finish(job.job, *(step.wait() for step in steps))
    show(fake, "status", "state")
    results = work_root / "results"
    print(f"\npublished results in {results}:")
    for task in tasks:
        key = str(task["key"])
        for item in sorted((results / key).iterdir()):
            print(f"  {key}/{item.name}  {item.stat().st_size} bytes")
        print(f"    metrics: {(results / key / 'metrics.json').read_text().strip()}")
    print(
        "\ndemo: done, against FakeScheduler. As root, demo/run does the same on a real Slurm "
        "24.11 over SSH.",
        flush=True,
    )


if __name__ == "__main__":
    main()
