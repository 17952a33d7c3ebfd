"""The page ``servatus report`` writes: one self-contained HTML file, hand-written SVG and a
little inline JavaScript, with no network, CDN or server needed to view it.

Why not a plotting library: Plotly with its JavaScript inlined is about 3.5 MB before any data,
and Vega-Lite needs its runtime (and, through Altair, a JavaScript engine to export); neither
virtualises 10,000 lanes of 30,000 attempts, and both would be an extra to install. A timeline
is rectangles on a time axis: the page packs the document's segments into a few integer columns
(tenths of a second from the earliest time) and draws only the lanes in view, so it stays a few
MB and opens at once at 10,000 Tasks. The summary is static HTML, built here.
"""

from __future__ import annotations

import html
import json
from collections.abc import Mapping, Sequence
from importlib import resources
from typing import Any

from servatus.config import format_duration
from servatus.engine.report import Span
from servatus.words import plural

COLOURS = {
    "SUCCEEDED": "#2e7d32",
    "FAILED": "#c62828",
    "STOPPED": "#ef6c00",
    "LOST": "#6a1b9a",
    "RUNNING": "#1565c0",
    "ENDING": "#4fa3e0",
    "QUEUED": "#8d8d8d",
    "ACCEPTED": "#607d8b",
    "UNRESOLVED": "#d4a017",
    "NOT_SUBMITTED": "#bdbdbd",
}
"""One colour per execution (the first word of ``STOPPED (time limit)``)."""

_SPANS = [span.value for span in Span]
_SPAN_WORDS = {
    "queued": "queued: intent (a later chain link: the end of the one before) to start marker",
    "running": "running: start to end marker",
    "lost": "LOST: started, never ended (counted at its time limit)",
    "unresolved": "UNRESOLVED: no receipt",
    "unobserved": "unobserved: no listing read",
}
_MAX_TABLE_ROWS = 200


def pack(document: Mapping[str, Any]) -> dict[str, Any]:
    """The document's lanes as integer columns the page draws from: every time in tenths of a
    second after ``t0``, every allocation and execution word once in a table."""
    segments = [s for lane in document["lanes"] for s in lane["segments"]]
    leases = document["leases"]
    starts = [s["start"] for s in segments] + [
        s["start"] for lease in leases for s in lease["segments"]
    ]
    t0: float = min(starts) if starts else document["made_at"]
    allocations: dict[str, int] = {}
    jobs: list[int | None] = []
    words: dict[str, int] = {}

    def allocation(allocation_id: str, job: int | None) -> int:
        index = allocations.get(allocation_id)
        if index is None:
            index = allocations[allocation_id] = len(jobs)
            jobs.append(job)
        return index

    def word(text: str) -> int:
        return words.setdefault(text, len(words))

    def tick(at: float) -> int:
        return round((float(at) - t0) * 10)

    columns: dict[str, list[int]] = {name: [] for name in "LSBEAXCKOW"}
    lanes = document["lanes"]
    for index, lane in enumerate(lanes):
        for s in lane["segments"]:
            columns["L"].append(index)
            columns["S"].append(_SPANS.index(s["span"]))
            columns["B"].append(tick(s["start"]))
            columns["E"].append(tick(s["end"]))
            columns["A"].append(allocation(s["allocation"], s["job"]))
            columns["X"].append(word(s["execution"]))
            columns["C"].append(-1 if s["exit_code"] is None else s["exit_code"])
            columns["K"].append(s["link"] or 0)
            columns["O"].append(1 if s["open"] else 0)
            columns["W"].append(-1 if s["within"] is None else allocation(s["within"], s["job"]))
    points = [
        [index, tick(p["at"]), allocation(p["allocation"], None)]
        for index, lane in enumerate(lanes)
        for p in lane["points"]
    ]
    packed_leases = [
        {
            "id": lease["allocation"],
            "job": lease["job"],
            "slots": lease["slots"],
            "link": lease["link"],
            "profile": lease["profile"],
            "idle": lease["idle_slot_hours"],
            "held": lease["held_slot_hours"],
            "segments": [
                [_SPANS.index(s["span"]), tick(s["start"]), tick(s["end"]), word(s["execution"])]
                for s in lease["segments"]
            ],
            "points": [tick(p["at"]) for p in lease["points"]],
        }
        for lease in leases
    ]
    return {
        "t0": t0,
        "made": tick(document["made_at"]),
        "keys": [lane["key"] for lane in lanes],
        "now": [word(lane["execution"]) for lane in lanes],
        "spans": _SPANS,
        "words": list(words),
        "allocations": list(allocations),
        "jobs": jobs,
        "segments": columns,
        "points": points,
        "leases": packed_leases,
        "colours": COLOURS,
    }


def _script_json(value: Any) -> str:
    """JSON safe inside a ``<script>`` element: ASCII, and no ``</`` to end it early."""
    text = json.dumps(value, ensure_ascii=True, separators=(",", ":"))
    return text.replace("</", "<\\/").replace("<!--", "<\\!--")


def _e(value: object) -> str:
    return html.escape(str(value), quote=True)


def _hours(value: float) -> str:
    return f"{value:,.1f}"


def _duration(seconds: float | None) -> str:
    return "-" if seconds is None else format_duration(max(0, round(seconds)))


def _grouped(count: int) -> str:
    return f"{count:,}"


def _counts_table(title: str, counts: Mapping[str, int]) -> str:
    rows = "".join(
        f'<tr><td><span class="swatch" style="background:{COLOURS.get(name, "#999")}"></span>'
        f"{_e(name)}</td><td class=n>{count:,}</td></tr>"
        for name, count in counts.items()
    )
    return f"<table class=counts><caption>{_e(title)}</caption>{rows}</table>"


def _histogram(title: str, value: Mapping[str, Any]) -> str:
    """An inline SVG histogram of a distribution's bins, with its quantiles."""
    bins: Sequence[Sequence[float]] = value["bins"]
    if not value["count"]:
        return f"<figure class=hist><figcaption>{_e(title)}: none yet</figcaption></figure>"
    tallest = max(b[2] for b in bins) or 1
    width, height = 240, 60
    step = width / len(bins)
    bars = "".join(
        f'<rect x="{i * step:.1f}" y="{height - height * b[2] / tallest:.1f}" '
        f'width="{max(step - 1, 1):.1f}" height="{height * b[2] / tallest:.1f}">'
        f"<title>{_e(_duration(b[0]))} to {_e(_duration(b[1]))}: {b[2]}</title></rect>"
        for i, b in enumerate(bins)
    )
    caption = (
        f"{_e(title)}: {value['count']:,}; median {_duration(value['median'])}, "
        f"p90 {_duration(value['p90'])}, max {_duration(value['max'])}"
    )
    return (
        f'<figure class=hist><svg width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}">{bars}</svg><figcaption>{caption}</figcaption></figure>'
    )


def _summary(document: Mapping[str, Any]) -> str:
    summary = document["summary"]
    requested, used = summary["requested"], summary["used"]
    hours = (
        "<table class=hours><caption>Resources</caption>"
        "<tr><th></th><th>requested</th><th>used</th></tr>"
        + "".join(
            f"<tr><td>{label}</td><td class=n>{_hours(requested[name])}</td>"
            f"<td class=n>{_hours(used[name])}</td></tr>"
            for label, name in (
                ("CPU-hours", "cpu_hours"),
                ("GPU-hours", "gpu_hours"),
                ("GiB-hours", "memory_gib_hours"),
            )
        )
        + "</table>"
    )
    if summary["unknown_resources"]:
        hours += (
            f"<p class=note>{summary['unknown_resources']:,} attempts were submitted before "
            "their resources were recorded and are not counted.</p>"
        )
    parts = [
        _counts_table("Tasks", summary["tasks"]),
        _counts_table("Attempts", summary["attempts"]),
        hours,
        _histogram("Queue wait", summary["queue_wait"]),
        _histogram("Run time", summary["run_time"]),
    ]
    chains = summary["chains"]
    if chains:
        rows = "".join(
            f"<tr><td>{_e(c['key'])}</td><td class=n>{c['link']} of {c['links']}</td>"
            f"<td class=n>{'' if c['complete'] else '~'}{_duration(c['run_time'])}</td>"
            f"<td class=n>{_duration(c['budget'])}</td></tr>"
            for c in chains[:_MAX_TABLE_ROWS]
        )
        more = len(chains) - _MAX_TABLE_ROWS
        tail = f"<tr><td colspan=4>and {more:,} more</td></tr>" if more > 0 else ""
        parts.append(
            "<table class=chains><caption>Chained Tasks: run time against budget</caption>"
            "<tr><th>Task</th><th>link</th><th>run time</th><th>budget</th></tr>"
            f"{rows}{tail}</table>"
        )
    leases = document["leases"]
    if leases:
        rows = "".join(
            f'<tr><td title="{_e(lease["allocation"])}">{_e(lease["allocation"][:8])}</td>'
            f"<td class=n>{lease['slots']}</td>"
            f"<td class=n>{_hours(lease['held_slot_hours'])}</td>"
            f"<td class=n>{_hours(lease['busy_slot_hours'])}</td>"
            f"<td class=n>{_hours(lease['idle_slot_hours'])}</td></tr>"
            for lease in leases
        )
        parts.append(
            "<table class=leases><caption>Leases: slot-hours</caption><tr><th>lease</th>"
            "<th>slots</th><th>held</th><th>busy</th><th>idle</th></tr>"
            f"{rows}</table>"
        )
    return "".join(parts)


def _legend() -> str:
    executions = "".join(
        f'<li data-execution="{name}"><span class=swatch style="background:{colour}"></span>'
        f"{name}</li>"
        for name, colour in COLOURS.items()
    )
    spans = "".join(
        f'<li data-span="{span}"><svg width="28" height="12"><rect class="seg {span}" x="1" '
        f'y="1" width="26" height="10" fill="#607d8b"/></svg>{_e(_SPAN_WORDS[span])}</li>'
        for span in _SPANS
    )
    marks = (
        '<li data-point="limit"><svg width="28" height="12"><path class="limit" '
        'd="M14 0 L14 12"/></svg>pre-limit signal</li>'
        '<li data-lease="idle"><svg width="28" height="12"><rect class="held" x="1" y="1" '
        'width="26" height="10"/><rect class="step" x="4" y="3" width="14" height="6" '
        'fill="#2e7d32"/></svg>'
        "lease: held slots (pale), each step in a slot row (its execution's colour); "
        "the pale rest is idle</li>"
    )
    return (
        f"<div id=legend><ul class=executions>{executions}</ul>"
        f"<ul class=spans>{spans}{marks}</ul></div>"
    )


def _asset(name: str) -> str:
    """The page's stylesheet or script, shipped beside this module."""
    return resources.files("servatus").joinpath(name).read_text(encoding="utf-8")


def render(document: Mapping[str, Any]) -> str:
    """The whole page for a ``servatus.report/1`` document."""
    warnings = "".join(f"<p class=warnings>warning: {_e(w)}</p>" for w in document["warnings"])
    mode = "read Slurm" if document["online"] else "offline: recorded evidence only"
    return (
        "<!DOCTYPE html><html lang=en><head><meta charset=utf-8>"
        '<meta http-equiv="Content-Security-Policy" content="default-src \'none\'; '
        "style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:\">"
        f"<title>servatus report {_e(document['campaign_id'])}</title>"
        f"<style>{_asset('report_page.css')}</style></head><body>"
        f"<header><h1>Campaign {_e(document['campaign_id'])}</h1>"
        f"<p>{plural(len(document['lanes']), 'Task', _grouped)}, "
        f"{plural(len(document['leases']), 'lease link', _grouped)}; "
        f'made <time id=made data-at="{document["made_at"]}"></time> ({_e(mode)})</p>'
        f"{warnings}</header>"
        "<div id=layout><div id=main>"
        f"{_legend()}"
        '<div id=controls><input id=filter type=search placeholder="filter by key or state"> '
        "<span id=shown></span></div>"
        '<div id=timeline><svg id=axis xmlns="http://www.w3.org/2000/svg"></svg>'
        '<svg id=lanes xmlns="http://www.w3.org/2000/svg"></svg></div>'
        f"</div><aside id=summary>{_summary(document)}</aside></div>"
        f'<script type="application/json" id=servatus-data>{_script_json(pack(document))}'
        "</script>"
        f"<script>{_asset('report_page.js')}"
        "document.getElementById('made').textContent=new Date("
        "document.getElementById('made').dataset.at*1000).toISOString();</script>"
        "</body></html>\n"
    )
