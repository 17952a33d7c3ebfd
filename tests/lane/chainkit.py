"""Chains for FakeScheduler tests: batch scripts with the chain lines the script renders
(docs/development/adr/0005-chains.md), and a campaign whose chain intents are written through the
store, so these tests do not wait for ``plan --budget`` or the script's renderer."""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path

from servatus import Campaign, Task
from servatus.config import Profile, target_identity
from servatus.journal import records, store
from servatus.testing import FakeScheduler

SBATCH = ["/usr/bin/sbatch", "--parsable"]


def link_id(chain: int, position: int) -> str:
    return f"{chain:02x}{position:02x}" * 6


def link_script(
    allocation_id: str,
    slots: int,
    *,
    position: int = 0,
    of: int = 0,
    after: str = "",
    task_links: Sequence[int] = (),
    later: Sequence[str] = (),
) -> str:
    """The lines of a batch script FakeScheduler reads: its name, slots and chain lines."""
    lines = [
        "#!/bin/sh",
        f"#SBATCH --job-name=servatus-{allocation_id}",
        f"#SBATCH --ntasks={slots}",
    ]
    if position:
        lines += [f"servatus_link={position}", f"servatus_links={of}"]
        lines += [f"servatus_after={after}"] if after else []
        lines += [f"servatus_later='{' '.join(reversed(later))}'"] if position < of else []
    for slot in range(slots):
        lines.append(f"# slot {slot}")
        if position:
            lines.append(f"# slot {slot} links {task_links[slot]}")
    return "\n".join(lines) + "\n"


def sbatch(
    fake: FakeScheduler, script: str, after: int | None = None, *, afterok: bool = False
) -> int:
    """Queue ``script``, after job ``after`` as ``submit`` chains links (``afterany``), or with
    ``afterok`` and ``--kill-on-invalid-dep=yes``, which the fake models too."""
    argv = [*SBATCH]
    if after is not None and afterok:
        argv += [f"--dependency=afterok:{after}", "--kill-on-invalid-dep=yes"]
    elif after is not None:
        argv += [f"--dependency=afterany:{after}"]
    result = fake.run(argv, stdin=script.encode())
    assert result.returncode == 0, result.stderr
    return int(result.stdout)


def submit_chain(
    fake: FakeScheduler,
    chain: int,
    links: int,
    slots: int = 1,
    task_links: Sequence[int] | None = None,
) -> list[int]:
    """Queue one chain straight to the fake, each link after the one before; its jobs."""
    own = list(task_links or [links] * slots)
    jobs: list[int] = []
    for position in range(1, links + 1):
        after = link_id(chain, position - 1) if position > 1 else ""
        script = link_script(
            link_id(chain, position),
            slots,
            position=position,
            of=links,
            after=after,
            task_links=own,
            later=[link_id(chain, later) for later in range(position + 1, links + 1)],
        )
        jobs.append(sbatch(fake, script, jobs[-1] if jobs else None))
    return jobs


def chain_campaign(
    path: Path,
    fake: FakeScheduler,
    profile: Profile,
    chains: Sequence[tuple[tuple[str, ...], int, Sequence[int]]],
    *,
    budget: int = 0,
    stop_after: int | None = None,
) -> tuple[Campaign, list[list[int]]]:
    """A campaign of ``chains`` ((keys, links, each key's own links) each), every link's intent
    recorded before its ``sbatch`` and its receipt after, as submission does. ``stop_after``
    links in all, submission stops (the rest never get an intent)."""
    keys = sorted({key for chain_keys, _, _ in chains for key in chain_keys})
    campaign = Campaign.create(path, [Task(key, ["/bin/true"]) for key in keys], connect=fake)
    jobs: list[list[int]] = []
    sent = 0
    with store.writing(campaign.path) as writer:
        target = writer.target(target_identity(profile.target))
        for number, (chain_keys, links, own) in enumerate(chains, 1):
            mine: list[int] = []
            for position in range(1, links + 1):
                if stop_after is not None and sent == stop_after:
                    break
                allocation_id = link_id(number, position)
                after = link_id(number, position - 1) if position > 1 else ""
                link = records.ChainLink(position, links, after, tuple(own), budget)
                writer.add(
                    records.Intent(
                        allocation_id, chain_keys, "digest", time.time(), target, 300, link
                    )
                )
                script = link_script(
                    allocation_id,
                    len(chain_keys),
                    position=position,
                    of=links,
                    after=after,
                    task_links=own,
                    later=[link_id(number, later) for later in range(position + 1, links + 1)],
                )
                job = sbatch(fake, script, mine[-1] if mine else None)
                writer.add(records.Receipt(allocation_id, job))
                mine.append(job)
                sent += 1
            jobs.append(mine)
    campaign.refresh()
    return campaign, jobs
