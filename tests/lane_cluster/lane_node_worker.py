"""The node tests' worker, copied into work_root as ``node_step.py``.

``node_step.py MODES`` takes one mode per chain link, comma-separated (the last for later links;
a plain allocation or a lease step is link 1). Before anything else it leaves
``runs/<key>.<job>.<pid>.json`` in work_root: its job, pid, link, when it started, and how many
earlier runs of the key it found (which node ran the job is Slurm's to say: steps run under
``env -i``, without ``SLURMD_NODENAME``). On its way out it
leaves ``runs/<key>.<job>.<pid>.end`` with the time and its exit code; a run killed with its node
leaves none.

``exitN`` sleeps 1 s, then exits N. ``gateN`` waits until ``gates/<key>.<link>`` exists, then exits
N. ``sleepS`` sleeps S seconds ignoring ``SIGUSR1`` (which Slurm may send up to a minute
early), then exits 0. ``failonce`` exits 3 on the key's first run and 0 on
any later one. ``hangonce`` sleeps until killed on the key's first run, and exits 0 at once on any
later one.
"""

import json
import os
import signal
import sys
import time
from pathlib import Path

env = os.environ
key, job = env["SERVATUS_TASK_KEY"], env["SERVATUS_JOB_ID"]
link = int(env.get("SERVATUS_LINK", "1"))
modes = sys.argv[1].split(",")
mode = modes[min(link, len(modes)) - 1]
runs = Path("runs")
earlier = len(list(runs.glob(f"{key}.*.json")))
name = f"{key}.{job}.{os.getpid()}"
record = {
    "key": key,
    "job": int(job),
    "pid": os.getpid(),
    "link": link,
    "mode": mode,
    "earlier": earlier,
    "started": time.time(),
}
(runs / f"{name}.json").write_text(json.dumps(record))
print(f"{key} link {link} in job {job}: {mode}", flush=True)


def end(code: int) -> None:
    (runs / f"{name}.end").write_text(f"{time.time()} {code}\n")
    sys.exit(code)


if mode.startswith("exit"):
    time.sleep(1)
    end(int(mode[4:]))
if mode.startswith("gate"):
    gate = Path("gates") / f"{key}.{link}"
    while not gate.exists():
        time.sleep(0.2)
    end(int(mode[4:]))
if mode.startswith("sleep"):
    signal.signal(signal.SIGUSR1, signal.SIG_IGN)
    time.sleep(int(mode[5:]))
    end(0)
if mode == "failonce":
    time.sleep(1)
    end(3 if earlier == 0 else 0)
if mode == "hangonce":
    if earlier:
        time.sleep(1)
        end(0)
    while True:
        time.sleep(60)
sys.exit(f"unknown mode {mode}")
