"""``python clock.py SHIFT ARGS``: the servatus CLI on a client whose clock is off.

SHIFT is ``later``, the clock past reconcile's 15-minute rule: the finale runs ``reconcile``
so once every allocation it knows of is cancelled and gone from Slurm's listing, and the real
``reconcile`` still waits on intents no job shows. Or SHIFT is a file holding the seconds to
add (the ``step-client-clock`` fault's: the injector rewrites it, and a command reads it once,
as it starts). Slurm, the journal and the markers are real; only this process's wall clock
moves. servatus reads the wall clock through ``time.time`` alone, and no module of it binds
that function at import, so moving it before the CLI runs moves every reading.
"""

import sys
import time
from pathlib import Path

LATER = 15 * 60 + 60
"""Past reconcile's RECONCILE_AFTER (15 minutes; tests/benchmarks checks the two agree)."""


def shift(spec: str) -> float:
    if spec == "later":
        return float(LATER)
    try:
        return float(Path(spec).read_text() or 0)
    except FileNotFoundError:
        return 0.0


def install(spec: str) -> float:
    """Move this process's ``time.time`` by ``shift(spec)`` seconds; the shift."""
    by = shift(spec)
    real = time.time
    time.time = lambda: real() + by
    return by


if __name__ == "__main__":
    install(sys.argv[1])
    from servatus.cli import main

    sys.exit(main(sys.argv[2:]))
