"""Every hook is documented in docs/development/plugins.md, and every documented hook exists."""

from __future__ import annotations

import re
from pathlib import Path

from servatus import hookspecs

DOC = Path(__file__).resolve().parents[2] / "docs" / "development" / "plugins.md"


def hook_names() -> set[str]:
    return {name for name in vars(hookspecs) if name.startswith("servatus_")}


def test_every_hook_has_a_heading_and_a_docstring() -> None:
    headings = set(re.findall(r"^### (servatus_\w+)$", DOC.read_text(), flags=re.MULTILINE))
    assert hook_names(), "no hooks found"
    assert headings == hook_names()
    for name in hook_names():
        assert (getattr(hookspecs, name).__doc__ or "").strip(), name


def test_firstresult_hooks_say_so() -> None:
    text = DOC.read_text()
    for name in hook_names():
        opts = getattr(hookspecs, name).servatus_spec
        section = text.split(f"### {name}\n", 1)[1].split("\n### ", 1)[0]
        assert ("*First result.*" in section) == bool(opts.get("firstresult")), name
