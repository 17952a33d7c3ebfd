"""The report page in a real browser: Debian's Chromium, headless, with no network, reads one
lane per Task, one segment per observed span and the legend, and takes a screenshot."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from browserkit import CHROMIUM, drawn_page, screenshot
from reportkit import T, lease_report, lease_state
from servatus import Campaign, Task
from servatus.cli.report_html import render
from servatus.config import Profile
from servatus.engine.report import build, report_document
from servatus.testing import FakeScheduler
from testkit import run

pytestmark = pytest.mark.skipif(
    CHROMIUM is None,
    reason="Debian's chromium is not installed (apt-get install chromium; .ci/run installs it)",
)


class Clock:
    def __init__(self) -> None:
        self.at = time.time()

    def __call__(self) -> float:
        return self.at


def a_campaign(
    tmp_path: Path, profile: Profile, monkeypatch: pytest.MonkeyPatch
) -> tuple[Campaign, FakeScheduler]:
    """Five Tasks: two succeed, one fails and is retried and succeeds, two are LOST (their node
    vanished), one is still running; the pre-limit signal reached the first allocation. One
    clock for intents and markers, as on a cluster whose clocks agree."""
    clock = Clock()
    monkeypatch.setattr(time, "time", clock)
    fake = FakeScheduler(clock=clock)
    keys = [Task(f"task-{i}", ["/usr/bin/python3", "train.py"]) for i in range(5)]
    campaign = Campaign.ensure(tmp_path / "state", keys, connect=fake)
    campaign.submit(campaign.plan(profile))  # 1000: task-0, task-1; 1001: 2, 3; 1002: 4
    clock.at += 40
    fake.start()
    clock.at += 200
    fake.signal_limit(1000)
    clock.at += 20
    fake.finish(1000, 0, 1)
    fake.vanish(1001)
    fake.purge()
    campaign.status()
    campaign.submit(campaign.plan(profile, retry=["task-1"]))
    clock.at += 30
    fake.start(1003)
    clock.at += 90
    fake.finish(1003, 0)
    clock.at += 30
    return campaign, fake


def test_the_browser_draws_one_lane_per_task_one_segment_per_span_and_the_legend(
    tmp_path: Path,
    profile: Profile,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    campaign, fake = a_campaign(tmp_path, profile, monkeypatch)
    page, data = tmp_path / "report.html", tmp_path / "report.json"
    code, out, err = run(
        ["report", str(campaign.path), "--json", "--output", str(page)], fake, capsys
    )
    assert (code, err) == (0, "")
    document = json.loads(out)
    drawn = drawn_page(page)
    expected = {lane["key"]: [s["span"] for s in lane["segments"]] for lane in document["lanes"]}
    assert drawn.lanes == expected
    assert set(drawn.lanes) == {f"task-{i}" for i in range(5)}
    assert expected["task-1"] == ["queued", "running", "queued", "running"]
    assert "lost" in expected["task-2"]
    assert expected["task-4"] == ["queued", "running"]
    assert set(drawn.legend) >= {
        "SUCCEEDED", "FAILED", "LOST", "RUNNING", "queued", "running", "lost", "unresolved",
        "unobserved", "limit", "idle",
    }  # fmt: skip
    assert drawn.render_ms is not None
    data.write_text(out)
    shots = os.environ.get("SERVATUS_REPORT_SCREENSHOTS")  # how docs/report*.png were made
    screenshot(page, Path(shots, "report.png") if shots else tmp_path / "report.png")


def test_the_browser_draws_a_lease_with_its_steps(tmp_path: Path) -> None:
    document = report_document(build(lease_state(), lease_report(lease_attempt=True), now=T + 1500))
    page = tmp_path / "lease.html"
    page.write_text(render(document))
    drawn = drawn_page(page)
    (lease,) = document["leases"]
    assert drawn.leases == {lease["allocation"]: ["queued", "running"]}
    assert sorted(drawn.steps[lease["allocation"]]) == ["a", "b", "c"]  # inside the lease's lane
    assert drawn.lanes == {"a": ["queued", "running"], "b": ["queued", "running"],
                           "c": ["queued", "running"]}  # fmt: skip
    shots = os.environ.get("SERVATUS_REPORT_SCREENSHOTS")
    screenshot(page, Path(shots, "report-lease.png") if shots else tmp_path / "lease.png")


def test_scrolling_a_long_report_draws_the_lanes_in_view_and_not_the_rest(tmp_path: Path) -> None:
    """3,000 lanes are virtualised: the browser draws those near the view, and after a scroll
    (a script appended to a copy of the page sets the scroll position and asks for a redraw at
    once, as a resize does, rather than wait for the scroll's animation frame) the ones now in
    view."""
    document = report_document(build(lease_state(), lease_report(lease_attempt=True), now=T + 1500))
    (template,) = [lane for lane in document["lanes"] if lane["key"] == "a"]
    document["lanes"] = [{**template, "key": f"t{i:04d}"} for i in range(3000)]
    document["leases"] = []
    page = tmp_path / "long.html"
    page.write_text(render(document))
    top = sorted(drawn_page(page).lanes)
    assert top[0] == "t0000" and len(top) < 100  # only the first screenful and a margin
    scrolled = tmp_path / "scrolled.html"
    scrolled.write_text(
        page.read_text().replace(
            "</body>",
            "<script>const t=document.getElementById('timeline');t.scrollTop=22*2000;"
            "window.dispatchEvent(new Event('resize'));</script></body>",
        )
    )
    there = sorted(drawn_page(scrolled).lanes)
    assert "t2000" in there and "t0000" not in there and len(there) < 100
