"""The lease's own CPU while idle: its batch shell and everything it runs, on the compute node.

Run ``python benchmarks/bench_lease_idle.py [--seconds S] [--poll P]`` as root with the test
cluster up. It submits one one-slot lease (``leasekit.running_lease``), offers it nothing, and
reads the CPU of the lease's batch shell (the child of ``slurmstepd: [JOB.batch]``) and of all
its descendants from ``/proc`` at the start and the end of ``S`` seconds (default 600, the
issue's ten minutes): ``utime + stime`` of each live process, plus the shell's ``cutime +
cstime``, which holds every child it has reaped (each poll's ``sleep``).

Why ``/proc`` and not ``sstat``/``sacct``: the test cluster has no accounting
(``jobacct_gather/none``), so neither has anything to say; and where a site has it, ``sstat``
samples the batch step every ``JobAcctGatherFrequency`` (30 s by default) while ``/proc`` counts
every tick the kernel charged. The cluster's daemons share this machine's kernel (one mount
namespace, no pid namespace), so the lease's processes are visible here by their real pids.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

from leasekit import running_lease

TICKS = os.sysconf("SC_CLK_TCK")


def _stat(pid: int) -> tuple[int, list[str]] | None:
    """A process's parent and its ``stat`` fields after the command name, or None if gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2 :].split()
    return int(fields[1]), fields


def batch_shell(job: int) -> int:
    """The pid of the lease's batch shell: the child of ``slurmstepd: [JOB.batch]``."""
    stepd = f"slurmstepd: [{job}.batch]".encode()
    daemons = set()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if Path(f"/proc/{entry}/cmdline").read_bytes().rstrip(b"\0") == stepd:
                    daemons.add(int(entry))
            except OSError:
                continue
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            found = _stat(int(entry))
            if found is not None and found[0] in daemons:
                return int(entry)
    raise SystemExit(f"no batch shell of job {job} on this machine")


def tree_ticks(shell: int) -> int:
    """CPU ticks of the shell and its live descendants, plus what the shell's reaped children
    used (``cutime``/``cstime``)."""
    parents: dict[int, int] = {}
    fields_of: dict[int, list[str]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            found = _stat(int(entry))
            if found is not None:
                parents[int(entry)], fields_of[int(entry)] = found
    if shell not in fields_of:
        raise SystemExit("the lease's batch shell ended during the measurement")
    tree, grew = {shell}, True
    while grew:
        more = {pid for pid, parent in parents.items() if parent in tree} - tree
        tree |= more
        grew = bool(more)
    # fields: state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime(11)...
    total = sum(int(fields_of[pid][11]) + int(fields_of[pid][12]) for pid in tree)
    return total + int(fields_of[shell][13]) + int(fields_of[shell][14])


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--seconds", type=float, default=600, metavar="S")
    parser.add_argument("--poll", type=int, default=5, metavar="P", help="the lease's poll")
    options = parser.parse_args()
    limit = int(options.seconds) + 300
    with running_lease(slots=1, time_limit=limit, poll_seconds=options.poll) as lease:
        shell = batch_shell(lease.job)
        time.sleep(options.poll)  # past the start marker and the first poll
        before, began = tree_ticks(shell), time.monotonic()
        time.sleep(options.seconds)
        after, elapsed = tree_ticks(shell), time.monotonic() - began
    cpu = (after - before) / TICKS
    polls = elapsed / options.poll
    print(f"an idle lease (job {lease.job}, poll {options.poll} s) over {elapsed:.0f} s:")
    share = 100 * cpu / elapsed
    print(f"  CPU of its batch shell and children: {cpu:.2f} s ({share:.3f} % of one core)")
    print(f"  about {polls:.0f} polls, {1000 * cpu / polls:.1f} ms of CPU each")


if __name__ == "__main__":
    main()
