"""SERVATUS.toml: Targets, Resources and Profiles.

Durations are held as whole seconds (``int``); ``parse_duration``/``format_duration`` convert the
``[D-]H:MM:SS`` text form. Time limits are rounded up to whole minutes when loaded.

DRAFT: the field names below are the contract other modules use. ``Profile.load``, validation,
the private cattrs converter, ``parse_duration``, ``format_duration`` and ``capacity`` are being
written against them.
"""

from __future__ import annotations

import attrs


@attrs.frozen
class Apptainer:
    """The Apptainer launcher's settings: executable, image, and extra binds."""

    executable: str
    image: str
    binds: tuple[str, ...] = ()


@attrs.frozen
class Target:
    """Where and how to run, with ceilings that guard against mistakes."""

    slurm_bin: str
    work_root: str
    log_root: str
    partitions: tuple[str, ...]
    max_tasks_per_allocation: int
    max_cpus_per_allocation: int
    max_memory_mib_per_allocation: int
    max_time_limit: int
    host: str | None = None
    account: str | None = None
    qos: str | None = None
    constraint: str | None = None
    gpu_gres: str | None = None
    max_gpus_per_allocation: int = 0
    max_allocations_per_submit: int | None = None
    max_script_bytes: int = 1048576
    apptainer: Apptainer | None = None
    launcher: str = "direct"
    launcher_options: tuple[tuple[str, str], ...] = ()


@attrs.frozen
class Resources:
    """What each Task needs; an allocation of n Tasks requests n times cpus, memory and gpus."""

    cpus: int
    memory_mib: int
    time_limit: int
    gpus: int = 0
    signal_before_end: int | None = None


@attrs.frozen
class Profile:
    """A named Target and Resources pair from SERVATUS.toml."""

    name: str
    target: Target
    resources: Resources
