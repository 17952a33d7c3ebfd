"""The lane tests' worker, copied into work_root as ``step.py`` and run by each Task's step.

``step.py exit N`` exits N; ``step.py sleep S`` sleeps S seconds, then exits 0 (and dies of a
SIGUSR1, 138); ``step.py ignore S`` does the same ignoring SIGUSR1; ``step.py usr1 N`` waits for
SIGUSR1, then exits N; ``step.py lines N`` prints N numbered lines, then exits 0. Every run first
leaves ``runs/<key>.<job>.<pid>`` in work_root, so a test counts how many times each Task really
started.
"""

import os
import signal
import sys
import time
from pathlib import Path

key = os.environ["SERVATUS_TASK_KEY"]
job = os.environ["SERVATUS_JOB_ID"]
(Path("runs") / f"{key}.{job}.{os.getpid()}").touch()
print(f"{key} started in job {job}", flush=True)
mode, value = sys.argv[1], int(sys.argv[2])
if mode == "exit":
    print(f"{key} exits {value}", flush=True)
    sys.exit(value)
if mode == "usr1":
    signal.signal(signal.SIGUSR1, lambda *_: sys.exit(value))
    while True:
        time.sleep(60)
if mode == "ignore":
    signal.signal(signal.SIGUSR1, signal.SIG_IGN)
if mode in ("sleep", "ignore"):
    time.sleep(value)
elif mode == "lines":
    for number in range(value):
        print(f"{key} line {number:06d}")
print(f"{key} done", flush=True)
