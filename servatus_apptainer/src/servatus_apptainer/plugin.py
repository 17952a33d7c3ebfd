"""The ``apptainer`` launcher: each Task runs in its own ``apptainer exec`` in its ``srun`` step.

The step command, with ``gpus > 0`` adding ``--nv`` (see ``docs/development/launchers.md``)::

    /bin/sh -c SCRIPT servatus-step APPTAINER exec --cleanenv [--nv]
        --bind WORK_ROOT[,BIND...] --pwd WORK_ROOT IMAGE ARGS...

* ``exec`` runs the Task's own ``args`` and ignores the image's runscript; Apptainer stops
  reading its own options at the image, so ``ARGS`` reach the Task unchanged and a relative
  ``args[0]`` resolves on the container's ``PATH``.
* ``--cleanenv`` keeps the host's environment (``SLURM_*`` included) out of the container. The
  Task's ``env`` and the reserved variables known at planning go in as ``APPTAINERENV_NAME``
  variables through :attr:`StepCommand.exported`, so no value is on a command line.
* One ``--bind`` carries ``work_root`` and the configured binds as Apptainer's comma-separated
  list; the configuration refuses ``,`` in both, so the list cannot be misread.
* ``SCRIPT`` is fixed text that copies the run-time variables (``inherit``; on GPU steps also
  Slurm's step-local ``CUDA_VISIBLE_DEVICES``) into ``APPTAINERENV_*`` variables by name, so their
  values are read from the step's environment and never written on a command line. It also
  gives Apptainer the batch script's ``PATH=/usr/bin:/bin`` when the step has none, since
  ``--nv`` looks up the host's NVIDIA binaries on ``PATH``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import attrs

from servatus.config import APPTAINER, Target
from servatus.errors import ConfigurationError
from servatus.hookspecs import hookimpl
from servatus.launcher import SHELL, Launcher, StepCommand

PREFIX = "APPTAINERENV_"
"""Apptainer sets ``NAME`` in the container for each ``APPTAINERENV_NAME`` it is given."""
GPU_VARIABLE = "CUDA_VISIBLE_DEVICES"
DEFAULT_PATH = "/usr/bin:/bin"
"""The ``PATH`` the batch script sets; Apptainer needs one to find the host's NVIDIA tools."""
STEP_NAME = "servatus-step"
"""``$0`` of the step shell, which names it in ``ps`` and in its error messages."""


def step_script(inherit: Sequence[str], *, gpus: int) -> str:
    """The fixed shell text that runs ``"$@"`` (Apptainer) with run-time values carried in.

    Only variable names appear in it. An unset ``CUDA_VISIBLE_DEVICES`` stays unset, as the
    direct launcher leaves it, rather than becoming an empty (no GPU) list in the container.
    """
    lines = [f'export {PREFIX}{name}="${name}"' for name in inherit]
    if gpus:
        lines.append(
            f'if [ "${{{GPU_VARIABLE}+set}}" = set ]; then '
            f'export {PREFIX}{GPU_VARIABLE}="${GPU_VARIABLE}"; fi'
        )
    lines.append(f'export PATH="${{PATH:-{DEFAULT_PATH}}}"')
    lines.append('exec "$@"')
    return "; ".join(lines)


@attrs.frozen
class ApptainerLauncher:
    """Runs each Task with ``apptainer exec --cleanenv`` in ``[target] image``."""

    name: str = APPTAINER

    def check(self, target: Target, args: Sequence[str]) -> None:
        """Refuse what cannot run: no image configured, or no program to run in it."""
        if target.apptainer is None:
            raise ConfigurationError(
                'target.launcher = "apptainer" needs target.apptainer and target.image'
            )
        if not args:
            raise ConfigurationError(
                "the apptainer launcher needs at least one argument: the program to run in "
                f"{target.apptainer.image} (apptainer exec ignores the image's runscript)"
            )

    def command(
        self,
        target: Target,
        args: Sequence[str],
        env: Mapping[str, str],
        *,
        inherit: Sequence[str],
        gpus: int,
    ) -> StepCommand:
        self.check(target, args)
        assert target.apptainer is not None  # check() refused the rest
        settings = target.apptainer
        work_root = target.work_root.rstrip("/") or "/"
        apptainer = [settings.executable, "exec", "--cleanenv"]
        if gpus:
            apptainer.append("--nv")
        apptainer += [
            "--bind",
            ",".join([work_root, *settings.binds]),
            "--pwd",
            work_root,
            settings.image,
            *args,
        ]
        exported = tuple((f"{PREFIX}{name}", value) for name, value in sorted(env.items()))
        script = step_script(inherit, gpus=gpus)
        return StepCommand(argv=(SHELL, "-c", script, STEP_NAME, *apptainer), exported=exported)


@hookimpl
def servatus_launchers() -> list[Launcher]:
    return [ApptainerLauncher()]
