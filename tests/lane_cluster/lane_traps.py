"""Traps that stop ``servatus submit`` at exact points around its ``sbatch`` calls.

Over SSH the transport runs ``ssh`` from the caller's ``PATH``, so a wrapper ``ssh`` placed first
on the subprocess's ``PATH`` sees every remote command, a batch of ``sbatch`` calls (ADR 0014) as
one; on the login node Slurm commands run from ``slurm_bin``, so the test's ``slurm_bin`` is a
directory whose ``sbatch`` is a wrapper and whose other commands are links to the real ones, and
the batch program runs it once per allocation. Either wrapper passes everything through except
the first batch (SSH) or ``sbatch --parsable`` (login node) after a test writes a ``mode`` file
beside it (it consumes the file); "the caller" is the nearest ancestor that runs servatus:

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
import re
import subprocess
import time
from pathlib import Path

from lane_helpers import Lane

SSH = "/usr/bin/ssh"
TIMED_OUT = "sbatch: error: Batch job submission failed: Socket timed out on send/recv operation"
"""What ``sbatch`` says when slurmctld did not answer: the wrappers that drop a submission say
it too (the job was not sent)."""
SLURM_COMMANDS = ("squeue", "scancel", "scontrol", "srun", "sinfo")

_CHOOSE = """\
if mv "$here/mode" "$here/mode.used" 2>/dev/null; then
    mode=$(cat "$here/mode.used")
else
    mode=pass
fi
"""


KILL_CALLER = """\
p=$PPID
while [ "$p" -gt 1 ] && ! tr '\\0' ' ' <"/proc/$p/cmdline" | grep -q servatus; do
    p=$(sed 's/.*) [A-Za-z] \\([0-9]*\\) .*/\\1/' "/proc/$p/stat")
done
if [ "$p" -gt 1 ]; then
    kill -KILL "$p"
else
    : >"$here/kill-now"
    while [ ! -e "$here/killed" ]; do sleep 0.05; done
fi
"""
"""Shell lines that SIGKILL the nearest ancestor running servatus: ``ssh``'s parent, or the
parent of the batch program that runs a wrapped ``sbatch``. A wrapped ``sbatch`` run over SSH
has none (servatus is on the laptop's side): it writes ``kill-now`` beside itself and waits for
the test to kill servatus and write ``killed`` (:func:`killed_when_asked`)."""


def killed_when_asked(
    process: subprocess.Popen[str], directory: Path, *, seconds: float = 120
) -> subprocess.CompletedProcess[str]:
    """Run ``process`` to its end, SIGKILLing it when a wrapper in ``directory`` asks."""
    deadline = time.monotonic() + seconds
    while process.poll() is None and time.monotonic() < deadline:
        if (directory / "kill-now").exists():
            process.kill()
            process.wait()
            (directory / "killed").touch()
            break
        time.sleep(0.02)
    out, err = process.communicate(timeout=max(deadline - time.monotonic(), 1))
    return subprocess.CompletedProcess(process.args, process.returncode, out, err)


def kill_cases(real: str, refused: int) -> str:
    """The ``case`` arms that SIGKILL the caller around one call of ``real``: ``before`` it
    (exiting ``refused``, as the command would when it never ran), or ``after`` it answered,
    keeping the answer in ``answer``."""
    return f"""\
before)
{KILL_CALLER}    exit {refused} ;;
after)
    answer=$({real} "$@")
    code=$?
    printf '%s\\n' "$answer" >"$here/answer"
{KILL_CALLER}    exit "$code" ;;
"""


SSH_WRAPPER = f"""\
#!/bin/sh
here=$(dirname "$0")
case "$*" in
*" -s batch"*) wanted="before after hold-sbatch" ;;
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
        for name in ("answer", "held", "go", "mode.used", "kill-now", "killed"):
            (self.directory / name).unlink(missing_ok=True)
        self.lane.put(self.directory / "mode", mode + "\n")

    @property
    def armed(self) -> bool:
        return (self.directory / "mode").exists()

    @property
    def answer(self) -> str:
        """The job numbers the trapped call answered, one per line: ``sbatch``'s own, or a
        batch's answers (``@INDEX 0 JOB.``) out of the framed ``ssh`` output."""
        text = (self.directory / "answer").read_text()
        batched = re.findall(r"^@[0-9]+ 0 ([1-9][0-9]*)[.;]", text, flags=re.MULTILINE)
        return "".join(f"{job}\n" for job in batched) if batched else text

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
