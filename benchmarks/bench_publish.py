"""What publication costs next to plain copies: run ``python benchmarks/bench_publish.py``.

Two measurements, each a ratio to the shell doing the same work durably, in the same run and on
the same filesystem:

- ``publish`` of a ``link_tree`` of 10,000 small files, against ``cp -al`` plus ``sync``;
- ``publish_file`` of 1 GiB written by ``shutil.copyfile``, against ``cp`` plus ``sync``.

Both sides start with the sources clean (synced) and in the page cache. ``publish`` syncs only
what it publishes (each file's data, each directory, the parent), while ``sync`` flushes every
filesystem, so on a busy machine the baseline can get slower, not faster. Each side runs
``--repeat`` times, alternating; the medians are reported.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from servatus import publish, publish_file
from servatus.plugins import hooks


def make_tree(root: Path, files: int) -> None:
    for index in range(files):
        directory = root / f"d{index // 100:03d}"
        if index % 100 == 0:
            directory.mkdir(parents=True)
        (directory / f"f{index:05d}").write_bytes(b"%d\n" % index)


def make_file(path: Path, size: int) -> None:
    block = os.urandom(1 << 20)
    with open(path, "wb") as handle:
        for _ in range(size // len(block)):
            handle.write(block)


def timed(action: Callable[[], object]) -> float:
    started = time.perf_counter()
    action()
    return time.perf_counter() - started


def shell(*argv: str) -> None:
    subprocess.run(argv, check=True)


def compare(
    name: str,
    ours: Callable[[int], object],
    theirs: Callable[[int], object],
    reset: Callable[[], None],
    repeat: int,
) -> float:
    mine, baseline = [], []
    for round_ in range(repeat):
        reset()
        baseline.append(timed(lambda r=round_: theirs(r)))
        reset()
        mine.append(timed(lambda r=round_: ours(r)))
    ratio = statistics.median(mine) / statistics.median(baseline)
    print(
        f"{name}: servatus {statistics.median(mine):.3f} s, "
        f"baseline {statistics.median(baseline):.3f} s, ratio {ratio:.2f}"
    )
    return ratio


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=10_000)
    parser.add_argument("--size-mib", type=int, default=1024)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--dir", type=Path, default=None, help="where to work (default: /var/tmp)")
    args = parser.parse_args()
    hooks()  # a worker builds the plugin manager once; keep it out of the timings

    with tempfile.TemporaryDirectory(dir=args.dir or "/var/tmp", prefix="bench-publish-") as tmp:
        root = Path(tmp)
        src, out = root / "src", root / "out"
        out.mkdir()
        make_tree(src, args.files)
        big = root / "big.bin"
        make_file(big, args.size_mib << 20)
        os.sync()

        def reset() -> None:
            for entry in out.iterdir():
                shutil.rmtree(entry) if entry.is_dir() else entry.unlink()
            os.sync()

        tree = compare(
            f"link_tree of {args.files} files",
            lambda r: publish(out / f"ours-{r}", lambda d: d.link_tree(src, "data")),
            lambda r: (shell("cp", "-al", str(src), str(out / f"cp-{r}")), shell("sync")),
            reset,
            args.repeat,
        )
        single = compare(
            f"publish_file of {args.size_mib} MiB",
            lambda r: publish_file(out / f"ours-{r}", lambda p: shutil.copyfile(big, p)),
            lambda r: (shell("cp", str(big), str(out / f"cp-{r}")), shell("sync")),
            reset,
            args.repeat,
        )
        print(f"ratios: link_tree {tree:.2f}, publish_file {single:.2f}")


if __name__ == "__main__":
    main()
