"""The status cache under SIGKILL, in real ``servatus`` processes on the local transport with a
fake ``slurm_bin``: killed at every write of the cache, and at every write of a settlement the
cache's status records, the campaign opens and the next status answers as one without a cache.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_settle_processes import CRASH_SYSCALLS, make_sweep

from servatus.cli import status_cache, status_cache_file
from servatus.journal import store
from testkit import count_calls

WORKER = textwrap.dedent(
    """
    import sys
    from servatus.cli import status_cache
    from servatus.cli import main

    state, threshold = sys.argv[1:3]
    status_cache.MIN_CACHED = int(threshold)  # 1: a cache of any size; a billion: none
    status_cache.MIN_SHARE = 0.0
    sys.exit(main(["status", state, *sys.argv[3:]]))
    """
)
CACHE_SYSCALLS = (*CRASH_SYSCALLS, "write", "openat")


def status(state: Path, *args: str, cached: bool = True) -> subprocess.CompletedProcess[str]:
    threshold = "1" if cached else str(10**9)
    argv = [sys.executable, "-c", WORKER, str(state), threshold, *args]
    return subprocess.run(argv, capture_output=True, text=True, timeout=120)


def cache_holds(state: Path, *, as_json: bool = False) -> bool:
    data, _, name = store.read_journal(state)
    saved = status_cache.MIN_CACHED
    try:
        status_cache.MIN_CACHED = 1
        name_of = status_cache_file.file_name(offline=False, as_json=as_json)
        found = status_cache_file.read_cache(state, name_of, data, name)
    finally:
        status_cache.MIN_CACHED = saved
    return found is not None


def crash_points(argv: list[str], syscalls: tuple[str, ...]) -> list[tuple[str, int]]:
    counts = count_calls(argv, syscalls)
    return [(name, n) for name, calls in sorted(counts.items()) for n in range(1, calls + 1)]


def killed(
    template: Path, argv: list[str], points: list[tuple[str, int]]
) -> Iterator[tuple[str, int, Path]]:
    """For each crash point, a copy of ``template`` that ``argv`` (naming the campaign at
    ``argv[3]``) was SIGKILLed in at that point: the point, and the copy."""
    for syscall, n in points:
        state = template.parent / f"{syscall}-{n}"
        shutil.copytree(template, state)
        injected = f"inject={syscall}:signal=SIGKILL:when={n}"
        subprocess.run(
            ["strace", "-f", "-qq", "-o", "/dev/null", "-e", injected, *argv[:3], str(state),
             *argv[4:]],
            capture_output=True,
            timeout=120,
        )  # fmt: skip
        yield syscall, n, state


@pytest.mark.slow
@pytest.mark.parametrize("as_json", [False, True], ids=["table", "json"])
def test_sigkill_at_every_write_of_the_cache(tmp_path: Path, as_json: bool) -> None:
    if not shutil.which("strace"):
        pytest.skip("strace is needed")
    template, _ = make_sweep(tmp_path, 6)
    form = ["--json"] if as_json else []
    assert status(template, *form).returncode == 0  # settles all three allocations
    assert len(store.read(template).settlements) == 3 and not cache_holds(template, as_json=as_json)
    reference = status(template, *form, cached=False)
    assert reference.returncode == 0
    counted = tmp_path / "counted"
    shutil.copytree(template, counted)
    argv = [sys.executable, "-c", WORKER, str(counted), "1", *form]
    points = [
        (name, n)
        for name, n in crash_points(argv, ("write", "pwrite64", "rename", "renameat", "renameat2"))
        if name != "write" or n <= 3  # the output's writes come last; the cache's are pwrites
    ]
    assert cache_holds(counted, as_json=as_json)
    assert any(name.startswith("rename") for name, _ in points), points
    outcomes: Counter[str] = Counter()
    for syscall, n, state in killed(template, argv, points):
        outcomes["whole" if cache_holds(state, as_json=as_json) else "none"] += 1
        for _ in range(2):  # the first may write the cache; the second reads it
            again = status(state, *form)
            assert (again.returncode, again.stdout, again.stderr) == (
                0,
                reference.stdout,
                "",
            ), (syscall, n)
        assert cache_holds(state, as_json=as_json), (syscall, n)
    print(f"cache crash points {points}: {dict(outcomes)}")
    assert outcomes["whole"] and outcomes["none"]


@pytest.mark.slow
def test_sigkill_at_every_write_of_a_settlement_the_cache_records(tmp_path: Path) -> None:
    if not shutil.which("strace"):
        pytest.skip("strace is needed")
    template, _ = make_sweep(tmp_path, 6)
    last = store.read(template).intents[-1].allocation_id
    logs = tmp_path / "logs"
    ends = sorted(logs.glob(f"servatus-{last}.*.end.*"))
    assert ends
    aside = tmp_path / "aside"
    aside.mkdir()
    for path in ends:  # the last allocation runs on (a start marker, no end): nothing settles it
        path.rename(aside / path.name)
    for _ in range(2):  # the first settles two allocations, the second writes the cache
        assert status(template).returncode == 0
    assert len(store.read(template).settlements) == 2 and cache_holds(template)
    for path in ends:  # its Tasks end: the next status settles it from the cache
        (aside / path.name).rename(path)
    copy = tmp_path / "reference"
    shutil.copytree(template, copy)
    reference = status(copy, cached=False)  # a status without the cache settles it too
    assert reference.returncode == 0 and len(store.read(copy).settlements) == 3
    counted = tmp_path / "counted"
    shutil.copytree(template, counted)
    argv = [sys.executable, "-c", WORKER, str(counted), "1"]
    points = crash_points(argv, CRASH_SYSCALLS)
    assert len(store.read(counted).settlements) == 3
    assert cache_holds(counted)  # recorded onto the journal the cache covers: it still holds
    outcomes: Counter[str] = Counter()
    for syscall, n, state in killed(template, argv, points):
        settled = store.read(state).settlements  # the campaign opens
        assert len(settled) in (2, 3), (syscall, n)
        outcomes["settled" if len(settled) == 3 else "not settled"] += 1
        again = status(state)
        assert (again.returncode, again.stdout, again.stderr) == (0, reference.stdout, "")
        assert len(store.read(state).settlements) == 3, (syscall, n)
    print(f"settlement crash points {points}: {dict(outcomes)}")
    assert outcomes["settled"] and outcomes["not settled"]
