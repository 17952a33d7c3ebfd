"""Sphinx configuration of the Servatus user's guide (``tox -e docs`` builds it, warnings fail)."""

from __future__ import annotations

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
autodoc_member_order = "bysource"
autodoc_typehints = "description"
nitpicky = False
suppress_warnings: list[str] = []
