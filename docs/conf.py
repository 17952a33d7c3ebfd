"""Sphinx configuration of the Servatus user's guide (``tox -e docs`` builds it, warnings fail)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sphinx.application import Sphinx

project = "Servatus"
author = "the Servatus developers"
copyright = "2026, the Servatus developers"
release = "0.14.1"
version = "0.14"

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx_click",
]
source_suffix = {".md": "markdown", ".rst": "restructuredtext"}
exclude_patterns = ["_build", "conftest.py", "examples/**/README.md", "doctest.py"]
myst_enable_extensions = ["colon_fence", "deflist"]
myst_heading_anchors = 3
html_theme = "furo"
html_title = f"Servatus {release}"
# Options, commands and messages are written as typed: smart quotes would turn ``--appendable``
# in prose (a click help text, a heading) into an en dash and "x" into curly quotes.
smartquotes = False
autodoc_member_order = "bysource"
autodoc_typehints = "description"
nitpicky = False
suppress_warnings: list[str] = []


def _examples_as_code(app: Sphinx, ctx: object, lines: list[str]) -> None:
    """A command's example, an epilog block click prints as written (``\\b``), which
    sphinx-click would make a line block: shown as a shell code block instead."""
    shown: list[str] = []
    for line in lines:
        if line.startswith("| "):
            if not shown or not shown[-1].startswith("   "):
                shown += [".. code-block:: sh", ""]
            shown.append("   " + line[2:].strip())
        else:
            shown.append(line)
    lines[:] = shown


def setup(app: Sphinx) -> None:
    app.connect("sphinx-click-process-epilog", _examples_as_code)
