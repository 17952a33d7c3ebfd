"""``python clock.py SHIFT ARGS``: the servatus CLI on a client whose clock is off.

SHIFT is ``later``, the clock past reconcile's 15-minute rule: the finale runs ``reconcile``
so once every allocation it knows of is cancelled and gone from Slurm's listing, and the real
``reconcile`` still waits on intents no job shows. Or SHIFT is a file holding the seconds to
add (the ``step-clock`` fault's: the injector rewrites it, and a command reads it once, as it
starts). Slurm, the journal and the markers are real; only this process's wall clock moves.
"""

import sys
import time
from pathlib import Path

from servatus.operations.reconcile import RECONCILE_AFTER


def shift(spec: str) -> float:
    if spec == "later":
        return RECONCILE_AFTER + 60.0
    try:
        return float(Path(spec).read_text() or 0)
    except FileNotFoundError:
        return 0.0


if __name__ == "__main__":
    _now = time.time
    _by = shift(sys.argv[1])
    time.time = lambda: _now() + _by

    from servatus.cli import main  # after the clock moves: a module may bind time.time

    sys.exit(main(sys.argv[2:]))
