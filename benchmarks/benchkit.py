"""What several benchmarks share: the one-profile SERVATUS.toml and the quickstart-shaped roster.

``bench_settle.py`` imports it only where it builds its campaign: its measuring processes may run
da44b63's code, which must not load this tree's."""

from __future__ import annotations

from servatus.tasks import Task

CONFIG = """\
default_profile = "one"

[target]
slurm_bin = "/usr/bin"
work_root = "/scratch/alice/sweep"
log_root = "/scratch/alice/sweep/logs"
partitions = ["debug"]
max_tasks_per_allocation = {per}
max_cpus_per_allocation = {per}
max_memory_mib_per_allocation = {memory}
max_time_limit = "01:00:00"

[profiles.one.resources]
cpus = 1
memory_mib = 100
time_limit = "00:01:00"
"""
"""Profile ``one``: a Task of 1 CPU, 100 MiB, a minute; fill in ``per`` (Tasks and CPUs per
allocation) and ``memory`` (MiB per allocation)."""


def roster(count: int, program: str = "/usr/bin/python3") -> list[Task]:
    """Tasks shaped like the quickstart's: args, a small JSON stdin, an env on every other one."""
    return [
        Task(
            f"lr-{i % 7}e-4-seed-{i}",
            [program, "train.py", "--epochs", "90"],
            stdin=b'{"lr": 0.0003, "seed": %d}' % i,
            env={"WANDB_MODE": "offline"} if i % 2 else None,
        )
        for i in range(count)
    ]
