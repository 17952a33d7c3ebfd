"""Traps that stop ``servatus submit`` at exact points around its one ``sbatch`` call.

Over SSH the transport runs ``ssh`` from the caller's ``PATH``, so a wrapper ``ssh`` placed first
on the subprocess's ``PATH`` sees every remote command; on the login node Slurm commands run from
``slurm_bin``, so the test's ``slurm_bin`` is a directory whose ``sbatch`` is a wrapper and whose
other commands are links to the real ones. Either wrapper passes everything through except the
first ``sbatch --parsable`` after a test writes a ``mode`` file beside it (it consumes the file):

``before``  the intent is durable and ``sbatch`` is being called: SIGKILL the caller (``$PPID``,
            the servatus process) and never run ``sbatch``.
``after``   run the real ``sbatch``, keep its answer in ``answer``, then SIGKILL the caller before
            it can record a receipt.
``hold-sbatch``, ``hold-listing``  (SSH) at the ``sbatch`` call, or at the command that reads
            ``squeue`` and the ``find`` listing of ``log_root`` for ``status``: write ``held``, wait
            for the test to write ``go`` (after it stopped sshd), then run the real ``ssh``.
"""

from __future__ import annotations

import os
from pathlib import Path

from lane_helpers import Lane

SSH = "/usr/bin/ssh"
SLURM_COMMANDS = ("squeue", "scancel", "scontrol", "srun", "sinfo")

_CHOOSE = """\
if mv "$here/mode" "$here/mode.used" 2>/dev/null; then
    mode=$(cat "$here/mode.used")
else
    mode=pass
fi
"""


def kill_cases(real: str, refused: int) -> str:
    """The ``case`` arms that SIGKILL the caller around one call of ``real``: ``before`` it
    (exiting ``refused``, as the command would when it never ran), or ``after`` it answered,
    keeping the answer in ``answer``."""
    return f"""\
before)
    kill -KILL "$PPID"
    exit {refused} ;;
after)
    answer=$({real} "$@")
    code=$?
    printf '%s\\n' "$answer" >"$here/answer"
    kill -KILL "$PPID"
    exit "$code" ;;
"""


SSH_WRAPPER = f"""\
#!/bin/sh
here=$(dirname "$0")
case "$*" in
*"/sbatch --parsable"*) wanted="before after hold-sbatch" ;;
*" find -H "*) wanted="hold-listing" ;;
*) exec {SSH} "$@" ;;
esac
case " $wanted " in
*" $(cat "$here/mode" 2>/dev/null) "*)
{_CHOOSE}    ;;
*) mode=pass ;;
esac
case $mode in
{kill_cases(SSH, 255)}hold-*)
    : >"$here/held"
    while [ ! -e "$here/go" ]; do sleep 0.1; done
    exec {SSH} "$@" ;;
esac
exec {SSH} "$@"
"""

SBATCH_WRAPPER = f"""\
#!/bin/sh
here=$(dirname "$0")
case " $* " in
*" --parsable "*) ;;
*) exec /usr/bin/sbatch "$@" ;;
esac
{_CHOOSE}case $mode in
{kill_cases("/usr/bin/sbatch", 1)}esac
exec /usr/bin/sbatch "$@"
"""


class Trap:
    """The wrapper installed for one lane, and its control files."""

    def __init__(self, lane: Lane, directory: Path) -> None:
        self.lane = lane
        self.directory = directory

    def arm(self, mode: str) -> None:
        for name in ("answer", "held", "go", "mode.used"):
            (self.directory / name).unlink(missing_ok=True)
        self.lane.put(self.directory / "mode", mode + "\n")

    @property
    def armed(self) -> bool:
        return (self.directory / "mode").exists()

    @property
    def answer(self) -> str:
        return (self.directory / "answer").read_text()

    @property
    def held(self) -> bool:
        return (self.directory / "held").exists()

    def release(self) -> None:
        (self.directory / "go").touch()


def install(lane: Lane, outside: Path) -> Trap:
    """A wrapper ``ssh`` first on PATH (SSH), or a wrapper ``slurm_bin`` (login node)."""
    if lane.ssh:
        outside.mkdir()
        lane.put(outside / "ssh", SSH_WRAPPER, mode=0o755)
        lane.extra_path.insert(0, str(outside))
        return Trap(lane, outside)
    return wrap_sbatch(lane, SBATCH_WRAPPER)


def wrap_sbatch(lane: Lane, wrapper: str) -> Trap:
    """The lane's ``slurm_bin`` becomes a directory inside the root whose ``sbatch`` is
    ``wrapper`` and whose other commands are links to the real ones; either transport runs it."""
    inner = f"{lane.base}/bin"
    lane.cluster.make_dirs(inner)
    directory = lane.cluster.outside(inner)
    lane.put(directory / "sbatch", wrapper, mode=0o755)
    for name in SLURM_COMMANDS:
        link = directory / name
        link.symlink_to(f"{lane.cluster.slurm_bin}/{name}")  # resolved inside the root
        os.lchown(link, lane.cluster.uid, lane.cluster.gid)
    (lane.launch / "SERVATUS.toml").unlink()
    lane.put(lane.launch / "SERVATUS.toml", lane.toml(slurm_bin=inner))
    return Trap(lane, directory)
