"""Rendering a lease's batch script and the orders it runs (ADR 0009).

A lease holds ``slots`` one-slot places for its time limit and runs nothing of its own. Its POSIX
``sh`` body polls ``LOG_ROOT/servatus-<lease id>.orders/`` every ``poll_seconds``, takes each
complete order by one ``ln`` of the order into its claim name, and starts the order's step as an
exact one-slot ``srun`` in a background watcher, so the loop never blocks on a step. Markers, on
top of a plain allocation's (:mod:`servatus_slurm.script`):

* the step writes its own ``step-start`` (``servatus-<step id>.<lease job>.step-start``) as the
  first thing its process does on the node, so a step waiting for a slot writes nothing;
* its watcher writes ``end.0.<exit>`` when the ``srun`` returns;
* a stop request (``<step id>.stop`` in the orders directory) makes the lease write the step's
  ``stop`` and send its watcher ``SIGUSR2``: the watcher sends ``SIGUSR1`` to its ``srun``, then
  ``SIGTERM`` after ``signal_before_end``;
* the pre-limit ``SIGUSR1`` writes the lease's ``limit`` and each unended step's ``limit``,
  relays the signal to every step, and stops the taking of orders.

The lease enters its orders directory once, after checking it is the user's own, and reads it
from then on by relative names (its working directory), never by path: SECURITY.md, "Leases".

An order is an ``sh`` fragment defining ``servatus_step``, rendered from the same quoting helpers
as a plain step, so stdin, environment and argument bytes survive exactly.
"""

from __future__ import annotations

from servatus.config import MAX_SIGNAL_BEFORE_END, Target
from servatus.errors import ConfigurationError
from servatus.ids import ALLOCATION_ID
from servatus.lease import orders_directory
from servatus.script import BUDGET_VARIABLE, CHAIN_VARIABLES, LeaseOrder, LeaseSpec
from servatus_slurm.script import (
    _PLAIN,
    _PRELUDE,
    _START,
    RUNTIME_VARIABLES,
    _absolute,
    _anchor,
    _check_name,
    _stdin_lines,
    _Words,
    directives,
    own_log,
    sh_quote,
    slot_options,
)

ORDER_VERSION = "servatus.order/1"
"""The first word of an order's header and trailer; the lease refuses any other."""
MAX_POLL_SECONDS = 60


def slot_text(cpus: int, memory_mib: int, gpus: int) -> str:
    """One slot's resources as an order's header names them."""
    return f"{cpus}/{memory_mib}/{gpus}"


def order_header(step_id: str, lease_id: str, slot: str) -> str:
    return f"# {ORDER_VERSION} {step_id} lease={lease_id} slot={slot}"


def order_trailer(step_id: str) -> str:
    return f"# {ORDER_VERSION} end {step_id}"


def render_order(order: LeaseOrder, target: Target) -> str:
    """The order file's whole text: printable ASCII, header and trailer lines around one
    ``servatus_step`` function that launches the step through ``"$@"`` (the lease's ``srun`` and
    slot options), in the background, with the step's own start-marker guard first."""
    for identity in (order.step_id, order.lease_id):
        if not ALLOCATION_ID.fullmatch(identity):
            raise ConfigurationError(f"not an allocation id: {identity!r}")
    argv = order.command.argv
    if not argv or not argv[0].startswith("/"):
        raise ConfigurationError(f"step {order.step_id} needs an absolute program")
    words = _Words()
    assignments = []
    names: list[str] = []
    reserved = [
        ("SERVATUS_LINK", "1"),
        ("SERVATUS_LINKS", "1"),
        ("SERVATUS_RUN_TIME", str(order.run_time)),
        *([(BUDGET_VARIABLE, str(order.budget))] if order.budget is not None else []),
    ]
    for name, value in (*order.command.exported, *reserved):
        _check_name(name, "exported variable")
        assignments.append(f"{name}={words.word(value, f'variable {name}')}")
    for name in (*order.inherit, *CHAIN_VARIABLES, *(name for name, _ in reserved)):
        if name in CHAIN_VARIABLES or name == BUDGET_VARIABLE:
            pass
        elif name not in RUNTIME_VARIABLES:
            raise ConfigurationError(f"a lease cannot provide run-time variable {name!r}")
        if name not in names:
            names.append(name)
    for name, _ in order.command.exported:
        if name not in names:
            names.append(name)
    work_root = _absolute(target.work_root, "work_root")
    options = [f"--export={','.join(names)}", f"--chdir={words.word(work_root, 'work_root')}"]
    command = " ".join(words.word(arg, f"argument {i}") for i, arg in enumerate(argv))
    redirect = '>>"$servatus_steplog" 2>&1 &'
    begin = '/bin/sh -c "$servatus_begin" sh "$servatus_started"'
    srun_line = " ".join([*assignments, '"$@"', *options, begin, command])
    if order.stdin:
        launch = [*_stdin_lines(order.stdin), f"{srun_line} {redirect}"]
    else:
        launch = [f"{srun_line} </dev/null {redirect}"]
    slot = slot_text(order.cpus, order.memory_mib, order.gpus)
    lines = [
        order_header(order.step_id, order.lease_id, slot),
        "servatus_step() {",
        *(f"    {line}" for line in (*words.setup, *launch)),
        "}",
        order_trailer(order.step_id),
    ]
    text = "\n".join(lines) + "\n"
    if len(text.encode("ascii")) > target.max_script_bytes:
        raise ConfigurationError(
            f"the order of step {order.step_id} is over max_script_bytes "
            f"({target.max_script_bytes})"
        )
    return text


def _lease_prelude() -> str:
    """The plain prelude plus: a stop request's ``USR2`` in each watcher (``SIGUSR1``, then
    ``SIGTERM`` after the grace), and the lease's traps marking every unended step too."""
    text = _anchor(_PRELUDE, "        servatus_mark limit\n", "        servatus_each limit\n")
    text = _anchor(text, "        servatus_mark stop\n", "        servatus_each stop\n")
    text = _anchor(
        text,
        "    trap servatus_relay USR1\n",
        "    servatus_hlate=\n    servatus_timer=\n    trap servatus_halt USR2\n",
    )
    text = _anchor(
        text,
        '        (sleep 2 && kill -USR1 "$2" 2>/dev/null) &\n    fi\n',
        '    if [ -n "$servatus_hlate" ]; then servatus_halt; fi\n',
    )
    return _anchor(
        text,
        "        fi\n        break\n    done\n",
        '    if [ -n "$servatus_timer" ]; then kill "$servatus_timer" 2>/dev/null; fi\n',
    )


_LEASE_PRELUDE = _lease_prelude()

_LEASE_FUNCTIONS = r"""
servatus_launched=' '
servatus_halted=' '
# In the batch shell's traps: the same marker for every launched step that has not ended.
servatus_each() {
    for servatus_en in $servatus_launched; do
        servatus_eq="$servatus_log/servatus-$servatus_en.$SLURM_JOB_ID"
        for servatus_eg in "$servatus_eq".end.0.*; do break; done
        if [ ! -e "$servatus_eg" ]; then servatus_own "$servatus_eq.$1"; fi
    done
}
# In a step's watcher, on a stop request: SIGUSR1 now, SIGTERM after the grace (srun turns it
# into SIGKILL). A waiting srun cancels its step on the first signal, without starting it.
servatus_halt() {
    servatus_f=1
    if [ -z "$servatus_p" ]; then
        servatus_hlate=1
    elif [ -z "$servatus_timer" ]; then
        kill -USR1 "$servatus_p" 2>/dev/null
        (sleep "$servatus_grace" && kill -TERM "$servatus_p" 2>/dev/null) </dev/null >/dev/null &
        servatus_timer=$!
    fi
}
# The step's first act on the node: its own start marker, or exit 1 before running anything.
servatus_begin='{ [ ! -h "$1" ] && (set -C && umask 077 && : >"$1") 2>/dev/null &&
    [ -f "$1" ] && [ ! -h "$1" ] && [ -O "$1" ]; } || {
    echo "servatus: cannot create $1; the step did not run" >&2
    exit 1
}
shift
exec "$@"'
# An order is usable only whole, of our version, and for this lease's slot.
servatus_whole() {
    { read -r servatus_h <"$1"; } 2>/dev/null || return 1
    [ "$servatus_h" = "# servatus.order/1 $2 lease=$servatus_lease slot=$servatus_slot" ] &&
        [ "$(tail -n 1 "$1" 2>/dev/null)" = "# servatus.order/1 end $2" ]
}
# Withdraw an order ourselves: link an empty file of our own into its claim.
servatus_void() {
    servatus_e="$servatus_orders/$1.void.$$"
    if (set -C && umask 077 && : >"$servatus_e") 2>/dev/null; then
        ln "$servatus_e" "$2" 2>/dev/null
        rm -f "$servatus_e"
    fi
}
servatus_launch() {
    (
        servatus_prefix="$servatus_log/servatus-$1.$SLURM_JOB_ID"
        servatus_started="$servatus_prefix.step-start"
        servatus_steplog="$servatus_log/servatus-$1-$SLURM_JOB_ID.0.out"
        if ! servatus_watch "$servatus_steplog"; then
            servatus_end_mark end.0.1
        elif servatus_steplog=/dev/fd/4 && . "$2" &&
            servatus_step "$servatus_srun" $servatus_options; then
            servatus_wait 0 "$!"
        else
            echo "servatus: the order of step $1 could not be read; it did not run" >&2
            servatus_end_mark end.0.1
        fi
    ) &
    servatus_pids="$servatus_pids $!"
    eval "servatus_w_$1=\$!"
    servatus_launched="$servatus_launched$1 "
}
# Every order not yet decided: claim it (the verdict is the claim's size, whoever linked it).
servatus_take() {
    for servatus_o in "$servatus_orders"/*; do
        servatus_n=${servatus_o##*/}
        case $servatus_n in *[!0-9a-f]*) continue ;; esac
        if [ "${#servatus_n}" != 24 ]; then continue; fi
        case $servatus_launched in *" $servatus_n "*) continue ;; esac
        servatus_c="$servatus_orders/servatus-$servatus_n.$SLURM_JOB_ID.claim"
        if [ ! -e "$servatus_c" ]; then
            if servatus_whole "$servatus_o" "$servatus_n"; then
                ln "$servatus_o" "$servatus_c" 2>/dev/null
            else
                echo "servatus: order $servatus_n is not whole or not for this lease's slot;" \
                    "withdrawn" >&2
                servatus_void "$servatus_n" "$servatus_c"
            fi
        fi
        servatus_z=$(wc -c <"$servatus_c" 2>/dev/null)
        case $servatus_z in
        *[1-9]*) servatus_launch "$servatus_n" "$servatus_c" && rm -f "$servatus_o" ;;
        *0*) rm -f "$servatus_o" ;;
        esac
    done
}
# Stop requests of launched steps that have not ended yet, each acted on once.
servatus_stops() {
    for servatus_r in "$servatus_orders"/*.stop; do
        servatus_n=${servatus_r##*/}
        servatus_n=${servatus_n%.stop}
        case $servatus_launched in *" $servatus_n "*) ;; *) continue ;; esac
        case $servatus_halted in *" $servatus_n "*) continue ;; esac
        servatus_halted="$servatus_halted$servatus_n "
        servatus_q="$servatus_log/servatus-$servatus_n.$SLURM_JOB_ID"
        for servatus_g in "$servatus_q".end.0.*; do break; done
        if [ -e "$servatus_g" ]; then continue; fi
        servatus_own "$servatus_q.stop"
        eval "kill -USR2 \"\$servatus_w_$servatus_n\"" 2>/dev/null
    done
}
""".lstrip("\n")

_CHECK_ORDERS = (
    'if [ -h "$servatus_orders" ] || ! cd -P "$servatus_orders" 2>/dev/null ||'
    ' [ -z "$(find . -prune -type d -user "$(id -u)" -perm -700 ! -perm /077 2>/dev/null)" ];'
    " then\n"
    '    echo "servatus: $servatus_orders is missing or not an owner-only directory (rwx for you'
    ' alone; a setgid bit is fine); the lease runs nothing" >&2\n'
    "    exit 1\n"
    "fi\n"
    "servatus_orders=.\n"
)
"""An order is a command run as the user: only an owner-only directory may hold them. The lease
checks the directory it has entered and from then on names orders and claims relative to it, so
renaming the directory (or a parent) aside and planting another under its name changes nothing
the lease reads: it polls the directory it checked, by inode, for its whole life."""

_LOOP = """
trap servatus_woken=1 URG
while [ -z "$servatus_stopped" ]; do
    servatus_woken=
    if [ -z "$servatus_limited" ]; then servatus_take; fi
    servatus_stops
    if [ -z "$servatus_woken" ]; then
        sleep "$servatus_poll" &
        servatus_nap=$!
        if [ -n "$servatus_woken" ] || ! wait "$servatus_nap"; then
            kill "$servatus_nap" 2>/dev/null
        fi
    fi
done
until wait; do :; done
exit 0
""".lstrip("\n")
"""Poll every ``poll_seconds``, and at once when an offer wakes the shell (``URG``, sent by
``scancel --batch`` after the offer's rename): the trap interrupts the ``wait`` on the poll's
``sleep``, which is then killed. A wake while the orders are being read sets the flag instead,
and the loop reads them again without sleeping, so an order renamed just after the directory was
listed is not left for the next poll. A wake of a lease with nothing new only re-reads its
orders."""


def _slot_options(spec: LeaseSpec) -> str:
    """One slot, exactly: explicit ``--gres`` (a step without one takes every GPU of the job),
    never ``--overlap``."""
    return " ".join(
        slot_options(spec.target, spec.cpus, spec.memory_mib, spec.gpus, gres_none=True)
    )


def render_lease(spec: LeaseSpec) -> str:
    """The lease's whole batch script; raises :class:`ConfigurationError` when it cannot be
    rendered safely."""
    if not ALLOCATION_ID.fullmatch(spec.allocation_id):
        raise ConfigurationError(f"not an allocation id: {spec.allocation_id!r}")
    if spec.slots < 1:
        raise ConfigurationError(f"lease {spec.allocation_id} holds no slots")
    if spec.cpus < 1 or spec.memory_mib < 1 or spec.gpus < 0 or spec.time_limit < 1:
        raise ConfigurationError(f"lease {spec.allocation_id} requests nothing runnable")
    if not 0 < spec.signal_before_end <= MAX_SIGNAL_BEFORE_END:
        raise ConfigurationError(
            f"a lease needs signal_before_end between 1 and {MAX_SIGNAL_BEFORE_END} seconds"
        )
    if not 1 <= spec.poll_seconds <= MAX_POLL_SECONDS:
        raise ConfigurationError(f"a lease polls every 1 to {MAX_POLL_SECONDS} seconds")
    target = spec.target
    log_root = _absolute(target.log_root, "log_root")
    slurm_bin = _absolute(target.slurm_bin, "slurm_bin").rstrip("/")
    srun, squeue = sh_quote(slurm_bin + "/srun"), sh_quote(slurm_bin + "/squeue")
    if not _PLAIN.fullmatch(srun) or not _PLAIN.fullmatch(log_root):
        raise ConfigurationError("slurm_bin and log_root must be printable ASCII")
    exported = []
    variables = []
    for name in spec.inherit:
        if name not in RUNTIME_VARIABLES:
            raise ConfigurationError(f"a lease cannot provide run-time variable {name!r}")
        source = RUNTIME_VARIABLES[name]
        if source is not None:
            variables.append(f'{name}="{source}"')
            exported.append(name)
    if exported:
        variables.append("export " + " ".join(exported))
    locations = [
        "# Rendered by servatus-slurm: a lease (ADR 0009); see docs/development/markers.md.",
        f"servatus_log={sh_quote(log_root)}",
        f'servatus_prefix="$servatus_log/servatus-{spec.allocation_id}.$SLURM_JOB_ID"',
        f"servatus_squeue={squeue}",
        f"servatus_srun={srun}",
        f'servatus_orders="$servatus_log/{orders_directory(spec.allocation_id)}"',
        f"servatus_lease={spec.allocation_id}",
        f"servatus_slot={slot_text(spec.cpus, spec.memory_mib, spec.gpus)}",
        f"servatus_options='{_slot_options(spec)}'",
        f"servatus_grace={spec.signal_before_end}",
        f"servatus_poll={spec.poll_seconds}",
    ]
    parts = [
        "\n".join(directives(spec)) + "\n",
        "\n".join(locations) + "\n",
        _LEASE_PRELUDE,
        _LEASE_FUNCTIONS,
        "".join(f"{line}\n" for line in variables),
        own_log(spec.allocation_id),
        _CHECK_ORDERS,
        _START,
        _LOOP,
    ]
    script = "".join(parts)
    if len(script.encode("ascii")) > target.max_script_bytes:
        raise ConfigurationError(
            f"the batch script of lease {spec.allocation_id} is over max_script_bytes "
            f"({target.max_script_bytes})"
        )
    return script
