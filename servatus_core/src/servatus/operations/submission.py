"""Submission: a reviewed plan becomes Slurm jobs, with a durable intent before every ``sbatch``.

The order of effects is the guarantee: the intent is synced before ``sbatch`` runs, and the
receipt after it answers. A crash or a lost answer in between leaves the intent without an
outcome (``UNRESOLVED``); only ``reconcile`` (:mod:`servatus.operations.reconcile`), reading Slurm's
evidence, decides it later. Nothing here retries.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any

import attrs

from servatus import batch
from servatus.config import Profile, Target
from servatus.continuation import MAX_LINKS, Link
from servatus.engine.plan import Allocation, earlier_links, later_links
from servatus.errors import (
    ConfigurationError,
    ShapeRejected,
    SubmissionInterrupted,
    Unavailable,
    Unreached,
)
from servatus.evidence import MAX_JOB
from servatus.journal.records import ChainLink, Intent, LeaseTerms, Receipt, Resolved, TaskResources
from servatus.journal.store import Writer
from servatus.launcher import Launcher
from servatus.lease import (
    GUARD_FAILED,
    Directory,
    Guard,
    Offer,
    make_directory,
    offer,
    orders_path,
)
from servatus.plugins import Hooks
from servatus.script import (
    BUDGET_VARIABLE,
    CHAIN_VARIABLES,
    LeaseOrder,
    LeaseSpec,
    ScriptSpec,
    ScriptStep,
)
from servatus.tasks import Task, content_size
from servatus.transport import CommandResult, Transport, run_streaming

RUNTIME_VARIABLES = ("SERVATUS_JOB_ID", "SERVATUS_JOB_END_TIME")
"""Reserved variables whose values exist only once the job runs; the script exports them."""

_JOB = re.compile(r"([1-9][0-9]{0,9})(?:;[^\s;]+)?")
_NO_ANSWER = re.compile(
    r"timed out|zero bytes|connection|communication|unable to contact|try again|temporarily"
    r"|standby|not responding",
    re.IGNORECASE,
)
"""What a Slurm command says when it lost the controller mid-request (``Socket timed out on
send/recv operation``, ``Zero Bytes were transmitted or received``, ``Unable to contact slurm
controller``, ...): no answer, so its exit is no refusal."""


def unanswered(result: CommandResult) -> bool:
    """Whether a Slurm command that exited nonzero says it never got the controller's answer.

    The one reading of Slurm's stderr that submit (the job may exist: interrupted), validate
    (the shape was never judged) and doctor (``unavailable``) share, so no command reads as a
    refusal what another reads as no answer.
    """
    said = result.stderr.decode("utf-8", "replace")
    return result.returncode != 0 and _NO_ANSWER.search(said) is not None


Progress = Callable[[int, int, str, int], None]
"""Called after each accepted allocation: (index from 1, count, allocation id, job number)."""


@attrs.frozen
class SubmittedAllocation:
    """A receipt as the user sees it: the allocation, Slurm's job number, and its Tasks."""

    allocation_id: str
    """The allocation (or lease step) submitted."""
    job: int
    """Slurm's job number (a step's: its lease's)."""
    task_keys: tuple[str, ...]
    """Its Tasks, slot 0 first (empty for a lease)."""


def command(target: Target, name: str) -> str:
    """The absolute path of a Slurm client command on the target."""
    return f"{target.slurm_bin.rstrip('/')}/{name}"


def step_environment(task: Task, allocation_id: str, slot: int) -> dict[str, str]:
    """A step's static environment: the Task's own plus the reserved variables known at planning."""
    return {
        **task.env,
        "SERVATUS_TASK_KEY": task.key,
        "SERVATUS_ALLOCATION_ID": allocation_id,
        "SERVATUS_SLOT": str(slot),
    }


def script_spec(
    profile: Profile,
    allocation: Allocation,
    tasks: Mapping[str, Task],
    launcher: Launcher,
    *,
    earlier: tuple[str, ...] = (),
    later: tuple[str, ...] = (),
    budget: int | None = None,
    spent: Mapping[str, int] | None = None,
) -> ScriptSpec:
    """What the allocation's batch script must do, decided entirely by the core. A chain link
    also needs its ``earlier`` and ``later`` links' ids, the ``budget``, and what each Task had
    ``spent``."""
    resources = profile.resources
    inherit: tuple[str, ...] = RUNTIME_VARIABLES
    if allocation.link is not None:
        inherit = (*inherit, *CHAIN_VARIABLES, *([BUDGET_VARIABLE] if budget is not None else []))
    steps = []
    for slot, key in enumerate(allocation.task_keys):
        task = tasks[key]
        env = step_environment(task, allocation.allocation_id, slot)
        step = launcher.command(
            profile.target, task.args, env, inherit=inherit, gpus=resources.gpus
        )
        links = allocation.task_links[slot] if allocation.link is not None else 0
        run_time = (spent or {}).get(key, 0)
        steps.append(ScriptStep(slot, key, step, task.stdin, links=links, run_time=run_time))
    return ScriptSpec(
        allocation_id=allocation.allocation_id,
        target=profile.target,
        cpus=resources.cpus,
        memory_mib=resources.memory_mib,
        gpus=resources.gpus,
        time_limit=allocation.time_limit(resources),
        signal_before_end=resources.signal_before_end,
        steps=tuple(steps),
        inherit=inherit,
        link=allocation.link,
        earlier=earlier,
        later=later,
        budget=budget,
    )


def chain_link(
    allocation: Allocation, budget: int | None, short: Collection[str] = ()
) -> ChainLink | None:
    """What an intent records of a link's place in its chain (a lease's links hold no Tasks,
    so their ``task_links`` are empty), the slots of the Tasks in ``short`` among them, whose
    links stop short of their budget."""
    if allocation.link is None:
        return None
    link = allocation.link
    return ChainLink(
        link.position,
        link.of,
        allocation.after or "",
        allocation.task_links,
        budget or 0,
        tuple(slot for slot, key in enumerate(allocation.task_keys) if key in short),
    )


def lease_terms(profile: Profile, slots: int) -> LeaseTerms:
    """What a lease link's intent records of what it holds: enough to plan steps into it
    without the profile (``plan --lease``)."""
    resources = profile.resources
    if resources.signal_before_end is None:
        raise ConfigurationError(f"profile {profile.name} has no signal_before_end for a lease")
    return LeaseTerms(
        profile.name,
        slots,
        resources.cpus,
        resources.memory_mib,
        resources.gpus,
        resources.signal_before_end,
    )


def lease_spec(profile: Profile, allocation: Allocation, slots: int) -> LeaseSpec:
    """What a lease link's batch script must do: hold ``slots`` of the profile's per-Task
    resources for the link's time limit, exporting the job's run-time variables to its steps."""
    terms = lease_terms(profile, slots)
    return LeaseSpec(
        allocation_id=allocation.allocation_id,
        target=profile.target,
        slots=slots,
        cpus=terms.cpus,
        memory_mib=terms.memory_mib,
        gpus=terms.gpus,
        time_limit=allocation.time_limit(profile.resources),
        signal_before_end=terms.signal_before_end,
        inherit=RUNTIME_VARIABLES,
    )


def lease_scripts(
    hooks: Hooks, profile: Profile, allocations: Sequence[Allocation], slots: int
) -> list[str]:
    """Every lease link's batch script, as ``submit`` sends it."""
    return [hooks.lease_script(lease_spec(profile, a, slots)) for a in allocations]


STEP_ROOM = 8192
"""Bytes a step may take in the planning bound beyond what :class:`ScriptRoom` measured and its
Task's escaped content (its key, slot, per-word quoting)."""
ESCAPE_GROWTH = 16
"""The most a character of a Task's content can grow by in a script: four UTF-8 bytes, each a
four-character octal escape."""
_TOO_LARGE = {
    "stdin": "give it its input in a file it reads instead",
    "env": "pass large values through a file it reads instead",
    "args": "pass large values through a file it reads instead",
}
_PROBE = Task("servatus-size-probe", ["/bin/true"])
"""The Task whose scripts :func:`script_room` renders: a program and nothing else."""


@attrs.frozen
class ScriptRoom:
    """What a Target's batch script takes besides its Tasks' content, measured by rendering it:
    ``frame`` is the script of one content-free step, ``step`` what each further such step adds
    (the launcher's words for it, binds and image included, and its ``srun`` line)."""

    frame: int
    step: int


_WIDEST = 10**12 - 1
"""A budget and a run time no real one reaches in digits: chain sizes are measured with it."""
_PROBE_LINKS = (
    None,
    Link(1, MAX_LINKS, 60),
    Link(MAX_LINKS - 1, MAX_LINKS, 60),
    Link(MAX_LINKS, MAX_LINKS, 60),
)
"""A plain allocation, and the chain links with the most in their scripts: the last that hands
on (the early stop and 30 earlier links to read), the first (31 later links to remove) and the
chain's last (31 earlier)."""


def _sized(allocation: Allocation, keys: tuple[str, ...]) -> tuple[Allocation, dict[str, Any]]:
    """``allocation`` cut to the Tasks ``keys``, and the ``script_spec`` arguments whose widest
    values make its script at least as long as the one submission renders."""
    if allocation.link is None:
        return Allocation(allocation.allocation_id, keys), {}
    links = dict(zip(allocation.task_keys, allocation.task_links, strict=True))
    position = allocation.link.position
    cut = attrs.evolve(
        allocation,
        task_keys=keys,
        task_links=tuple(links.get(key, allocation.link.of) for key in keys),
    )
    widest = {
        "earlier": ("0" * 24,) * (position - 1),
        "later": ("0" * 24,) * (allocation.link.of - position),
        "budget": _WIDEST,
        "spent": dict.fromkeys(keys, _WIDEST),
    }
    return cut, widest


def script_room(hooks: Hooks, profile: Profile, launcher: Launcher) -> ScriptRoom | None:
    """The :class:`ScriptRoom` of ``profile``'s scripts, from renders of a one-step and a
    two-step script of :data:`_PROBE`, plain and as the largest chain links; None if even those
    cannot be rendered (every script must then be rendered to say why)."""
    unbounded = attrs.evolve(profile, target=attrs.evolve(profile.target, max_script_bytes=2**62))
    probes = {_PROBE.key: _PROBE}
    frame = step = 0
    for link in _PROBE_LINKS:
        sizes = []
        for keys in ((_PROBE.key,), (_PROBE.key, _PROBE.key)):
            after = "0" * 24 if link is not None and link.position > 1 else None
            probe = Allocation("0" * 24, keys, link, after, (link.of,) * len(keys) if link else ())
            cut, widest = _sized(probe, keys)
            spec = script_spec(unbounded, cut, probes, launcher, **widest)
            try:
                sizes.append(_utf8(hooks.batch_script(spec)))
            except ConfigurationError:
                return None
        one, two = sizes
        frame, step = max(frame, one), max(step, two - one)
    return ScriptRoom(frame=frame, step=step)


def script_may_exceed(target: Target, sizes: Sequence[int], room: ScriptRoom | None) -> bool:
    """Whether the batch script of Tasks of these content sizes can be over
    ``max_script_bytes``: a bound that never says no wrongly, so planning renders only the
    scripts that may be too large instead of every one (100,000 allocations). ``room`` is what
    the launcher and the script add per step, measured once a plan (:func:`script_room`); without
    it every script may be."""
    if room is None:
        return True
    steps = len(sizes)
    bound = room.frame + room.step * (steps - 1) + STEP_ROOM * steps + ESCAPE_GROWTH * sum(sizes)
    return bound > target.max_script_bytes


def script_problem(
    hooks: Hooks,
    profile: Profile,
    allocation: Allocation,
    tasks: Mapping[str, Task],
    launcher: Launcher,
) -> str | None:
    """Why the allocation's batch script cannot be sent, found at planning, or None. A script
    over ``max_script_bytes`` is put in the user's terms: the Task with the most content and its
    largest part (stdin, env, args) when even its script alone is too large, else the number of
    Tasks in the allocation.

    A script carries every byte of its Tasks' content, so content over the bound is refused
    without rendering it (300 MB of stdin would render to a script of a gigabyte and more);
    otherwise the script is rendered once, unbounded, and measured."""
    bound = profile.target.max_script_bytes
    unbounded = attrs.evolve(profile, target=attrs.evolve(profile.target, max_script_bytes=2**62))

    def size(keys: tuple[str, ...]) -> int:
        cut, widest = _sized(allocation, keys)
        return _utf8(hooks.batch_script(script_spec(unbounded, cut, tasks, launcher, **widest)))

    chosen = [tasks[key] for key in allocation.task_keys]
    least = sum(map(content_size, chosen))
    if least > bound:
        measured = f"its batch script would be more than {least} bytes"
    else:
        try:
            total = size(allocation.task_keys)
        except ConfigurationError as exc:
            return str(exc)
        if total <= bound:
            return None
        measured = f"its batch script is {total} bytes"
    task = max(chosen, key=content_size)
    if len(chosen) > 1 and content_size(task) <= bound and size((task.key,)) <= bound:
        why = (
            f"the {len(chosen)} Tasks of one allocation do not fit in one "
            "batch script; plan fewer per allocation (--tasks-per-allocation)"
        )
    else:
        why = _too_large(task)
    return f"{why} ({measured}, over max_script_bytes {bound})"


def _too_large(task: Task) -> str:
    """The Task's largest part, which a script too large even for it alone is blamed on."""
    parts = {
        "stdin": len(task.stdin),
        "env": sum(_utf8(name) + _utf8(value) + 1 for name, value in task.env.items()),
        "args": sum(_utf8(arg) + 1 for arg in task.args),
    }
    cause = max(parts, key=lambda part: parts[part])
    return (
        f"Task {task.key!r}: its {cause} ({parts[cause]} bytes) is too large; {_TOO_LARGE[cause]}"
    )


def _utf8(text: str) -> int:
    return len(text.encode("utf-8", "surrogateescape"))


PING_UNANSWERED = "sbatch --version did not answer"


def ping_problem(result: CommandResult) -> str | None:
    """What is wrong with an ``sbatch --version`` that ran, in the words submit, validate and
    doctor share (it ran and failed, or printed nothing); None when it printed a version."""
    if result.returncode != 0:
        said = result.stderr.decode("utf-8", "replace").strip()
        reason = said.splitlines()[-1][:200] if said else "no message"
        return f"sbatch --version ran and failed (exit {result.returncode}): {reason}"
    if not result.stdout.strip():
        return "sbatch --version ran but printed no version"
    return None


def ping(transport: Transport, target: Target) -> str:
    """``sbatch --version``: proves Slurm answers before anything is recorded."""
    try:
        result = transport.run([command(target, "sbatch"), "--version"])
    except Unavailable as exc:
        raise Unavailable(f"{PING_UNANSWERED}: {exc}") from exc
    problem = ping_problem(result)
    if problem is not None and result.returncode == 126:
        raise ConfigurationError(problem)  # a shell's "found but cannot execute"
    if problem is not None:
        raise Unavailable(problem)
    return result.stdout.decode("utf-8", "replace").strip()


def parse_job(stdout: bytes) -> int | None:
    """The job number ``sbatch --parsable`` printed (``JOB`` or ``JOB;CLUSTER``), else None; a
    number beyond Slurm's 32 bits is none either, since the journal refuses such a receipt on
    every later read."""
    lines = stdout.decode("utf-8", "replace").strip().splitlines()
    if len(lines) != 1:
        return None
    match = _JOB.fullmatch(lines[0].strip())
    return int(match[1]) if match and int(match[1]) <= MAX_JOB else None


def batch_scripts(
    hooks: Hooks,
    profile: Profile,
    allocations: Sequence[Allocation],
    tasks: Mapping[str, Task],
    launcher: Launcher,
    *,
    budget: int | None = None,
    spent: Mapping[str, int] | None = None,
) -> list[str]:
    """Every allocation's batch script, as ``submit`` sends it: a chain link's knows its earlier
    links (from ``allocations``, in order), the ``budget`` and what each Task had ``spent``."""
    earlier, later = earlier_links(allocations), later_links(allocations)
    return [
        hooks.batch_script(
            script_spec(
                profile,
                allocation,
                tasks,
                launcher,
                earlier=earlier.get(allocation.allocation_id, ()),
                later=later.get(allocation.allocation_id, ()),
                budget=budget,
                spent=spent,
            )
        )
        for allocation in allocations
    ]


def submit_allocations(
    writer: Writer,
    transport: Transport,
    hooks: Hooks,
    profile: Profile,
    allocations: Sequence[Allocation],
    tasks: Mapping[str, Task],
    launcher: Launcher,
    *,
    plan_digest: str,
    target_identity: str,
    progress: Progress | None = None,
    budget: int | None = None,
    spent: Mapping[str, int] | None = None,
    short: Collection[str] = (),
    lease: int | None = None,
    on_batch: BatchProgress | None = None,
) -> tuple[SubmittedAllocation, ...]:
    """Submit the allocations in order, in batches (ADR 0014): each batch's intents in one
    synced write, then one remote program runs its ``sbatch`` calls, and each receipt is synced
    as its job number arrives. A chain link's intent records which of its Tasks are ``short``:
    their links stop short of their budget.

    A definite refusal by ``sbatch`` ends the batch there: the refused allocation, and the
    batch's later ones that were never sent, are recorded as not submitted, and the submission
    stops with :class:`ShapeRejected`. No answer, an answer that is not a job number, or a
    failure that says Slurm was lost mid-request leaves every allocation of the batch without an
    answer unresolved and stops with :class:`SubmissionInterrupted` (exit 3).

    With ``lease`` (its number of slots) the allocations are a lease's links (ADR 0009), sent
    one per batch: each intent records the :class:`LeaseTerms`, the link's orders directory is
    made between its intent and its ``sbatch`` (a refusal there is one as ``sbatch``'s would
    be), and a later link waits for the one before it with ``afterany``.
    """
    known = set()
    for allocation in allocations:
        if allocation.after is not None and allocation.after not in known:
            raise ConfigurationError(
                f"chain link {allocation.allocation_id} follows {allocation.after}, which this "
                "submission does not send before it; nothing was submitted"
            )
        known.add(allocation.allocation_id)
    if lease is None:
        scripts = batch_scripts(
            hooks, profile, allocations, tasks, launcher, budget=budget, spent=spent
        )
        terms = None
    else:
        scripts = lease_scripts(hooks, profile, allocations, lease)
        terms = lease_terms(profile, lease)
    sending = _Sending(writer, transport, profile, allocations, progress, lease=terms is not None)
    try:
        # The Target is recorded once per campaign, before its first intent.
        target = writer.target(target_identity)
    except Unavailable as exc:
        raise Unavailable(f"{exc}; {sending.done}; nothing was sent") from exc
    asked = profile.resources
    slot = TaskResources(asked.cpus, asked.memory_mib, asked.gpus)
    intents = [
        Intent(
            allocation_id=allocation.allocation_id,
            task_keys=allocation.task_keys,
            plan_digest=plan_digest,
            created_at=0.0,
            target=target,
            time_limit=allocation.time_limit(profile.resources),
            chain=chain_link(allocation, budget, short),
            lease=terms,
            resources=None if terms is not None else slot,
        )
        for allocation in allocations
    ]
    sizes = [len(script.encode("utf-8", "surrogateescape")) for script in scripts]
    start = 0
    while start < len(allocations):
        group = range(start, start + 1) if terms is not None else next(batch.split(sizes, start))
        if on_batch is not None:
            on_batch(start, len(group), len(allocations))
        start = sending.send(group, [scripts[at] for at in group], intents)
    return tuple(sending.accepted)


BatchProgress = Callable[[int, int, int], None]
"""Called as each batch goes out: (allocations sent before it, its size, all allocations)."""


class _Sending:
    """One submission's batches in flight: what Slurm accepted so far, and the records each
    answer makes."""

    def __init__(
        self,
        writer: Writer,
        transport: Transport,
        profile: Profile,
        allocations: Sequence[Allocation],
        progress: Progress | None,
        *,
        lease: bool,
    ) -> None:
        self.lease = lease
        self.writer = writer
        self.transport = transport
        self.target = profile.target
        self.allocations = allocations
        self.progress = progress
        self.accepted: list[SubmittedAllocation] = []
        self.jobs: dict[str, int] = {}
        self.intended: set[str] = set()

    @property
    def done(self) -> str:
        return f"{len(self.accepted)} of {len(self.allocations)} allocations were accepted"

    def send(self, group: range, scripts: Sequence[str], intents: Sequence[Intent]) -> int:
        """Send one batch; returns where the next begins (a batch its time budget ended early
        goes on from where it stopped, its intents already durable)."""
        members = [self.allocations[at] for at in group]
        positions = {allocation.allocation_id: at for at, allocation in enumerate(members)}
        items = [
            batch.Item(
                script,
                after_job=None
                if allocation.after in positions
                else followed_job(allocation, self.jobs),
                after_item=positions.get(allocation.after) if allocation.after else None,
            )
            for allocation, script in zip(members, scripts, strict=True)
        ]
        program = batch.program(command(self.target, "sbatch"), items)
        now = time.time()
        fresh = [
            attrs.evolve(intents[at], created_at=now)
            for at in group
            if intents[at].allocation_id not in self.intended
        ]
        try:
            self.writer.add_all(fresh)  # every intent of the batch is durable before it goes
        except Unavailable as exc:
            raise Unavailable(
                f"{exc}; {self.done}; allocation {members[0].allocation_id} and the rest were "
                "not sent"
            ) from exc
        self.intended.update(intent.allocation_id for intent in fresh)
        if self.lease:
            _orders_directory(self.writer, self.transport, self.target, members[0], self.done)
        answers = batch.Answers(len(items))
        answered: list[batch.Answer] = []

        def arrived(chunk: bytes) -> None:
            taken = answers.feed(chunk)
            answered.extend(taken)
            self._receipts(members, taken, group.start)

        try:
            result = run_streaming(
                self.transport,
                ["/bin/sh", "-s", batch.LABEL],
                stdin=program,
                timeout=batch.timeout(len(items)),
                on_stdout=arrived,
            )
        except Unavailable as exc:
            raise self._unanswered(members, len(answered), f"({exc})") from exc
        ended = answered[-1] if answered else None
        if ended is not None and _job(ended) is None:
            self._ended(members, ended, batch.item_errors(result.stderr).get(ended.index, b""))
        if answers.stopped is not None and answers.stopped == len(answered):
            return group.start + answers.stopped
        if len(answered) < len(members):
            said = result.stderr.decode("utf-8", "replace").strip().splitlines()
            why = f"(exit {result.returncode}: {said[-1] if said else 'no message'})"
            raise self._unanswered(members, len(answered), why)
        return group.stop

    def _receipts(
        self, members: Sequence[Allocation], answers: Sequence[batch.Answer], offset: int
    ) -> None:
        """Record each accepted job at once, one synced write for the answers of one piece
        (``offset``: where the batch begins among all allocations)."""
        accepted = [
            (offset + answer.index, members[answer.index], job)
            for answer in answers
            if (job := _job(answer)) is not None
        ]
        if not accepted:
            return
        try:
            self.writer.add_all(
                [Receipt(allocation_id=a.allocation_id, job=job) for _, a, job in accepted]
            )
        except Unavailable as exc:  # the jobs exist, and their durable intents will be resolved
            _, first, job = accepted[0]
            raise _interrupted(
                f"allocation {first.allocation_id} was accepted as job {job}, but its receipt "
                f"could not be recorded ({exc}); {len(self.accepted) + len(accepted)} of "
                f"{len(self.allocations)} allocations reached Slurm"
            ) from exc
        for at, allocation, job in accepted:
            self.accepted.append(
                SubmittedAllocation(allocation.allocation_id, job, allocation.task_keys)
            )
            self.jobs[allocation.allocation_id] = job
            if self.progress is not None:
                self.progress(at + 1, len(self.allocations), allocation.allocation_id, job)

    def _ended(self, members: Sequence[Allocation], answer: batch.Answer, said: bytes) -> None:
        """The answer that ended a batch without a job number: no answer from Slurm, or a
        refusal, which records it and the batch's later allocations, never sent, as not
        submitted."""
        allocation = members[answer.index]
        reason = said.decode("utf-8", "replace").strip().splitlines()
        link = allocation.link
        if answer.status == 0 or unanswered(CommandResult((), answer.status, b"", said)):
            what = (
                f"sbatch answered allocation {allocation.allocation_id} with no job number"
                if answer.status == 0
                else f"sbatch lost Slurm while submitting allocation {allocation.allocation_id} "
                f"({reason[-1]})"
            )
            self._unsent(members[answer.index + 1 :])
            raise _interrupted(f"{what}; {self.done}{self._cut(allocation, members)}")
        self._unsent(members[answer.index :])
        chained = (
            f" (chain link {link.position}/{link.of}: none of its later links was sent)"
            if link is not None and link.position < link.of
            else ""
        )
        raise ShapeRejected(
            f"sbatch refused allocation {allocation.allocation_id}: "
            f"{reason[-1] if reason else f'exit {answer.status}'}{chained}; {self.done}"
        )

    def _unsent(self, allocations: Sequence[Allocation]) -> None:
        """The batch ended before these: none was sent."""
        if allocations:
            self.writer.add_all(
                [Resolved(allocation_id=a.allocation_id, job=None) for a in allocations]
            )

    def _unanswered(
        self, members: Sequence[Allocation], answered: int, why: str
    ) -> SubmissionInterrupted:
        first = members[answered]
        rest = len(members) - answered - 1
        more = (
            f"; the {rest} allocation{'s' if rest != 1 else ''} after it in its batch may have "
            "been sent too"
            if rest
            else ""
        )
        return _interrupted(
            f"no answer from sbatch for allocation {first.allocation_id} {why}; {self.done}"
            f"{self._cut(first, members)}{more}"
        )

    def _cut(self, allocation: Allocation, members: Sequence[Allocation]) -> str:
        """What an interrupted submission leaves of a chain whose later links were not sent."""
        link = allocation.link
        if link is None or link.position >= link.of or self.lease:
            return ""
        if any(member.after == allocation.allocation_id for member in members):
            return ""
        return f" (chain link {link.position}/{link.of}: its later links were not sent)"


def _job(answer: batch.Answer) -> int | None:
    """The job number an answer gives, if it is one: accepted, and within Slurm's 32 bits."""
    if answer.status != 0 or answer.job is None:
        return None
    return parse_job(answer.job.encode("ascii"))


def _orders_directory(
    writer: Writer, transport: Transport, target: Target, allocation: Allocation, done: str
) -> None:
    """Make a lease link's orders directory, after its intent and before its ``sbatch``: a
    refusal records the link as not submitted (nothing was sent), no answer leaves it
    unresolved."""
    directory = orders_path(target.log_root, allocation.allocation_id)
    lease = allocation.allocation_id
    try:
        made = make_directory(transport, directory)
    except Unavailable as exc:
        raise _interrupted(
            f"no answer while making the orders directory of lease {lease} ({exc}); {done}"
        ) from exc
    if made is Directory.UNDECIDED:
        raise _interrupted(
            f"making the orders directory of lease {lease} gave no clear answer; {done}"
        )
    if made is Directory.REFUSED:
        writer.add(Resolved(allocation_id=lease, job=None))
        raise ShapeRejected(
            f"lease {lease} was not sent: {directory} cannot be made, or exists and is not an "
            f"owner-only directory of yours (mode 0700); {done}"
        )


def step_orders(
    hooks: Hooks,
    profile: Profile,
    within: str,
    allocations: Sequence[Allocation],
    tasks: Mapping[str, Task],
    launcher: Launcher,
    *,
    run_times: Mapping[str, int],
    budget: int | None = None,
) -> dict[str, str]:
    """Each step's order into lease link ``within``, by step id, as ``submit`` offers it: the
    Task's command shaped as a chain link's step is (the launcher carries ``SERVATUS_LINK``,
    ``SERVATUS_LINKS``, ``SERVATUS_RUN_TIME`` and, with a budget, ``SERVATUS_BUDGET``), in the
    slot the profile (the lease's) holds. Raises :class:`ConfigurationError` for an order that
    cannot be sent (over ``max_script_bytes``, say)."""
    resources = profile.resources
    carried = (*RUNTIME_VARIABLES, *CHAIN_VARIABLES, *([BUDGET_VARIABLE] if budget else []))
    orders = {}
    for allocation in allocations:
        (key,) = allocation.task_keys
        task = tasks[key]
        env = step_environment(task, allocation.allocation_id, 0)
        step = launcher.command(
            profile.target, task.args, env, inherit=carried, gpus=resources.gpus
        )
        order = LeaseOrder(
            step_id=allocation.allocation_id,
            lease_id=within,
            task_key=key,
            command=step,
            stdin=task.stdin,
            cpus=resources.cpus,
            memory_mib=resources.memory_mib,
            gpus=resources.gpus,
            inherit=RUNTIME_VARIABLES,
            run_time=run_times.get(key, 0),
            budget=budget,
        )
        orders[allocation.allocation_id] = hooks.lease_order(order, profile.target)
    return orders


def submit_steps(
    writer: Writer,
    transport: Transport,
    lease: Intent,
    job: int,
    directory: str,
    allocations: Sequence[Allocation],
    orders: Mapping[str, str],
    *,
    plan_digest: str,
    progress: Progress | None = None,
    budget: int | None = None,
    wake: str | None = None,
    guard: Guard | None = None,
) -> tuple[SubmittedAllocation, ...] | None:
    """Offer steps to a lease link (ADR 0009): every step's intent in one synced write (with
    the steps' ``budget``, so ``status`` shows it), then
    one offer of all their orders into its orders directory (which, given ``scancel``'s path
    as ``wake``, then wakes the lease in the same command), then, in one synced write, a
    receipt with the lease's job for each one offered and ``Resolved(job=None)`` for each one
    refused or withdrawn (no order of it can ever run).

    With a ``guard`` (a plan made from the journal alone), a link that is not as the guard
    says gets nothing written: every step is resolved unsent and the answer is None, for the
    caller to read Slurm and plan again.

    A step with no clear answer stays unresolved (:class:`SubmissionInterrupted`, exit 3:
    ``reconcile`` decides it by its claim). Otherwise a refusal for a full filesystem is
    :class:`Unavailable` (exit 75), any other :class:`ShapeRejected` (exit 1)."""
    now = time.time()
    intents = [
        Intent(
            allocation_id=allocation.allocation_id,
            task_keys=allocation.task_keys,
            plan_digest=plan_digest,
            created_at=now,
            target=lease.target,
            time_limit=lease.time_limit,
            within=lease.allocation_id,
            budget=budget,
        )
        for allocation in allocations
    ]
    writer.add_all(intents)  # every intent is durable before any order can exist
    count = f"of {len(allocations)} steps"
    try:
        answers = offer(transport, directory, job, orders, wake, guard)
    except Unreached as exc:  # nothing ran: no order of any step can exist
        try:
            writer.add_all([Resolved(allocation_id=i.allocation_id, job=None) for i in intents])
        except Unavailable as lost:
            raise _interrupted(f"{exc}, and that could not be recorded ({lost})") from lost
        raise Unavailable(f"{exc}; none {count} was offered") from exc
    except Unavailable as exc:
        raise _interrupted(
            f"no answer from the offer to lease {lease.allocation_id} ({exc}); none {count} "
            "is known to be offered"
        ) from exc
    outcomes: list[Receipt | Resolved] = []
    accepted: list[SubmittedAllocation] = []
    refused: list[str] = []
    undecided: list[str] = []
    unguarded: list[str] = []
    full = False
    for allocation in allocations:
        step = allocation.allocation_id
        answer = answers[step]
        if answer.outcome is Offer.WITHDRAWN and answer.reason == GUARD_FAILED:
            outcomes.append(Resolved(allocation_id=step, job=None))
            unguarded.append(f"{step} ({', '.join(allocation.task_keys)}: its link changed)")
        elif answer.outcome is Offer.OFFERED:
            outcomes.append(Receipt(allocation_id=step, job=job))
            accepted.append(SubmittedAllocation(step, job, allocation.task_keys))
        elif answer.outcome is Offer.UNDECIDED:
            undecided.append(step)
        else:
            outcomes.append(Resolved(allocation_id=step, job=None))
            why = "withdrawn" if answer.reason is None else answer.reason
            refused.append(f"{step} ({', '.join(allocation.task_keys)}: {why})")
            full = full or answer.reason == "write"
    try:
        writer.add_all(outcomes)
    except Unavailable as exc:
        raise _interrupted(
            f"the offer to lease {lease.allocation_id} was answered, but its outcome could not "
            f"be recorded ({exc})"
        ) from exc
    if len(unguarded) == len(allocations):
        return None
    refused += unguarded  # a guard holds for all steps or none: never seen, never dropped
    if progress is not None:
        for index, receipt in enumerate(accepted, 1):
            progress(index, len(allocations), receipt.allocation_id, receipt.job)
    if undecided:
        raise _interrupted(
            f"the offer to lease {lease.allocation_id} gave no clear answer for "
            f"{len(undecided)} {count} ({', '.join(undecided)}); {len(accepted)} were offered"
        )
    if refused:
        what = (
            f"the lease's orders directory {directory} refused {len(refused)} {count}: "
            f"{'; '.join(refused)}; {len(accepted)} were offered"
        )
        if full:
            raise Unavailable(f"{what} (its filesystem is full: free space, then start again)")
        raise ShapeRejected(what)
    return tuple(accepted)


def followed_job(allocation: Allocation, jobs: Mapping[str, int]) -> int | None:
    """The job a chain link follows (``--dependency=afterany:JOB``), accepted earlier in the
    same submission: the job number exists only now.

    ``afterany``, for a Task's chain (ADR 0005) and a lease's (ADR 0009) alike: the link becomes
    eligible when the one before it ended, however it ended (``COMPLETED``, ``TIMEOUT``, a raw
    ``scancel``), and the handoff it claims decides what it runs. A link that hands nothing on
    removes the rest of its chain itself, while they are still pending."""
    if allocation.after is None:
        return None
    job = jobs.get(allocation.after)
    if job is None:  # a link whose predecessor was not accepted is never sent
        raise ConfigurationError(
            f"chain link {allocation.allocation_id} follows {allocation.after}, which was not "
            "accepted in this submission"
        )
    return job


def _interrupted(what: str) -> SubmissionInterrupted:
    """A submission stopped with an intent that has no outcome, and what to do about it."""
    return SubmissionInterrupted(
        f"{what}; its Tasks are UNRESOLVED until servatus reconcile decides"
    )
