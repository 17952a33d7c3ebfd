"""Kill a running job's processes so that it ends without recording how.

``python3 lane_kill.py JOB`` (inside, as alice) finds every process descending from the job's
``slurmstepd: [JOB.*]`` daemons (the batch shell, its step watchers, each ``srun``, and each
step's task), stops them all with ``SIGSTOP`` until no new one appears, then sends ``SIGKILL`` to
each. Stopped processes never run again, so no trap, no watcher and no ``srun`` writes a ``stop``
or ``end`` marker: that is a job that vanished, as on a node failure. The ``slurmstepd`` daemons
(root) are left to report the deaths to slurmctld.

``python3 lane_kill.py JOB --daemons`` (as root; the cluster shares the machine's pids) takes the
``slurmstepd`` daemons too, so nothing on the node is left to tell slurmctld the job ended: what a
node that lost the job's processes, or crashed while slurmctld still counts it up, leaves behind.
Prints what it killed as JSON.
"""

import contextlib
import json
import os
import signal
import sys

job = sys.argv[1]
daemons_too = "--daemons" in sys.argv[2:]


def table() -> dict[int, tuple[int, str]]:
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
            with open(f"/proc/{entry}/cmdline", "rb") as handle:
                command = handle.read().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:
            continue
        found[int(entry)] = (int(fields[1]), command)
    return found


def victims() -> dict[int, str]:
    processes = table()
    daemons = {pid for pid, (_, cmd) in processes.items() if cmd.startswith(f"slurmstepd: [{job}.")}
    chosen: dict[int, str] = {pid: processes[pid][1] for pid in daemons} if daemons_too else {}
    frontier = set(daemons)
    while frontier:
        children = {pid for pid, (ppid, _) in processes.items() if ppid in frontier}
        children -= chosen.keys() | daemons
        chosen.update({pid: processes[pid][1] for pid in children})
        frontier = children
    return chosen


stopped: dict[int, str] = {}
while True:
    fresh = {pid: cmd for pid, cmd in victims().items() if pid not in stopped}
    if not fresh:
        break
    for pid, command in fresh.items():
        try:
            os.kill(pid, signal.SIGSTOP)
        except ProcessLookupError:
            continue
        stopped[pid] = command
# Deepest first, so the batch shell is the last of its tree to die: its death is what a live
# slurmstepd acts on.
for pid in reversed(stopped):
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
print(json.dumps(sorted(stopped.values())))
