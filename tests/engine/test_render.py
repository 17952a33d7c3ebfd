"""Human output from values alone, without click: each command's lines as the CLI prints them."""

from __future__ import annotations

from servatus.campaign import Authoring, ShapeCheck
from servatus.cli.render import (
    accepted_line,
    authoring_line,
    batch_line,
    cancelled_lines,
    check_line,
    doctor_lines,
    nothing_started_line,
    plugins_lines,
    reconcile_lines,
    saved_line,
    submitted_lines,
    terminal_text,
)
from servatus.engine.plan import Hold
from servatus.operations.doctor import Check, Diagnosis
from servatus.operations.reconcile import Resolution
from servatus.operations.submission import SubmittedAllocation
from servatus.plugins import PluginInfo


def test_authoring_lines() -> None:
    assert authoring_line("create", "st", Authoring(True, 3, 0, 3, False)) == (
        "created st: 3 Tasks (appendable)"
    )
    assert authoring_line("ensure", "st", Authoring(True, 1, 0, 1, True)) == (
        "created st: 1 Task (sealed)"
    )
    assert authoring_line("seal", "st", Authoring(False, 0, 0, 5, True)) == "sealed st: 5 Tasks"
    assert authoring_line("ensure", "st", Authoring(False, 2, 1, 5, False)) == (
        "ensure st: 2 new, 1 existing"
    )
    assert authoring_line("append", "st", Authoring(False, 0, 3, 5, True)) == (
        "append st: 0 new, 3 existing; sealed"
    )


def test_plan_submit_and_validate_lines() -> None:
    assert saved_line("my st", "p.json") == (
        "saved p.json; submit it with: servatus submit 'my st' p.json"
    )
    assert check_line(ShapeCheck(2, False, "too big", 3600)) == (
        "2 Tasks per allocation for 01:00:00: REJECTED: too big"
    )
    assert check_line(ShapeCheck(1, True, "ok", 90060)) == (
        "1 Task per allocation for 1-01:01:00: accepted: ok"
    )
    assert accepted_line(1, 3, "a1", 1000) == "allocation 1 of 3: a1 accepted as job 1000"
    assert batch_line(100, 100, 250) == "sending allocations 101-200 of 250 in one batch"
    assert batch_line(249, 1, 250) == "sending allocation 250 of 250"
    receipts = [SubmittedAllocation("a1", 1000, ("k0", "k1")), SubmittedAllocation("a2", 7, ())]
    assert submitted_lines(receipts) == [
        "submitted allocation a1: job 1000 (k0, k1)",
        "submitted allocation a2: job 7 ()",
    ]
    assert submitted_lines([]) == ["nothing to submit: the plan selects no Task"]


def test_reconcile_and_cancel_lines() -> None:
    decisions = [Resolution("a1", "accepted", job=4), Resolution("a2", "not_submitted")]
    assert reconcile_lines(decisions) == [
        "allocation a1: accepted as job 4",
        "allocation a2: recorded as not submitted",
    ]
    (waiting,) = reconcile_lines([Resolution("a3", "waiting", retry_at=0.0)])
    assert waiting.startswith("allocation a3: no evidence yet; decidable after 19")
    assert reconcile_lines([]) == ["nothing to reconcile"]
    assert cancelled_lines(["a1", "a2"]) == ["cancelled allocation a1", "cancelled allocation a2"]
    assert cancelled_lines([]) == ["nothing to cancel: no matching allocation is queued or running"]


def test_plugins_and_doctor_lines() -> None:
    loaded = [PluginInfo("servatus-x", "dist-x", "1.0"), PluginInfo("y", "dist-y", "2")]
    assert plugins_lines(loaded, ["direct"], []) == [
        "servatus-x  dist-x 1.0",
        "y           dist-y 2",
        "launchers: direct",
        "transports: -",
    ]
    diagnosis = Diagnosis("cpu", (Check("squeue", "pass", "answers"), Check("a", "fail", "no")))
    assert doctor_lines(diagnosis) == [
        "doctor: profile cpu",
        "  pass         squeue  answers",
        "  fail         a       no",
    ]


def test_terminal_text_escapes_each_line_whole() -> None:
    assert terminal_text(["plain", "text"]) == "plain\ntext"
    assert terminal_text(["tab\there", "a\nb", "é"]) == "tab\\there\na\\nb\né"


def test_nothing_started_names_each_hold_with_a_few_keys() -> None:
    spent = [(f"s{i}", Hold.SPENT) for i in range(5)]
    held = [("a", Hold.ACTIVE), *spent, ("other", Hold.NOT_REQUESTED), ("b", Hold.SUBMITTED)]
    keys = ["a", "b", *(key for key, _ in spent)]
    assert nothing_started_line(keys, held) == (
        "nothing to start: none of the 7 Tasks is selected; held 5 SPENT (s0, s1, s2, ...), "
        "1 SUBMITTED (b), 1 ACTIVE (a); see plan"
    )
    assert nothing_started_line(["x"], held) == (
        "nothing to start: none of the 1 Task is selected; see plan"
    )
