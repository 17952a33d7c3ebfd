"""Rendering one allocation's batch script: ``#SBATCH`` options, then a POSIX ``sh`` body.

The body runs every step concurrently as its own exact ``srun`` step and leaves run markers in
``log_root`` (grammar in ``docs/development/markers.md`` and :mod:`servatus_slurm.markers`):

* ``start`` before any step begins;
* ``end.<slot>.<exit>`` as soon as a step's ``srun`` returns;
* ``limit`` when the pre-limit ``SIGUSR1`` reaches the batch shell, which relays it to every
  running step (each step's watcher forwards it to its ``srun``, which forwards it to the task);
* ``stop`` when the job is told to end (``SIGTERM`` from ``scancel`` or the time limit), by the
  batch shell's trap or by a watcher whose step failed while Slurm ends the job;
* in a chain link (ADR 0005), ``handoff.<slot>`` right after a step's end when the Task goes on in
  the next link. Each later link waits with ``afterany`` and runs a slot only on a handoff it
  claims (``taken.<slot>``, made once by ``ln``); every link but the chain's last stops its own
  steps shortly before its limit, and one that hands nothing on removes the rest of its chain
  (``scancel --name``) while they are still pending.

The script holds only printable ASCII: stdin bytes and any argument or value that is not plain
printable text are rebuilt at run time from ``printf`` octal escapes, so no byte can be mangled
by ``sbatch`` (which refuses ``\\r`` and NUL) or by the shell.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from servatus.config import GRES, MAX_SIGNAL_BEFORE_END, Target
from servatus.continuation import Link
from servatus.errors import ConfigurationError
from servatus.ids import ALLOCATION_ID, job_name
from servatus.script import BUDGET_VARIABLE, CHAIN_VARIABLES, LeaseSpec, ScriptSpec, ScriptStep
from servatus_slurm.markers import allocation_log_name, step_log_name

RUNTIME_VARIABLES = {
    "SERVATUS_JOB_ID": "$SLURM_JOB_ID",
    "SERVATUS_JOB_END_TIME": "$SLURM_JOB_END_TIME",
    "PATH": None,  # exported by the script itself
}
"""Run-time variables the script can export to steps, with where their values come from."""

GRACE = 10
"""Seconds a link keeps after its early stop: ``srun`` returning after ``SIGTERM``, the end and
handoff markers, the shell's exit, and how far the node's clock may run behind slurmctld's
(measured on the test cluster: ADR 0005)."""

END_TRIES = 30
"""Times a step's end marker is tried, a second apart, while ``log_root`` is full: a disk or
inode shortage of up to half a minute costs the allocation that long, not the step's outcome."""
END_MARGIN = 5
"""Seconds before the job's end time (``SLURM_JOB_END_TIME``) after which the end marker is no
longer tried again: a chain link must still write its handoff and exit inside its limit, or the
next link's ``afterok`` is never satisfied."""

OVER_WAIT = 90
"""Seconds at most a later link waits to see its previous link's ``over`` file before it trusts
what it lists: longer than an NFS client caches a directory by default (``acdirmax``, 60 s), and
never more than an eighth of the link's own time limit."""

STDIN_CHUNK = 1024
"""Input bytes per ``printf`` line, so no script line grows beyond a few KiB."""

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_PLAIN = re.compile(r"[\x20-\x7e]*")
_DIRECTIVE = re.compile(r"[\x21-\x7e]+")
_DIRECTIVE_FORBIDDEN = set("\"'\\#")
_LITERAL_BYTES = frozenset(
    b'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789 !"#$&()*+,./:;<=>?@[]^_`{|}~'
)
_RESERVED_PREFIXES = ("SLURM_", "SRUN_", "SBATCH_", "SALLOC_")


def sh_quote(text: str) -> str:
    """Single-quote printable ASCII for ``sh``; callers route anything else through ``printf``."""
    return "'" + text.replace("'", "'\\''") + "'"


def printf_format(data: bytes) -> str:
    """A single-quoted ``printf`` format that prints exactly ``data``.

    Letters, digits and harmless punctuation stay literal; every other byte (``'``, ``\\``,
    ``%``, ``-`` (a leading one would read as an option), control bytes, NUL, bytes above 127)
    becomes a three-digit octal escape, which ``dash``, ``bash`` and coreutils ``printf`` all
    read the same way.
    """
    return "'" + "".join(chr(b) if b in _LITERAL_BYTES else f"\\{b:03o}" for b in data) + "'"


def _to_bytes(text: str, what: str) -> bytes:
    if "\0" in text:
        raise ConfigurationError(f"{what} cannot contain a NUL byte")
    try:
        return text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError as exc:
        raise ConfigurationError(f"{what} is not encodable as bytes: {exc}") from None


class _Words:
    """Renders words of one step: plain text inline, anything else via a ``printf`` variable."""

    def __init__(self) -> None:
        self.setup: list[str] = []

    def word(self, text: str, what: str) -> str:
        data = _to_bytes(text, what)
        if _PLAIN.fullmatch(text):
            return sh_quote(text)
        # $(...) drops trailing newlines, so print one extra character and strip it.
        variable = f"servatus_v{len(self.setup)}"
        self.setup.append(
            f"{variable}=$(printf {printf_format(data + b'.')}); {variable}=${{{variable}%.}}"
        )
        return f'"${variable}"'


def _directive(option: str, value: str, what: str) -> str:
    if not _DIRECTIVE.fullmatch(value) or _DIRECTIVE_FORBIDDEN & set(value):
        raise ConfigurationError(
            f"{what} {value!r} cannot go on an #SBATCH line: use printable ASCII without "
            "spaces, quotes, backslashes or '#'"
        )
    return f"#SBATCH --{option}={value}"


def _absolute(path: str, what: str) -> str:
    if not path.startswith("/"):
        raise ConfigurationError(f"{what} must be an absolute path, got {path!r}")
    return path.rstrip("/") or "/"


def _minutes(seconds: int) -> int:
    return max(1, -(-seconds // 60))


def directives(spec: ScriptSpec | LeaseSpec) -> list[str]:
    """The ``#SBATCH`` lines: the whole allocation's request (one task per step, or per slot of a
    lease) and its fixed safety options."""
    target = spec.target
    count = spec.slots if isinstance(spec, LeaseSpec) else len(spec.steps)
    log_root = _absolute(target.log_root, "log_root")
    if "%" in log_root:
        raise ConfigurationError(f"log_root cannot contain '%': {log_root!r}")
    _directive("output", log_root, "log_root")  # the same rule as every #SBATCH path, as loaded
    lines = [
        "#!/bin/sh",
        _directive("job-name", job_name(spec.allocation_id), "the job name"),
        # Slurm opens --output by name, following a link planted there while the job waits
        # (seen on the test cluster: it truncated the file behind it), so Slurm writes nothing;
        # the script opens its own log as a new file (own_log).
        "#SBATCH --output=/dev/null",
        _directive("chdir", _absolute(target.work_root, "work_root"), "work_root"),
        "#SBATCH --export=NIL",
        "#SBATCH --no-requeue",
        "#SBATCH --nodes=1",
        f"#SBATCH --ntasks={count}",
        f"#SBATCH --cpus-per-task={spec.cpus}",
        f"#SBATCH --mem={count * spec.memory_mib}M",
    ]
    if spec.gpus:
        lines.append(
            _directive("gres", f"{_gres(target.gpu_gres)}:{count * spec.gpus}", "gpu_gres")
        )
    lines.append(f"#SBATCH --time={_minutes(spec.time_limit)}")
    if not target.partitions:
        raise ConfigurationError("a Target needs at least one partition")
    lines.append(_directive("partition", ",".join(target.partitions), "partitions"))
    for option, value in (
        ("account", target.account),
        ("qos", target.qos),
        ("constraint", target.constraint),
    ):
        if value is not None:
            lines.append(_directive(option, value, option))
    if spec.signal_before_end is not None:
        if not 0 < spec.signal_before_end <= MAX_SIGNAL_BEFORE_END:
            raise ConfigurationError(
                f"signal_before_end must be between 1 and {MAX_SIGNAL_BEFORE_END} seconds"
            )
        # B: signals only the batch shell; it writes the limit marker and relays to the steps.
        lines.append(f"#SBATCH --signal=B:USR1@{spec.signal_before_end}")
    return lines


_PRELUDE = (
    r"""# Traps first: Slurm may send the pre-limit signal early, even as the job starts.
trap servatus_limit USR1
trap servatus_stop TERM INT
PATH=/usr/bin:/bin
export PATH
servatus_pids=
servatus_limited=
servatus_stopped=
"""
    + f"servatus_tries={END_TRIES}\nservatus_margin={END_MARGIN}"
    + r"""
# A marker is an empty owner-only file; -C keeps the first one, and its mtime, if it exists. It
# counts only as a new regular file of this user's: never one planted under its name (SECURITY.md).
# servatus_own PATH [TEXT] makes one, holding TEXT (a handoff holds its own name).
servatus_mark() {
    servatus_own "$servatus_prefix.$1"
}
servatus_own() {
    [ ! -h "$1" ] && (set -C && umask 077 && printf '%s' "${2-}" >"$1") 2>/dev/null &&
        servatus_mine "$1"
}
# A regular file of this user's, not a link: the only kind of file any marker test counts.
servatus_mine() {
    [ -f "$1" ] && [ ! -h "$1" ] && [ -O "$1" ]
}
# The end marker is the step's outcome: while log_root has no space or inode left, try again once
# a second, up to servatus_tries times and not once the job's end time is servatus_margin away,
# so a step that finished is not read as LOST; its mtime is then when it could be written, and
# the job's log says so. A name that exists already (anything planted there) is not tried again.
servatus_end_mark() {
    servatus_n=1
    until servatus_mark "$1"; do
        if [ -e "$servatus_prefix.$1" ] || [ -h "$servatus_prefix.$1" ] ||
            [ "$servatus_n" -ge "$servatus_tries" ] || servatus_ending_soon; then
            echo "servatus: could not write run marker $1 ($servatus_n tries)" >&2
            return 1
        fi
        servatus_n=$((servatus_n + 1))
        sleep 1
    done
    if [ "$servatus_n" -gt 1 ]; then
        echo "servatus: wrote run marker $1 at try $servatus_n (log_root was full)" >&2
    fi
}
# Whether the job's end time is less than servatus_margin away (never, where Slurm sets none).
servatus_ending_soon() {
    case ${SLURM_JOB_END_TIME:-} in
    '' | *[!0-9]*) return 1 ;;
    esac
    [ "$(date +%s)" -ge $((SLURM_JOB_END_TIME - servatus_margin)) ]
}
# The step log, opened once as fd 4, only as a new file of this user's: -C never opens an
# existing regular file or creates through a planted link, and anything else it opened (a link
# to a FIFO or a device) is refused by its type. The step writes to the descriptor, never the name.
servatus_open() {
    servatus_um=$(umask)
    umask 077
    set -C
    if [ ! -h "$1" ] && [ ! -e "$1" ] && command exec 4>"$1"; then
        umask "$servatus_um"
        { [ -f /dev/stdin ] && [ ! -s /dev/stdin ] && [ -O /dev/stdin ]; } <&4 && return 0
    fi 2>/dev/null
    umask "$servatus_um"
    echo "servatus: $1 already exists or is not a new file of this user's; the step did not run" >&2
    return 1
}
# Pre-limit SIGUSR1 (only the batch shell gets it): mark it, then relay it to every step.
servatus_limit() {
    if [ -z "$servatus_limited" ]; then
        servatus_limited=1
        servatus_mark limit
        for servatus_w in $servatus_pids; do kill -USR1 "$servatus_w" 2>/dev/null; done
    fi
}
servatus_stop() {
    if [ -z "$servatus_stopped" ]; then
        servatus_stopped=1
        servatus_mark stop
    fi
}
# In a step's watcher: forward SIGUSR1 to its srun (srun forwards it to the task).
servatus_relay() {
    servatus_f=1
    if [ -n "$servatus_p" ]; then
        kill -USR1 "$servatus_p" 2>/dev/null
    else
        servatus_late=1
    fi
}
servatus_watch() {
    servatus_p=
    servatus_f=0
    servatus_late=$servatus_limited
    trap servatus_relay USR1
    servatus_open "$1"
}
# Wait for the step's srun and mark its end; a wait cut short by the relay is resumed. SIGTERM
# is ignored only now, so srun kept Slurm's handling of it.
servatus_wait() {
    servatus_p=$2
    trap '' TERM INT
    if [ -n "$servatus_late" ]; then
        (sleep 2 && kill -USR1 "$2" 2>/dev/null) &
    fi
    while :; do
        servatus_f=0
        wait "$2"
        servatus_s=$?
        if [ "$servatus_f" = 0 ] || [ "$servatus_s" -le 128 ]; then break; fi
        if kill -0 "$2" 2>/dev/null; then continue; fi
        wait "$2"
        servatus_t=$?
        if [ "$servatus_t" -ge 0 ] && [ "$servatus_t" -le 255 ] && [ "$servatus_t" != 127 ]; then
            servatus_s=$servatus_t
        fi
        break
    done
    # Killed steps can beat the stop trap; Slurm ends the job before it signals (markers.md).
    if [ "$servatus_s" != 0 ] && [ ! -e "$servatus_prefix.stop" ]; then
        case $("$servatus_squeue" -hj "$SLURM_JOB_ID" -o %T 2>/dev/null) in
        RUNNING | SUSPENDED) ;;
        [A-Z]*) servatus_mark stop ;;
        *) sleep 1 ;;
        esac
    fi
    servatus_end_mark "end.$1.$servatus_s"
}
"""
)


def _anchor(text: str, anchor: str, added: str) -> str:
    """``text`` with ``added`` right after its one ``anchor``: a chain link's prelude is the
    plain one plus the lines that stop it early and hand on."""
    if text.count(anchor) != 1:
        raise AssertionError(f"the prelude lost its anchor {anchor!r}")
    return text.replace(anchor, anchor + added)


def _chain_prelude() -> str:
    """The prelude of a link that may hand on: the limit trap starts the early stop, a watcher
    stops its ``srun`` on the batch shell's word, and writes the handoff after the end."""
    text = _anchor(
        _PRELUDE,
        '        for servatus_w in $servatus_pids; do kill -USR1 "$servatus_w" 2>/dev/null; done\n',
        "        servatus_early\n",
    )
    text = _anchor(
        text,
        "    trap servatus_relay USR1\n",
        "    servatus_tlate=$servatus_ending\n    trap servatus_term USR2\n",
    )
    text = _anchor(
        text,
        '        (sleep 2 && kill -USR1 "$2" 2>/dev/null) &\n    fi\n',
        '    if [ -n "$servatus_tlate" ]; then kill -TERM "$2" 2>/dev/null; fi\n',
    )
    text = _anchor(
        text, '    servatus_end_mark "end.$1.$servatus_s"', ' && servatus_handoff "$1" "$3"'
    )
    text = _anchor(
        text, "        servatus_stopped=1\n        servatus_mark stop\n", "        servatus_told\n"
    )
    return _anchor(text, "trap servatus_stop TERM INT\n", "trap servatus_end USR2\n")


_CHAIN_PRELUDE = _chain_prelude()

_HANDING_ON = r"""
servatus_timer=
servatus_ending=
servatus_removed=
# Whether some slot of this link handed on: a handoff of its own, never a name someone planted.
servatus_handed() {
    for servatus_h in $servatus_slots; do
        if servatus_mine "$servatus_prefix.handoff.$servatus_h"; then return 0; fi
    done
    return 1
}
# The later links wait (afterany) for this one to end, so they are still pending: removing them
# by name, newest first, means none is ever allocated.
servatus_remove() {
    if [ -n "$servatus_removed" ]; then return; fi
    servatus_removed=1
    for servatus_r in $servatus_later; do
        "$servatus_scancel" --name="servatus-$servatus_r" </dev/null
    done
}
# Told to end before the pre-limit signal (scancel): no step can hand on any more, so the rest of
# the chain goes now, while this shell still runs. After the signal the handoffs decide, at the end.
servatus_told() {
    if [ ! -e "$servatus_prefix.limit" ] && ! servatus_handed; then servatus_remove; fi
}
# A link that hands on must end COMPLETED, inside its limit, for the next link's afterok: at the
# earlier of (signal + signal_before_end - grace) and (SLURM_JOB_END_TIME - grace) a timer asks
# the batch shell to stop every step still running.
servatus_early() {
    if [ -z "$servatus_before" ]; then return; fi
    servatus_in=$((servatus_before - servatus_grace))
    case ${SLURM_JOB_END_TIME:-} in
    '' | *[!0-9]*) ;;
    *)
        servatus_left=$((SLURM_JOB_END_TIME - servatus_grace - $(date +%s)))
        if [ "$servatus_left" -lt "$servatus_in" ]; then servatus_in=$servatus_left; fi
        ;;
    esac
    if [ "$servatus_in" -lt 0 ]; then servatus_in=0; fi
    (
        trap 'kill "$servatus_z" 2>/dev/null; exit 0' TERM
        sleep "$servatus_in" &
        servatus_z=$!
        wait "$servatus_z" && kill -USR2 $$
    ) </dev/null >/dev/null 2>&1 &
    servatus_timer=$!
}
# The early stop is this link's own limit: mark it as Slurm's would be (stop, then the ends), so a
# step of a Task on its own last link, which hands nothing on, reads stopped, not failed.
servatus_end() {
    servatus_ending=1
    servatus_mark stop
    for servatus_u in $servatus_pids; do kill -USR2 "$servatus_u" 2>/dev/null; done
}
# In a step's watcher: SIGTERM its srun, which kills the step; one not started yet is stopped
# as soon as it is.
servatus_term() {
    servatus_f=1
    if [ -n "$servatus_p" ]; then
        kill -TERM "$servatus_p" 2>/dev/null
    else
        servatus_tlate=1
    fi
}
# The Task goes on in the next link ($2 = 1: this is not its last link) if it yielded, or if it
# ended nonzero after the pre-limit signal.
servatus_handoff() {
    if [ "$2" = 1 ] && { [ "$servatus_s" = 75 ] ||
        { [ "$servatus_s" != 0 ] && [ -e "$servatus_prefix.limit" ]; }; }; then
        servatus_own "$servatus_prefix.handoff.$1" "${servatus_prefix##*/}.handoff.$1"
    fi
}
""".lstrip("\n")

_OVER = r"""
# Every watcher has written its end and handoff: say so for the next link, whose node may list
# log_root from a stale cache (NFS) and must not take a late listing for "nothing handed on".
# A dot file, like the claim's, so no marker listing carries it.
servatus_over() {
    servatus_own "$servatus_log/.${servatus_prefix##*/}.over"
}
""".lstrip("\n")

_HANDED_ON = r"""
# A slot runs only on a handoff of the previous link (whatever its job number), a regular file of
# this user's holding its own name (so no other file of the user's renamed to it), that this job
# claims: ln creates the claim name once, on NFS too, and the claim holds the job number of
# whoever linked it first, so at most one job ever runs a slot on it. reconcile claims with an
# empty file to keep a link it decided was never submitted from running anything.
servatus_given() {
    for servatus_g in "$servatus_log/servatus-$servatus_after".*".handoff.$1"; do
        if servatus_mine "$servatus_g" &&
            [ "$(cat "$servatus_g" 2>/dev/null)" = "${servatus_g##*/}" ]; then
            servatus_c="${servatus_g%.handoff.$1}.taken.$1"
            servatus_v="$servatus_log/.${servatus_prefix##*/}.take.$1"
            if (set -C && umask 077 && echo "$SLURM_JOB_ID" >"$servatus_v") 2>/dev/null; then
                ln "$servatus_v" "$servatus_c" 2>/dev/null
                rm -f "$servatus_v"
            fi
            if servatus_mine "$servatus_c" &&
                [ "$(cat "$servatus_c" 2>/dev/null)" = "$SLURM_JOB_ID" ]; then
                return 0
            fi
        fi
    done
    return 1
}
# The slot's run time in this chain's earlier links, end.<slot> - start per link, each span
# rounded as status rounds it (floor of span + 0.5), added to the plan's measure ($2).
servatus_ran() {
    printf '%s\n' "$servatus_found" | awk -v s="$1" -v t="$2" '
        { n = split($1, p, "."); k = p[1] "." p[2] }
        n == 3 && p[3] == "start" { b[k] = $2 }
        n == 5 && p[3] == "end" && p[4] == s { e[k] = $2 }
        END {
            for (k in e) if (k in b) { d = int(e[k] - b[k] + 0.5); if (d > 0) t += d }
            printf "%d\n", t
        }'
}
# The previous link made its over file after all its handoffs, so a listing that shows it shows
# every handoff too, on NFS as well. A link killed outright made none: after $1 seconds the
# listing is trusted as it is.
servatus_await() {
    servatus_o=0
    while :; do
        for servatus_g in "$servatus_log/.servatus-$servatus_after".*.over; do
            if servatus_mine "$servatus_g"; then return 0; fi
        done
        if [ "$servatus_o" -ge "$1" ]; then return 1; fi
        sleep 1
        servatus_o=$((servatus_o + 1))
    done
}
""".lstrip("\n")


def own_log(allocation_id: str) -> str:
    """The script's first act after its traps and functions: its own log (what ``logs
    --allocation`` reads), opened as a new file of the user's and made its stdout and stderr.
    A name someone planted there (a link to one of the user's files, a file of theirs) makes the
    job exit 1 before its start marker, having written nothing anywhere."""
    log = f'"$servatus_log/{allocation_log_name(allocation_id, "$SLURM_JOB_ID")}"'
    return f"servatus_open {log} || exit 1\nset +C\nexec >&4 2>&1 4>&-\n"


_START = (
    'servatus_mark start || { echo "servatus: cannot create the start marker in $servatus_log;'
    ' no step was started" >&2; exit 1; }\n'
)
"""No step runs without the start marker: a job that ran but left none would read as never
started once Slurm forgets it, and ``--retry-failed`` would run its Tasks again."""

_LINK_START = _anchor(_START, ">&2; ", "servatus_remove; ")
"""The same for a link that may hand on: it hands nothing on, so it removes the rest of its
chain while those links are still pending, rather than leave the next to be allocated."""

_EPILOGUE = """
until wait; do :; done
exit 0
""".lstrip("\n")


def _handing_on_epilogue(link: Link) -> str:
    """Waits for the watchers only (not the timer); a link that handed nothing on removes the
    rest of its chain before it exits 1 (the exit code is for a human reading ``sacct``)."""
    return (
        # Its own loop variable: a trap that runs while it waits (USR1, USR2) loops over the
        # watchers too, and must not move this loop on to the last watcher.
        "for servatus_e in $servatus_pids; do\n"
        '    until wait "$servatus_e"; [ $? -le 128 ]; do :; done\n'
        "done\n"
        'if [ -n "$servatus_timer" ]; then kill "$servatus_timer" 2>/dev/null; fi\n'
        "servatus_over\n"
        "if servatus_handed; then exit 0; fi\n"
        f'echo "servatus: link {link.position}/{link.of} hands nothing on; it removes the rest'
        ' of the chain" >&2\n'
        "servatus_remove\n"
        "exit 1\n"
    )


def _export_names(spec: ScriptSpec, step: ScriptStep) -> str:
    names: list[str] = []
    for name in (*spec.inherit, *(name for name, _ in step.command.exported)):
        if name not in names:
            names.append(name)
    return ",".join(names) if names else "NIL"


def _check_name(name: str, what: str) -> None:
    if not _NAME.fullmatch(name):
        raise ConfigurationError(f"{what} {name!r} is not a valid environment variable name")
    if name.startswith(_RESERVED_PREFIXES):
        raise ConfigurationError(f"{what} {name!r} would change what srun does; rename it")


def _stdin_lines(data: bytes) -> list[str]:
    """A brace group printing ``data``, to be piped into ``srun``; empty stdin is ``/dev/null``."""
    chunks = [data[i : i + STDIN_CHUNK] for i in range(0, len(data), STDIN_CHUNK)]
    return ["{", *(f"    printf {printf_format(chunk)}" for chunk in chunks), "} |"]


def _gres(gres: str | None) -> str:
    """The Target's GRES, as the configuration allows it (:data:`servatus.config.GRES`): it goes
    unquoted into every step's ``srun`` line, so a Target built around the loader is refused here
    too."""
    if not gres:
        raise ConfigurationError("a profile with gpus needs [target] gpu_gres")
    if not GRES.fullmatch(gres):
        raise ConfigurationError(
            f"gpu_gres {gres!r} is not a GRES name (NAME or NAME:TYPE of letters, digits, "
            "'_', '-' and '.'); it cannot go into a batch script"
        )
    return gres


def slot_options(
    target: Target, cpus: int, memory_mib: int, gpus: int, *, gres_none: bool = False
) -> list[str]:
    """An exact one-slot step's ``srun`` options, never ``--overlap``. A step without ``--gres``
    takes every GPU of its job, so a CPU-only step of a job that may hold GPUs (a lease) says
    ``gres_none``; in a plain allocation a CPU-only profile's job holds none."""
    options = [
        "--ntasks=1",
        "--nodes=1",
        "--exact",
        f"--cpus-per-task={cpus}",
        f"--mem={memory_mib}M",
    ]
    if gpus:
        options.append(f"--gres={_gres(target.gpu_gres)}:{gpus}")
    elif gres_none:
        options.append("--gres=none")
    return options


_TO_LOG = ">&4 2>&1 4>&- &"
"""A step's output goes to the log its watcher opened (``servatus_open``), by descriptor."""


def _step(spec: ScriptSpec, step: ScriptStep, srun: str, work_root: str) -> str:
    words = _Words()
    argv = step.command.argv
    if not argv or not argv[0].startswith("/"):
        raise ConfigurationError(
            f"step {step.slot} of allocation {spec.allocation_id} needs an absolute program"
        )
    assignments = []
    for name, value in step.command.exported:
        _check_name(name, "exported variable")
        assignments.append(f"{name}={words.word(value, f'variable {name}')}")
    options = slot_options(spec.target, spec.cpus, spec.memory_mib, spec.gpus)
    options.append(f"--export={_export_names(spec, step)}")
    options.append(f"--chdir={words.word(work_root, 'work_root')}")
    command = " ".join(words.word(arg, f"argument {i}") for i, arg in enumerate(argv))
    log = f'"$servatus_log/{step_log_name(spec.allocation_id, "$SLURM_JOB_ID", step.slot)}"'
    srun_line = " ".join([*assignments, srun, *options, command])
    if step.stdin:
        launch = [*_stdin_lines(step.stdin), f"{srun_line} {_TO_LOG}"]
    else:
        launch = [f"{srun_line} </dev/null {_TO_LOG}"]
    wait = f'servatus_wait {step.slot} "$!"'
    head = [f"# slot {step.slot}"]
    chained: list[str] = []
    link = spec.link
    if link is not None:
        head.append(f"# slot {step.slot} links {step.links}")
        run_time = (
            f"$(servatus_ran {step.slot} {step.run_time})" if spec.earlier else str(step.run_time)
        )
        chained = [
            f"SERVATUS_LINK={link.position} SERVATUS_LINKS={step.links} "
            f"SERVATUS_RUN_TIME={run_time}",
            "export " + " ".join(CHAIN_VARIABLES),
        ]
        if not link.last:
            wait += " 1" if link.position < step.links else " 0"
    refused = f"servatus_watch {log} || {{ servatus_end_mark end.{step.slot}.1; exit 0; }}"
    body = [refused, *chained, *words.setup, *launch, wait]
    lines = [
        *head,
        "(",
        *(f"    {line}" for line in body),
        ") &",
        'servatus_pids="$servatus_pids $!"',
    ]
    if spec.earlier:
        lines = [*head, f"if servatus_given {step.slot}; then", *lines[len(head) :], "fi"]
    return "\n".join(lines) + "\n"


def _locations(spec: ScriptSpec, log_root: str, slurm_bin: str) -> list[str]:
    """Where markers go, and the ``squeue`` a watcher asks; set before the traps."""
    return [
        "# Rendered by servatus-slurm; run markers: docs/development/markers.md.",
        f"servatus_log={sh_quote(log_root)}",
        f'servatus_prefix="$servatus_log/servatus-{spec.allocation_id}.$SLURM_JOB_ID"',
        f"servatus_squeue={sh_quote(slurm_bin + '/squeue')}",
        *_chain_lines(spec, slurm_bin),
    ]


def _chain_lines(spec: ScriptSpec, slurm_bin: str) -> list[str]:
    """A chain link's place, machine-readable (the FakeScheduler reads these lines back): a link
    that may hand on also names its slots and its later links, newest first (what it removes)."""
    link = spec.link
    if link is None:
        return []
    lines = [f"servatus_link={link.position}", f"servatus_links={link.of}"]
    if spec.depends_on is not None:
        lines.append(f"servatus_after={spec.depends_on}")
    if not link.last:
        lines.append(f"servatus_before={spec.signal_before_end or ''}")
        lines.append(f"servatus_grace={GRACE}")
        lines.append(f"servatus_slots={sh_quote(' '.join(str(s.slot) for s in spec.steps))}")
        lines.append(f"servatus_later={sh_quote(' '.join(reversed(spec.later)))}")
        lines.append(f"servatus_scancel={sh_quote(slurm_bin + '/scancel')}")
    return lines


def _variables(spec: ScriptSpec) -> list[str]:
    """The run-time variables steps inherit, exported from the batch shell."""
    lines = []
    exported = []
    chain = {*CHAIN_VARIABLES, BUDGET_VARIABLE}
    if spec.link is not None:
        wanted = {*CHAIN_VARIABLES, *([BUDGET_VARIABLE] if spec.budget is not None else [])}
        given = chain & set(spec.inherit)
        if wanted != given:
            raise ConfigurationError(
                f"chain link {spec.allocation_id} must pass its steps "
                f"{', '.join(sorted(wanted))}, not {', '.join(sorted(given)) or 'none'}"
            )
        if spec.budget is not None:
            lines.append(f"{BUDGET_VARIABLE}={spec.budget}")
            exported.append(BUDGET_VARIABLE)
    for name in spec.inherit:
        if name in chain and spec.link is not None:
            continue
        if name not in RUNTIME_VARIABLES:
            raise ConfigurationError(
                f"the batch script cannot provide run-time variable {name!r}; "
                f"it knows {', '.join(sorted(RUNTIME_VARIABLES))}"
            )
        source = RUNTIME_VARIABLES[name]
        if source is not None:
            lines.append(f'{name}="{source}"')
            exported.append(name)
    if exported:
        lines.append("export " + " ".join(exported))
    return lines


def _check_link(spec: ScriptSpec, link: Link) -> None:
    """A link renders only with its whole chain before it: the guard and the run-time sum read
    the earlier links' markers by their ids."""
    if len(spec.earlier) != link.position - 1 or len(spec.later) != link.of - link.position:
        raise ConfigurationError(
            f"chain link {spec.allocation_id} is link {link.position}/{link.of} but names "
            f"{len(spec.earlier)} earlier and {len(spec.later)} later links"
        )
    for earlier in (*spec.earlier, *spec.later):
        if not ALLOCATION_ID.fullmatch(earlier):
            raise ConfigurationError(f"not an allocation id: {earlier!r}")
    for step in spec.steps:
        if not 1 <= step.links <= link.of or step.run_time < 0:
            raise ConfigurationError(
                f"slot {step.slot} of chain link {spec.allocation_id} has {step.links} links "
                f"and run time {step.run_time}; link {link.position}/{link.of} cannot run it"
            )


def _found(spec: ScriptSpec) -> str:
    """Once the previous link's ``over`` is seen (or waited for), one listing of the earlier
    links' markers, which every slot's run time is summed from."""
    if not spec.earlier:
        return ""
    names = " -o ".join(f"-name 'servatus-{earlier}.*'" for earlier in spec.earlier)
    wait = min(OVER_WAIT, spec.time_limit // 8)
    return (
        f"servatus_await {wait} || echo 'servatus: the previous link left no over file; "
        "its handoffs are read as listed' >&2\n"
        f'servatus_found=$(find "$servatus_log" -maxdepth 1 \\( {names} \\) -type f '
        "-user \"$(id -u)\" -printf '%f %T@\\n' 2>/dev/null)\n"
    )


def render(spec: ScriptSpec) -> str:
    """The whole batch script for ``spec``; raises :class:`ConfigurationError` when it cannot be
    rendered safely or exceeds ``max_script_bytes``."""
    if not ALLOCATION_ID.fullmatch(spec.allocation_id):
        raise ConfigurationError(f"not an allocation id: {spec.allocation_id!r}")
    if not spec.steps:
        raise ConfigurationError(f"allocation {spec.allocation_id} has no steps")
    link = spec.link
    if link is None and (spec.earlier or spec.later):
        raise ConfigurationError(f"allocation {spec.allocation_id} has other links but no link")
    if link is not None:
        _check_link(spec, link)
    slots = [step.slot for step in spec.steps]
    if len(set(slots)) != len(slots) or min(slots) < 0:
        raise ConfigurationError(f"allocation {spec.allocation_id} has bad slots {slots}")
    if spec.cpus < 1 or spec.memory_mib < 1 or spec.gpus < 0 or spec.time_limit < 1:
        raise ConfigurationError(f"allocation {spec.allocation_id} requests nothing runnable")
    target = spec.target
    log_root = _absolute(target.log_root, "log_root")
    work_root = _absolute(target.work_root, "work_root")
    slurm_bin = _absolute(target.slurm_bin, "slurm_bin").rstrip("/")
    srun = sh_quote(slurm_bin + "/srun")
    if not _PLAIN.fullmatch(srun) or not _PLAIN.fullmatch(log_root):
        raise ConfigurationError("slurm_bin and log_root must be printable ASCII")
    handing_on = link is not None and not link.last
    parts: Iterable[str] = [
        "\n".join(directives(spec)) + "\n",
        "\n".join(_locations(spec, log_root, slurm_bin)) + "\n",
        _CHAIN_PRELUDE if handing_on else _PRELUDE,
        _HANDING_ON if handing_on else "",
        _OVER if handing_on else "",
        _HANDED_ON if spec.earlier else "",
        "".join(f"{line}\n" for line in _variables(spec)),
        own_log(spec.allocation_id),
        _LINK_START if handing_on else _START,
        _found(spec),
        *(_step(spec, step, srun, work_root) for step in spec.steps),
        _handing_on_epilogue(link) if link is not None and handing_on else _EPILOGUE,
    ]
    script = "".join(parts)
    size = len(script.encode("ascii"))
    if size > target.max_script_bytes:
        raise ConfigurationError(
            f"the batch script of allocation {spec.allocation_id} is {size} bytes, over "
            f"max_script_bytes ({target.max_script_bytes})"
        )
    return script
