"""Reading ``squeue`` and the run-marker listing: strict, bounded, identity-checked.

A partial listing is worse than none: a job missing from ``squeue`` or a marker missing from
``log_root`` is read as "Slurm forgot it" or "it never ended". So a command that failed, or whose
output was cut at the read bound or has more rows than :data:`MAX_ROWS`, raises
:class:`~servatus.errors.Unavailable` instead of returning what it could read. Rows that are not
ours (other jobs, foreign files, lines too long, malformed lines) are dropped, never guessed at.
"""

from __future__ import annotations

import math
import re
from typing import TYPE_CHECKING

import attrs

from servatus.errors import Unavailable
from servatus.evidence import LOG_ROOT_MISSING, MAX_JOB, Marker, MarkerKind, MarkerQuery, QueueEntry
from servatus.lease import orders_directory
from servatus.transport import CommandResult
from servatus_slurm.markers import (
    ID_LENGTH,
    MARKER_GLOB,
    MARKER_NAME,
    allocation_log_name,
    marker_from_groups,
    marker_name,
    step_log_name,
)
from servatus_slurm.transport import Frame, framed, unframe

_new = tuple.__new__
"""Builds a named tuple from a tuple of its fields without its Python ``__new__``: a listing
holds a row per job or marker (100,000 jobs, 200,000 markers in the benchmarks)."""

if TYPE_CHECKING:
    from servatus.config import Target
    from servatus.transport import Transport

QUEUE_FORMAT = "%A|%j|%T"
"""Job number, name, state. Our names (``servatus-<hex>``) never contain ``|``."""
MARKER_FORMAT = "%f %T@ %s\\n"
"""File name, mtime in UNIX seconds (file server's clock), size."""
MAX_NAMED = 1000
"""Most allocation ids a listing names. Over ``ssh`` the whole remote command is one argument to
the remote shell, which Linux bounds at 128 KiB (``MAX_ARG_STRLEN``); each id adds at most
``-o -name 'servatus-<id>.*'`` (45 bytes quoted), so 1,000 of them stay under 45 KiB."""
NAMED_IN_FIND = 16
"""Most ids named as ``find -name`` tests. ``find`` tries every name against every file, so 1,000
names over 2,000 markers took 0.57 s here; beyond this many, ``find`` lists every marker and
:data:`_FILTER` keeps the named ones (0.011 s for the same), which costs a row piped per marker
of ``log_root`` instead."""
MAX_ROWS = 1_000_000
MAX_LINE = 512
"""Longer lines are not ours: our names are under 80 bytes."""

_ROOT = (
    f'[ -d "$1" ] || {{ echo "log_root $1 is not a directory" >&2; exit {LOG_ROOT_MISSING}; }}; '
)
"""First in every listing: a ``log_root`` that is gone (purged, never made) is said apart from a
listing that failed, since asking again cannot help."""
_CLOCK = (
    'clock=$(umask 077 && mktemp -- "$1/servatus-clock.XXXXXXXXXX" 2>/dev/null) '
    '&& { find "$clock" -maxdepth 0 -type f -user "$(id -u)" -printf "clock %T@\\n" 2>/dev/null; '
    'rm -f -- "$clock"; }; '
)
_ORDERS = (
    "LC_ALL=C && export LC_ALL && root=$1 format=$2 n=$3 && shift 3 && points= i=0 && "
    "me=$(id -u) && "
    '{ find -H "$root" -maxdepth 0 -printf "root %m %U $me\\n" 2>/dev/null; true; } && '
    "foreign='foreign %U %f\\n' odd='*[!-.0-9a-z]*' && "
    'while [ "$i" -lt "$n" ]; do '
    'i=$((i + 1)); if [ -d "$1" ]; then eval "servatus_d$i=\\$1"; '
    'points="$points \\"\\$servatus_d$i\\""; fi; shift; done && '
    'eval "exec find -H \\"\\$root\\"$points -mindepth 1 -maxdepth 1 '
    '\\"\\$@\\" ! -name \\"\\$odd\\" -type f \\\\( -user \\"\\$me\\" -printf \\"\\$format\\" '
    '-o -printf \\"\\$foreign\\" \\\\)"'
)
"""The listing proper: ``$1`` log_root, ``$2`` the row format, ``$3`` how many orders
directories follow (ADR 0009: the claims of lease steps), then the tests that choose the
markers (:func:`_selection`). Each directory is a further start point of the one ``find``, kept
only if it is a directory now: a purged one drops out instead of failing the listing. The kept
ones are put in numbered variables and named on the ``find`` line by ``eval`` (only the
variables' names are in the evaluated text, never their values), so the tests stay in ``$@``
untouched, however many they are.

Before the markers, one ``root MODE OWNER ME`` row gives ``log_root``'s permission bits (octal,
the sticky bit included), its owner's uid and the user's: whether others can rename the user's
markers there (:func:`servatus.evidence.renamers`), which ``status`` then says.

A name with any character a marker's name cannot hold (``odd``: anything but ``-``, ``.``,
digits and lowercase letters; a newline above all, which would let one file print two rows) is
never printed; ``LC_ALL=C`` makes every test bytewise, so no byte escapes the pattern. Only a
file of this user's (``-user``, the uid ``id -u`` prints on the cluster) is listed as a marker;
anyone else's under a selected name is printed as ``foreign UID NAME``, never as evidence
(ADR 0012).
"""
_FILTER = (
    "ids=$1 && shift && "
    '{ "$@"; echo "!exit $?"; } | LC_ALL=C awk -v ids="$ids" '
    '\'BEGIN { n = split(ids, list, " "); for (i = 1; i <= n; i++) want[list[i]] = 1; code = 125 } '
    '$1 == "!exit" && NF == 2 { code = $2; next } '
    'NR == 1 && $1 == "clock" { print; next } '
    'NR <= 2 && $1 == "root" && NF == 4 { print; next } '
    '{ name = $1 == "foreign" ? $3 : $1 } '
    f'substr(name, 1, 9) == "servatus-" && substr(name, {10 + ID_LENGTH}, 1) == "." '
    f"&& (substr(name, 10, {ID_LENGTH}) in want) {{ print }} "
    "END { exit code }'"
)
"""``sh -c _FILTER filter IDS LISTING...``: runs the listing and keeps of its rows the clock row
and those naming one of ``IDS`` (space-separated allocation ids), as ``-name
'servatus-<id>.*'`` tests would, in one hash lookup per row (:data:`NAMED_IN_FIND`). The
listing's exit status comes after its rows as ``!exit N``, which no row can be (a listed name
holds no ``!``), and is the filter's own; a listing cut off before it is status 125, never a
success."""
FILTER_LABEL = "filter"
LIST_SCRIPT = _ROOT + _ORDERS
"""``sh -c`` text of a listing without the clock (``doctor``'s, which writes nothing)."""
CLOCK_SCRIPT = _ROOT + _CLOCK + _ORDERS
"""``sh -c`` text of the clock listing: the clock row, then :data:`_ORDERS`'s listing.

``mktemp`` creates a fresh file (``O_EXCL``: a link or file already at its name is never
followed or reused), so its mtime is the file server's time at creation; its row (``clock
MTIME``, which no marker row can be: those start with ``servatus-``) is printed, the file
removed, then the markers listed. The row is read only from a regular file of this user, so a
file swapped in under the name by someone else is no clock. Where ``log_root`` cannot be
written, no row is printed and the listing runs anyway: the clock is never why a listing
fails. Its exit status is the marker ``find``'s."""
READ_SCRIPT = (
    "qa=$1 qb=$2 ma=$3 mb=$4 n=$5 && shift 5 && q= i=0 && "
    'while [ "$i" -lt "$n" ]; do '
    'i=$((i + 1)); eval "servatus_q$i=\\$1"; q="$q \\"\\$servatus_q$i\\""; shift; done; '
    + framed('eval "$q"', '"$qa"', '"$qb"')
    + '; [ "$s" = 0 ] || exit "$s"; '
    + framed('"$@"', '"$ma"', '"$mb"')
    + '; exit "$s"'
)
"""``sh -c READ_SCRIPT listings QA QB MA MB N QUEUE... LISTING...``: both listings of a Target
in one command, so one round trip (:meth:`SlurmEvidenceReader.run_listings`). The first ``N``
words are the ``squeue`` command, run first; the rest are the marker listing, run only after
``squeue`` exited 0. Each runs inside a frame of its own (the transport's sentinels, from the
halves ``QA QB`` and ``MA MB``: fresh random tokens each call), its exit status after it, on
stdout and on stderr, so each is read back as if it had run alone and nothing either prints can
end a section. The ``squeue`` words are kept in numbered variables and named on the ``eval``
line by name only (as :data:`_ORDERS` does)."""
_CLOCK_ROW = re.compile(rb"clock ([0-9]{1,12}(?:\.[0-9]{1,10})?)")
_ROOT_ROW = re.compile(rb"root ([0-7]{3,4}) ([0-9]{1,10}) ([0-9]{1,10})")
_FOREIGN_ROW = re.compile(
    rf"\nforeign ([0-9]{{1,10}}) ({MARKER_NAME.pattern})$", re.MULTILINE | re.ASCII
)
"""A file of another user's under a marker's name (:data:`_ORDERS`): its uid and name."""

_PADDING = r"[ \t\r\v\f]*"
"""What ``bytes.strip`` removes from a line (squeue pads some fields)."""
_QUEUE_ROW = re.compile(
    rf"\n({_PADDING})([1-9][0-9]{{0,9}})\|(servatus-[0-9a-f]{{{ID_LENGTH}}})"
    rf"\|([A-Z][A-Z_]{{0,31}})({_PADDING})$",
    re.MULTILINE | re.ASCII,
)
"""One squeue row: padding, job, name, state, padding."""
_MARKER_ROW = re.compile(
    rf"\n{MARKER_NAME.pattern} ([0-9]{{1,12}}(?:\.[0-9]{{1,10}})?) ([0-9]{{1,20}})$",
    re.MULTILINE | re.ASCII,
)
"""One marker row: the groups of :data:`~servatus_slurm.markers.MARKER_NAME`, the mtime, and
the size (a claim's verdict).

At most 12 integer digits keep every mtime finite, and the longest row the grammar admits is
115 bytes, so no row it matches is over :data:`MAX_LINE`.
"""


def _listing(result: CommandResult, what: str) -> str:
    """The checked output as text with a newline before every row: the row patterns start with
    that literal, so one scan jumps from row to row instead of trying a match at every byte.

    Latin-1 maps each byte to one character, so rows and lengths are kept; our grammars are
    ASCII, so no other byte can be part of a match.
    """
    if result.returncode != 0:
        said = result.stderr.decode(errors="replace").strip().splitlines()
        reason = said[-1] if said else "no message"
        raise Unavailable(f"{what} exited {result.returncode}: {reason}")
    if result.truncated:
        raise Unavailable(f"{what} printed more than can be read; the listing would be partial")
    stdout = result.stdout
    rows = stdout.count(b"\n")
    if stdout and not stdout.endswith(b"\n"):
        rows += 1
    if rows > MAX_ROWS:
        raise Unavailable(f"{what} listed more than {MAX_ROWS} rows; the listing would be partial")
    return "\n" + stdout.decode("latin-1")


def _section(result: CommandResult, frame: Frame, argv: list[str], what: str) -> CommandResult:
    """The result of the command that ran inside ``frame`` of a :data:`READ_SCRIPT` answer."""
    out = unframe(result.stdout, frame, with_code=True)
    err = unframe(result.stderr, frame, with_code=False)
    if out is not None and out[1] is not None:
        return CommandResult(tuple(argv), out[1], out[0], b"" if err is None else err[0])
    if result.truncated:
        return CommandResult(tuple(argv), 0, b"", b"", truncated=True)
    said = result.stderr.decode(errors="replace").strip().splitlines()
    reason = said[-1][:200] if said else "no message"
    raise Unavailable(f"no complete answer from {what} (exit {result.returncode}): {reason}")


def _selection(query: MarkerQuery | None) -> list[str]:
    """The ``find`` tests choosing which markers a query needs (see :meth:`marker_command`)."""
    if query is not None and NAMED_IN_FIND < len(query.ids) <= MAX_NAMED:
        return ["-name", MARKER_GLOB]  # and :data:`_FILTER` keeps the named ones
    if query is not None and len(query.ids) <= MAX_NAMED:
        named: list[str] = []
        for allocation_id in sorted(query.ids):
            named += ["-o", "-name", f"servatus-{allocation_id}.*"]
        return ["(", *named[1:], ")"] if named else ["-name", MARKER_GLOB, "-false"]
    if query is not None and query.since is not None:
        # -newermt compares mtimes on the file server with a time of the same clock.
        return ["-name", MARKER_GLOB, "-newermt", f"@{math.floor(query.since)}"]
    return ["-name", MARKER_GLOB]


def _orders_points(target: Target, query: MarkerQuery | None) -> list[str]:
    """The orders directories of the query's lease links, in a fixed order."""
    if query is None:
        return []
    root = target.log_root.rstrip("/")
    return [f"{root}/{orders_directory(lease)}" for lease in sorted(query.leases)]


@attrs.frozen
class SlurmEvidenceReader:
    """Reads ``squeue --me`` and ``find`` listings of ``log_root``."""

    def queue_command(self, target: Target) -> list[str]:
        """Every job of the user in every state Slurm still keeps (``--states=all``): a finished
        job stays listed until ``MinJobAge`` passes, which is what makes ``ENDING`` visible."""
        return [
            f"{target.slurm_bin.rstrip('/')}/squeue",
            "--me",
            "--noheader",
            "--states=all",
            f"--format={QUEUE_FORMAT}",
        ]

    def run_listings(
        self, transport: Transport, target: Target, query: MarkerQuery | None = None
    ) -> tuple[CommandResult, CommandResult | None]:
        """Both listings in one remote command (:data:`READ_SCRIPT`): ``squeue``, then the clock
        and the marker listing. Each frame is read back into the result its command alone would
        have given; the listing is None when ``squeue`` failed, since it does not run then. A
        frame the answer does not hold whole is no answer (:class:`Unavailable`), unless the
        answer was cut at the read bound: that reads as a partial listing."""
        queue_argv = self.queue_command(target)
        marker_argv = self.marker_command(target, query)
        queue_frame, marker_frame = Frame.random(), Frame.random()
        result = transport.run(
            [
                "/bin/sh",
                "-c",
                READ_SCRIPT,
                "listings",
                *queue_frame.halves,
                *marker_frame.halves,
                str(len(queue_argv)),
                *queue_argv,
                *marker_argv,
            ]
        )
        queue = _section(result, queue_frame, queue_argv, "squeue")
        if queue.returncode != 0 or queue.truncated:
            return queue, None
        return queue, _section(result, marker_frame, marker_argv, "the marker listing")

    def parse_queue(self, result: CommandResult) -> list[QueueEntry]:
        """Only padding can stretch a row of ours past :data:`MAX_LINE`, so only padded rows are
        measured."""
        entries: list[QueueEntry] = []
        append = entries.append
        for lead, job, name, state, trail in _QUEUE_ROW.findall(_listing(result, "squeue")):
            if (lead or trail) and len(f"{lead}{job}|{name}|{state}{trail}") > MAX_LINE:
                continue
            number = int(job)
            if number <= MAX_JOB:
                append(_new(QueueEntry, (number, name, state)))
        return entries

    def marker_command(
        self, target: Target, query: MarkerQuery | None = None, *, clock: bool = True
    ) -> list[str]:
        """``-H`` follows a symlinked ``log_root`` itself (and nothing below it); a marker is a
        regular file of this user's, so a directory or link under a marker's name, or another
        user's file, is no evidence.

        With ``clock``, one ``sh`` first creates a fresh file in ``log_root`` and prints its
        mtime, then runs the same ``find``: the file server stamps that mtime as it stamps the
        markers', so the first row is its "now" (:data:`CLOCK_SCRIPT`). ``$0`` is ``find``, so
        the shell's own complaints name the listing.

        With a query, up to :data:`MAX_NAMED` ids are named (exactly their markers: as
        ``find`` tests up to :data:`NAMED_IN_FIND`, beyond it by :data:`_FILTER`); more are
        filtered on the file server's clock, by mtime after ``query.since``, where there is
        one; else every marker is listed. The orders directory of each of the query's
        ``leases`` is a further start point (:data:`LIST_SCRIPT`), so its steps' claims come
        in the same listing.
        """
        points = _orders_points(target, query)
        listing = [
            "/bin/sh",
            "-c",
            CLOCK_SCRIPT if clock else LIST_SCRIPT,
            "find",
            target.log_root,
            MARKER_FORMAT,
            str(len(points)),
            *points,
            *_selection(query),
        ]
        if query is None or not NAMED_IN_FIND < len(query.ids) <= MAX_NAMED:
            return listing
        ids = " ".join(sorted(query.ids))
        return ["/bin/sh", "-c", _FILTER, FILTER_LABEL, ids, *listing]

    def parse_markers(self, result: CommandResult) -> list[Marker]:
        """``findall`` hands over each row's groups as one tuple: a listing of 200,000 markers
        costs one call per row beyond the scan."""
        markers: list[Marker] = []
        append = markers.append
        rows = _MARKER_ROW.findall(_listing(result, "find"))
        for identity, job, plain, end_slot, code, handoff, at, size in rows:
            marker = marker_from_groups(
                identity, job, plain, end_slot, code, handoff, float(at), size
            )
            if marker is not None:
                append(marker)
        return markers

    def parse_foreign(self, result: CommandResult) -> list[tuple[str, int]]:
        """Each file under a marker's name that another user owns, with that user's uid: never
        evidence, named in a warning. Read only from a listing that succeeded."""
        if result.returncode != 0 or result.truncated:
            return []
        text = "\n" + result.stdout.decode("latin-1")
        return [(match[2], int(match[1])) for match in _FOREIGN_ROW.finditer(text)]

    def parse_clock(self, result: CommandResult) -> float | None:
        """The mtime of the clock row a ``clock`` listing prints first; None when it printed
        none (``log_root`` could not be written), so run time falls back to another clock.
        Only the first line is read: every marker row starts ``servatus-``, so no file name
        can pose as the clock."""
        end = result.stdout.find(b"\n")
        match = _CLOCK_ROW.fullmatch(result.stdout[: end if end >= 0 else len(result.stdout)])
        if result.returncode != 0 or match is None:
            return None
        return float(match[1])

    def parse_root(self, result: CommandResult) -> tuple[int, int, int] | None:
        """``log_root``'s mode, its owner's uid and the user's, from the ``root`` row a
        listing prints before its markers (the first line, or the second after the clock);
        None when there is none or the listing failed. No marker row can pose as it: every
        one starts ``servatus-`` or ``foreign``."""
        if result.returncode != 0:
            return None
        for line in result.stdout.split(b"\n", 2)[:2]:
            match = _ROOT_ROW.fullmatch(line)
            if match is not None:
                return int(match[1], 8), int(match[2]), int(match[3])
        return None

    def marker_name(
        self,
        allocation_id: str,
        job: int,
        kind: MarkerKind,
        *,
        slot: int | None = None,
        exit_code: int | None = None,
    ) -> str:
        return marker_name(allocation_id, job, kind, slot=slot, exit_code=exit_code)

    def log_path(self, target: Target, allocation_id: str, job: int, slot: int | None) -> str:
        """The allocation's Slurm log (``slot`` None) or the step log of ``slot``."""
        name = (
            allocation_log_name(allocation_id, job)
            if slot is None
            else step_log_name(allocation_id, job, slot)
        )
        return f"{target.log_root.rstrip('/')}/{name}"
