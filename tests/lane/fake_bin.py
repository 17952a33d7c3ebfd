"""A fake ``slurm_bin`` for real ``servatus`` processes on the local transport: ``sbatch`` takes
a job and runs it at once (its start marker and a 0 end marker per slot, by the batch script's
names, in the real log_root), ``squeue`` lists nothing (Slurm has already forgotten every job),
``scancel`` does nothing. Every accepted allocation is appended to ``submitted`` beside the bin,
so a test can compare what Slurm took with what the campaign recorded.
"""

from __future__ import annotations

from pathlib import Path

from testkit import CPU_PROFILE

SBATCH = """#!/usr/bin/python3
import fcntl, os, re, sys
if "--version" in sys.argv:
    print("slurm 24.11.5")
    sys.exit(0)
script = sys.stdin.read()
allocation = re.search(r"^#SBATCH --job-name=servatus-([0-9a-f]{24})$", script, re.M)[1]
slots = int(re.search(r"^#SBATCH --ntasks=([0-9]+)$", script, re.M)[1])
here = os.path.dirname(os.path.abspath(sys.argv[0]))
with open(os.path.join(here, "counter"), "a+") as counter:
    fcntl.flock(counter, fcntl.LOCK_EX)
    counter.seek(0)
    job = int(counter.read() or "1000") + 1
    counter.seek(0)
    counter.truncate()
    counter.write(str(job))
    counter.flush()
    logs = os.environ.get("FAKE_LOG_ROOT") or @LOGS@
    open(os.path.join(logs, f"servatus-{allocation}.{job}.start"), "x").close()
    for slot in range(slots):
        open(os.path.join(logs, f"servatus-{allocation}.{job}.end.{slot}.0"), "x").close()
    with open(os.path.join(here, "submitted"), "a") as log:
        log.write(f"{allocation} {job}\\n")
print(job)
"""


def make_fake_bin(root: Path) -> tuple[Path, Path]:
    """``root/bin`` (sbatch, squeue, scancel), ``root/logs``, and a SERVATUS.toml pointing at
    them; returns the config's path and the log root."""
    bindir, logs = root / "bin", root / "logs"
    bindir.mkdir()
    logs.mkdir()
    (bindir / "sbatch").write_text(SBATCH.replace("@LOGS@", repr(str(logs))))
    (bindir / "squeue").write_text("#!/bin/sh\nexit 0\n")
    (bindir / "scancel").write_text("#!/bin/sh\nexit 0\n")
    for name in ("sbatch", "squeue", "scancel"):
        (bindir / name).chmod(0o755)
    config = root / "SERVATUS.toml"
    text = CPU_PROFILE.replace('slurm_bin = "/usr/bin"', f'slurm_bin = "{bindir}"')
    text = text.replace('log_root = "/scratch/alice/sweep/logs"', f'log_root = "{logs}"')
    text = text.replace('work_root = "/scratch/alice/sweep"', f'work_root = "{root}"')
    config.write_text(text)
    return config, logs


def submitted(root: Path) -> list[tuple[str, int]]:
    path = root / "bin" / "submitted"
    if not path.exists():
        return []
    return [(a, int(j)) for a, j in (line.split() for line in path.read_text().splitlines())]
