"""``python later.py ARGS``: the servatus CLI with its clock past reconcile's 15-minute rule.

The soak's finale runs ``reconcile`` through it once every allocation it knows of is cancelled
and gone from Slurm's listing, and the real ``reconcile`` still waits on intents that no job
shows: the wait the rule asks for, without spending it. Slurm, the journal and the markers are
read for real; only this process's wall clock runs ahead.
"""

import sys
import time

from servatus.operations.reconcile import RECONCILE_AFTER

_now = time.time
time.time = lambda: _now() + RECONCILE_AFTER + 60

from servatus.cli import main  # noqa: E402  (after the clock moves: modules may bind it)

sys.exit(main(sys.argv[1:]))
