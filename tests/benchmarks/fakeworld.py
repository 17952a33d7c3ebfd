"""A Slurm that outlives each ``servatus`` process: ``python fakeworld.py WORLD ARGS...`` runs
``servatus ARGS`` through ``main(connect=FakeScheduler)``, the scheduler unpickled from the file
``WORLD`` (made on first use) under an exclusive lock, and pickled back after one tick of the
world. So the soak's driver can run the user's commands as separate processes against running,
ended and forgotten jobs, chains that hand on, and a lease taking steps, none of which the fake
``slurm_bin`` lane has.

A tick, after every command: jobs that ended at the tick before are forgotten (``MinJobAge``
passed); a running job ends once it ran ``2 + J % 5`` ticks (J its number; a lease runs on,
ending each step after 2); pending jobs start. So a job is listed ``RUNNING`` after the command
that submitted it, for two to six commands, then ended for one, then forgotten. Steps exit 0,
except that with ``WORLD_FAILING`` set every third job's steps exit 1, and a chain link before its
Task's last yields (75) so its next link takes the handoff. Markers and claims are written under
``WORLD_LOG_ROOT`` with their mtimes, for the soak's evidence to read as it reads a cluster's.

A command killed mid-way loses its world changes, as if Slurm never heard of them: with kills,
the finale's ``reconcile`` needs its 15 minutes.
"""

from __future__ import annotations

import fcntl
import os
import pickle
import sys
from pathlib import Path
from typing import Any

from servatus.cli import main
from servatus.testing import FakeScheduler

ENDED = frozenset({"COMPLETED", "CANCELLED", "FAILED", "TIMEOUT", "NODE_FAIL"})


def tick(fake: FakeScheduler, world: dict[str, Any], failing: bool) -> None:
    """One step of the world: forget what ended a tick ago, end what ran long enough (job J
    runs ``2 + J % 5`` ticks, a lease's step 2), start what is pending."""
    ended: set[int] = world.setdefault("ended", set())
    ages: dict[str, int] = world.setdefault("ages", {})
    for job in fake.jobs:
        if job.job in ended and job.state in ENDED:
            job.listed = False
    for job in list(fake.jobs):
        if job.state != "RUNNING":
            continue
        code = 1 if failing and job.job % 3 == 0 else 0
        if job.lease is not None:
            for step in list(job.lease.running):
                ages[step] = ages.get(step, 0) + 1
                if ages[step] >= 2:
                    fake.finish_step(step, code)
            continue
        key = str(job.job)
        ages[key] = ages.get(key, 0) + 1
        if ages[key] < 2 + job.job % 5:
            continue
        if job.link and job.link < job.links:
            code = 75 if code == 0 else code
        fake.finish(job.job, *([code] * job.slots))
    fake.start()
    ended.clear()
    ended.update(job.job for job in fake.jobs if job.state in ENDED)


def materialize(fake: FakeScheduler, log_root: Path) -> None:
    log_root.mkdir(parents=True, exist_ok=True)
    for name, at in fake.markers.items():
        path = log_root / name
        if not path.exists():
            path.touch()
        os.utime(path, (at, at))
    for name, (at, data) in fake.claims.items():
        path = log_root / name
        if not path.exists() or path.read_bytes() != data:
            path.write_bytes(data)
        os.utime(path, (at, at))


def run(world: Path, args: list[str]) -> int:
    with open(world.with_name(world.name + ".lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if world.exists():
            fake, state = pickle.loads(world.read_bytes())
        else:
            fake, state = FakeScheduler(), {}
        try:
            return main(args, connect=fake)
        finally:
            tick(fake, state, bool(os.environ.get("WORLD_FAILING")))
            fresh = world.with_name(world.name + ".new")
            fresh.write_bytes(pickle.dumps((fake, state)))
            os.replace(fresh, world)
            materialize(fake, Path(os.environ["WORLD_LOG_ROOT"]))


if __name__ == "__main__":
    sys.exit(run(Path(sys.argv[1]), sys.argv[2:]))
