"""The report of one soak: a JSON document for CI (schema ``servatus.soak.report/1``) and one
readable table. Pure: it formats what the schedule, evidence and invariants produced."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from soak.evidence import SoakEvidence
from soak.invariants import INVARIANTS, Violation
from soak.schedule import FaultKind, FaultPlan

SCHEMA = "servatus.soak.report/1"

KILLED = "killed"
"""The exit-code column of a command the driver killed on purpose."""


def build(
    plan: FaultPlan | None,
    evidence: SoakEvidence,
    checked: Mapping[str, Sequence[Violation]],
    *,
    injected: Sequence[str] = (),
    left_out: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The JSON report. ``injected``: the kinds of the faults the injector really injected,
    one per fault; the client kills are counted from the command log (the driver does them), so
    a kill planned for a command that ended first is planned, not injected. ``left_out``: fault
    kinds this soak does not run, each with the reason (``faults_left_out``)."""
    faults: Counter[str] = Counter(kind for kind in injected if kind != FaultKind.KILL_CLIENT.value)
    faults[FaultKind.KILL_CLIENT.value] = sum(1 for r in evidence.commands if r.killed)
    planned: Counter[str] = Counter(f.kind.value for f in plan.faults) if plan else Counter()
    if plan is not None:
        for kind, _ in plan.rates:
            faults.setdefault(kind.value, 0)
            planned.setdefault(kind.value, 0)
    commands: dict[str, Counter[str]] = {}
    for record in evidence.commands:
        code = KILLED if record.killed else str(record.exit_code)
        commands.setdefault(record.verb, Counter())[code] += 1
    final = evidence.statuses[-1].tasks if evidence.statuses else ()
    outcomes = Counter(execution for _, execution, _ in final)
    published = {result.key for result in evidence.results if result.present}
    lost_published = sorted(
        key for key, execution, _ in final if execution == "LOST" and key in published
    )
    violations = [
        {"invariant": v.invariant, "subject": v.subject, "reason": v.reason}
        for name in checked
        for v in checked[name]
    ]
    return {
        "schema": SCHEMA,
        "seed": plan.seed if plan is not None else None,
        "duration": plan.duration if plan is not None else None,
        "faults": dict(sorted(faults.items())),
        "faults_planned": dict(sorted(planned.items())),
        "faults_left_out": dict(sorted((left_out or {}).items())),
        "commands": {verb: dict(sorted(c.items())) for verb, c in sorted(commands.items())},
        "invariants": [{"name": name, "violations": len(checked[name])} for name in checked],
        "violations": violations,
        "tasks": dict(sorted(outcomes.items())),
        "lost_published": lost_published,
        "ok": not violations,
    }


def table(document: Mapping[str, Any]) -> str:
    """One readable table of the report, section by section."""
    rows: list[tuple[str, str, str]] = [("SECTION", "WHAT", "COUNT")]
    seed = document.get("seed")
    duration = document.get("duration")
    rows.append(("soak", f"seed {'-' if seed is None else seed}, {duration or '-'} s", ""))
    planned = document["faults_planned"]
    for kind in sorted({*document["faults"], *planned}):
        injected = document["faults"].get(kind, 0)
        rows.append(("fault", f"{kind} (of {planned.get(kind, 0)} planned)", str(injected)))
    for kind in document["faults_left_out"]:  # the reasons are in the JSON
        rows.append(("fault", f"{kind} left out (not run here)", "-"))
    for verb, codes in document["commands"].items():
        for code, count in codes.items():
            rows.append(
                (
                    "command",
                    f"{verb} exit {code}" if code != KILLED else f"{verb} killed",
                    str(count),
                )
            )
    for entry in document["invariants"]:
        rows.append(("invariant", entry["name"], str(entry["violations"])))
    for execution, count in document["tasks"].items():
        rows.append(("tasks", execution, str(count)))
    rows.append(("tasks", "LOST that had published", str(len(document["lost_published"]))))
    for v in document["violations"]:
        rows.append(("violation", f"{v['invariant']}: {v['subject']}: {v['reason']}", ""))
    rows.append(
        ("verdict", "ok" if document["ok"] else "VIOLATIONS", str(len(document["violations"])))
    )
    widths = [max(len(row[i]) for row in rows) for i in range(2)]
    return (
        "\n".join(
            f"{row[0]:<{widths[0]}}  {row[1]:<{widths[1]}}  {row[2]}".rstrip() for row in rows
        )
        + "\n"
    )


def validate(document: Any) -> list[str]:
    """What in ``document`` breaks the ``servatus.soak.report/1`` schema (empty: nothing). CI
    reads a report only once this is empty.

    The schema: ``schema`` the name; ``seed`` an int and ``duration`` a number (both null
    without a fault plan); ``faults`` fault kind to count injected, ``faults_planned`` to count
    planned, ``faults_left_out`` fault kind to the reason it was not run; ``commands``
    subcommand to exit code (a decimal string, or ``killed``) to count; ``invariants`` one
    ``{name, violations}`` per invariant, every one, in order; ``violations`` a list of
    ``{invariant, subject, reason}`` strings, as many per invariant as it counts; ``tasks``
    execution to count; ``lost_published`` the keys of the Tasks that end ``LOST`` although
    their result was published (no invariant: the evidence of their end was lost, which Servatus
    reports honestly, but each is a rerun the user pays for); ``ok`` true exactly when there is
    no violation."""
    problems: list[str] = []
    if not isinstance(document, dict):
        return ["not an object"]
    expected = {"schema", "seed", "duration", "faults", "faults_planned", "faults_left_out",
                "commands", "invariants", "violations", "tasks", "lost_published",
                "ok"}  # fmt: skip
    if set(document) != expected:
        problems.append(f"keys {sorted(document)}, expected {sorted(expected)}")
        return problems
    if document["schema"] != SCHEMA:
        problems.append(f"schema {document['schema']!r}")
    if document["seed"] is not None and not _is_int(document["seed"]):
        problems.append("seed is not an integer")
    duration = document["duration"]
    if duration is not None and (
        not isinstance(duration, int | float) or isinstance(duration, bool)
    ):
        problems.append("duration is not a number")
    kinds = {kind.value for kind in FaultKind}
    problems += _counts(document["faults"], "faults", lambda k: k in kinds)
    problems += _counts(document["faults_planned"], "faults_planned", lambda k: k in kinds)
    left_out = document["faults_left_out"]
    if not isinstance(left_out, dict) or not all(
        k in kinds and isinstance(v, str) and v for k, v in left_out.items()
    ):
        problems.append("faults_left_out is not fault kinds to reasons")
    commands = document["commands"]
    if not isinstance(commands, dict):
        problems.append("commands is not an object")
    else:
        for verb, codes in commands.items():
            problems += _counts(codes, f"commands.{verb}", lambda k: k == KILLED or _code(k))
    names = [name for name, _ in INVARIANTS]
    entries = document["invariants"]
    if (
        not isinstance(entries, list)
        or [e.get("name") if isinstance(e, dict) else None for e in entries] != names
    ):
        problems.append(f"invariants do not name {names} in order")
        entries = []
    violations = document["violations"]
    if not isinstance(violations, list) or not all(
        isinstance(v, dict)
        and set(v) == {"invariant", "subject", "reason"}
        and all(isinstance(x, str) for x in v.values())
        for v in violations
    ):
        problems.append("violations are not a list of {invariant, subject, reason} strings")
        violations = []
    for entry in entries:
        counted = entry.get("violations")
        listed = sum(1 for v in violations if v["invariant"] == entry["name"])
        if not _is_int(counted) or counted != listed:
            problems.append(f"invariant {entry['name']} counts {counted!r}, lists {listed}")
    problems += _counts(document["tasks"], "tasks", lambda k: k.isupper())
    lost = document["lost_published"]
    if not isinstance(lost, list) or not all(isinstance(key, str) for key in lost):
        problems.append("lost_published is not a list of Task keys")
    if document["ok"] is not (not violations):
        problems.append("ok disagrees with the violations")
    return problems


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _code(key: str) -> bool:
    return key.lstrip("-").isdigit()


def _counts(value: Any, where: str, good_key: Callable[[str], bool]) -> list[str]:
    if not isinstance(value, dict):
        return [f"{where} is not an object"]
    return [
        f"{where}: {key!r}: {count!r}"
        for key, count in value.items()
        if not good_key(key) or not _is_int(count) or count < 0
    ]
