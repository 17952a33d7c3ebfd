"""Sphinx configuration of the Servatus user's guide (``tox -e docs`` builds it, warnings fail)."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from docutils import nodes
from sphinx import addnodes
from sphinx.pycode import ModuleAnalyzer

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
# Every name a page or a docstring refers to must have an entry (docs/api.md). Only the standard
# library's are let through: linking them would need intersphinx, and the build no network.
nitpicky = True
nitpick_ignore = [
    ("py:class", name)
    for name in (
        "collections.abc.Callable",
        "collections.abc.Collection",
        "collections.abc.Iterable",
        "collections.abc.Mapping",
        "collections.abc.Sequence",
        "contextlib.AbstractContextManager",
        "os.PathLike",
        "pathlib.Path",
        "Path",  # pathlib's, as Campaign's own signature spells it
    )
]
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


_PRIVATE_PARAMETER = re.compile(r",\s*_\w+(?:=[^,()]*)?(?=[,)])")


def _without_private_parameters(
    app: Sphinx, what: str, name: str, obj: object, options: object, args: str | None, ret: str
) -> tuple[str | None, str] | None:
    """A ``_name`` parameter is for Servatus' own calls (``Campaign(..., _state=...)``): it is not
    part of the signature a reader may use."""
    if args is None or "_" not in args:
        return None
    return _PRIVATE_PARAMETER.sub("", args), ret


def _exported_constant(
    app: Sphinx, what: str, name: str, obj: object, options: object, lines: list[str]
) -> None:
    """A constant ``servatus`` re-exports (``servatus.MAX_LINKS``) keeps the doc comment of the
    module that defines it; autodoc would otherwise show the docstring of ``int``."""
    if what != "data" or not name.startswith("servatus.") or name.count(".") != 1:
        return
    import servatus  # noqa: PLC0415 - the package being documented

    short = name.partition(".")[2]
    module = servatus._EXPORTS.get(short)
    if module is not None:
        found = ModuleAnalyzer.for_module(module).find_attr_docs().get(("", short))
        if found:
            lines[:] = list(found)


def _fields_once(app: Sphinx, domain: str, objtype: str, content: Any) -> None:
    """The parameter list autodoc builds from type hints, without what needs no entry there: a
    parameter the signature does not show (a private ``_name`` one, or any of a value the page
    documents with no constructor, as ``Plan()``), and a class's parameter that the class's own
    attribute entry already describes with its type. Runs after autodoc's handler made the list."""
    if domain != "py":
        return
    described = {
        child[0]["fullname"].rpartition(".")[2]
        for child in content.children
        if isinstance(child, addnodes.desc)
        and child["objtype"] in ("attribute", "property")
        and ":" in "".join(n.astext() for n in child[0].findall(addnodes.desc_annotation))
    }
    shown = {
        parameter.astext().partition("=")[0].lstrip("*").strip()
        for parameter in content.parent[0].findall(addnodes.desc_parameter)
    }
    for field_list in [c for c in content.children if isinstance(c, nodes.field_list)]:
        for field in list(field_list.children):
            words = field[0].astext().split()
            if words[0] in ("param", "type") and len(words) > 1:
                parameter = words[-1]
                if parameter not in shown or parameter in described:
                    field_list.remove(field)
        if not field_list.children:
            content.remove(field_list)


def _option_extras(app: Sphinx, ctx: Any, lines: list[str]) -> None:
    """What ``--help`` says of an option beyond its text, in the reference too: that it may be
    repeated, and its range (``--bytes``: 1 to 1048576). Both are read from the option itself;
    sphinx-click shows neither."""
    import click  # noqa: PLC0415 - sphinx-click has loaded it

    for option in ctx.command.params:
        if not isinstance(option, click.Option):
            continue
        extras = []
        if option.multiple:
            extras.append("Repeatable.")
        kind = option.type
        if isinstance(kind, click.IntRange):
            if kind.min is not None and kind.max is not None:
                extras.append(f"Accepts {kind.min} to {kind.max}.")
            elif kind.min is not None:
                extras.append(f"Accepts at least {kind.min}.")
            else:
                extras.append(f"Accepts at most {kind.max}.")
        if not extras:
            continue
        heading = f".. option:: {option.opts[0]}"
        start = next(i for i, line in enumerate(lines) if line.split(" <")[0] == heading)
        end = next(
            (i for i in range(start + 1, len(lines)) if lines[i].startswith(".. option::")),
            len(lines),
        )
        fields = [i for i in range(start + 1, end) if lines[i].startswith("    :")]
        at = fields[0] if fields else end
        while lines[at - 1] == "":
            at -= 1
        lines[at:at] = ["", "    " + " ".join(extras)]


_ARGUMENTS = {
    "STATE": "The campaign directory.",
    "TASKS.jsonl": "A Tasks file: one Task per line, a JSON object with key and args.",
    "PLAN": "A plan file saved by plan --output.",
}
"""What each argument name means, in every command that takes it: click 8.1 has no help for
arguments, so each command's text describes them and the reference names them here too."""


def _argument_meanings(app: Sphinx, ctx: Any, lines: list[str]) -> None:
    """Each argument's meaning under its name, beside sphinx-click's "Required argument"; an
    argument name with no meaning here fails the build."""
    shown: list[str] = []
    for line in lines:
        shown.append(line)
        if line.startswith(".. option:: "):
            name = line.removeprefix(".. option:: ")
            if name not in _ARGUMENTS:
                raise ValueError(f"docs/conf.py: describe the argument {name} in _ARGUMENTS")
            shown += ["", f"    {_ARGUMENTS[name]}"]
    lines[:] = shown


def setup(app: Sphinx) -> None:
    app.connect("sphinx-click-process-epilog", _examples_as_code)
    app.connect("sphinx-click-process-options", _option_extras)
    app.connect("sphinx-click-process-arguments", _argument_meanings)
    app.connect("autodoc-process-signature", _without_private_parameters)
    app.connect("autodoc-process-docstring", _exported_constant)
    app.connect("object-description-transform", _fields_once, priority=600)
