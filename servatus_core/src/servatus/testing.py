"""``FakeScheduler``: an in-memory Slurm for testing launchers without a cluster.

Pass it as ``connect=`` to :class:`~servatus.Campaign` or :func:`servatus.cli.main`. It answers
the commands Servatus runs (``sbatch``, ``squeue``, ``scancel``, ``scontrol``, the run-marker
``find``, ``tail`` and ``doctor``'s ``sh`` probe) the way a cluster would, and its controls move
jobs along and make commands fail. Controls name commands by basename (``"sbatch"``), except the
``sbatch --version`` check, which is ``"ping"``; a name outside :data:`CONTROL_NAMES` is refused
with ``ValueError``.

It is a stand-in for tests of *your* code and of Servatus' own decisions; every behaviour it
models is also proven against a real Slurm in Servatus' own test suite.

Chains (budgeted continuation, ``docs/development/adr/0005-chains.md``) are modelled as Slurm and
the batch script run them, so a chain application can be tested without a cluster:

* ``sbatch --dependency=afterany:J`` queues a job that stays ``PENDING``
  (:meth:`FakeScheduler.start` skips it) until J ended, however it ended; ``afterany`` on a job
  the fake does not list (unknown, or forgotten by :meth:`~FakeScheduler.purge`) is met at once,
  as Slurm's is. ``afterok`` (with ``--kill-on-invalid-dep=yes``) is modelled too: met by
  ``COMPLETED`` only, otherwise the dependent is cancelled unallocated; on a job the fake does
  not list it is refused as Slurm refuses it: exit 1, ``Job dependency problem``.
* A script's ``servatus_link=``, ``servatus_links=``, ``servatus_after=``, ``servatus_later=``
  and ``# slot <s> links <n>`` lines make its job a chain link. A later link runs only the slots
  whose handoff (a ``handoff`` marker of its predecessor's allocation id) it claims: the claim
  ``servatus-<id>.<job>.taken.<slot>`` (in :attr:`~FakeScheduler.claims`, listed by the marker
  ``find``) holds the job number of whoever made it first, a link or ``reconcile`` (empty). A
  link that runs nothing writes its start marker and ends ``FAILED``. :attr:`FakeJob.allocated`
  says whether a job ever started.
* A link's step that returns 75, or any nonzero code after :meth:`~FakeScheduler.signal_limit`,
  hands its slot on (a ``handoff`` marker after its end marker), unless this is that Task's own
  last link. So ``finish(job, 75)`` on a middle link writes the end and the handoff and ends the
  link ``COMPLETED``, and the next link may start. A link that ends having handed nothing on
  (``FAILED``, cancelled before its signal, Slurm's ``TIMEOUT``) first cancels every later link
  of its chain, which was never allocated, as its batch shell does; one that vanishes
  (:meth:`~FakeScheduler.vanish`, a node failure or a ``SIGKILL`` of the whole job) cannot, so
  its next link starts once Slurm has ended it, runs nothing and removes the rest.
  :meth:`~FakeScheduler.time_out` of a middle link that had its pre-limit signal is the batch
  shell's own early stop (the stop marker, 143 for each step still running, handoffs, then
  ``COMPLETED``); without the signal, and on a chain's last link, it is Slurm's ``TIMEOUT``.
  A ``scancel`` after the signal hands on (143 after ``limit``), and the chain continues.

Leases (``docs/development/adr/0009-leases.md``) are modelled as the lease's batch script runs them,
so a lease application can be tested without a cluster:

* ``sbatch`` of a lease script (one with a ``servatus_lease=`` line) makes a lease job of
  ``--ntasks`` slots. ``--dependency=afterany:J`` (a later lease link) waits until J ended, however
  it ended; ``afterany`` on a job the fake does not list starts at once, as Slurm's does.
* ``submit`` makes the lease's orders directory first (its ``mkdir`` command): made, or accepted
  when it already is one of the fake's; a path in :attr:`FakeScheduler.foreign_directories`, or
  under a ``log_root`` in :attr:`~FakeScheduler.missing_directories`, is refused. A lease that
  starts without its directory ends ``FAILED`` before its start marker and runs nothing. A
  marker listing of a ``log_root`` in that set fails as a gone one does on a cluster (exit 66:
  a ``ConfigurationError``, not unavailable evidence).
* The offer's ``sh -c`` (``DIR JOB NONCE WAKE STEP SIZE...``, the orders on stdin) keeps each order
  whole (``refused STEP directory`` without the directory, ``refused STEP write`` for a directory
  in :attr:`~FakeScheduler.full_directories`). While its lease job is ``RUNNING`` and has not had
  its pre-limit signal, the lease takes each order at once: its claim holds the order's bytes, and
  the step starts (its ``step-start`` marker) if a slot is free, else it waits (``QUEUED``) and
  starts when a slot frees, the longest-waiting first (Slurm picks on a real cluster). An order
  that is not whole, or names another lease or slot, is withdrawn by the lease (an empty claim).
  An offer that names ``scancel`` as its ``WAKE`` and renamed an order into place wakes a running
  lease: :attr:`FakeScheduler.wakes` lists the job numbers it signalled.
* The withdraw's ``sh -c`` makes an empty claim unless the lease took the order first, and
  answers by the claim's size, as the real one does. Claims are listed by the marker ``find`` as
  ``servatus-<step>.<job>.claim`` rows whose size is the verdict.
* The stop request's ``sh -c`` (``cancel --task`` of a taken step) gives a running step its
  ``stop`` marker, and it runs on until :meth:`~FakeScheduler.finish_step` (what the application
  does with ``SIGUSR1``); a step still waiting for a slot ends without starting (exit 1).
* :meth:`~FakeScheduler.finish_step` ends a step by its id (``end.0.<exit>``; a step still
  waiting ends without ever starting) and frees its slot. The lease's pre-limit signal
  (:meth:`~FakeScheduler.signal_limit`) writes each started step's ``limit`` marker, ends each
  waiting one unstarted (exit 1) and takes no more orders; ``scancel`` and the time limit write
  each unended step's ``stop`` and end it 143 (1 if it never started).
"""

from __future__ import annotations

import fnmatch
import os
import re
import time
from collections.abc import Callable, Sequence

import attrs

from servatus import batch
from servatus.config import Target
from servatus.errors import Unavailable, Unreached
from servatus.evidence import LOG_ROOT_MISSING, EvidenceReader, MarkerKind
from servatus.ids import ALLOCATION_ID_HEX
from servatus.lease import GUARD_FAILED, GUARDED_OFFER_SCRIPT
from servatus.plugins import hooks
from servatus.transport import COMMAND_TIMEOUT, CommandResult, OnOutput, Transport

_NAME = re.compile(r"^#SBATCH --job-name=servatus-([0-9a-f]+)$", re.MULTILINE)
_NTASKS = re.compile(r"^#SBATCH --ntasks=([0-9]+)$", re.MULTILINE)
_LINK = re.compile(r"^servatus_link='?([0-9]+)'?$", re.MULTILINE)
_LINKS = re.compile(r"^servatus_links='?([0-9]+)'?$", re.MULTILINE)
_AFTER = re.compile(r"^servatus_after='?([0-9a-f]+)'?$", re.MULTILINE)
_LATER = re.compile(r"^servatus_later='([0-9a-f ]*)'$", re.MULTILINE)
_SLOT_LINKS = re.compile(r"^# slot ([0-9]+) links ([0-9]+)$", re.MULTILINE)
_LEASE = re.compile(r"^servatus_lease=([0-9a-f]{24})$", re.MULTILINE)
_LEASE_LOG = re.compile(r"^servatus_log='?([^'\n]+)'?$", re.MULTILINE)
_LEASE_SLOT = re.compile(r"^servatus_slot=([0-9]+/[0-9]+/[0-9]+)$", re.MULTILINE)
_ORDER_HEADER = re.compile(rb"# servatus.order/1 ([0-9a-f]{24}) lease=([0-9a-f]{24}) slot=(\S+)\n")
_ENDED = frozenset({"COMPLETED", "CANCELLED", "FAILED", "TIMEOUT", "NODE_FAIL"})
DEPENDENCY_PROBLEM = "sbatch: error: Batch job submission failed: Job dependency problem\n"
"""What ``sbatch`` says (exit 1) for ``afterok`` on a job Slurm does not know: ESLURM_DEPENDENCY."""


@attrs.define
class FakeJob:
    """One job the fake scheduler accepted."""

    job: int
    """Its job number."""
    allocation_id: str
    """The allocation it was submitted for (its name is ``servatus-<allocation_id>``)."""
    script: str
    """The batch script ``sbatch`` received."""
    slots: int
    """How many steps it runs (a lease: its slots)."""
    state: str = "PENDING"
    """Its Slurm state word, ``PENDING`` until it starts (``RUNNING``, ``COMPLETED``,
    ``FAILED``, ``CANCELLED``, ``TIMEOUT``)."""
    listed: bool = True
    """Whether ``squeue`` lists it: False once purged, or once it vanished."""
    after: int | None = None
    """The job this one waits for (``afterok``) until it ends ``COMPLETED``."""
    kill_on_invalid_dep: bool = False
    """Whether it was submitted with ``--kill-on-invalid-dep=yes``."""
    link: int = 0
    """Its position in its chain (``servatus_link``), 0 for a plain job."""
    links: int = 0
    """How many links its chain has (``servatus_links``), 0 for a plain job."""
    after_id: str = ""
    """The allocation id of the link before it (``servatus_after``)."""
    later: tuple[str, ...] = ()
    """The allocation ids of the later links it removes when it hands nothing on, newest first
    (``servatus_later``)."""
    slot_links: dict[int, int] = attrs.Factory(dict)
    """Each slot's own number of links (``# slot <s> links <n>``)."""
    skipped: frozenset[int] = frozenset()
    """The slots a later link did not run: its predecessor handed them nothing."""
    allocated: bool = False
    """Whether the job ever started (a removed chain link never does)."""
    after_any: bool = False
    """Whether it waits with ``afterany`` (a chain's or a lease's later link), not ``afterok``."""
    lease: FakeLease | None = None
    """What a lease job holds: its orders directory and its steps."""

    @property
    def name(self) -> str:
        """Its Slurm job name."""
        return f"servatus-{self.allocation_id}"

    @property
    def waiting(self) -> bool:
        """Pending on a dependency not satisfied yet (or never to be, without the kill flag)."""
        return self.after is not None


@attrs.define
class FakeLease:
    """A lease job's side of its orders: the directory it reads, its slot (as an order's header
    names it), the steps it took in order, and which of them run, wait, or ended."""

    directory: str
    """Its orders directory."""
    slot: str
    """One slot's resources, as the header of each order names them."""
    taken: list[str] = attrs.Factory(list)
    """Every step it took, in order."""
    running: list[str] = attrs.Factory(list)
    """The steps running now."""
    waiting: list[str] = attrs.Factory(list)
    """Steps taken and waiting for a free slot."""
    ended: dict[str, int] = attrs.Factory(dict)
    """Each ended step's exit code."""
    stopping: set[str] = attrs.Factory(set)
    """Running steps asked to stop: they have their ``stop`` marker and run on until
    :meth:`FakeScheduler.finish_step` (the application's answer to ``SIGUSR1``)."""


@attrs.define
class _Fault:
    mode: str
    """``fail`` (ran and said no), ``unavailable`` (no answer), ``unreached`` (never ran),
    ``lose`` (ran, answer lost)."""
    times: int
    returncode: int = 1
    stderr: str = ""


class FakeScheduler:
    """An in-memory Slurm: call it with a Target to get a Transport (``connect=``).

    A control (``fail``, ``unavailable``, ``unreachable``, ``lose_answer``) fires on the next
    ``times`` runs; ``times`` below 1 is refused with ``ValueError``, never read as "once".

    :param version: What ``sbatch --version`` prints.
    :param min_job_age: The ``MinJobAge`` in seconds that ``scontrol show config`` reports.
    :param proctrack: The ``ProctrackType`` that ``scontrol show config`` reports.
    :param clock: Where the fake reads the time it stamps its run markers with.
    :param first_job: The job number the first ``sbatch`` gets; each next one counts up.
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
        """What ``sbatch --version`` (and ``scancel --version``) prints; change it to see
        ``doctor`` fail."""
        self.min_job_age = min_job_age
        """The ``MinJobAge`` (seconds) ``scontrol show config`` reports."""
        self.proctrack = proctrack
        """The ``ProctrackType`` ``scontrol show config`` reports."""
        self.clock = clock
        """What the fake reads the time from: the mtime of each marker it writes."""
        self.jobs: list[FakeJob] = []
        """Every job ``sbatch`` accepted, in submission order."""
        self._numbered: dict[int, FakeJob] = {}
        self.calls: list[tuple[str, ...]] = []
        """Every command run through the fake, as its argv, in order; the one command that reads
        ``squeue`` and the run markers together is recorded as those two commands."""
        self.round_trips = 0
        """How many commands came through :meth:`run` and :meth:`stream`: the round trips a
        cluster would see (the listings read together are one, and so is a batch of ``sbatch``)."""
        self._inside = 0
        self.markers: dict[str, float] = {}
        """Every run marker by file name, with its mtime on :attr:`clock`."""
        self._reader: EvidenceReader | None = None
        self.logs: dict[str, bytes] = {}
        """Log files by name (``servatus-ID-J.S.out`` for slot S of job J of allocation ID), as
        ``servatus logs`` reads them."""
        self.missing_directories: set[str] = set()
        """Paths ``doctor`` reports as missing."""
        self.read_only_directories: set[str] = set()
        """Paths ``doctor`` reports as not writable."""
        self.foreign_directories: set[str] = set()
        """Paths where a lease's orders directory would be, held by something ``mkdir`` must
        refuse (another user's directory, one not 0700, a file)."""
        self.full_directories: set[str] = set()
        """Orders directories whose filesystem is full: every offer into one is refused."""
        self.orders: dict[str, dict[str, bytes]] = {}
        """Each orders directory the fake made, with the orders offered and not yet taken."""
        self.claims: dict[str, tuple[float, bytes]] = {}
        """Each claim by name (a lease step's ``servatus-<step>.<job>.claim``, a chain handoff's
        ``servatus-<link>.<job>.taken.<slot>``): when it was made, what it holds."""
        self.wakes: list[int] = []
        """Each lease job an offer woke (the offer's ``scancel --batch --signal=URG``), in
        order: only a running lease's batch shell, and only after an order was renamed into
        place, as on a cluster. The fake's lease takes orders at once either way."""
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
        """The next ``times`` runs of ``command`` run and say no (a nonzero exit).

        :param command: The command, by basename (``"sbatch"``, ``"squeue"``, ...), or
            ``"ping"`` for the ``sbatch --version`` check; an unknown name is ``ValueError``.
        :param times: How many runs in a row it fires for, at least 1.
        :param returncode: The exit code they return.
        :param stderr: What they print on stderr; empty: a line saying the fake refused.
        """
        program = _program(self._known(command, times))
        message = stderr or f"{program}: error: refused by FakeScheduler\n"
        self._faults[command] = _Fault("fail", times, returncode, message)

    def unavailable(self, command: str, *, times: int = 1) -> None:
        """The next ``times`` runs of ``command`` get no answer (a dropped connection).

        :param command: The command, by basename (``"sbatch"``, ``"squeue"``, ...), or
            ``"ping"`` for the ``sbatch --version`` check; an unknown name is ``ValueError``.
        :param times: How many runs in a row it fires for, at least 1.
        """
        self._faults[self._known(command, times)] = _Fault("unavailable", times)

    def unreachable(self, command: str, *, times: int = 1) -> None:
        """The next ``times`` runs of ``command`` never reach the cluster (``ssh`` could not
        connect): they do nothing, and say so (:class:`~servatus.errors.Unreached`).

        :param command: The command, by basename (``"sbatch"``, ``"squeue"``, ...), or
            ``"ping"`` for the ``sbatch --version`` check; an unknown name is ``ValueError``.
        :param times: How many runs in a row it fires for, at least 1.
        """
        self._faults[self._known(command, times)] = _Fault("unreached", times)

    def lose_answer(self, command: str = "sbatch", *, times: int = 1) -> None:
        """The next ``times`` runs of ``command`` take effect, but their answer never arrives.

        :param command: The command, by basename (``"sbatch"``, ``"squeue"``, ...), or
            ``"ping"`` for the ``sbatch --version`` check; an unknown name is ``ValueError``.
        :param times: How many runs in a row it fires for, at least 1.
        """
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
        link runs only the slots handed to it, and ends ``FAILED`` at once if none were.

        :param job: The job to start; None starts every pending job that waits for nothing.
        """
        for item in self._select(job, {"PENDING"}):
            if item.waiting:
                if job is None:
                    continue
                raise ValueError(f"job {item.job} waits for afterok:{item.after}")
            if item.lease is not None and item.lease.directory not in self.orders:
                item.allocated = True
                self._ends(item, "FAILED")  # no owner-only orders directory: runs nothing
                continue
            item.state = "RUNNING"
            item.allocated = True
            self._mark(item, MarkerKind.START)
            if item.lease is not None:
                self._take(item)
            if item.link > 1:
                taken = self._claim(item)
                item.skipped = frozenset(range(item.slots)) - taken
                if not taken:  # runs no step; one before the last removes the rest, exits 1
                    self._ends(item, "FAILED" if item.link < item.links else "COMPLETED")

    def finish(self, job: int, *exit_codes: int) -> None:
        """End a job's steps with these exit codes, one per slot (all 0 if none are given; a
        step that already ended, by :meth:`end_step`, keeps its code); the job stays listed as
        ``COMPLETED`` until :meth:`purge`. A chain link ends only the steps it runs (a code for
        a slot it was not handed is ignored), writes each handoff, and ends ``FAILED`` if it is
        not its chain's last link and handed nothing on; finishing a link that never ran a step
        (removed, or handed nothing) does nothing.

        :param job: The job's number, as ``sbatch`` answered it (:attr:`FakeJob.job`).
        :param exit_codes: Each slot's step exit code, in slot order (a lease's: its running
            steps', in the order it took them); none: 0 for every slot.
        """
        item = self._job(job)
        if item.state == "PENDING":
            self.start(job)
        if item.lease is not None:  # a lease's slots are its steps'
            if item.state == "RUNNING":
                for step, code in zip(list(item.lease.running), exit_codes or (), strict=False):
                    self.finish_step(step, code)
                for step in [*item.lease.running, *item.lease.waiting]:
                    self._lease_step_ends(item, step, 0 if step in item.lease.running else 1)
                self._ends(item, "COMPLETED")
            return
        if item.link and item.state != "RUNNING":
            return  # removed, or handed nothing and ended at its start: no step to end
        codes = exit_codes or (0,) * item.slots
        for slot, code in enumerate(codes):
            if slot in item.skipped or self._ended(item, slot):
                continue
            self._step_ends(item, slot, code)
        self._ends(item, self._link_state(item))

    def end_step(self, job: int, slot: int, exit_code: int) -> None:
        """One step of a running job returns ``exit_code`` (its end marker, and a chain link's
        handoff when it hands the slot on); the job runs on.

        :param job: The job's number, as ``sbatch`` answered it (:attr:`FakeJob.job`).
        :param slot: The step's slot, from 0.
        :param exit_code: What the step exits with.
        """
        self._step_ends(self._job(job), slot, exit_code)

    def signal_limit(self, job: int) -> None:
        """The pre-limit signal reached a running job: its limit marker. How each step answers
        (exit on it, or run on into the limit) is :meth:`end_step` or :meth:`time_out`.

        :param job: The job's number, as ``sbatch`` answered it (:attr:`FakeJob.job`).
        """
        item = self._job(job)
        self._mark(item, MarkerKind.LIMIT)
        if item.lease is not None and item.state == "RUNNING":
            for step in item.lease.running:
                self._mark_step(item, step, MarkerKind.LIMIT)
            for step in list(item.lease.waiting):  # the relay cancels a waiting srun
                self._lease_step_ends(item, step, 1)

    def finish_step(self, step_id: str, exit_code: int = 0) -> None:
        """A lease's step returns ``exit_code`` (its ``end.0.<exit>``; one still waiting for a
        slot ends without starting) and frees its slot for a waiting step; the lease runs on.

        :param step_id: The step's id, its allocation id (:meth:`steps` lists them).
        :param exit_code: What the step exits with.
        """
        for item in self.jobs:
            lease = item.lease
            if lease is not None and step_id in (*lease.running, *lease.waiting):
                self._lease_step_ends(item, step_id, exit_code)
                self._take(item)
                return
        raise KeyError(f"FakeScheduler has no running or waiting step {step_id}")

    def steps(self, job: int) -> dict[str, str]:
        """Each step a lease job took, in order, and where it is: ``RUNNING``, ``QUEUED`` (waiting
        for a slot), or ``ENDED <exit>``.

        :param job: The lease's job number; another job is ``ValueError``.
        """
        lease = self._job(job).lease
        if lease is None:
            raise ValueError(f"job {job} is no lease")
        where = {step: "RUNNING" for step in lease.running}
        where.update({step: "QUEUED" for step in lease.waiting})
        where.update({step: f"ENDED {code}" for step, code in lease.ended.items()})
        return {step: where[step] for step in lease.taken}

    def time_out(self, job: int) -> None:
        """The job hit its time limit, as on a real cluster: the stop marker, then 143 for each
        step still running (Slurm's ``SIGTERM``), ``TIMEOUT`` until purged. A chain link before
        the last that had its pre-limit signal stops its own steps first instead (the stop
        marker, 143 each, their handoffs) and ends ``COMPLETED`` if it handed any slot on.

        :param job: The job's number, as ``sbatch`` answered it (:attr:`FakeJob.job`).
        """
        item = self._job(job)
        if item.state == "RUNNING" and 0 < item.link < item.links and self._limited(item):
            self._mark(item, MarkerKind.STOP)  # the shell's own stop, as its timer marks it
            for slot in range(item.slots):
                if slot not in item.skipped and not self._ended(item, slot):
                    self._step_ends(item, slot, 143)
            self._ends(item, self._link_state(item))
            return
        self._told_to_end(item, "TIMEOUT")

    def vanish(self, job: int, *, state: str | None = None) -> None:
        """The job's processes die without writing another marker (a node failure), so a chain
        link's batch shell removes nothing: its next link is released (``afterany``), an
        ``afterok`` dependent cancelled. Without ``state`` the job drops out of the queue at
        once; with an ended state it stays listed in it until :meth:`purge`, as the test cluster
        showed: ``FAILED`` when a live ``slurmstepd`` saw the batch shell die, ``TIMEOUT`` when
        nothing on the node was left to tell slurmctld and the job ran on in Slurm to its limit,
        ``NODE_FAIL`` when Slurm declared the node down.

        :param job: The job's number, as ``sbatch`` answered it (:attr:`FakeJob.job`).
        :param state: The ended state Slurm keeps listing it in; None: it leaves the queue.
        """
        item = self._job(job)
        if state is None:
            item.listed = False
        elif state in _ENDED:
            item.state = state
        else:
            raise ValueError(f"a vanished job ends in one of {sorted(_ENDED)}, not {state!r}")
        self._dependents_end(item, state or "NODE_FAIL")

    def purge(self) -> None:
        """Slurm forgets every ended job (what ``MinJobAge`` does after a while)."""
        for item in self.jobs:
            if item.state in _ENDED:
                item.listed = False

    def count(self, command: str) -> int:
        """How many times ``command`` (a basename, or ``"ping"``) ran.

        :param command: The command's basename (``"sbatch"``), or ``"ping"`` for the
            ``sbatch --version`` check.
        """
        return sum(1 for call in self.calls if _control_name(call) == command)

    # -- Transport --------------------------------------------------------------------------

    def run(
        self, argv: Sequence[str], *, stdin: bytes = b"", timeout: float = COMMAND_TIMEOUT
    ) -> CommandResult:
        """Answer ``argv`` as a cluster would (a Transport's ``run``), after recording it in
        :attr:`calls`; a control set for its command fires first.

        :param argv: The command line, program first.
        :param stdin: What the command reads (a batch script, for ``sbatch``).
        :param timeout: Accepted as a Transport's is; the fake answers at once.
        """
        return self.stream(argv, stdin=stdin, timeout=timeout, on_stdout=lambda _: None)

    def stream(
        self,
        argv: Sequence[str],
        *,
        stdin: bytes = b"",
        timeout: float = COMMAND_TIMEOUT,
        on_stdout: OnOutput,
    ) -> CommandResult:
        """As :meth:`run`, handing stdout to ``on_stdout`` as a cluster's would arrive: a
        batch program's (ADR 0014) one answer at a time, each ``sbatch`` of it recorded in
        :attr:`calls` and subject to the controls as a lone one is, so a fault cuts the batch
        where that ``sbatch`` stands.

        :param argv: The command line, program first.
        :param stdin: What the command reads.
        :param timeout: Accepted as a Transport's is; the fake answers at once.
        :param on_stdout: Takes each piece of stdout.
        """
        if not self._inside:  # a batch's own sbatch runs come through run too
            self.round_trips += 1
        self._inside += 1
        try:
            call = tuple(argv)
            if _command_name(call) == batch.LABEL:
                return self._batch(call, stdin, on_stdout)
            if _is_script(call) and call[3] == "listings" and len(call) > 8 and call[8].isdigit():
                result = self._listings(call)
            else:
                result = self._faulted(call, stdin)
            on_stdout(result.stdout)
            return result
        finally:
            self._inside -= 1

    def _listings(self, call: tuple[str, ...]) -> CommandResult:
        """``sh -c SCRIPT listings QA QB MA MB N QUEUE... LISTING...``: the ``squeue`` of the
        first ``N`` words, then, if it exited 0, the marker listing of the rest, each run as if
        alone (recorded in :attr:`calls`, controls firing) and printed inside its frame (the
        token ``QA QB`` joined, then ``MA MB``), its exit code after it."""
        count = int(call[8])
        out, err = bytearray(), bytearray()
        code = 0
        for token, argv in (
            (call[4] + call[5], call[9 : 9 + count]),
            (call[6] + call[7], call[9 + count :]),
        ):
            result = self._faulted(argv, b"")
            code = result.returncode
            out += f"{token}>\n".encode() + result.stdout + f"\n<{token} {code}\n".encode()
            err += f"{token}>\n".encode() + result.stderr + f"\n<{token}\n".encode()
            if code != 0:
                break
        return CommandResult(call, code, bytes(out), bytes(err))

    def _faulted(self, call: tuple[str, ...], stdin: bytes) -> CommandResult:
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
            if fault.mode == "unreached":
                raise Unreached(f"FakeScheduler: {program} never reached the cluster")
            if fault.mode == "fail":
                return CommandResult(call, fault.returncode, b"", fault.stderr.encode())
            self._answer(call, stdin)
            raise Unavailable(f"FakeScheduler: the answer of {program} was lost")
        return self._answer(call, stdin)

    def _batch(self, call: tuple[str, ...], program: bytes, on_stdout: OnOutput) -> CommandResult:
        """A batch program, run as ``sh`` runs it: each ``sbatch`` in turn (through :meth:`run`),
        its answer out at once, and the first that gets no job number ends it."""
        sbatch, items = batch.read_program(program)
        out, err = bytearray(), bytearray()
        jobs: list[int] = []
        for index, item in enumerate(items):
            after = jobs[item.after_item] if item.after_item is not None else item.after_job
            depends = () if after is None else (f"--dependency=afterany:{after}",)
            script = item.script.encode("utf-8", "surrogateescape")
            # Through run, so a test that wraps run sees each sbatch as it would a lone one.
            result = self.run((sbatch, "--parsable", *depends), stdin=script)
            job = batch.job_word(result.stdout) if result.returncode == 0 else None
            line = batch.answer_line(batch.Answer(index, result.returncode, job))
            err += b"@servatus-item %d\n" % index + result.stderr
            out += line
            on_stdout(line)
            if job is None:
                break
            jobs.append(int(job.partition(";")[0]))
        return CommandResult(call, 0, bytes(out), bytes(err))

    # -- the commands -----------------------------------------------------------------------

    def _answer(self, argv: tuple[str, ...], stdin: bytes) -> CommandResult:
        if _is_script(argv) and argv[3] == "filter":
            return self._filtered(argv, stdin)
        base = _command_name(argv)
        handler = getattr(self, f"_cmd_{base}", None)
        if handler is None:
            return CommandResult(argv, 127, b"", f"{base}: command not found\n".encode())
        result: CommandResult = handler(argv, stdin)
        return result

    def _filtered(self, argv: tuple[str, ...], stdin: bytes) -> CommandResult:
        """``sh -c FILTER filter IDS LISTING...``: the listing, keeping the clock row and the
        rows whose name (the third word of a ``foreign`` row) is a marker of one of ``IDS``."""
        wanted = frozenset(argv[4].split())
        inner = self._answer(argv[5:], stdin)
        kept = []
        for row in inner.stdout.decode().splitlines(keepends=True):
            words = row.split()
            name = words[2] if words[:1] == ["foreign"] and len(words) > 2 else words[0]
            marker = _FILTERED_NAME.match(name)
            if row.startswith("clock ") or (marker is not None and marker[1] in wanted):
                kept.append(row)
        return attrs.evolve(inner, argv=argv, stdout="".join(kept).encode())

    def _cmd_sbatch(self, argv: tuple[str, ...], stdin: bytes) -> CommandResult:
        if "--version" in argv:
            return CommandResult(argv, 0, f"{self.version}\n".encode(), b"")
        script = stdin.decode("utf-8", "surrogateescape")
        name = _NAME.search(script)
        if name is None:
            return CommandResult(argv, 1, b"", b"sbatch: error: no job name\n")
        after: int | None = None
        after_any = False
        for word in argv:
            if word.startswith("--dependency="):
                kind, _, number = word.split("=", 1)[1].partition(":")
                if kind not in ("afterok", "afterany") or not number.isdigit():
                    message = (
                        f"sbatch: error: FakeScheduler models afterok and afterany only, not "
                        f"{word}\n"
                    )
                    return CommandResult(argv, 1, b"", message.encode())
                after, after_any = int(number), kind == "afterany"
                known = self._numbered.get(after)
                if known is None or not known.listed:
                    if not after_any:
                        return CommandResult(argv, 1, b"", DEPENDENCY_PROBLEM.encode())
                    after = None  # afterany on a job Slurm forgot: met at once
        if "--test-only" in argv:
            message = f"sbatch: Job {self._next_job} to start at now using 1 processors\n"
            return CommandResult(argv, 0, b"", message.encode())
        ntasks, link, links, before, later = (
            pattern.search(script) for pattern in (_NTASKS, _LINK, _LINKS, _AFTER, _LATER)
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
            later=tuple(later[1].split()) if later else (),
            slot_links={int(s): int(n) for s, n in _SLOT_LINKS.findall(script)},
            after_any=after_any,
            lease=_lease_of(script),
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
        if "--version" in argv:  # doctor's check: one Slurm release installed the client commands
            return CommandResult(argv, 0, f"{self.version}\n".encode(), b"")
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
        if _is_script(argv) and argv[4] in self.missing_directories:
            message = f"log_root {argv[4]} is not a directory\n".encode()
            return CommandResult(argv, LOG_ROOT_MISSING, b"", message)
        if _is_script(argv) and "mktemp" in argv[2] and argv[4] not in self.read_only_directories:
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
        rows += [
            f"{name} {at:.10f} {len(data)}\n"
            for name, (at, data) in sorted(self.claims.items())
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

    def _cmd_mkdir(self, argv: tuple[str, ...], stdin: bytes) -> CommandResult:
        """``sh -c MKDIR_SCRIPT mkdir DIR``: a lease's orders directory."""
        directory = argv[4]
        if directory in self.orders:
            answer = "exists"
        elif directory in self.foreign_directories or (
            os.path.dirname(directory) in self.missing_directories
        ):
            answer = "refused"
        else:
            self.orders[directory] = {}
            answer = "made"
        return CommandResult(argv, 0, f"{answer}\n".encode(), b"")

    def _cmd_offer(self, argv: tuple[str, ...], stdin: bytes) -> CommandResult:
        """``sh -c OFFER_SCRIPT offer DIR JOB NONCE WAKE STEP SIZE...``, the orders on stdin;
        the guarded offer (``... WAKE SQUEUE NAME LIMIT STEP SIZE...``) withdraws every step
        unwritten unless job JOB is pending or running as NAME, no marker is named as LIMIT is,
        and ``squeue`` has no control set, and wakes only a running one."""
        directory, job, wake = argv[4], int(argv[5]), argv[7]
        words = argv[8:]
        known = self._numbered.get(job)
        unguarded = False
        if argv[2] == GUARDED_OFFER_SCRIPT:
            name, limit, words = argv[9], argv[10], argv[11:]
            live = known is not None and known.listed and known.state in ("RUNNING", "PENDING")
            named = known is not None and f"servatus-{known.allocation_id}" == name
            down = "squeue" in self._faults  # the guard's own squeue fails as a lone one would
            unguarded = down or not (live and named) or os.path.basename(limit) in self.markers
        pairs = list(zip(words[::2], map(int, words[1::2]), strict=True))
        lines = []
        if unguarded:
            lines = [f"withdrawn {step} {GUARD_FAILED}" for step, _ in pairs]
        elif directory not in self.orders:
            lines = [f"refused {step} directory" for step, _ in pairs]
        else:
            offset = 0
            for step, size in pairs:
                data = stdin[offset : offset + size]
                offset += size
                if directory in self.full_directories or len(data) != size:
                    lines.append(f"refused {step} write")
                else:
                    self.orders[directory][step] = data
                    lines.append(f"offered {step}")
        offered = any(line.startswith("offered") for line in lines)
        if wake and offered and known is not None and known.state == "RUNNING":
            self.wakes.append(job)
        if known is not None and known.lease is not None:
            self._take(known)
        return CommandResult(argv, 0, "".join(f"{line}\n" for line in lines).encode(), b"")

    def _cmd_withdraw(self, argv: tuple[str, ...], stdin: bytes) -> CommandResult:
        """``sh -c WITHDRAW_SCRIPT withdraw DIR JOB NONCE STEP...``: an empty claim unless the
        lease took the order first; the answer is the claim's size, whoever made it."""
        directory, job = argv[4], argv[5]
        lines = []
        for step in argv[7:]:
            if directory not in self.orders:
                lines.append(f"undecided {step} directory")
                continue
            name = f"servatus-{step}.{job}.claim"
            self.claims.setdefault(name, (self.clock(), b""))
            lines.append(f"{'taken' if self.claims[name][1] else 'withdrawn'} {step}")
        return CommandResult(argv, 0, "".join(f"{line}\n" for line in lines).encode(), b"")

    def _cmd_claim(self, argv: tuple[str, ...], stdin: bytes) -> CommandResult:
        """``sh -c CLAIM_SCRIPT claim LOG_ROOT ID JOB NONCE SLOT...``: an empty claim of each
        handoff unless a link claimed it first; the answer is what the claim holds."""
        allocation_id, job = argv[5], argv[6]
        lines = []
        for slot in argv[8:]:
            name = f"servatus-{allocation_id}.{job}.taken.{slot}"
            self.claims.setdefault(name, (self.clock(), b""))
            held = self.claims[name][1].decode().strip()
            lines.append(f"taken {slot} {held}" if held else f"withdrawn {slot}")
        return CommandResult(argv, 0, "".join(f"{line}\n" for line in lines).encode(), b"")

    def _cmd_stop(self, argv: tuple[str, ...], stdin: bytes) -> CommandResult:
        """``sh -c STOP_SCRIPT stop DIR STEP...``: a stop request, acted on at once as the
        lease's next poll would: a running step gets its ``stop`` marker (then ``SIGUSR1``) and
        runs on until :meth:`finish_step`; one still waiting for a slot ends without starting."""
        directory = argv[4]
        lines = []
        for step in argv[5:]:
            if directory not in self.orders:
                lines.append(f"unwritten {step} directory")
                continue
            for job in self.jobs:
                lease = job.lease
                if lease is None or lease.directory != directory or job.state != "RUNNING":
                    continue
                if step in lease.running and step not in lease.stopping:
                    lease.stopping.add(step)
                    self._mark_step(job, step, MarkerKind.STOP)
                elif step in lease.waiting:
                    self._lease_step_ends(job, step, 1)
            lines.append(f"stopping {step}")
        return CommandResult(argv, 0, "".join(f"{line}\n" for line in lines).encode(), b"")

    def _cmd_tail(self, argv: tuple[str, ...], stdin: bytes) -> CommandResult:
        name = os.path.basename(argv[-1])
        if name not in self.logs:
            return CommandResult(argv, 1, b"", f"tail: cannot open '{argv[-1]}'\n".encode())
        words = argv[4:] if _is_script(argv) else argv  # ``sh -c TAIL_OWN tail -c N -- PATH``
        count = int(words[words.index("-c") + 1]) if "-c" in words else 65536
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

    def _marker_name(
        self,
        allocation_id: str,
        job: int,
        kind: MarkerKind,
        *,
        slot: int | None = None,
        exit_code: int | None = None,
    ) -> str:
        """A marker's name as the evidence reader lists it: the fake writes what the batch
        script would, in the installed plugin's layout, and the core names no plugin."""
        if self._reader is None:
            self._reader = hooks().evidence_reader()
        return self._reader.marker_name(allocation_id, job, kind, slot=slot, exit_code=exit_code)

    def _ended(self, job: FakeJob, slot: int) -> bool:
        prefix = self._marker_name(
            job.allocation_id, job.job, MarkerKind.END, slot=slot, exit_code=0
        )
        stem = prefix.rsplit(".", 1)[0] + "."
        markers = self.markers  # a lookup per exit code, not a scan of every marker
        return any(f"{stem}{code}" in markers for code in range(256))

    def _told_to_end(self, job: FakeJob, state: str) -> None:
        """``scancel`` or the time limit: a running job's batch shell marks the stop, then each
        step still running returns 143 (``SIGTERM``) after it, as the real cluster shows (a
        chain link's watcher hands the slot on if the pre-limit signal came first)."""
        if job.state == "RUNNING" and job.lease is not None:
            self._mark(job, MarkerKind.STOP)
            for step in [*job.lease.running, *job.lease.waiting]:
                self._mark_step(job, step, MarkerKind.STOP)
                self._lease_step_ends(job, step, 143 if step in job.lease.running else 1)
        elif job.state == "RUNNING":
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
        if job.later and job.allocated and not self._handed_by(job):
            self._remove(job)
        job.state = state
        self._dependents_end(job, state)

    def _handed_by(self, job: FakeJob) -> bool:
        markers = self.markers
        return any(
            f"servatus-{job.allocation_id}.{job.job}.handoff.{slot}" in markers
            for slot in range(job.slots)
        )

    def _remove(self, job: FakeJob) -> None:
        """A link's batch shell that hands nothing on cancels its later links by name, newest
        first, while they are still pending."""
        for allocation_id in job.later:
            for item in self._by_allocation.get(allocation_id, ()):
                if item.listed and item.state in ("PENDING", "RUNNING"):
                    self._told_to_end(item, "CANCELLED")

    def _claim(self, job: FakeJob) -> set[int]:
        """The slots a later link claims: each handoff of its predecessor (any job number) is
        claimed once, by the first to link its claim; the link runs the slots whose claim holds
        its own job number."""
        mine = f"{job.job}\n".encode()
        taken = set()
        for before in self._by_allocation.get(job.after_id, ()):
            for slot in range(job.slots):
                handoff = f"servatus-{job.after_id}.{before.job}.handoff.{slot}"
                if handoff not in self.markers:
                    continue
                name = f"servatus-{job.after_id}.{before.job}.taken.{slot}"
                self.claims.setdefault(name, (self.clock(), mine))
                if self.claims[name][1] == mine:
                    taken.add(slot)
        return taken

    def _dependents_end(self, job: FakeJob, state: str) -> None:
        for item in self._dependents.get(job.job, ()):
            if item.after == job.job and item.state == "PENDING":
                self._dependency_ended(item, state)

    def _dependency_ended(self, job: FakeJob, state: str) -> None:
        """``afterok`` is met by ``COMPLETED`` only; otherwise a job that says
        ``--kill-on-invalid-dep=yes`` is cancelled unallocated, and the cancel cascades."""
        if state == "COMPLETED" or job.after_any:
            job.after = None
        elif job.kill_on_invalid_dep:
            self._ends(job, "CANCELLED")

    def _handed(self, allocation_id: str) -> set[int]:
        """The slots some job of ``allocation_id`` handed on (any job number: the id decides),
        as the markers say now."""
        markers = self.markers
        return {
            slot
            for item in self._by_allocation.get(allocation_id, ())
            for slot in range(item.slots)
            if self._marker_name(allocation_id, item.job, MarkerKind.HANDOFF, slot=slot) in markers
        }

    def _take(self, job: FakeJob) -> None:
        """A running lease's poll: claim every order it has not decided (withdrawing one that is
        not whole or not for it), then start waiting steps while slots are free."""
        lease = job.lease
        if lease is None or job.state != "RUNNING":
            return
        pending = self.orders.get(lease.directory, {})
        if not self._limited(job):
            for step, data in list(pending.items()):
                name = f"servatus-{step}.{job.job}.claim"
                if name not in self.claims:
                    whole = _order_fits(data, step, job.allocation_id, lease.slot)
                    self.claims[name] = (self.clock(), data if whole else b"")
                del pending[step]
                if self.claims[name][1] and step not in lease.taken:
                    lease.taken.append(step)
                    lease.waiting.append(step)
        while lease.waiting and len(lease.running) < job.slots:
            step = lease.waiting.pop(0)
            lease.running.append(step)
            self._mark_step(job, step, MarkerKind.STEP_START)
            self.logs.setdefault(f"servatus-{step}-{job.job}.0.out", b"")

    def _lease_step_ends(self, job: FakeJob, step: str, exit_code: int) -> None:
        assert job.lease is not None
        for place in (job.lease.running, job.lease.waiting):
            if step in place:
                place.remove(step)
        job.lease.ended[step] = exit_code
        self._mark_step(job, step, MarkerKind.END, slot=0, exit_code=exit_code)

    def _mark_step(
        self,
        job: FakeJob,
        step: str,
        kind: MarkerKind,
        *,
        slot: int | None = None,
        exit_code: int | None = None,
    ) -> None:
        self.markers[self._marker_name(step, job.job, kind, slot=slot, exit_code=exit_code)] = (
            self.clock()
        )

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
        name = self._marker_name(job.allocation_id, job.job, kind, slot=slot, exit_code=exit_code)
        self.markers[name] = self.clock()


CONTROL_NAMES = (
    "ping", "sbatch", "squeue", "scancel", "scontrol", "find", "tail", "sh",
    "mkdir", "offer", "withdraw", "stop", "claim",
)  # fmt: skip
"""What a control may name: each command the fake answers, by basename (``sh`` is doctor's
directory probe), and ``ping``, the ``sbatch --version`` check. A lease's ``sh -c`` commands are
named by their ``$0``: ``mkdir`` (its orders directory), ``offer``, ``withdraw`` and ``stop``;
``claim`` is ``reconcile``'s claim of a chain link's handoffs."""


def _lease_of(script: str) -> FakeLease | None:
    """What a lease script says of its orders: where they are, and the slot they must name."""
    lease, log_root, slot = (p.search(script) for p in (_LEASE, _LEASE_LOG, _LEASE_SLOT))
    if lease is None or log_root is None or slot is None:
        return None
    return FakeLease(f"{log_root[1].rstrip('/')}/servatus-{lease[1]}.orders", slot[1])


def _order_fits(data: bytes, step: str, lease: str, slot: str) -> bool:
    """Whether an order is whole (its header and trailer) and for this lease and slot."""
    header = _ORDER_HEADER.match(data)
    trailer = f"# servatus.order/1 end {step}\n".encode()
    return (
        header is not None
        and header.groups() == (step.encode(), lease.encode(), slot.encode())
        and data.endswith(trailer)
    )


def _program(control: str) -> str:
    """The command a control name stands for, as its own messages would name it."""
    return "sbatch" if control == "ping" else control


def _is_script(argv: Sequence[str]) -> bool:
    return len(argv) > 3 and os.path.basename(argv[0]) == "sh" and argv[1] == "-c"


_FILTERED_NAME = re.compile(rf"servatus-([0-9a-f]{{{ALLOCATION_ID_HEX}}})\.")


def _command_name(argv: Sequence[str]) -> str:
    """The basename of the program, or the ``$0`` a ``sh -c`` script is given (``find`` for the
    clock listing, ``sh`` for doctor's directory probe); a filtered listing is its listing's."""
    if _is_script(argv) and argv[3] == "filter":
        return _command_name(argv[5:])
    if _is_script(argv):
        return argv[3]
    if len(argv) == 3 and os.path.basename(argv[0]) == "sh" and argv[1] == "-s":
        return argv[2]  # a program on stdin, named by its $0 (a batch)
    return os.path.basename(argv[0]) if argv else ""


def _control_name(argv: Sequence[str]) -> str:
    base = _command_name(argv)
    if base == "sbatch" and "--version" in argv:
        return "ping"
    return base


__all__ = ["FakeJob", "FakeLease", "FakeScheduler"]
