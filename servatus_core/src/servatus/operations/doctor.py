"""``servatus doctor``: check, read-only, what a profile needs from its cluster.

Each check is ``pass``, ``fail`` (the command ran and said no, or its output is unusable) or
``unavailable`` (no answer came back). A cluster that does not answer ``sbatch --version`` stops
the run there, since every other command would wait for its deadline too. Nothing is submitted
or written: ``sbatch --test-only`` only asks. Every command runs where the transport runs, so
no check sees a compute node.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Sequence

import attrs

from servatus.config import Profile, Target, profile_problems
from servatus.engine.plan import Allocation
from servatus.errors import EXIT_ERROR, EXIT_OK, EXIT_TEMPFAIL, ConfigurationError, Unavailable
from servatus.evidence import renamers
from servatus.operations.submission import (
    PING_UNANSWERED,
    command,
    ping_problem,
    script_spec,
    unanswered,
)
from servatus.plugins import Hooks
from servatus.plugins import hooks as default_hooks
from servatus.tasks import Task
from servatus.transport import COMMAND_TIMEOUT, CommandResult, Transport

MIN_VERSION = (23, 2)
"""``--export=NIL`` arrived in Slurm 23.02."""
MIN_JOB_AGE = 120
PROCTRACK = "proctrack/cgroup"
PASS, FAIL, UNAVAILABLE = "pass", "fail", "unavailable"

_VERSION = re.compile(r"slurm(?:-wlm)?\s+([0-9]+)\.([0-9]+)(?:\.([0-9]+))?")
_CONFIG_LINE = re.compile(r"^\s*(\w+)\s*=\s*(.*?)\s*$")
_PROBE_ALLOCATION = "0" * 24


@attrs.frozen
class Check:
    """One check's name, result, and what it saw."""

    name: str
    """The check, as ``doctor`` names it (``slurm version``, ``squeue``, ``MinJobAge``, ...)."""
    status: str
    """``pass``, ``fail`` (it ran and said no, or said something unusable), or ``unavailable``
    (no answer came back)."""
    detail: str
    """What it saw, or why it failed."""


@attrs.frozen
class Diagnosis:
    """What ``servatus doctor`` prints: the profile and each check in order."""

    profile: str
    """The profile's name."""
    checks: tuple[Check, ...]
    """Each check made, in the order ``doctor`` prints them."""
    warnings: tuple[str, ...] = ()
    """What passes but is unsafe on a shared cluster: each directory (``work_root``,
    ``log_root``, ``work_root/results``, or a parent of one) that others can write to without
    the sticky bit, with the fix."""
    round_trip: float | None = None
    """Seconds the fastest of its commands took, from sending it to its whole answer (through
    ``ssh``, connecting included): what one reading of Slurm costs from here at least, as
    ``status`` makes one per Target. None when no command answered."""
    commands: int = 0
    """How many commands answered: the round trip is the fastest of them."""

    @property
    def exit_code(self) -> int:
        """1 if a check failed, else 75 if one went unanswered, else 0."""
        statuses = {check.status for check in self.checks}
        if FAIL in statuses:
            return EXIT_ERROR
        return EXIT_TEMPFAIL if UNAVAILABLE in statuses else EXIT_OK


def slurm_version(text: str) -> tuple[int, int] | None:
    """``(major, minor)`` from ``sbatch --version`` output such as ``slurm 24.11.5``."""
    match = _VERSION.search(text)
    return (int(match[1]), int(match[2])) if match else None


def config_values(text: str) -> dict[str, str]:
    """``scontrol show config`` as a name-to-value mapping."""
    values = {}
    for line in text.splitlines():
        match = _CONFIG_LINE.match(line)
        if match:
            values[match[1]] = match[2]
    return values


def min_job_age_seconds(value: str) -> int | None:
    """``300 sec`` -> 300."""
    match = re.fullmatch(r"([0-9]+)(?:\s*sec)?", value.strip())
    return int(match[1]) if match else None


def diagnose(
    profile: Profile,
    *,
    connect: Callable[[Target], Transport] | None = None,
    hooks: Hooks | None = None,
) -> Diagnosis:
    """Run every check for ``profile`` after refusing one that does not fit its own ceilings."""
    problems = profile_problems(profile)
    if problems:
        raise ConfigurationError(f"profile {profile.name!r}: {'; '.join(problems)}")
    hooks = hooks or default_hooks()
    target = profile.target
    inner = (connect or _default_connect(hooks))(target)
    transport = _Timed(inner)
    try:
        checks = tuple(_checks(profile, transport, hooks))
        # No answer to sbatch --version: it stops there.
        warnings = () if checks[0].status == UNAVAILABLE else _open_directories(target, transport)
    finally:
        inner.close()
    timed = transport.answered
    return Diagnosis(profile.name, checks, warnings, min(timed, default=None), len(timed))


@attrs.define
class _Timed:
    """The transport, timing each command that answered (ran, whatever its exit code)."""

    inner: Transport
    answered: list[float] = attrs.Factory(list)

    def run(
        self, argv: Sequence[str], *, stdin: bytes = b"", timeout: float = COMMAND_TIMEOUT
    ) -> CommandResult:
        began = time.monotonic()
        result = self.inner.run(argv, stdin=stdin, timeout=timeout)
        self.answered.append(time.monotonic() - began)
        return result

    def close(self) -> None:
        self.inner.close()


def _default_connect(hooks: Hooks) -> Callable[[Target], Transport]:
    def connect(target: Target) -> Transport:
        return hooks.transport("ssh" if target.host else "local").connect(target)

    return connect


def _run(transport: Transport, argv: list[str], stdin: bytes = b"") -> CommandResult | Unavailable:
    """What came back, or the :class:`Unavailable` that says why nothing did (for ``ssh``, its
    own reason), so a check can print it."""
    try:
        return transport.run(argv, stdin=stdin)
    except Unavailable as exc:
        return exc


def _no_answer(exc: Unavailable, what: str = "no answer") -> str:
    return f"{what}: {exc}"


def _refused(result: CommandResult) -> str:
    """A Slurm command's nonzero exit: ``fail`` if Slurm said no, ``unavailable`` if it says
    the controller never answered (:func:`~servatus.operations.submission.unanswered`)."""
    return UNAVAILABLE if unanswered(result) else FAIL


def _said(result: CommandResult) -> str:
    text = (result.stderr or result.stdout).decode("utf-8", "replace").strip()
    return text.splitlines()[-1][:200] if text else f"exit {result.returncode}"


def _checks(profile: Profile, transport: Transport, hooks: Hooks) -> list[Check]:
    target = profile.target
    checks = []
    version = _run(transport, [command(target, "sbatch"), "--version"])
    if isinstance(version, Unavailable):
        return [Check("slurm version", UNAVAILABLE, _no_answer(version, PING_UNANSWERED))]
    problem = ping_problem(version)
    found = slurm_version(version.stdout.decode("utf-8", "replace"))
    if problem is not None:
        checks.append(Check("slurm version", FAIL, problem))
    elif found is None:
        checks.append(Check("slurm version", FAIL, f"unusable answer: {_said(version)}"))
    elif found < MIN_VERSION:
        checks.append(
            Check(
                "slurm version", FAIL, f"Slurm {found[0]}.{found[1]:02d} < 23.02 (no --export=NIL)"
            )
        )
    else:
        checks.append(Check("slurm version", PASS, f"Slurm {found[0]}.{found[1]:02d}"))

    reader = hooks.evidence_reader()
    queue = _run(transport, reader.queue_command(target))
    if isinstance(queue, Unavailable):
        checks.append(Check("squeue", UNAVAILABLE, _no_answer(queue)))
    elif queue.returncode != 0:
        checks.append(Check("squeue", _refused(queue), _said(queue)))
    else:
        checks.append(Check("squeue", PASS, "answers under the scrubbed environment"))

    checks.append(_scancel(target, transport))

    checks.extend(_config_checks(_run(transport, [command(target, "scontrol"), "show", "config"])))

    for name, path in (("work_root", target.work_root), ("log_root", target.log_root)):
        probe = _run(transport, ["/bin/sh", "-c", 'test -d "$1" && test -w "$1"', "sh", path])
        if isinstance(probe, Unavailable):
            checks.append(Check(name, UNAVAILABLE, _no_answer(probe)))
        elif probe.returncode != 0:
            checks.append(Check(name, FAIL, f"{path} is not a writable directory"))
        else:
            checks.append(Check(name, PASS, path))

    listing = _run(transport, reader.marker_command(target, clock=False))  # no clock file written
    if isinstance(listing, Unavailable):
        checks.append(Check("find -printf", UNAVAILABLE, _no_answer(listing)))
    elif listing.returncode != 0:
        checks.append(Check("find -printf", FAIL, _said(listing)))
    else:
        try:
            reader.parse_markers(listing)
        except Exception as exc:  # a reader refusing the listing means it is unusable
            checks.append(Check("find -printf", FAIL, f"unusable listing: {exc}"))
        else:
            checks.append(Check("find -printf", PASS, f"lists {target.log_root} with mtimes"))

    checks.append(_test_only(profile, transport, hooks))
    return checks


RESULTS = "results"
"""The results directory under ``work_root`` that the quickstart has users create."""

# The user's uid, then for each path as given and as resolved (links followed), it and each of its
# parents: octal mode, owner's uid, and name; a link itself and a missing path are skipped.
_MODES = r"""id -u
for given in "$@"; do
    for p in "$given" "$(readlink -f -- "$given" 2>/dev/null)"; do
        [ -n "$p" ] || continue
        while :; do
            [ -h "$p" ] || stat -c '%a %u %n' -- "$p" 2>/dev/null
            [ "$p" = / ] && break
            p=$(dirname -- "$p")
        done
    done
done"""


def _open_directories(target: Target, transport: Transport) -> tuple[str, ...]:
    """One warning per directory on the way to ``work_root``, ``log_root`` and the results
    directory (the paths as written and as their links resolve) in which another user could
    rename or replace entries: one that others can write without the sticky bit, or a sticky one
    owned by someone other than the user and root (its owner may rename anything in it). Asked on
    the target in one command; no answer, no warnings."""
    work_root = target.work_root.rstrip("/") or "/"
    paths = [work_root, target.log_root.rstrip("/") or "/", f"{work_root}/{RESULTS}"]
    result = _run(transport, ["/bin/sh", "-c", _MODES, "sh", *paths])
    if isinstance(result, Unavailable):
        return ()
    lines = result.stdout.decode("utf-8", "surrogateescape").splitlines()
    if not lines or not lines[0].isdigit():
        return ()
    me = int(lines[0])
    warnings: list[str] = []
    seen: set[str] = set()
    for line in lines[1:]:
        mode_text, _, rest = line.partition(" ")
        owner_text, _, path = rest.partition(" ")
        if not re.fullmatch(r"[0-7]{3,4}", mode_text) or not owner_text.isdigit() or not path:
            continue
        if path in seen:
            continue
        seen.add(path)
        mode, owner = int(mode_text, 8), int(owner_text)
        who = renamers(mode, owner, me)
        if who is not None and not mode & 0o1000:
            warnings.append(
                f"{path} is writable by {who} without the sticky bit (mode {mode:04o}): another "
                f"user could rename or replace entries in it; run chmod go-w {path} "
                f"(or chmod +t {path} if others must write there)"
            )
        elif who is not None:
            warnings.append(
                f"{path} is sticky but belongs to uid {owner} (mode {mode:04o}): its owner can "
                "rename or replace any entry in it; keep your work in a directory of your own"
            )
    return tuple(warnings)


SCANCEL_NEEDED = "servatus cancel and chains need scancel in slurm_bin"
"""What a ``scancel`` that does not answer breaks, and where it must be, in one clause."""


def _scancel(target: Target, transport: Transport) -> Check:
    """``scancel --version`` at ``slurm_bin``, run where the transport runs (the login host).

    ``servatus cancel`` runs this ``scancel``, and a chain link that hands nothing on runs the
    one at the same path on its compute node to remove its chain's later links; without it each
    later link is allocated, finds no handoff and exits 1. So a missing one is a ``fail``, though
    a sweep without chains could still run. Nothing short of a job runs a command on a compute
    node (sites refuse a login there without a job, and ``scontrol`` reports no node's files),
    and doctor submits nothing, so the compute nodes' ``scancel`` is taken to be the login
    host's: one Slurm installation, as the client commands usually are. ``--version`` never asks
    the controller, so any nonzero exit means no usable ``scancel``.
    """
    path = command(target, "scancel")
    result = _run(transport, [path, "--version"])
    if isinstance(result, Unavailable):
        return Check("scancel", UNAVAILABLE, _no_answer(result))
    if result.returncode != 0:
        return Check("scancel", FAIL, f"{_said(result)} ({SCANCEL_NEEDED})")
    return Check("scancel", PASS, f"{path} answers")


def _config_checks(result: CommandResult | Unavailable) -> list[Check]:
    if isinstance(result, Unavailable):
        detail = _no_answer(result, "scontrol show config did not answer")
        return [
            Check("MinJobAge", UNAVAILABLE, detail),
            Check("ProctrackType", UNAVAILABLE, detail),
        ]
    if result.returncode != 0:
        return [
            Check("MinJobAge", _refused(result), _said(result)),
            Check("ProctrackType", _refused(result), _said(result)),
        ]
    values = config_values(result.stdout.decode("utf-8", "replace"))
    checks = []
    age = min_job_age_seconds(values.get("MinJobAge", ""))
    if age is None:
        checks.append(Check("MinJobAge", FAIL, "not reported"))
    elif age < MIN_JOB_AGE:
        checks.append(Check("MinJobAge", FAIL, f"{age} s < {MIN_JOB_AGE} s"))
    else:
        checks.append(Check("MinJobAge", PASS, f"{age} s"))
    proctrack = values.get("ProctrackType", "")
    status = PASS if proctrack == PROCTRACK else FAIL
    checks.append(Check("ProctrackType", status, proctrack or "not reported"))
    return checks


def _test_only(profile: Profile, transport: Transport, hooks: Hooks) -> Check:
    launcher = hooks.launcher(profile.target.launcher)
    probe = Task("servatus-doctor", ["/bin/true"])
    spec = script_spec(
        profile, Allocation(_PROBE_ALLOCATION, (probe.key,)), {probe.key: probe}, launcher
    )
    script = hooks.batch_script(spec).encode()
    result = _run(transport, [command(profile.target, "sbatch"), "--test-only"], stdin=script)
    if isinstance(result, Unavailable):
        return Check("sbatch --test-only", UNAVAILABLE, _no_answer(result))
    if result.returncode != 0:
        return Check("sbatch --test-only", _refused(result), _said(result))
    return Check("sbatch --test-only", PASS, "Slurm accepts the one-Task request")
