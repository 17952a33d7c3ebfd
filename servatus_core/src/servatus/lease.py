"""The client's side of a lease's orders and claims (ADR 0009): offering orders and withdrawing
them, over a :class:`~servatus.transport.Transport`.

Both are one fixed ``sh -c`` each, whatever the number of steps, and their answers are read
back by pure functions. The claim decides. ``servatus-<step id>.<lease job>.claim`` in the
lease's orders directory is created by the first ``link(2)`` to reach the file server. Every
party reads it after its own ``link``, whatever that returned: non-empty means the lease took
the order, empty means it was withdrawn, unreadable means undecided (ask again later).
"""

from __future__ import annotations

import enum
import re
import secrets
import shlex
from collections.abc import Iterable, Mapping, Sequence

import attrs

from servatus.engine.slots import queued_or_running
from servatus.errors import ConfigurationError
from servatus.evidence import Evidence, MarkerKind
from servatus.ids import ALLOCATION_ID
from servatus.journal.records import Intent
from servatus.transport import Transport


def orders_directory(lease_id: str) -> str:
    """The orders directory's name under ``log_root``: beside the markers, which the marker
    listing (``-type f``) never descends into."""
    return f"servatus-{lease_id}.orders"


def orders_path(log_root: str, lease_id: str) -> str:
    """The orders directory of lease link ``lease_id`` on the cluster: under ``log_root``."""
    return f"{log_root.rstrip('/')}/{orders_directory(lease_id)}"


def steps_within(intents: Iterable[Intent]) -> dict[str, str]:
    """Each step's lease link, by the step's id, in recording order."""
    return {i.allocation_id: i.within for i in intents if i.within is not None}


def lease_link_ids(intents: Iterable[Intent]) -> frozenset[str]:
    """The allocation ids of the campaign's lease links."""
    return frozenset(i.allocation_id for i in intents if i.lease is not None)


def claim_name(step_id: str, job: int | str) -> str:
    """The one name whose ``link(2)`` decides an order: taken (non-empty) or withdrawn (empty)."""
    return f"servatus-{step_id}.{job}.claim"


def lease_links(intents: Iterable[Intent], lease_id: str) -> list[Intent]:
    """Every link of the lease that ``lease_id`` names (any of its links' ids), in chain order,
    from the campaign's intents; :class:`ConfigurationError` when it names no lease."""
    leases = {intent.allocation_id: intent for intent in intents if intent.lease is not None}
    named = leases.get(lease_id)
    if named is None:
        raise ConfigurationError(f"no lease {shlex.quote(lease_id)} in this campaign")
    first = named
    while first.chain is not None and first.chain.after in leases:
        first = leases[first.chain.after]
    after = {
        intent.chain.after: intent
        for intent in leases.values()
        if intent.chain is not None and intent.chain.after
    }
    links = [first]
    while links[-1].allocation_id in after:
        links.append(after[links[-1].allocation_id])
    return links


def current_link(links: Sequence[tuple[str, int | None]], evidence: Evidence) -> str | None:
    """The link of a lease that can take steps now (ADR 0009, "Which link `--lease ID`
    targets"), from its ``links`` (allocation id and job number, in chain order) and one reading
    of their Target: the first that Slurm lists in a state that has not ended, and whose
    ``limit`` marker the listing does not show. None when there is none, or when either listing
    is missing (nothing can be said without both)."""
    if evidence.queue is None or evidence.markers is None:
        return None
    live = {(entry.job, entry.name) for entry in evidence.queue if queued_or_running(entry.state)}
    limited = {
        (marker.allocation_id, marker.job)
        for marker in evidence.markers
        if marker.kind is MarkerKind.LIMIT
    }
    for allocation_id, job in links:
        if job is None or (job, f"servatus-{allocation_id}") not in live:
            continue
        if (allocation_id, job) not in limited:
            return allocation_id
    return None


def no_current_link(lease_id: str) -> str:
    """The one-line refusal of a plan into a lease none of whose links can take steps."""
    return (
        f"lease {lease_id}: no link can take steps (every link ended or had its pre-limit signal)"
    )


WAKE_SIGNAL = "URG"
"""What the offer sends the lease's batch shell (``scancel --batch``), which traps it to read its
orders at once. Its default action is to ignore it, in the shell before the trap is set, in the
watchers (a subshell resets the trap) and in ``srun``, which neither handles nor relays it; the
lease already gives ``USR1``, ``USR2``, ``TERM`` and ``INT`` their own meanings. ``scancel --batch``
signals the batch shell alone (seen on Slurm 24.11: a subshell and a step trapping it got
nothing)."""


class Verdict(enum.Enum):
    """What an order's claim says."""

    TAKEN = "taken"
    WITHDRAWN = "withdrawn"
    UNDECIDED = "undecided"


GUARD_FAILED = "guard"
"""The reason of a step a guarded offer withdrew unwritten: its lease link was not as assumed."""


class Offer(enum.Enum):
    """What offering one order came to. ``REFUSED`` means no order can ever exist for it."""

    OFFERED = "offered"
    REFUSED = "refused"
    WITHDRAWN = "withdrawn"
    UNDECIDED = "undecided"


@attrs.frozen
class OfferAnswer:
    """One step's offer outcome; ``reason`` names a refusal (``directory``, ``write``), or a
    withdrawal before anything was written (:data:`GUARD_FAILED`)."""

    outcome: Offer
    reason: str | None = None


_OWNED_DIRECTORY = (
    'owned() { [ -n "$(find "$1" -prune -type d -user "$(id -u)" -perm -700 ! -perm /077 '
    '2>/dev/null)" ]; }\n'
    'enter() { [ ! -h "$1" ] && cd -P -- "$1" 2>/dev/null && owned .; }\n'
)
"""Only an owner-only directory (rwx for the user alone; setgid, which a project directory passes
on, is fine) may hold orders or claims: an order is a command run as the user, and nobody else
must be able to place one or pre-empt a claim. ``enter`` checks the directory it has entered,
and the scripts then name everything relative to it (``d=.``): a directory renamed aside and
replaced after the check is never written to or read."""

LINK_EMPTY = r"""
# link_empty CLAIM VOID: link an empty file of our own (VOID, a name nobody else uses) into
# CLAIM, unless something holds CLAIM already; the claim is then read whoever linked it.
link_empty() {
    if (set -C && : >"$2") 2>/dev/null; then
        ln "$2" "$1" 2>/dev/null
        rm -f "$2"
    fi
}
""".lstrip("\n")
"""The one way a withdrawer claims a name empty (a lease order, a chain link's handoff):
``link(2)`` is atomic, on NFS too, so exactly one of it and the lease or link wins."""

_WITHDRAW_ONE = r"""
# Only a regular file is a claim: a directory under its name reads as empty, which is no verdict.
withdraw() {
    c="$d/servatus-$1.$job.claim"
    link_empty "$c" "$d/$1.void.$nonce"
    z=
    if [ -f "$c" ] && [ ! -h "$c" ]; then z=$(wc -c <"$c" 2>/dev/null); fi
    case $z in
    *[1-9]*) echo "taken $1" ;;
    *0*) echo "withdrawn $1" ;;
    *) echo "undecided $1" ;;
    esac
}
""".lstrip("\n")

WITHDRAW_SCRIPT = (
    "umask 077\n"
    "d=$1 job=$2 nonce=$3\nshift 3\n"
    + _OWNED_DIRECTORY
    + LINK_EMPTY
    + _WITHDRAW_ONE
    + 'if ! enter "$d"; then\n'
    '    for s in "$@"; do echo "undecided $s directory"; done\n'
    "    exit 0\n"
    "fi\n"
    "d=.\n"
    'for s in "$@"; do withdraw "$s"; done\n'
)
"""``sh -c WITHDRAW_SCRIPT withdraw DIR JOB NONCE STEP...``: one ``taken|withdrawn|undecided STEP``
line per step. A withdrawer never makes the directory: a missing (or foreign) one is
``undecided STEP directory``, which ``reconcile`` tells apart from an unreadable claim."""

STOP_SCRIPT = (
    "umask 077\n"
    "d=$1\nshift\n"
    + _OWNED_DIRECTORY
    + r"""
if ! enter "$d"; then
    for s in "$@"; do echo "unwritten $s directory"; done
    exit 0
fi
d=.
for s in "$@"; do
    r="$d/$s.stop"
    # A request already in place (an earlier cancel's) is as good as ours.
    if (set -C && : >"$r") 2>/dev/null || { [ -f "$r" ] && [ ! -h "$r" ]; }; then
        echo "stopping $s"
    else
        echo "unwritten $s"
    fi
done
""".lstrip("\n")
)
"""``sh -c STOP_SCRIPT stop DIR STEP...``: one ``stopping|unwritten STEP`` line per step. The lease
reads ``<step id>.stop`` in its orders directory at each poll and stops that step, once, if it
took it and it has not ended (ADR 0009, "Stopping a step")."""

_GUARD = r"""
# A plan made from the journal alone holds only while the link's job is queued or running under
# the link's name and its limit marker is not there; else nothing is written.
unguarded() {
    while [ "$#" -gt 1 ]; do echo "withdrawn $1 guard"; shift 2; done
    exit 0
}
q=$(LC_ALL=C timeout 10 "$squeue" --me --noheader --states=all --jobs="$job" \
    --format='%j|%T' </dev/null 2>/dev/null | tr -d ' \t\r')
case $q in
"$name|RUNNING") ;;
"$name|PENDING") wake= ;;
*) unguarded "$@" ;;
esac
if [ -h "$limit" ] || [ -e "$limit" ]; then unguarded "$@"; fi
""".lstrip("\n")
"""What :data:`GUARDED_OFFER_SCRIPT` checks before it offers: only a running batch shell is woken
(Slurm refuses to signal a pending job), and any other state, or a file of anyone's under the
limit marker's name, withdraws every step unwritten (``withdrawn STEP guard``). ``squeue`` gets
10 s (``timeout``): a slurmctld slower than that fails the guard, and the reading that follows
says so, instead of the whole offer outliving the command's time limit. The name is tested as
a link first, so a planted link to a hung mount is never followed."""

OFFER_SCRIPT = (
    "umask 077\n"
    "d=$1 job=$2 nonce=$3 wake=$4\nshift 4\n"
    + _OWNED_DIRECTORY
    + LINK_EMPTY
    + _WITHDRAW_ONE
    + r"""
if ! enter "$d"; then
    while [ "$#" -gt 1 ]; do echo "refused $1 directory"; shift 2; done
    exit 0
fi
d=.
bad=
woke=
set -- "$@" --
while [ "$1" != -- ]; do
    if ! (set -C && : >"$d/$1.tmp.$nonce") 2>/dev/null; then bad="$bad $1"; fi
    set -- "$@" "$1" "$2"
    shift 2
done
shift
# Split stdin into the temporary files: each order runs from its header to its trailer line.
awk -v d="$d" -v n="$nonce" -v ids=" $* " '
    $1 == "#" && $2 == "servatus.order/1" && $3 != "end" && f == "" && index(ids, " " $3 " ") {
        f = d "/" $3 ".tmp." n
    }
    f != "" { print >>f }
    $1 == "#" && $2 == "servatus.order/1" && $3 == "end" && f != "" { close(f); f = "" }
' || bad="$bad -"
while [ "$#" -gt 1 ]; do
    t="$d/$1.tmp.$nonce"
    case " $bad " in
    *" - "* | *" $1 "*) ok= ;;
    *) ok=$(wc -c <"$t" 2>/dev/null | tr -d ' ') ;;
    esac
    if [ "$ok" = "$2" ]; then
        # A mv that fails may still have renamed (a retransmitted RENAME): the claim decides.
        if mv -- "$t" "$d/$1" 2>/dev/null; then
            echo "offered $1"
            woke=$wake
        else
            withdraw "$1" | sed 's/^taken/offered/'
        fi
    else
        rm -f "$t"
        echo "refused $1 write"
    fi
    shift 2
done
# Wake the lease's batch shell once its orders are in place; detached and silent, so neither a
# refusal nor a slow slurmctld can touch the answer above or the exit status.
if [ -n "$woke" ]; then
    ("$woke" --batch --signal=URG "$job" </dev/null >/dev/null 2>&1 &)
fi
""".lstrip("\n")
)
"""``sh -c OFFER_SCRIPT offer DIR JOB NONCE WAKE STEP SIZE...``, the orders concatenated on stdin:
one ``offered|withdrawn|undecided STEP`` or ``refused STEP REASON`` line per step. Every write and
size check comes before any rename, so a refusal means no order of that step exists. ``WAKE``,
when not empty, is the ``scancel`` that sends the lease's batch shell :data:`WAKE_SIGNAL` after a
rename, so it takes the order now instead of at its next poll."""
GUARDED_OFFER_SCRIPT = (
    "umask 077\n"
    "d=$1 job=$2 nonce=$3 wake=$4 squeue=$5 name=$6 limit=$7\nshift 7\n"
    + _GUARD
    + OFFER_SCRIPT.split("shift 4\n", 1)[1]
)
"""``sh -c GUARDED_OFFER_SCRIPT offer DIR JOB NONCE WAKE SQUEUE NAME LIMIT STEP SIZE...``: the
offer of a plan made from the journal alone (``start`` in one round trip), made only if the
lease link's job is still queued or running as ``NAME`` and ``LIMIT`` does not exist
(:data:`_GUARD`); its answer lines are the offer's."""


MKDIR_SCRIPT = (
    "umask 077\n"
    "d=$1\n"
    + _OWNED_DIRECTORY
    + 'if mkdir -m 700 -- "$d" 2>/dev/null; then echo made\n'
    + 'elif [ ! -h "$d" ] && owned "$d"; then echo exists\n'
    + "else echo refused\n"
    + "fi\n"
)
"""``sh -c MKDIR_SCRIPT mkdir DIR``: makes a lease's orders directory owner-only (``made``),
accepts one that already is (``exists``), and refuses anything else there, or a ``log_root``
where it cannot be made (``refused``)."""


class Directory(enum.Enum):
    """What making a lease's orders directory came to."""

    READY = "ready"
    REFUSED = "refused"
    UNDECIDED = "undecided"


def mkdir_command(directory: str) -> list[str]:
    if not directory.startswith("/"):
        raise ConfigurationError(f"the orders directory must be absolute, got {directory!r}")
    return ["/bin/sh", "-c", MKDIR_SCRIPT, "mkdir", directory]


def read_mkdir(stdout: bytes) -> Directory:
    """The one answer line of :data:`MKDIR_SCRIPT`; anything else is undecided."""
    words = {"made": Directory.READY, "exists": Directory.READY, "refused": Directory.REFUSED}
    return words.get(stdout.decode("ascii", "replace").strip(), Directory.UNDECIDED)


def make_directory(transport: Transport, directory: str) -> Directory:
    """Make the orders directory before the lease's ``sbatch``, so that orders can be written
    while the lease is queued. Raises :class:`~servatus.errors.Unavailable` when no answer came
    back."""
    result = transport.run(mkdir_command(directory))
    if result.returncode != 0 or result.truncated:
        return Directory.UNDECIDED
    return read_mkdir(result.stdout)


_LINE = re.compile(
    r"(offered|refused|withdrawn|undecided|taken|stopping|unwritten) ([0-9a-f]{24})(?: ([a-z]+))?"
)


def _check_ids(directory: str, job: int, step_ids: Sequence[str]) -> None:
    if not directory.startswith("/"):
        raise ConfigurationError(f"the orders directory must be absolute, got {directory!r}")
    if job < 1:
        raise ConfigurationError(f"not a job number: {job}")
    for step in step_ids:
        if not ALLOCATION_ID.fullmatch(step):
            raise ConfigurationError(f"not an allocation id: {step!r}")
    if len(set(step_ids)) != len(step_ids):
        raise ConfigurationError("a step is named twice")


def withdraw_command(directory: str, job: int, step_ids: Sequence[str], nonce: str) -> list[str]:
    _check_ids(directory, job, step_ids)
    return ["/bin/sh", "-c", WITHDRAW_SCRIPT, "withdraw", directory, str(job), nonce, *step_ids]


def stop_command(directory: str, step_ids: Sequence[str]) -> list[str]:
    _check_ids(directory, 1, step_ids)
    return ["/bin/sh", "-c", STOP_SCRIPT, "stop", directory, *step_ids]


@attrs.frozen
class Guard:
    """What a plan of steps made from the journal alone assumed of its lease link, for the
    offer to check on the cluster before it writes (:data:`GUARDED_OFFER_SCRIPT`)."""

    squeue: str
    """The absolute path of ``squeue`` on the cluster."""
    name: str
    """The link's job name, ``servatus-<link id>``."""
    limit: str
    """The absolute path of the link's ``limit`` marker, which must not exist."""


def offer_command(
    directory: str,
    job: int,
    orders: Mapping[str, str],
    nonce: str,
    wake: str | None = None,
    guard: Guard | None = None,
) -> tuple[list[str], bytes]:
    """The argv and stdin that offer ``orders`` (step id to rendered order text); with ``wake``
    (the absolute path of ``scancel``) the same command then wakes lease job ``job``; with a
    ``guard``, only if the link is as the guard says."""
    _check_ids(directory, job, list(orders))
    for path in (wake, *(() if guard is None else (guard.squeue, guard.limit))):
        if path is not None and not path.startswith("/"):
            raise ConfigurationError(f"a path on the cluster must be absolute, got {path!r}")
    words: list[str] = []
    data = bytearray()
    for step, text in orders.items():
        encoded = text.encode("ascii")
        if not encoded.endswith(b"\n"):
            raise ConfigurationError(f"the order of step {step} does not end with a newline")
        words += [step, str(len(encoded))]
        data += encoded
    argv = ["/bin/sh", "-c", OFFER_SCRIPT, "offer", directory, str(job), nonce, wake or ""]
    if guard is not None:
        argv[2] = GUARDED_OFFER_SCRIPT
        argv += [guard.squeue, guard.name, guard.limit]
    return [*argv, *words], bytes(data)


def _answers(stdout: bytes, step_ids: Sequence[str]) -> dict[str, tuple[str, str | None]]:
    """Each step's answer word; a step with no line, or more than one, gets none (undecided)."""
    seen: dict[str, list[tuple[str, str | None]]] = {}
    for line in stdout.decode("ascii", "replace").splitlines():
        match = _LINE.fullmatch(line)
        if match is not None:
            word, step, reason = match.groups()
            seen.setdefault(step, []).append((word, reason))
    return {step: seen[step][0] for step in step_ids if step in seen and len(seen[step]) == 1}


def read_withdrawals(stdout: bytes, step_ids: Sequence[str]) -> dict[str, Verdict]:
    """Each step's verdict from a withdraw's output; anything cut short or odd is undecided."""
    answers = _answers(stdout, step_ids)
    verdicts = {"taken": Verdict.TAKEN, "withdrawn": Verdict.WITHDRAWN}
    return {
        step: verdicts.get(answers[step][0], Verdict.UNDECIDED)
        if step in answers
        else Verdict.UNDECIDED
        for step in step_ids
    }


def read_directory_missing(stdout: bytes, step_ids: Sequence[str]) -> bool:
    """Whether a withdraw found no orders directory of the user's (missing, foreign, a link):
    every step named, and each ``undecided STEP directory``."""
    answers = _answers(stdout, step_ids)
    return bool(step_ids) and all(
        answers.get(step) == ("undecided", "directory") for step in step_ids
    )


def read_stops(stdout: bytes, step_ids: Sequence[str]) -> dict[str, bool]:
    """Whether each step's stop request is in place; anything cut short or odd says no."""
    answers = _answers(stdout, step_ids)
    return {step: answers.get(step) == ("stopping", None) for step in step_ids}


def read_offers(stdout: bytes, step_ids: Sequence[str]) -> dict[str, OfferAnswer]:
    """Each step's outcome from an offer's output; a step without a clear line is undecided."""
    answers = _answers(stdout, step_ids)
    result = {}
    for step in step_ids:
        word, reason = answers.get(step, ("undecided", None))
        if word == "refused" and reason is not None:
            result[step] = OfferAnswer(Offer.REFUSED, reason)
        elif word == "withdrawn" and reason == GUARD_FAILED:
            result[step] = OfferAnswer(Offer.WITHDRAWN, reason)
        elif word in ("offered", "withdrawn") and reason is None:
            result[step] = OfferAnswer(Offer(word))
        else:
            result[step] = OfferAnswer(Offer.UNDECIDED)
    return result


def nonce() -> str:
    """A name part no other writer uses, so ``set -C`` never meets an old file of ours."""
    return secrets.token_hex(8)


@attrs.frozen
class Withdrawal:
    """What one withdraw came to: each step's verdict, and whether the orders directory was
    missing (or not the user's), so that nothing could be decided there."""

    verdicts: dict[str, Verdict]
    no_directory: bool = False


def withdraw_orders(
    transport: Transport, directory: str, job: int, step_ids: Sequence[str]
) -> Withdrawal:
    """Withdraw each step's order from lease job ``job``, and say who won each claim. Raises
    :class:`~servatus.errors.Unavailable` when no answer came back."""
    result = transport.run(withdraw_command(directory, job, step_ids, nonce()))
    if result.returncode != 0 or result.truncated:
        return Withdrawal(dict.fromkeys(step_ids, Verdict.UNDECIDED))
    return Withdrawal(
        read_withdrawals(result.stdout, step_ids),
        read_directory_missing(result.stdout, step_ids),
    )


def withdraw(
    transport: Transport, directory: str, job: int, step_ids: Sequence[str]
) -> dict[str, Verdict]:
    """:func:`withdraw_orders`, the verdicts alone."""
    return withdraw_orders(transport, directory, job, step_ids).verdicts


def stop(transport: Transport, directory: str, step_ids: Sequence[str]) -> dict[str, bool]:
    """Ask the lease to stop each step it took: ``<step id>.stop`` in its orders directory. True
    where the request is in place. Raises :class:`~servatus.errors.Unavailable` when no answer
    came back."""
    result = transport.run(stop_command(directory, step_ids))
    if result.returncode != 0 or result.truncated:
        return dict.fromkeys(step_ids, False)
    return read_stops(result.stdout, step_ids)


def offer(
    transport: Transport,
    directory: str,
    job: int,
    orders: Mapping[str, str],
    wake: str | None = None,
    guard: Guard | None = None,
) -> dict[str, OfferAnswer]:
    """Offer each order to lease job ``job``: written under a temporary name, size-checked, then
    renamed into place; with ``wake`` (``scancel``'s path), the lease is then woken in the same
    command; with a ``guard``, only if the link is still as it says. Raises
    :class:`~servatus.errors.Unavailable` when no answer came back."""
    argv, data = offer_command(directory, job, orders, nonce(), wake, guard)
    result = transport.run(argv, stdin=data)
    if result.returncode != 0 or result.truncated:
        return dict.fromkeys(orders, OfferAnswer(Offer.UNDECIDED))
    return read_offers(result.stdout, list(orders))
