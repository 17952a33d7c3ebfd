"""The demo sweep: 3 Tasks through plan, submit and status on the local test cluster, over SSH.

Run by ``demo/run`` once the cluster is up. It prints each command it runs and its output, waits
until every Task has finished, lists the published results, and leaves the campaign in place.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
SERVATUS = [sys.executable, "-m", "servatus"]
DEADLINE = 150.0


def cluster_env() -> dict[str, object]:
    harness = HERE.parent / "tests" / "cluster" / "harness.py"
    out = subprocess.run([sys.executable, str(harness), "env"], check=True, capture_output=True)
    env: dict[str, object] = json.loads(out.stdout)
    return env


def show(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    print(f"\n$ servatus {' '.join(args)}", flush=True)
    result = subprocess.run(
        [*SERVATUS, *args], cwd=cwd, text=True, capture_output=True, check=False
    )
    print(result.stdout, end="")
    print(result.stderr, end="", file=sys.stderr)
    if result.returncode not in (0,):
        raise SystemExit(f"demo: servatus {args[0]} exited {result.returncode}")
    return result


LIMITS = """max_tasks_per_allocation = 2
max_cpus_per_allocation = 2
max_memory_mib_per_allocation = 4000
max_time_limit = "00:30:00"

[profiles.cpu.resources]
cpus = 1
memory_mib = 500
time_limit = "00:05:00"
"""
"""The demo's allocation limits and its one profile, after its own ``[target]`` lines."""


def write_tasks(demo: Path, python: str, seconds_per_step: float) -> list[dict[str, str]]:
    """Three Tasks of ``demo_train.py`` (learning rates 0.1, 0.05, 0.01), each config in its
    own stdin file, written to ``tasks.jsonl``; the Tasks as written."""
    configs = demo / "configs"
    configs.mkdir(exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    tasks = []
    for lr in (0.1, 0.05, 0.01):
        key = f"demo-{stamp}-lr-{lr}"
        settings = {"lr": lr, "steps": 12, "seconds_per_step": seconds_per_step}
        (configs / f"{key}.json").write_text(json.dumps(settings, sort_keys=True))
        tasks.append(
            {"key": key, "args": [python, "demo_train.py"], "stdin_file": f"configs/{key}.json"}
        )
    (demo / "tasks.jsonl").write_text("".join(json.dumps(task) + "\n" for task in tasks))
    return tasks


def list_results(results: Path, tasks: list[dict[str, str]]) -> None:
    """What each worker published under ``results``."""
    print(f"\npublished results in {results}:")
    for task in tasks:
        key = task["key"]
        for item in sorted((results / key).iterdir()):
            print(f"  {key}/{item.name}  {item.stat().st_size} bytes")
        print(f"    metrics: {(results / key / 'metrics.json').read_text().strip()}")


def main() -> None:
    env = cluster_env()
    work_root = Path(str(env["work_root"]))
    uid, gid = int(str(env["uid"])), int(str(env["gid"]))
    python = str(env["venv_python"])
    demo = Path.cwd() / "servatus-demo"
    if (demo / "state").exists():
        raise SystemExit(
            f"demo: {demo}/state exists from an earlier run; "
            f"`{Path(sys.executable).parent / 'servatus'} status {demo}/state` shows it. "
            f"Remove {demo} to run the demo again."
        )
    demo.mkdir(exist_ok=True)
    worker = work_root / "demo_train.py"
    shutil.copyfile(HERE / "train.py", worker)
    os.chown(worker, uid, gid)
    tasks = write_tasks(demo, python, 0.5)
    (demo / "SERVATUS.toml").write_text(
        f"""default_profile = "cpu"

[target]
host = "{env["ssh_alias"]}"                   # the local test cluster, over real OpenSSH
slurm_bin = "{env["slurm_bin"]}"
work_root = "{work_root}"
log_root = "{env["log_root"]}"
partitions = ["{env["partition"]}"]
{LIMITS}signal_before_end = "0:01:00"
"""
    )
    print(f"demo: campaign, tasks and SERVATUS.toml in {demo}", flush=True)
    show("ensure", "state", "tasks.jsonl", cwd=demo)
    show("plan", "state", "--output", "plan.json", cwd=demo)
    show("submit", "state", "plan.json", cwd=demo)
    started = time.monotonic()
    while True:
        time.sleep(3)
        result = subprocess.run(
            [*SERVATUS, "status", "state", "--json"],
            cwd=demo,
            text=True,
            capture_output=True,
            check=False,
        )
        if result.returncode == 0 and json.loads(result.stdout)["quiescent"]:
            break
        if time.monotonic() - started > DEADLINE:
            raise SystemExit("demo: the sweep did not finish in time; see servatus status")
        print(f"... waiting ({time.monotonic() - started:.0f} s)", flush=True)
    show("status", "state", cwd=demo)
    list_results(work_root / "results", tasks)
    servatus = Path(sys.executable).parent / "servatus"
    print(
        f"\ndemo: done. Go on with: cd {demo} && {servatus} status state\n"
        "demo: RESULT reads UNOBSERVED because the demo names no result probe (a function that "
        "checks what a Task wrote; see docs/status.md)\n"
        f"demo: and a Task's output: cd {demo} && {servatus} logs state --task {tasks[0]['key']}",
        flush=True,
    )


if __name__ == "__main__":
    main()
