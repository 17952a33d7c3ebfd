"""Debian's Chromium, headless and cut off from every network, opening a local file: the DOM
after its scripts ran, what the report page drew in it, and a screenshot (the flags of
docs/report.md's proof)."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
from html.parser import HTMLParser
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


class Drawn(HTMLParser):
    """What the page drew: per Task lane (by key) its segments' spans, per lease lane its
    segments and its step boxes, and the legend's entries."""

    def __init__(self) -> None:
        super().__init__()
        self.lanes: dict[str, list[str]] = {}
        self.leases: dict[str, list[str]] = {}
        self.steps: dict[str, list[str]] = {}
        """Per lease lane, the Task key of each step box drawn inside it."""
        self.legend: list[str] = []
        self.render_ms: int | None = None
        self._in: list[str] = []  # the group each open element belongs to
        self._group: tuple[str, str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = dict(attrs)
        classes = (found.get("class") or "").split()
        if tag == "body" and found.get("data-render-ms"):
            self.render_ms = int(found["data-render-ms"] or 0)
        if tag == "g" and "lane" in classes:
            self._group = ("lane", found["data-key"] or "")
            self.lanes[self._group[1]] = []
        elif tag == "g" and "lease" in classes:
            self._group = ("lease", found["data-allocation"] or "")
            self.leases[self._group[1]] = []
        elif tag == "rect" and "step" in classes and self._group is not None:
            self.steps.setdefault(self._group[1], []).append(found["data-key"] or "")
        elif tag == "rect" and "seg" in classes and self._group is not None:
            kind, name = self._group
            (self.lanes if kind == "lane" else self.leases)[name].append(found["data-span"] or "")
        elif tag == "li" and len(self._in) and self._in[-1] == "legend":
            key = found.get("data-execution") or found.get("data-span") or found.get(
                "data-point") or found.get("data-lease")  # fmt: skip
            self.legend.append(key or "")
        if tag == "div":
            self._in.append(found.get("id") or "")
        if tag == "ul" and self._in and self._in[-1] == "legend":
            self._in.append("legend")

    def handle_endtag(self, tag: str) -> None:
        if tag == "g":
            self._group = None
        if tag in ("div", "ul") and self._in:
            self._in.pop()


def drawn_page(page: Path) -> Drawn:
    """What the page at ``page`` drew once its scripts ran."""
    dom, _ = dump_dom(page)
    drawn = Drawn()
    drawn.feed(dom)
    return drawn
