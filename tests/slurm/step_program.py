"""The Task program of script tests: records what it was given, then behaves as told.

``step_program.py OUTDIR NAME MODE [ARGS...]`` writes ``OUTDIR/NAME.json`` with its arguments,
environment, working directory and stdin (all as hex, so any byte survives), then:
``exit:N`` exits N; ``usr1`` waits for SIGUSR1 and exits 138 after recording it;
``usr1-then:N`` waits for SIGUSR1 and exits N; ``usr1-slow:N`` waits for SIGUSR1, saves for a
second, and exits N; ``wait:NAME`` waits until ``OUTDIR/NAME.json``
exists (a peer step running at the same time), then exits 0; ``sleep`` sleeps until killed.
"""

import json
import os
import signal
import sys
import time

outdir, name, mode = sys.argv[1], sys.argv[2], sys.argv[3]
got_usr1 = []
signal.signal(signal.SIGUSR1, lambda *_: got_usr1.append(time.time()))
record = {
    "argv": [os.fsencode(a).hex() for a in sys.argv[4:]],
    "env": {os.fsencode(k).hex(): v.hex() for k, v in os.environb.items()},
    "cwd": os.getcwd(),
    "stdin": sys.stdin.buffer.read().hex(),
    "pid": os.getpid(),
}


def write(path: str, data: dict) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w") as handle:
        json.dump(data, handle)
    os.replace(tmp, path)


write(os.path.join(outdir, name + ".json"), record)
if mode.startswith("exit:"):
    sys.exit(int(mode[5:]))
if mode.startswith("wait:"):
    peer = os.path.join(outdir, mode[5:] + ".json")
    deadline = time.time() + 20
    while not os.path.exists(peer):
        if time.time() > deadline:
            sys.exit(9)
        time.sleep(0.05)
    sys.exit(0)
if mode.startswith("usr1"):
    deadline = time.time() + 60
    while not got_usr1 and time.time() < deadline:
        time.sleep(0.05)
    write(os.path.join(outdir, name + ".usr1.json"), {"at": got_usr1})
    if mode.startswith("usr1-slow:"):
        time.sleep(1)
        sys.exit(int(mode[len("usr1-slow:") :]))
    sys.exit(int(mode[len("usr1-then:") :]) if mode.startswith("usr1-then:") else 138)
if mode == "sleep":
    while True:
        time.sleep(1)
sys.exit(99)
