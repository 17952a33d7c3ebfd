"""Submits chains through the product's own path, run on the login node as alice.

``lane_chain.py SPEC`` reads a JSON file ``{"toml", "profile", "state", "tasks": [Task documents],
"chains": [{"keys", "links", "minutes", "task_links", "budget", "spent"}]}``, makes the campaign,
builds each chain's links as planning would (same Tasks in the same slots, each ``after`` its
predecessor) and hands them all to ``servatus.operations.submission.submit_allocations`` in one
submission, with the real hooks, launcher and Slurm transport. It prints the receipts as JSON: one
list of ``[allocation_id, job]`` per chain, links in order. Planning does not plan chains through
the CLI yet, so this is the nearest real path: the intents, the scripts and the ``afterok``
arguments are the ones ``servatus submit`` sends.
"""

import json
import secrets
import sys

from servatus import Campaign, Task
from servatus.config import Profile, target_identity
from servatus.continuation import Link
from servatus.engine.plan import Allocation
from servatus.journal import store
from servatus.operations.submission import submit_allocations

with open(sys.argv[1]) as handle:
    spec = json.load(handle)
profile = Profile.load(spec["toml"], name=spec["profile"])
tasks = [Task(t["key"], t["args"]) for t in spec["tasks"]]
campaign = Campaign.ensure(spec["state"], tasks)
chains = []
allocations = []
for chain in spec["chains"]:
    keys = tuple(chain["keys"])
    ids = [secrets.token_hex(12) for _ in range(chain["links"])]
    chains.append(ids)
    for j, allocation_id in enumerate(ids):
        link = Link(j + 1, chain["links"], 60 * chain["minutes"])
        after = ids[j - 1] if j else None
        allocations.append(Allocation(allocation_id, keys, link, after, tuple(chain["task_links"])))
budgets = {chain.get("budget") for chain in spec["chains"]}
assert len(budgets) == 1, "one submission has one budget"
spent = {k: v for chain in spec["chains"] for k, v in chain.get("spent", {}).items()}
hooks = campaign._hooks()
transport = campaign._connector()(profile.target)
with store.writing(campaign.path) as writer:
    assert writer.state is not None
    receipts = submit_allocations(
        writer,
        transport,
        hooks,
        profile,
        allocations,
        writer.state.tasks.by_key(),
        hooks.launcher(profile.target.launcher),
        plan_digest="0" * 64,
        target_identity=target_identity(profile.target),
        budget=budgets.pop(),
        spent=spent,
    )
jobs = {r.allocation_id: r.job for r in receipts}
print(json.dumps([[[i, jobs[i]] for i in ids] for ids in chains]))
