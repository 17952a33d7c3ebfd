"""``FakeScheduler``: an in-memory Slurm for testing launchers without a cluster.

Pass it as ``connect=`` to :class:`~servatus.Campaign` or :func:`servatus.cli.main`. It answers
the commands Servatus runs (``sbatch``, ``squeue``, ``scancel``, ``scontrol``, the run-marker
``find``, ``tail`` and ``doctor``'s ``sh`` probe) the way a cluster would, and its controls move
jobs along and make commands fail. Controls name commands by basename (``"sbatch"``), except the
``sbatch --version`` check, which is ``"ping"``; a name outside :data:`CONTROL_NAMES` is refused
with ``ValueError``.

It is a stand-in for tests of *your* code and of Servatus' own decisions; every behaviour it
models is also proven against a real Slurm in Servatus' own test suite.

Chains (budgeted continuation, ``docs/adr/0005-chains.md``) are modelled as Slurm and the batch
script run them, so a chain application can be tested without a cluster:

* ``sbatch --dependency=afterok:J --kill-on-invalid-dep=yes`` queues a job that stays
  ``PENDING`` (:meth:`FakeScheduler.start` skips it) until J ends ``COMPLETED``. When J ends
  any other way the dependent is cancelled without ever being allocated, and so is every job
  that depends on it (Slurm removing the rest of a chain); without ``--kill-on-invalid-dep=yes``
  it stays pending for ever. ``afterok`` on a job the fake does not list (unknown, or forgotten
  by :meth:`~FakeScheduler.purge`) is refused as Slurm refuses it: exit 1, ``Job dependency
  problem``.
* A script's ``servatus_link=``, ``servatus_links=``, ``servatus_after=`` and
  ``# slot <s> links <n>`` lines make its job a chain link. A later link runs only the slots its
  predecessor handed on (a ``handoff`` marker of that allocation id); with none it writes its
  start marker, runs nothing and ends ``FAILED``. :attr:`FakeJob.allocated` says whether a job
  ever started.
* A link's step that returns 75, or any nonzero code after :meth:`~FakeScheduler.signal_limit`,
  hands its slot on (a ``handoff`` marker after its end marker), unless this is that Task's own
  last link. So ``finish(job, 75)`` on a middle link writes the end and the handoff and ends the
  link ``COMPLETED``, and the next link may start; a link that hands nothing on ends ``FAILED``
  and its successors are cancelled. :meth:`~FakeScheduler.time_out` of a middle link that had its
  pre-limit signal is the batch shell's own early stop (143 for each step still running, no
  stop marker, handoffs, then ``COMPLETED``); without the signal, and on a chain's last link, it
  is Slurm's ``TIMEOUT``, and ``TIMEOUT`` removes the rest of the chain.
"""

from __future__ import annotations

import fnmatch
import os
import re
import time
from collections.abc import Callable, Sequence

import attrs

from servatus.config import Target
from servatus.errors import Unavailable
from servatus.evidence import MarkerKind
from servatus.transport import COMMAND_TIMEOUT, CommandResult, Transport

_NAME = re.compile(r"^#SBATCH --job-name=servatus-([0-9a-f]+)$", re.MULTILINE)
_NTASKS = re.compile(r"^#SBATCH --ntasks=([0-9]+)$", re.MULTILINE)
_LINK = re.compile(r"^servatus_link='?([0-9]+)'?$", re.MULTILINE)
_LINKS = re.compile(r"^servatus_links='?([0-9]+)'?$", re.MULTILINE)
_AFTER = re.compile(r"^servatus_after='?([0-9a-f]+)'?$", re.MULTILINE)
_SLOT_LINKS = re.compile(r"^# slot ([0-9]+) links ([0-9]+)$", re.MULTILINE)
_ENDED = frozenset({"COMPLETED", "CANCELLED", "FAILED", "TIMEOUT", "NODE_FAIL"})
DEPENDENCY_PROBLEM = "sbatch: error: Batch job submission failed: Job dependency problem\n"
"""What ``sbatch`` says (exit 1) for ``afterok`` on a job Slurm does not know: ESLURM_DEPENDENCY."""


@attrs.define
class FakeJob:
    """One job the fake scheduler accepted."""

    job: int
    allocation_id: str
    script: str
    slots: int
    state: str = "PENDING"
    listed: bool = True
    after: int | None = None
    """The job this one waits for (``afterok``) until it ends ``COMPLETED``."""
    kill_on_invalid_dep: bool = False
    link: int = 0
    """Its position in its chain (``servatus_link``), 0 for a plain job."""
    links: int = 0
    after_id: str = ""
    """The allocation id of the link before it (``servatus_after``)."""
    slot_links: dict[int, int] = attrs.Factory(dict)
    """Each slot's own number of links (``# slot <s> links <n>``)."""
    skipped: frozenset[int] = frozenset()
    """The slots a later link did not run: its predecessor handed them nothing."""
    allocated: bool = False
    """Whether the job ever started (a removed chain link never does)."""

    @property
    def name(self) -> str:
        return f"servatus-{self.allocation_id}"

    @property
    def waiting(self) -> bool:
        """Pending on a dependency not satisfied yet (or never to be, without the kill flag)."""
        return self.after is not None


@attrs.define
class _Fault:
    mode: str  # "fail" (ran and said no), "unavailable" (no answer), "lose" (ran, answer lost)
    times: int
    returncode: int = 1
    stderr: str = ""


class FakeScheduler:
    """An in-memory Slurm: call it with a Target to get a Transport (``connect=``).

    A control (``fail``, ``unavailable``, ``lose_answer``) fires on the next ``times`` runs;
    ``times`` below 1 is refused with ``ValueError``, never read as "once".
    """

    def __init__(
        self,
        *,
        version: str = "slurm 24.11.5",
        min_job_age: int = 300,
        proctrack: str = "proctrack/cgroup",
        clock: Callable[[], float] = time.time,
        first_job: int = 1000,
    ) -> None:
        self.version = version
        self.min_job_age = min_job_age
        self.proctrack = proctrack
        self.clock = clock
        self.jobs: list[FakeJob] = []
        self._numbered: dict[int, FakeJob] = {}
        self.calls: list[tuple[str, ...]] = []
        self.markers: dict[str, float] = {}
        self.logs: dict[str, bytes] = {}
        self.missing_directories: set[str] = set()
        self.read_only_directories: set[str] = set()
        self._next_job = first_job
        self._faults: dict[str, _Fault] = {}
        self._dependents: dict[int, list[FakeJob]] = {}
        self._by_allocation: dict[str, list[FakeJob]] = {}

    # -- connect= ---------------------------------------------------------------------------

    def __call__(self, target: Target) -> Transport:
        return self

    def close(self) -> None:
        """Nothing to close: the fake keeps no connection."""

    # -- controls ---------------------------------------------------------------------------

    def fail(self, command: str, *, times: int = 1, returncode: int = 1, stderr: str = "") -> None:
        """The next ``times`` runs of ``command`` run and say no (a nonzero exit)."""
        program = _program(self._known(command, times))
        message = stderr or f"{program}: error: refused by FakeScheduler\n"
        self._faults[command] = _Fault("fail", times, returncode, message)

    def unavailable(self, command: str, *, times: int = 1) -> None:
        """The next ``times`` runs of ``command`` get no answer (a dropped connection)."""
        self._faults[self._known(command, times)] = _Fault("unavailable", times)

    def lose_answer(self, command: str = "sbatch", *, times: int = 1) -> None:
        """The next ``times`` runs of ``command`` take effect, but their answer never arrives."""
        self._faults[self._known(command, times)] = _Fault("lose", times)

    def _known(self, command: str, times: int) -> str:
        """A control that names no command the fake answers, or that fires fewer than once
        (``times`` below 1), would never do what its caller meant: refuse it (``ValueError``)
        rather than fire once or silently never."""
        if isinstance(times, bool) or not isinstance(times, int) or times < 1:
            raise ValueError(f"FakeScheduler controls fire at least once; times={times!r}")
        if command not in CONTROL_NAMES:
            raise ValueError(
                f"FakeScheduler has no command {command!r}; its controls name one of "
                f"{', '.join(CONTROL_NAMES)}"
            )
        return command

    def start(self, job: int | None = None) -> None:
        """Start a pending job (every pending one without ``job``): it writes its start marker.
        A job waiting on a dependency does not start (naming it is ``ValueError``); a later chain
        link runs only the slots handed to it, and ends ``FAILED`` at once if none were."""
        for item in self._select(job, {"PENDING"}):
            if item.waiting:
                if job is None:
                    continue
                raise ValueError(f"job {item.job} waits for afterok:{item.after}")
            item.state = "RUNNING"
            item.allocated = True
            self._mark(item, MarkerKind.START)
            if item.link > 1:
                handed = self._handed(item.after_id)
                item.skipped = frozenset(range(item.slots)) - handed
                if not handed & set(range(item.slots)):
                    self._ends(item, "FAILED")  # runs no step, exits 1

    def finish(self, job: int, *exit_codes: int) -> None:
        """End a job's steps with these exit codes, one per slot (all 0 if none are given); the
        job stays listed as ``COMPLETED`` until :meth:`purge`. A chain link ends only the steps it
        runs (a code for a slot it was not handed is ignored), writes each handoff, and ends
        ``FAILED`` if it is not its chain's last link and handed nothing on; finishing a link
        that never ran a step (removed, or handed nothing) does nothing."""
        item = self._job(job)
        if item.state == "PENDING":
            self.start(job)
        if item.link and item.state != "RUNNING":
            return  # removed, or handed nothing and ended at its start: no step to end
        codes = exit_codes or (0,) * item.slots
        for slot, code in enumerate(codes):
            if item.link and (slot in item.skipped or self._ended(item, slot)):
                continue
            self._step_ends(item, slot, code)
        self._ends(item, self._link_state(item))

    def end_step(self, job: int, slot: int, exit_code: int) -> None:
        """One step of a running job returns ``exit_code`` (its end marker, and a chain link's
        handoff when it hands the slot on); the job runs on."""
        self._step_ends(self._job(job), slot, exit_code)

    def signal_limit(self, job: int) -> None:
        """The pre-limit signal reached a running job: its limit marker. How each step answers
        (exit on it, or run on into the limit) is :meth:`end_step` or :meth:`time_out`."""
        self._mark(self._job(job), MarkerKind.LIMIT)

    def time_out(self, job: int) -> None:
        """The job hit its time limit, as on a real cluster: the stop marker, then 143 for each
        step still running (Slurm's ``SIGTERM``), ``TIMEOUT`` until purged. A chain link before
        the last that had its pre-limit signal stops its own steps first instead (143 each, no
        stop marker, their handoffs) and ends ``COMPLETED`` if it handed any slot on."""
        item = self._job(job)
        if item.state == "RUNNING" and 0 < item.link < item.links and self._limited(item):
            for slot in range(item.slots):
                if slot not in item.skipped and not self._ended(item, slot):
                    self._step_ends(item, slot, 143)
            self._ends(item, self._link_state(item))
            return
        self._told_to_end(item, "TIMEOUT")

    def vanish(self, job: int) -> None:
        """The job disappears from the queue without writing another marker (a node failure);
        jobs that depend on it are cancelled."""
        item = self._job(job)
        item.listed = False
        self._dependents_end(item, "NODE_FAIL")

    def purge(self) -> None:
        """Slurm forgets every ended job (what ``MinJobAge`` does after a while)."""
        for item in self.jobs:
            if item.state in _ENDED:
                item.listed = False

    def count(self, command: str) -> int:
        """How many times ``command`` (a basename, or ``"ping"``) ran."""
        return sum(1 for call in self.calls if _control_name(call) == command)

    # -- Transport --------------------------------------------------------------------------

    def run(
        self, argv: Sequence[str], *, stdin: bytes = b"", timeout: float = COMMAND_TIMEOUT
    ) -> CommandResult:
        call = tuple(argv)
        self.calls.append(call)
        name = _control_name(call)
        fault = self._faults.get(name)
        if fault is not None:
            fault.times -= 1
            if fault.times <= 0:
                del self._faults[name]
            program = _program(name)
            if fault.mode == "unavailable":
                raise Unavailable(f"FakeScheduler: no answer from {program}")
            if fault.mode == "fail":
                return CommandResult(call, fault.returncode, b"", fault.stderr.encode())
            self._answer(call, stdin)
            raise Unavailable(f"FakeScheduler: the answer of {program} was lost")
        return self._answer(call, stdin)

    # -- the commands -----------------------------------------------------------------------

    def _answer(self, argv: tuple[str, ...], stdin: bytes) -> CommandResult:
        base = _command_name(argv)
        handler = getattr(self, f"_cmd_{base}", None)
        if handler is None:
            return CommandResult(argv, 127, b"", f"{base}: command not found\n".encode())
        result: CommandResult = handler(argv, stdin)
        return result

    def _cmd_sbatch(self, argv: tuple[str, ...], stdin: bytes) -> CommandResult:
        if "--version" in argv:
            return CommandResult(argv, 0, f"{self.version}\n".encode(), b"")
        script = stdin.decode("utf-8", "surrogateescape")
        name = _NAME.search(script)
        if name is None:
            return CommandResult(argv, 1, b"", b"sbatch: error: no job name\n")
        after: int | None = None
        for word in argv:
            if word.startswith("--dependency="):
                kind, _, number = word.split("=", 1)[1].partition(":")
                if kind != "afterok" or not number.isdigit():
                    message = f"sbatch: error: FakeScheduler models afterok only, not {word}\n"
                    return CommandResult(argv, 1, b"", message.encode())
                after = int(number)
                known = self._numbered.get(after)
                if known is None or not known.listed:
                    return CommandResult(argv, 1, b"", DEPENDENCY_PROBLEM.encode())
        if "--test-only" in argv:
            message = f"sbatch: Job {self._next_job} to start at now using 1 processors\n"
            return CommandResult(argv, 0, b"", message.encode())
        ntasks, link, links, before = (
            pattern.search(script) for pattern in (_NTASKS, _LINK, _LINKS, _AFTER)
        )
        job = FakeJob(
            job=self._next_job,
            allocation_id=name[1],
            script=script,
            slots=int(ntasks[1]) if ntasks else 1,
            after=after,
            kill_on_invalid_dep="--kill-on-invalid-dep=yes" in argv,
            link=int(link[1]) if link else 0,
            links=int(links[1]) if links else 0,
            after_id=before[1] if before else "",
            slot_links={int(s): int(n) for s, n in _SLOT_LINKS.findall(script)},
        )
        self._next_job += 1
        self.jobs.append(job)
        self._numbered[job.job] = job
        self._by_allocation.setdefault(job.allocation_id, []).append(job)
        if after is not None:
            self._dependents.setdefault(after, []).append(job)
            ended = self._numbered[after]
            if ended.state in _ENDED:  # afterok on a job that already ended
                self._dependency_ended(job, ended.state)
        return CommandResult(argv, 0, f"{job.job}\n".encode(), b"")

    def _cmd_squeue(self, argv: tuple[str, ...], stdin: bytes) -> CommandResult:
        fmt = "%i %j %T"
        for index, arg in enumerate(argv):
            if arg in ("-o", "--format") and index + 1 < len(argv):
                fmt = argv[index + 1]
            elif arg.startswith("--format="):
                fmt = arg.split("=", 1)[1]
        lines = []
        for job in self.jobs:
            if not job.listed:
                continue
            line = fmt.replace("%i", str(job.job)).replace("%A", str(job.job))
            lines.append(line.replace("%j", job.name).replace("%T", job.state))
        return CommandResult(argv, 0, "".join(f"{line}\n" for line in lines).encode(), b"")

    def _cmd_scancel(self, argv: tuple[str, ...], stdin: bytes) -> CommandResult:
        names = [arg.split("=", 1)[1] for arg in argv if arg.startswith("--name=")]
        for job in list(self.jobs):
            if job.listed and job.name in names and job.state in ("PENDING", "RUNNING"):
                self._told_to_end(job, "CANCELLED")
        return CommandResult(argv, 0, b"", b"")

    def _cmd_scontrol(self, argv: tuple[str, ...], stdin: bytes) -> CommandResult:
        text = (
            f"MinJobAge               = {self.min_job_age} sec\n"
            f"ProctrackType           = {self.proctrack}\n"
        )
        return CommandResult(argv, 0, text.encode(), b"")

    def _cmd_find(self, argv: tuple[str, ...], stdin: bytes) -> CommandResult:
        """A plain ``find``, or the clock listing (``sh -c SCRIPT find LOG_ROOT FORMAT TESTS``),
        which prints the clock row first, stamped by this fake's (the file server's) clock,
        unless LOG_ROOT is in :attr:`read_only_directories`. Names match any ``-name`` pattern
        of the tests (``-false`` matches none), and with ``-newermt @T`` only those modified
        after T."""
        rows = []
        if _is_script(argv) and argv[4] not in self.read_only_directories:
            rows.append(f"clock {self.clock():.10f}\n")
        patterns = [argv[i + 1] for i, word in enumerate(argv) if word == "-name"] or ["*"]
        if "-false" in argv:
            patterns = []
        listed = re.compile("|".join(map(fnmatch.translate, patterns)) or "(?!)").match
        after = float(argv[argv.index("-newermt") + 1][1:]) if "-newermt" in argv else None
        rows += [
            f"{name} {at:.10f} 0\n"
            for name, at in sorted(self.markers.items())
            if listed(name) and (after is None or at > after)
        ]
        now = self.clock()
        if after is None or now > after:
            rows += [
                f"{name} {now:.10f} {len(data)}\n"
                for name, data in self.logs.items()
                if listed(name)
            ]
        return CommandResult(argv, 0, "".join(rows).encode(), b"")

    def _cmd_tail(self, argv: tuple[str, ...], stdin: bytes) -> CommandResult:
        name = os.path.basename(argv[-1])
        if name not in self.logs:
            return CommandResult(argv, 1, b"", f"tail: cannot open '{argv[-1]}'\n".encode())
        count = int(argv[argv.index("-c") + 1]) if "-c" in argv else 65536
        return CommandResult(argv, 0, self.logs[name][-count:], b"")

    def _cmd_sh(self, argv: tuple[str, ...], stdin: bytes) -> CommandResult:
        """Only the directory probe ``doctor`` runs: a writable directory unless marked missing
        or read-only."""
        missing = bool(argv) and (
            argv[-1] in self.missing_directories or argv[-1] in self.read_only_directories
        )
        return CommandResult(argv, 1 if missing else 0, b"", b"")

    # -- helpers ----------------------------------------------------------------------------

    def _job(self, job: int) -> FakeJob:
        found = self._numbered.get(job)  # a dict, so finishing N jobs is not O(N^2)
        if found is not None:
            return found
        for item in self.jobs:
            if item.job == job:
                return item
        raise KeyError(f"FakeScheduler has no job {job}")

    def _ended(self, job: FakeJob, slot: int) -> bool:
        from servatus_slurm.markers import marker_name  # noqa: PLC0415 - the plugin is optional

        prefix = marker_name(job.allocation_id, job.job, MarkerKind.END, slot=slot, exit_code=0)
        stem = prefix.rsplit(".", 1)[0] + "."
        markers = self.markers  # a lookup per exit code, not a scan of every marker
        return any(f"{stem}{code}" in markers for code in range(256))

    def _told_to_end(self, job: FakeJob, state: str) -> None:
        """``scancel`` or the time limit: a running job's batch shell marks the stop, then each
        step still running returns 143 (``SIGTERM``) after it, as the real cluster shows (a
        chain link's watcher hands the slot on if the pre-limit signal came first)."""
        if job.state == "RUNNING":
            self._mark(job, MarkerKind.STOP)
            for slot in range(job.slots):
                if slot not in job.skipped and not self._ended(job, slot):
                    self._step_ends(job, slot, 143)
        self._ends(job, state)

    def _step_ends(self, job: FakeJob, slot: int, exit_code: int) -> None:
        """A step's watcher: the end marker, then a chain link's handoff when the protocol
        continues the Task (75, or nonzero after the signal, before the Task's last link)."""
        self._mark(job, MarkerKind.END, slot=slot, exit_code=exit_code)
        if not job.link or job.link >= job.slot_links.get(slot, job.links):
            return
        if exit_code == 75 or (exit_code != 0 and self._limited(job)):
            self._mark(job, MarkerKind.HANDOFF, slot=slot)

    def _link_state(self, job: FakeJob) -> str:
        """How a job whose steps all returned ends: a link before its chain's last exits 0 only
        if it handed some slot on (else 1, ``FAILED``); every other job ``COMPLETED``."""
        if not job.link or job.link >= job.links or self._handed(job.allocation_id):
            return "COMPLETED"
        return "FAILED"

    def _ends(self, job: FakeJob, state: str) -> None:
        job.state = state
        self._dependents_end(job, state)

    def _dependents_end(self, job: FakeJob, state: str) -> None:
        for item in self._dependents.get(job.job, ()):
            if item.after == job.job and item.state == "PENDING":
                self._dependency_ended(item, state)

    def _dependency_ended(self, job: FakeJob, state: str) -> None:
        """``afterok`` is met by ``COMPLETED`` only; otherwise a job that says
        ``--kill-on-invalid-dep=yes`` is cancelled unallocated, and the cancel cascades."""
        if state == "COMPLETED":
            job.after = None
        elif job.kill_on_invalid_dep:
            self._ends(job, "CANCELLED")

    def _handed(self, allocation_id: str) -> set[int]:
        """The slots some job of ``allocation_id`` handed on (any job number: the id decides),
        as the markers say now."""
        from servatus_slurm.markers import marker_name  # noqa: PLC0415 - the plugin is optional

        markers = self.markers
        return {
            slot
            for item in self._by_allocation.get(allocation_id, ())
            for slot in range(item.slots)
            if marker_name(allocation_id, item.job, MarkerKind.HANDOFF, slot=slot) in markers
        }

    def _limited(self, job: FakeJob) -> bool:
        return f"servatus-{job.allocation_id}.{job.job}.limit" in self.markers

    def _select(self, job: int | None, states: set[str]) -> list[FakeJob]:
        chosen = self.jobs if job is None else [self._job(job)]
        return [item for item in chosen if item.state in states]

    def _mark(
        self,
        job: FakeJob,
        kind: MarkerKind,
        *,
        slot: int | None = None,
        exit_code: int | None = None,
    ) -> None:
        from servatus_slurm.markers import marker_name  # noqa: PLC0415 - the Slurm plugin is optional

        name = marker_name(job.allocation_id, job.job, kind, slot=slot, exit_code=exit_code)
        self.markers[name] = self.clock()


CONTROL_NAMES = ("ping", "sbatch", "squeue", "scancel", "scontrol", "find", "tail", "sh")
"""What a control may name: each command the fake answers, by basename (``sh`` is doctor's
directory probe), and ``ping``, the ``sbatch --version`` check."""


def _program(control: str) -> str:
    """The command a control name stands for, as its own messages would name it."""
    return "sbatch" if control == "ping" else control


def _is_script(argv: Sequence[str]) -> bool:
    return len(argv) > 3 and os.path.basename(argv[0]) == "sh" and argv[1] == "-c"


def _command_name(argv: Sequence[str]) -> str:
    """The basename of the program, or the ``$0`` a ``sh -c`` script is given (``find`` for the
    clock listing, ``sh`` for doctor's directory probe)."""
    if _is_script(argv):
        return argv[3]
    return os.path.basename(argv[0]) if argv else ""


def _control_name(argv: Sequence[str]) -> str:
    base = _command_name(argv)
    if base == "sbatch" and "--version" in argv:
        return "ping"
    return base


__all__ = ["FakeJob", "FakeScheduler"]
