"""``servatus report`` against FakeScheduler: what it reads, draws, writes and refuses."""

from __future__ import annotations

import json
import os
import re
import stat
import time
from pathlib import Path

import pytest

from reportkit import T, lease_report, lease_state
from servatus import Campaign, Task
from servatus.cli.report_html import render
from servatus.config import Profile
from servatus.engine.report import build, disagreements, report_document
from servatus.journal import records, store
from servatus.testing import FakeScheduler
from testkit import CPU_PROFILE, run

SECRET = "hunter2-secret"


def tasks(n: int) -> list[Task]:
    return [
        Task(f"t{i}", ["/usr/bin/python3", "train.py", SECRET], stdin=SECRET.encode(),
             env={"TOKEN": SECRET})
        for i in range(n)
    ]  # fmt: skip


class Clock:
    """The file server's clock, moved by the test."""

    def __init__(self, at: float) -> None:
        self.at = at

    def __call__(self) -> float:
        return self.at


def test_submit_records_each_tasks_resources_with_its_intent(
    tmp_path: Path, profile: Profile
) -> None:
    fake = FakeScheduler()
    campaign = Campaign.ensure(tmp_path / "state", tasks(3), connect=fake)
    campaign.submit(campaign.plan(profile))
    asked = records.TaskResources(1, 500, 0)
    assert [intent.resources for intent in store.read(campaign.path).intents] == [asked, asked]


def swept(tmp_path: Path, profile: Profile) -> tuple[Campaign, FakeScheduler, Clock]:
    """Three Tasks in two allocations: t1 fails and is retried, t0 and t2 succeed; Slurm has
    forgotten them all, and the pre-limit signal reached the first."""
    clock = Clock(time.time())
    fake = FakeScheduler(clock=clock)
    campaign = Campaign.ensure(tmp_path / "state", tasks(3), connect=fake)
    campaign.submit(campaign.plan(profile))
    clock.at += 60
    fake.start()
    clock.at += 30
    fake.signal_limit(1000)
    clock.at += 30
    fake.finish(1000, 0, 3)
    clock.at += 100
    fake.finish(1001, 0)
    fake.purge()
    campaign.status()  # settles all three
    campaign.submit(campaign.plan(profile, retry_failed=True))
    clock.at += 10
    fake.start(1002)
    clock.at += 50
    fake.finish(1002, 0)
    fake.purge()
    return campaign, fake, clock


def test_the_report_draws_every_span_of_every_attempt_and_agrees_with_status(
    tmp_path: Path, profile: Profile, capsys: pytest.CaptureFixture[str]
) -> None:
    campaign, fake, _ = swept(tmp_path, profile)
    code, out, err = run(["report", str(campaign.path), "--json"], fake, capsys)
    assert (code, err) == (0, "")
    document = json.loads(out)
    code, status_out, _ = run(["status", str(campaign.path), "--json"], fake, capsys)
    assert disagreements(document, json.loads(status_out)) == []
    lanes = {lane["key"]: lane for lane in document["lanes"]}
    assert [s["span"] for s in lanes["t1"]["segments"]] == ["queued", "running"] * 2
    first, second = lanes["t1"]["segments"][1], lanes["t1"]["segments"][3]
    assert (first["execution"], first["exit_code"], first["job"]) == ("FAILED", 3, 1000)
    assert (second["execution"], second["job"]) == ("SUCCEEDED", 1002)
    assert second["end"] - second["start"] == pytest.approx(50)
    assert lanes["t2"]["segments"][1]["end"] - lanes["t2"]["segments"][1]["start"] == 160
    assert [p["kind"] for p in lanes["t0"]["points"]] == ["limit"]
    assert lanes["t2"]["points"] == []
    summary = document["summary"]
    assert summary["tasks"] == {"SUCCEEDED": 3}
    assert summary["attempts"] == {"SUCCEEDED": 3, "FAILED": 1}
    # four attempts of 1 CPU and 500 MiB, each asking for its 5 minutes; used: 60+60+160+50 s
    assert summary["requested"]["cpu_hours"] == pytest.approx(4 * 300 / 3600)
    assert summary["used"]["cpu_hours"] == pytest.approx(330 / 3600)
    assert summary["used"]["memory_gib_hours"] == pytest.approx(330 / 3600 * 500 / 1024)
    assert summary["run_time"]["count"] == 4 and summary["run_time"]["max"] == 160
    assert summary["queue_wait"]["count"] == 4
    assert SECRET not in out


def test_a_report_after_every_marker_is_deleted_still_draws_every_settled_allocation(
    tmp_path: Path, profile: Profile, capsys: pytest.CaptureFixture[str]
) -> None:
    campaign, fake, _ = swept(tmp_path, profile)
    campaign.status()  # settles the retry too
    squeues = fake.count("squeue")
    assert len(store.read(campaign.path).settlements) == 3
    fake.markers.clear()
    fake.logs.clear()
    code, out, err = run(["report", str(campaign.path), "--offline", "--json"], fake, capsys)
    assert (code, err) == (0, "")
    assert fake.count("squeue") == squeues  # offline: Slurm is not asked
    document = json.loads(out)
    drawn = {
        (s["allocation"], s["execution"])
        for lane in document["lanes"]
        for s in lane["segments"]
        if s["span"] == "running"
    }
    intents = store.read(campaign.path).intents
    assert {allocation for allocation, _ in drawn} == {i.allocation_id for i in intents}
    assert {execution for _, execution in drawn} == {"SUCCEEDED", "FAILED"}
    html_path = tmp_path / "report.html"
    code, _, err = run(
        ["report", str(campaign.path), "--offline", "--output", str(html_path)], fake, capsys
    )
    assert (code, err) == (0, "")
    page = html_path.read_text()
    for intent in intents:
        assert intent.allocation_id in page


def test_the_page_is_written_owner_only_never_over_a_file_and_holds_no_secret(
    tmp_path: Path, profile: Profile, capsys: pytest.CaptureFixture[str]
) -> None:
    campaign, fake, _ = swept(tmp_path, profile)
    path = tmp_path / "report.html"
    squeues = fake.count("squeue")
    finds = fake.count("find")
    code, out, err = run(["report", str(campaign.path), "--output", str(path)], fake, capsys)
    assert (code, out, err) == (0, "", "")
    assert (fake.count("squeue") - squeues, fake.count("find") - finds) == (1, 1)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    page = path.read_text()
    assert page.startswith("<!DOCTYPE html>") and SECRET not in page
    # Nothing to fetch: no address but the SVG namespace, no protocol-relative or @import one.
    bare = page.replace("http://www.w3.org/2000/svg", "")
    fetch = re.search(r"https?:|//[a-z0-9.-]+\.[a-z]{2,}/|@import|<link\b|\bsrc=", bare)
    assert fetch is None, fetch
    path.write_text("mine")
    calls = len(fake.calls)
    code, out, err = run(["report", str(campaign.path), "--output", str(path)], fake, capsys)
    assert code == 1 and out == ""
    assert fake.calls[calls:] == []  # refused before Slurm is read
    assert err == f"servatus: ConfigurationError: {path} exists; a report is never overwritten\n"
    assert path.read_text() == "mine"


def test_the_page_never_goes_to_a_terminal(
    tmp_path: Path,
    profile: Profile,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    campaign, fake, _ = swept(tmp_path, profile)
    monkeypatch.setattr("sys.stdout.isatty", lambda: True)
    code, out, err = run(["report", str(campaign.path)], fake, capsys)
    assert code == 1 and out == ""
    assert err.startswith("servatus: ConfigurationError: a report is an HTML page and never")
    assert len(err.splitlines()) == 1


def test_the_page_goes_to_a_pipe(
    tmp_path: Path, profile: Profile, capsys: pytest.CaptureFixture[str]
) -> None:
    campaign, fake, _ = swept(tmp_path, profile)
    code, out, err = run(["report", str(campaign.path), "--offline"], fake, capsys)
    assert (code, err) == (0, "")
    assert out.startswith("<!DOCTYPE html>") and out.endswith("</html>\n")


def test_a_missing_campaign_is_one_line_and_exit_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(
        ["report", str(tmp_path / "none"), "--output", str(tmp_path / "r.html")],
        FakeScheduler(),
        capsys,
    )
    assert code == 1 and out == "" and len(err.splitlines()) == 1
    assert not (tmp_path / "r.html").exists()


def test_slurm_unavailable_is_exit_75_and_writes_nothing(
    tmp_path: Path, profile: Profile, capsys: pytest.CaptureFixture[str]
) -> None:
    campaign, fake, _ = swept(tmp_path, profile)
    fake.unavailable("squeue")
    path = tmp_path / "report.html"
    code, _, err = run(["report", str(campaign.path), "--output", str(path)], fake, capsys)
    assert code == 75 and len(err.splitlines()) == 1
    assert not path.exists()


def test_an_offline_report_of_a_settled_lease_draws_it_and_its_steps_as_online(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A lease of two slots ran to its time limit with two steps in it, one ending 0, one 3
    after the pre-limit signal (stopped at the time limit, not failed); once all of it settled,
    ``--offline`` draws the lease's held span, its slot-hours and each step's reading from the
    settled record, as the online report does from the markers."""
    path = tmp_path / "SERVATUS.toml"
    limit = 'time_limit = "00:05:00"\n'
    path.write_text(CPU_PROFILE.replace(limit, f'{limit}signal_before_end = "00:01:00"\n'))
    clock = Clock(time.time())
    fake = FakeScheduler(clock=clock)
    campaign = Campaign.ensure(tmp_path / "state", tasks(2), connect=fake)
    lease = campaign.submit(campaign.hold(Profile.load(path), slots=2)).receipts[0].allocation_id
    clock.at += 10
    fake.start()
    steps = [receipt.allocation_id for receipt in campaign.start(tasks(2), lease=lease).receipts]
    clock.at += 30
    fake.finish_step(steps[0], 0)
    clock.at += 200
    (job,) = fake.jobs
    fake.signal_limit(job.job)
    clock.at += 5
    fake.finish_step(steps[1], 3)
    clock.at += 55
    fake.time_out(job.job)
    fake.purge()
    campaign.status()  # settles the lease and both steps
    assert len(store.read(campaign.path).settlements) == 3
    code, out, err = run(["report", str(campaign.path), "--json"], fake, capsys)
    assert (code, err) == (0, "")
    online = json.loads(out)
    code, out, err = run(["report", str(campaign.path), "--offline", "--json"], fake, capsys)
    assert (code, err) == (0, "")
    offline = json.loads(out)
    [held] = online["leases"]
    assert [s["span"] for s in held["segments"]] == ["queued", "running"]
    assert held["segments"][1]["execution"] == "STOPPED"
    assert held["held_slot_hours"] == pytest.approx(2 * 290 / 3600)
    assert held["busy_slot_hours"] == pytest.approx((30 + 235) / 3600)
    assert offline["leases"] == online["leases"]
    words = {
        lane["key"]: [s["execution"] for s in lane["segments"] if s["span"] == "running"]
        for lane in online["lanes"]
    }
    assert words == {"t0": ["SUCCEEDED"], "t1": ["STOPPED (time limit)"]}
    assert [lane["segments"] for lane in offline["lanes"]] == [
        lane["segments"] for lane in online["lanes"]
    ]
    assert offline["summary"]["used"] == online["summary"]["used"]
    assert offline["summary"]["attempts"] == online["summary"]["attempts"]


def test_the_page_header_counts_in_words_that_agree_with_their_number() -> None:
    document = report_document(build(lease_state(), lease_report(lease_attempt=True), now=T + 1500))
    assert "<p>3 Tasks, 1 lease link; made " in render(document)
