"""Debian's Chromium, headless and cut off from every network, opening a local file: the DOM
after its scripts ran, and a screenshot (the flags of docs/report.md's proof)."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
from pathlib import Path

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
"""The browser, or None where it is not installed (the browser tests then skip)."""

FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    # No network: every name resolves to nothing and every connection goes to a closed port.
    "--host-resolver-rules=MAP * ~NOTFOUND",
    "--proxy-server=127.0.0.1:9",
    "--proxy-bypass-list=<-loopback>",
)


def _chromium(page: Path, *args: str, size: tuple[int, int]) -> subprocess.CompletedProcess[str]:
    assert CHROMIUM is not None
    with tempfile.TemporaryDirectory(prefix="servatus-chromium-") as profile:
        return subprocess.run(
            [
                CHROMIUM, *FLAGS, f"--user-data-dir={profile}",
                f"--window-size={size[0]},{size[1]}", *args, page.resolve().as_uri(),
            ],
            capture_output=True, text=True, timeout=180, check=True,
        )  # fmt: skip


def dump_dom(page: Path, *, size: tuple[int, int] = (1400, 900)) -> tuple[str, float]:
    """The page's DOM once loaded and its scripts ran, and the seconds the browser took."""
    began = time.perf_counter()
    done = _chromium(page, "--dump-dom", size=size)
    return done.stdout, time.perf_counter() - began


def screenshot(page: Path, image: Path, *, size: tuple[int, int] = (1400, 700)) -> None:
    """A PNG of the page as the window of ``size`` shows it."""
    _chromium(page, f"--screenshot={image.resolve()}", size=size)
    assert image.stat().st_size > 0
