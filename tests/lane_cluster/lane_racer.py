"""A step that ends just as its job is cancelled: copied into work_root as ``racer.py``.

``racer.py DELAY_MS SLOTS``: every step of the job leaves ``race/<job>.<key>.ready`` and waits
until all ``SLOTS`` have. The step whose key sorts first then leaves ``race/<job>.go`` and runs
the real ``scancel`` on its own job; the others wait for ``go``. Each step then sleeps
``DELAY_MS`` and exits 3, unless the cancel's signal ends it first. So its end marker's exit is
the truth the test checks the reading against: 3 means it ended by itself, anything else
(143, 137) that the cancel killed it.
"""

import os
import subprocess
import sys
import time
from pathlib import Path

key = os.environ["SERVATUS_TASK_KEY"]
job = os.environ["SERVATUS_JOB_ID"]
delay, slots = int(sys.argv[1]) / 1000, int(sys.argv[2])
race = Path("race")
(race / f"{job}.{key}.ready").touch()
go = race / f"{job}.go"
deadline = time.monotonic() + 60
while len(ready := sorted(race.glob(f"{job}.*.ready"))) < slots or not (
    go.exists() or ready[0].name == f"{job}.{key}.ready"
):
    if time.monotonic() > deadline:
        sys.exit(4)  # never hang a test: the other steps did not come
    time.sleep(0.002)
if not go.exists():
    go.touch()
    subprocess.run(["/usr/bin/scancel", job], check=True)
time.sleep(delay)
sys.exit(3)
