"""The ``bubblewrap`` launcher: each Task runs in a bubblewrap sandbox inside its ``srun`` step.

Select it with ``[target] launcher = "bubblewrap"``. The sandbox sees the whole filesystem
read-only except ``work_root`` (and any ``writable`` paths), gets a private ``/tmp``, runs in its
own PID namespace and dies with its step. The step command (``docs/development/launchers.md``)::

    /bin/sh -c SCRIPT servatus-step BWRAP --ro-bind / / --dev /dev --proc /proc --tmpfs /tmp
        --bind WORK_ROOT WORK_ROOT [--bind W W]... --chdir WORK_ROOT --unshare-pid
        [--unshare-net] --new-session --die-with-parent
        -- /usr/bin/env [-u PWD] --default-signal=USR1,TERM ARGS...

The environment is exactly the Task's ``env`` plus the reserved variables, and no value is
written on a command line: the values reach the step by name (``StepCommand.exported`` and the
batch script's run-time variables), and SCRIPT, which holds only names, removes every other
variable (``SLURM_*`` and the like) with ``--unsetenv NAME``. bwrap's ``--setenv NAME VALUE``
would have put the values in bwrap's own command line, readable in ``/proc`` by other users for
the whole run. bwrap sets ``PWD`` inside the sandbox; ``env -u PWD`` takes it out again.

Signals: Slurm signals every process of a step (``SIGUSR1`` before the limit, ``SIGTERM`` at the
end). bwrap does not forward them, and dies of them, which would kill the sandbox at once
(``--die-with-parent``). So SCRIPT starts bwrap with both ignored, and ``env --default-signal``
restores them for the Task, which receives Slurm's signals itself.

Options, from ``[target] launcher_options``:

``writable``
    Comma-separated absolute paths the Task may also write, e.g. ``"/scratch/alice"``.
``network``
    ``"host"`` (default) or ``"none"`` for a private network namespace with loopback only.
``bwrap``
    The bubblewrap executable on the compute nodes; default ``/usr/bin/bwrap``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import attrs

from servatus.config import Target
from servatus.errors import ConfigurationError
from servatus.hookspecs import hookimpl
from servatus.launcher import SHELL, Launcher, StepCommand, check_program

NAME = "bubblewrap"
BWRAP = "/usr/bin/bwrap"
ENV = "/usr/bin/env"
CUT = "/usr/bin/cut"
TR = "/usr/bin/tr"
GPU_VARIABLE = "CUDA_VISIBLE_DEVICES"
SIGNALS = "USR1,TERM"
"""Slurm's signals to a step: before the limit, and at the end; the Task must receive them."""
OPTIONS = {
    "writable": "comma-separated absolute paths the Task may write besides work_root",
    "network": '"host" (default) or "none"',
    "bwrap": f"absolute path of bubblewrap on the compute nodes (default {BWRAP})",
}
NETWORKS = ("host", "none")


@attrs.frozen
class Settings:
    """The launcher options of one Target, checked."""

    bwrap: str = BWRAP
    writable: tuple[str, ...] = ()
    network: str = "host"


def _absolute(path: str, what: str) -> str:
    if not path.startswith("/") or "," in path or not path.isprintable():
        raise ConfigurationError(f"launcher_options.{what}: {path!r} is not an absolute path")
    return path.rstrip("/") or "/"


def settings(target: Target) -> Settings:
    """Read ``launcher_options``; refuse unknown keys and bad values with the key's name."""
    options = dict(target.launcher_options)
    unknown = sorted(set(options) - set(OPTIONS))
    if unknown:
        known = "; ".join(f"{key}: {meaning}" for key, meaning in OPTIONS.items())
        raise ConfigurationError(
            f"the bubblewrap launcher has no option {', '.join(map(repr, unknown))} ({known})"
        )
    network = options.get("network", "host")
    if network not in NETWORKS:
        raise ConfigurationError(
            f"launcher_options.network: {network!r} is not one of {', '.join(NETWORKS)}"
        )
    text = options.get("writable", "")
    writable = tuple(_absolute(p.strip(), "writable") for p in text.split(",") if p.strip())
    return Settings(
        bwrap=_absolute(options.get("bwrap", BWRAP), "bwrap"),
        writable=writable,
        network=network,
    )


def _quote(text: str) -> str:
    return "'" + text.replace("'", "'\\''") + "'"


def step_script(keep: Sequence[str]) -> str:
    """The fixed shell text that starts ``"$@"`` (bwrap) with every variable not in ``keep``
    removed by name, and with Slurm's signals ignored by bwrap itself."""
    lines = ["set -f", "servatus_bwrap=$1; shift"]
    if keep:
        names = "|".join(_quote(name) for name in keep)
        lines.append(
            f"for servatus_n in $({CUT} -z -d= -f1 /proc/self/environ | {TR} '\\0' ' '); do "
            f'case $servatus_n in {names}) ;; *) set -- --unsetenv "$servatus_n" "$@" ;; esac; '
            "done"
        )
    lines.append(f"trap '' {SIGNALS.replace(',', ' ')}")
    lines.append('exec "$servatus_bwrap" "$@"')
    return "; ".join(lines)


@attrs.frozen
class BubblewrapLauncher:
    """Runs the Task's absolute ``args[0]`` in a bubblewrap sandbox."""

    name: str = NAME

    def check(self, target: Target, args: Sequence[str]) -> None:
        check_program(args, self.name)
        settings(target)

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
        chosen = settings(target)
        work_root = target.work_root.rstrip("/") or "/"
        # GPUs are device files: a GPU step sees the host's /dev, a CPU step a minimal one.
        devices = ["--dev-bind", "/dev", "/dev"] if gpus else ["--dev", "/dev"]
        bwrap = [chosen.bwrap, "--ro-bind", "/", "/", *devices, "--proc", "/proc"]
        bwrap += ["--tmpfs", "/tmp"]
        for path in (work_root, *chosen.writable):
            bwrap += ["--bind", path, path]
        bwrap += ["--chdir", work_root, "--unshare-pid"]
        if chosen.network == "none":
            bwrap.append("--unshare-net")
        bwrap += ["--new-session", "--die-with-parent", "--"]
        inner = [ENV, *(["-u", "PWD"] if "PWD" not in env else []), f"--default-signal={SIGNALS}"]
        keep = [*sorted(env), *inherit, *([GPU_VARIABLE] if gpus else [])]
        return StepCommand(
            argv=(SHELL, "-c", step_script(keep), "servatus-step", *bwrap, *inner, *args),
            exported=tuple(sorted(env.items())),
        )


@hookimpl
def servatus_launchers() -> list[Launcher]:
    return [BubblewrapLauncher()]
