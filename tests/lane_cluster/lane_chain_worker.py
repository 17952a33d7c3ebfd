"""The chain tests' worker, copied into work_root as ``chain_step.py``.

``chain_step.py MODES`` takes one mode per link, comma-separated, and uses the one of its
``SERVATUS_LINK`` (the last for later links): ``exitN`` sleeps 3 s, then exits N; ``yieldS``
sleeps S seconds, then exits 75; ``usr1N`` exits N on SIGUSR1; ``saveS`` saves for S seconds on
SIGUSR1, then exits 75; ``ignore`` ignores SIGUSR1 and sleeps until it is killed; ``die`` sleeps
with SIGUSR1's default action, so it dies of it (138). Before that it leaves
``runs/<key>.<job>.json`` in work_root with what it was given (the chain's reserved variables)
and when it started, which the tests compare with the markers.
"""

import json
import os
import signal
import sys
import time
from pathlib import Path

env = os.environ
key, job = env["SERVATUS_TASK_KEY"], env["SERVATUS_JOB_ID"]
link = int(env["SERVATUS_LINK"])
modes = sys.argv[1].split(",")
mode = modes[min(link, len(modes)) - 1]
record = {
    "started": time.time(),
    "mode": mode,
    **{name: env.get(name) for name in sorted(env) if name.startswith("SERVATUS_")},
}
(Path("runs") / f"{key}.{job}.json").write_text(json.dumps(record))
print(f"{key} link {link}: {mode}", flush=True)
if mode.startswith("exit"):
    time.sleep(3)
    sys.exit(int(mode[4:]))
if mode.startswith("yield"):
    time.sleep(int(mode[5:]))
    sys.exit(75)
if mode.startswith("usr1"):
    code = int(mode[4:])
    signal.signal(signal.SIGUSR1, lambda *_: sys.exit(code))
elif mode.startswith("save"):

    def save(*_: object) -> None:
        time.sleep(int(mode[4:]))
        sys.exit(75)

    signal.signal(signal.SIGUSR1, save)
elif mode == "ignore":
    signal.signal(signal.SIGUSR1, signal.SIG_IGN)
while True:
    time.sleep(60)
