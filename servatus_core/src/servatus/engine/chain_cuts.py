"""Chains cut short: which chains of Task links never reached their last link, and the warnings."""

from __future__ import annotations

from collections.abc import Iterable

from servatus.config import format_duration
from servatus.engine.status_values import Execution, Outcome, StopReason, Submission, TaskStatus
from servatus.files import path_word

_ACCEPTED = Outcome.ACCEPTED


def cut_chains(submissions: Iterable[Submission]) -> list[tuple[Submission, frozenset[str]]]:
    """Each chain of Task links cut short: later links of it never reached Slurm (a ``submit``
    stopped after an earlier link, or ``sbatch`` refused one, or ``reconcile`` recorded one as
    never submitted), so it ends at its last accepted link before its last planned one. Each
    comes as that link with the ids of its chain's links up to it. A chain with a link still
    unresolved is not judged yet: ``reconcile`` decides it first. A lease's links are not a
    Task's chain and are left out."""
    root_of: dict[str, str] = {}
    chains: dict[str, list[Submission]] = {}
    for submission in submissions:
        chain = submission.chain
        if chain is None or submission.slots is not None:
            continue
        root = submission.allocation_id if chain.position == 1 else root_of.get(chain.after)
        if root is None:
            continue
        root_of[submission.allocation_id] = root
        chains.setdefault(root, []).append(submission)
    cut = []
    for links in chains.values():
        if any(link.outcome is Outcome.PENDING for link in links):
            continue
        accepted = [link for link in links if link.outcome is _ACCEPTED]
        if not accepted:
            continue
        last = accepted[-1]
        assert last.chain is not None
        if last.chain.position < last.chain.of:
            upto = frozenset(
                link.allocation_id
                for link in links
                if link.chain is not None and link.chain.position <= last.chain.position
            )
            cut.append((last, upto))
    return cut


_GOES_ON = frozenset(
    {
        Execution.QUEUED,
        Execution.RUNNING,
        Execution.ENDING,
        Execution.ACCEPTED,
        Execution.UNRESOLVED,
    }
)
_HANDS_ON = frozenset({StopReason.YIELDED, StopReason.TIME_LIMIT})


def cut_chain_warnings(
    submissions: Iterable[Submission], tasks: Iterable[TaskStatus], state: str
) -> list[str]:
    """One warning per chain cut short (:func:`cut_chains`) whose Tasks would go on: their
    current work is one of its links, and it is still going, or it stopped asking for the next
    link (``yielded``, ``time limit``), which will never come. Each names the chain's last link
    and the ``plan`` that continues its Tasks under the same budget (or the links it lacks)."""
    cut = cut_chains(submissions)
    if not cut:
        return []

    current = {task.key: task for task in tasks}
    warnings = []
    for last, links in cut:
        chain = last.chain
        assert chain is not None
        keys = []
        for key in last.task_keys:
            task = current.get(key)
            if task is None or task.allocation_id not in links:
                continue
            if task.execution in _GOES_ON or (
                task.execution is Execution.STOPPED and task.detail in _HANDS_ON
            ):
                keys.append(key)
        if not keys:
            continue
        missing = (
            f"link {chain.of} was"
            if chain.position + 1 == chain.of
            else f"links {chain.position + 1}-{chain.of} were"
        )
        more = (
            f"--budget {format_duration(chain.budget)}"
            if chain.budget
            else f"--max-links {chain.of - chain.position}"
        )
        retry = " ".join(f"--retry {path_word(key)}" for key in keys)
        warnings.append(
            f"chain cut short: allocation {last.allocation_id} (link {chain.position}/"
            f"{chain.of}) is the last link of its chain that reached Slurm; {missing} never "
            f"sent, so {', '.join(keys)} stop{'s' if len(keys) == 1 else ''} after it; once it "
            f"has ended, continue with: servatus plan {path_word(state)} {retry} {more} "
            "--output continue.json, and the profile it was planned with"
        )
    return warnings
