"""A soak Task's program on the cluster, copied into work_root as ``soak_task.py`` beside a copy
of :mod:`soak.worker` (``work_root/soak/``), and run by each Task's step from work_root.

``soak_task.py SECONDS [flaky]``: works for SECONDS seconds, then publishes its result with
:func:`soak.worker.publish_result` (writer ``<allocation>.<job>.<slot>`` from the step's
environment; a result already there is kept, as a rerun must) and exits 0. SIGUSR1 (the
pre-limit signal) makes it yield at once: exit 75, nothing published. ``flaky`` fails the first
run of its key (exit 1, nothing published), so ``plan --retry-failed`` has work. In a chain
(``SERVATUS_BUDGET`` set) the first link works until the pre-limit signal and yields, so the
chain hands on; a later link finishes in a few seconds.

Before anything else it leaves ``runs/<key>.<job>.<slot>`` in work_root (one file per run).
"""

import os
import signal
import sys
import time
from pathlib import Path

from servatus.errors import DestinationExists
from soak.worker import publish_result

YIELD = 75

env = os.environ
key = env["SERVATUS_TASK_KEY"]
writer = f"{env['SERVATUS_ALLOCATION_ID']}.{env['SERVATUS_JOB_ID']}.{env.get('SERVATUS_SLOT', '0')}"
seconds = float(sys.argv[1])
flaky = sys.argv[2:] == ["flaky"]
chained = "SERVATUS_BUDGET" in env
link = int(env.get("SERVATUS_LINK") or 1)

signalled: list[int] = []
signal.signal(signal.SIGUSR1, lambda number, _frame: signalled.append(number))
runs = Path("runs")
runs.mkdir(exist_ok=True)
(runs / writer.replace(env["SERVATUS_ALLOCATION_ID"], key, 1)).touch()
print(f"{key} as {writer}: {seconds} s{' flaky' if flaky else ''} link {link}", flush=True)

if chained:
    seconds = 1e9 if link == 1 else 3.0
deadline = time.monotonic() + seconds
while not signalled and time.monotonic() < deadline:
    time.sleep(min(0.5, max(0.0, deadline - time.monotonic())))
if signalled:
    print(f"{key}: pre-limit signal, yielding", flush=True)
    sys.exit(YIELD)
failed_once = runs / f"{key}.failed-once"
if flaky and not failed_once.exists():
    failed_once.touch()
    print(f"{key}: failing its first run", flush=True)
    sys.exit(1)
try:
    publish_result(Path("results"), key, writer)
except DestinationExists:
    print(f"{key}: already published, kept", flush=True)
else:
    print(f"{key}: published", flush=True)
sys.exit(0)
