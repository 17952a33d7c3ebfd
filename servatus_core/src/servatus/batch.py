"""Batched submission's remote program (ADR 0014): one POSIX ``sh`` runs a batch's ``sbatch``
calls in order and answers each one as Slurm answered it, so a batch costs one round trip.

The program comes on the shell's stdin (``sh -s batch``): scripts are here-documents, so no
argument grows with them. For each allocation it prints a separator to stderr, runs ``sbatch``
(a chain's later link takes ``afterany`` on the job number the line before it printed, in the
same program), then one answer on stdout, ``@INDEX STATUS JOB.``, where JOB is what ``sbatch``
printed when it is a job number, else ``?``. The first allocation that does not get a job number
ends the program, and so does the time budget: past :data:`BUDGET_SECONDS` it sends nothing
more and says where it stopped (``@stop INDEX.``). Each answer ends with ``.`` before its newline,
so a reader knows it is whole as soon as it arrives.

:class:`Answers` reads the answers as they arrive; :func:`read_program` reads a program back
(``servatus.testing.FakeScheduler`` answers one as Slurm would).
"""

from __future__ import annotations

import re
import secrets
import shlex
from collections.abc import Iterator, Sequence

import attrs

from servatus.errors import ConfigurationError
from servatus.transport import COMMAND_TIMEOUT

LABEL = "batch"
"""What ``$0`` is in a batch program, and how ``FakeScheduler`` knows one."""

MAX_ALLOCATIONS = 100
"""Allocations per batch at most: an interruption leaves at most this many unresolved."""

MAX_BYTES = 8 * 1024 * 1024
"""Bytes of scripts per batch at most (a batch holds at least one allocation, however large)."""

BUDGET_SECONDS = 20
"""Seconds after which a batch starts no further ``sbatch``: a batch, like any command, ends
within its time limit (:func:`timeout`), however slowly Slurm answers."""

_ANSWER = re.compile(rb"@([0-9]{1,9}) ([0-9]{1,3}) ([0-9A-Za-z_;-]+|\?)\.")
_WORD = re.compile(rb"[0-9A-Za-z_;-]+")
_STOP = re.compile(rb"@stop ([0-9]{1,9})\.")
_ITEM = re.compile(
    r"(?m)^servatus_out=\$\(\"\$servatus_sbatch\" --parsable((?: [^\n<]+?)?) "
    r"<<'(SERVATUS_[0-9a-f]+)'\n"
)
_DEPENDS = re.compile(r" --dependency=afterany:(?:([0-9]+)|\$servatus_j([0-9]+))")


@attrs.frozen
class Item:
    """One allocation of a batch: its script and what it follows."""

    script: str
    """The batch script, as ``sbatch`` reads it."""
    after_job: int | None = None
    """The job it follows, accepted before this batch (a chain's link)."""
    after_item: int | None = None
    """The earlier item of this batch whose job it follows."""


@attrs.frozen
class Answer:
    """What ``sbatch`` answered for one item."""

    index: int
    """The item's place in its batch, from 0."""
    status: int
    """``sbatch``'s exit status."""
    job: str | None
    """What it printed when that was a job number (``JOB`` or ``JOB;CLUSTER``), else None."""


def timeout(items: int) -> float:
    """How long a batch may take: its budget, then one ``sbatch`` begun at the budget's end."""
    return BUDGET_SECONDS + COMMAND_TIMEOUT if items > 1 else COMMAND_TIMEOUT


def split(sizes: Sequence[int], start: int = 0) -> Iterator[range]:
    """Consecutive batches of the scripts sized ``sizes`` from ``start`` on, each within
    :data:`MAX_ALLOCATIONS` and :data:`MAX_BYTES` (a larger script alone); lazily, so taking
    the next batch costs only its own length."""
    held = 0
    for index in range(start, len(sizes)):
        size = sizes[index]
        if index > start and (index - start >= MAX_ALLOCATIONS or held + size > MAX_BYTES):
            yield range(start, index)
            start, held = index, 0
        held += size
    if start < len(sizes):
        yield range(start, len(sizes))


def program(sbatch: str, items: Sequence[Item]) -> bytes:
    """The batch's program for ``sh -s``; a script holding a NUL byte is refused
    (:class:`ConfigurationError`), since a shell cannot carry it."""
    scripts = [item.script for item in items]
    if any("\0" in script for script in scripts):
        raise ConfigurationError("a batch script cannot contain a NUL byte")
    mark = _delimiter(scripts)
    parts = [
        "servatus_t0=$(date +%s)\n",
        f"servatus_sbatch={shlex.quote(sbatch)}\n",
    ]
    for index, item in enumerate(items):
        if index:
            parts.append(
                f'[ "$(($(date +%s) - servatus_t0))" -lt {BUDGET_SECONDS} ] '
                f"|| {{ printf '@stop %d.\\n' {index}; exit 0; }}\n"
            )
        depends = ""
        if item.after_item is not None:
            if not 0 <= item.after_item < index:
                raise ValueError(f"item {index} follows a later item {item.after_item}")
            depends = f" --dependency=afterany:$servatus_j{item.after_item}"
        elif item.after_job is not None:
            depends = f" --dependency=afterany:{int(item.after_job)}"
        script = item.script if item.script.endswith("\n") else f"{item.script}\n"
        parts.append(
            f"printf '@servatus-item %d\\n' {index} >&2\n"
            f"servatus_out=$(\"$servatus_sbatch\" --parsable{depends} <<'{mark}'\n"
            f"{script}{mark}\n)\n"
            "servatus_s=$?\n"
            'case $servatus_out in ""|*[!0-9A-Za-z_\\;-]*) servatus_out="?" ;; esac\n'
            f'printf \'@%d %d %s.\\n\' {index} "$servatus_s" "$servatus_out"\n'
            f"servatus_j{index}=${{servatus_out%%;*}}\n"
            f'case $servatus_j{index} in ""|*[!0-9]*) exit 0 ;; esac\n'
            '[ "$servatus_s" -eq 0 ] || exit 0\n'
        )
    return "".join(parts).encode("utf-8", "surrogateescape")


def _delimiter(scripts: Sequence[str]) -> str:
    """A here-document delimiter that is no line of any script."""
    while True:
        mark = f"SERVATUS_{secrets.token_hex(12)}"
        if not any(mark in script for script in scripts):
            return mark


def read_program(text: bytes) -> tuple[str, list[Item]]:
    """The ``sbatch`` path and items of a :func:`program` (for ``FakeScheduler``)."""
    source = text.decode("utf-8", "surrogateescape")
    head = re.search(r"(?m)^servatus_sbatch=(.*)$", source)
    if head is None:
        raise ValueError("not a batch program")
    (sbatch,) = shlex.split(head[1])
    items = []
    for match in _ITEM.finditer(source):
        body_start = match.end()
        body_end = source.index(f"\n{match[2]}\n", body_start - 1) + 1
        script = source[body_start:body_end]
        depends = _DEPENDS.fullmatch(match[1]) if match[1] else None
        items.append(
            Item(
                script,
                after_job=int(depends[1]) if depends and depends[1] else None,
                after_item=int(depends[2]) if depends and depends[2] else None,
            )
        )
    return sbatch, items


def job_word(stdout: bytes) -> str | None:
    """What the program reports of ``sbatch``'s stdout (for ``FakeScheduler``): the job
    number it printed, as ``JOB`` or ``JOB;CLUSTER``, else None, as the shell's ``case`` does."""
    word = stdout.rstrip(b"\n")
    if not _WORD.fullmatch(word) or not word.partition(b";")[0].isdigit():
        return None
    return word.decode("ascii")


def answer_line(answer: Answer) -> bytes:
    """An answer as the program prints it (for ``FakeScheduler``)."""
    return f"@{answer.index} {answer.status} {answer.job or '?'}.\n".encode()


def stop_line(index: int) -> bytes:
    """The line a program prints when its budget ends before item ``index``."""
    return f"@stop {index}.\n".encode()


class Answers:
    """Reads the stdout of a batch of ``size`` items as it arrives: each whole answer once, in
    order, to :meth:`feed`'s caller; :attr:`stopped` is where the budget ended the batch, if it
    did. An answer out of order is no answer: the stream is :attr:`garbled` from there."""

    def __init__(self, size: int) -> None:
        self._size = size
        self._next = 0
        self._pending = bytearray()
        self.stopped: int | None = None
        self.garbled = False

    def feed(self, chunk: bytes) -> list[Answer]:
        """The answers ``chunk`` completes; anything that is no answer marks the stream
        :attr:`garbled`, and nothing after it is read."""
        self._pending += chunk
        answers = []
        while self._pending and not self.garbled:
            if self._pending[:1] == b"\n":
                del self._pending[:1]
                continue
            end = self._pending.find(b".")
            if end < 0:
                if len(self._pending) > 64:
                    self.garbled = True
                break
            line = bytes(self._pending[: end + 1])
            del self._pending[: end + 1]
            answer, stop = _ANSWER.fullmatch(line), _STOP.fullmatch(line)
            if answer is not None and int(answer[1]) == self._next < self._size:
                job = None if answer[3] == b"?" else answer[3].decode("ascii")
                answers.append(Answer(self._next, int(answer[2]), job))
                self._next += 1
            elif stop is not None and int(stop[1]) == self._next:
                self.stopped = self._next
            else:
                self.garbled = True
        return answers


def item_errors(stderr: bytes) -> dict[int, bytes]:
    """Each item's stderr, split at the separators the program prints before each ``sbatch``."""
    parts = re.split(rb"(?m)^@servatus-item ([0-9]{1,9})\n", stderr)
    return {int(parts[at]): parts[at + 1] for at in range(1, len(parts) - 1, 2)}
