"""What the defences against other users (issue #30, ADR 0012) cost, each against the same work
without it, measured in one run.

- ``status``'s evidence path at N allocations (default 100,000; two markers each, as a settled-free
  campaign lists them): parsing the listing, then folding it, against the same plus the
  ``foreign`` rows' parse and ``own_job``'s pass over the markers against the accepted jobs.
- The batch script's guards, per event, in ``dash`` on this machine's ``/tmp``: a marker made by
  ``servatus_own`` (``test -h``, ``set -C`` create, three tests after) against the bare ``set -C``
  create the scripts used before; a step log opened by ``servatus_open`` (``O_EXCL`` as fd 4,
  its type checked through the descriptor) against the bare ``: >>`` before. R rounds each
  (default 500), each in a fresh file.

Prints one row per measure: the guarded time, the bare time, and their ratio.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from servatus.evidence import fold_markers, own_job
from servatus.transport import CommandResult
from servatus_slurm.evidence import SlurmEvidenceReader
from servatus_slurm.script import _PRELUDE


def best(function: Callable[[], object], repeat: int = 5) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        function()
        times.append(time.perf_counter() - start)
    return min(times)


def listing(allocations: int) -> tuple[CommandResult, dict[str, int | None]]:
    rows = []
    jobs: dict[str, int | None] = {}
    for n in range(allocations):
        identity = f"{n:024x}"
        job = 1000 + n
        jobs[identity] = job
        rows.append(f"servatus-{identity}.{job}.start 1796612897.5261504150 0\n")
        rows.append(f"servatus-{identity}.{job}.end.0.0 1796612999.1000000000 0\n")
    stdout = ("clock 1796613000.0000000000\n" + "".join(rows)).encode()
    return CommandResult(("find",), 0, stdout, b""), jobs


def evidence_rows(allocations: int) -> None:
    reader = SlurmEvidenceReader()
    result, jobs = listing(allocations)

    def bare() -> None:
        fold_markers(reader.parse_markers(result))

    def guarded() -> None:
        markers = reader.parse_markers(result)
        reader.parse_foreign(result)
        kept, _ = own_job(markers, jobs)
        fold_markers(kept)

    guarded_times, bare_times = [], []
    for _ in range(7):  # in turns, so load on the machine falls on both alike
        guarded_times.append(best(guarded, 1))
        bare_times.append(best(bare, 1))
    report(f"status evidence, {allocations:,} allocations", min(guarded_times), min(bare_times))


def shell_function(name: str) -> str:
    """One function of the batch script's prelude, as rendered."""
    start = _PRELUDE.index(f"{name}() {{")
    end = _PRELUDE.index("\n}\n", start) + 3
    return _PRELUDE[start:end]


def shell_rows(rounds: int) -> None:
    dash = shutil.which("dash")
    if dash is None:
        print("dash not found: the script rows are skipped")
        return
    functions = shell_function("servatus_own") + shell_function("servatus_open")
    cases = {
        "marker": (
            'servatus_own "$d/m$i"',
            '(set -C && umask 077 && : >"$d/m$i") 2>/dev/null',
        ),
        "step log": (
            '(servatus_open "$d/l$i")',
            '(umask 077 && : >>"$d/l$i") 2>/dev/null',
        ),
    }
    for what, (guarded, bare) in cases.items():
        timings = []
        for body in (guarded, bare):
            with tempfile.TemporaryDirectory() as directory:
                script = (
                    f"{functions}d={directory}\ni=0\n"
                    f'while [ "$i" -lt {rounds} ]; do {body}; i=$((i + 1)); done\n'
                )
                start = time.perf_counter()
                subprocess.run([dash, "-c", script], check=True)
                timings.append((time.perf_counter() - start) / rounds)
                made = len(list(Path(directory).iterdir()))
                assert made == rounds, f"{what}: {made} of {rounds} files made"
        report(f"{what} in dash, per event", timings[0], timings[1])


def report(what: str, guarded: float, bare: float) -> None:
    print(
        f"{what:<42} guarded {guarded * 1000:9.3f} ms   bare {bare * 1000:9.3f} ms   "
        f"ratio {guarded / bare:5.2f}x"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--allocations", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=500)
    arguments = parser.parse_args()
    evidence_rows(arguments.allocations)
    shell_rows(arguments.rounds)


if __name__ == "__main__":
    main()
