"""The user's guide (``docs/``, not ``docs/development/``) has an entry for every public name,
CLI command and option, ``SERVATUS.toml`` key, exit code and status value (issue #17).

The inventory is read from the code itself, so a new option or state without a word in the guide
fails here. Run as a script (``python tests/core/test_guide_coverage.py``) it lists what is missing.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from pathlib import Path

import attrs
import click

ROOT = Path(__file__).resolve().parents[2]
GUIDE = ROOT / "docs"
FENCE = re.compile(r"^(```|~~~).*?^\1", re.MULTILINE | re.DOTALL)
INLINE = re.compile(r"`([^`\n]+)`")


def pages() -> dict[str, str]:
    """Every hand-written page of the guide, by its path under ``docs/``."""
    return {
        str(path.relative_to(GUIDE)): path.read_text()
        for path in sorted(GUIDE.rglob("*.md"))
        if path.relative_to(GUIDE).parts[0] not in ("development", "examples")
    }


def literals(text: str) -> str:
    """The page's code: fenced blocks and inline literals, where names and options are shown."""
    return "\n".join([m.group(0) for m in FENCE.finditer(text)] + INLINE.findall(text))


def _shown(word: str, code: str) -> bool:
    return re.search(rf"(?<![\w-]){re.escape(word)}(?![\w-])", code) is not None


def public_names() -> Iterator[str]:
    import servatus
    import servatus.errors
    import servatus.hookspecs
    import servatus.testing

    yield from servatus.__all__
    # The hooks a site plugin implements: pluggy marks each spec with ``servatus_spec``.
    yield from (n for n, f in vars(servatus.hookspecs).items() if hasattr(f, "servatus_spec"))
    yield from (n for n in vars(servatus.errors) if not n.startswith("_") and n[0].isupper())
    yield "FakeScheduler"
    yield from (
        name
        for name, member in vars(servatus.testing.FakeScheduler).items()
        if not name.startswith("_") and callable(member)
    )


def cli_words() -> Iterator[str]:
    from servatus.cli import cli

    yield "servatus"
    assert isinstance(cli, click.Group)
    for name, command in cli.commands.items():
        yield f"servatus {name}"
        for parameter in command.params:
            if isinstance(parameter, click.Option):
                yield from (o for o in parameter.opts if o.startswith("--"))
    yield from (o for p in cli.params for o in getattr(p, "opts", ()) if o.startswith("--"))


def config_keys() -> Iterator[str]:
    from servatus import config

    for table in (config._Document, config._TargetTable, config._ResourcesTable):
        yield from (f.name for f in attrs.fields(table))


def exit_codes() -> Iterator[int]:
    import servatus.errors

    yield from sorted({v for n, v in vars(servatus.errors).items() if n.startswith("EXIT_")})


def status_values() -> Iterator[str]:
    from servatus.engine import plan
    from servatus.engine import status_values as status

    yield from (e.value for e in status.Execution)
    yield from (e.value for e in status.StopReason)
    yield from (status.RESULT_VALID, status.RESULT_MISSING, status.RESULT_UNOBSERVED)
    yield from (h.value for h in plan.Hold)


def missing() -> dict[str, list[str]]:
    """What the guide lacks, by kind (empty lists: nothing)."""
    texts = pages()
    code = "\n".join(literals(text) for text in texts.values())
    configuration = literals(texts.get("configuration.md", ""))
    tables = "\n".join(texts.values())
    api = "\n".join(m.group(0) for m in FENCE.finditer(texts.get("api.md", "")))
    found: dict[str, list[str]] = {
        "public names": [n for n in public_names() if not _shown(n, code)],
        # The API reference lists its entries by hand: a name mentioned on another page only
        # would have no entry of its own, with its docstring, in the reference.
        "public names (an entry in api.md)": [n for n in public_names() if not _shown(n, api)],
        "CLI commands and options": [w for w in cli_words() if not _shown(w, code)],
        "SERVATUS.toml keys (configuration.md)": [
            k for k in config_keys() if not _shown(k, configuration)
        ],
        "exit codes (a table row)": [
            str(c)
            for c in exit_codes()
            if not re.search(rf"^\|\s*`?{c}`?\s*\|", tables, re.MULTILINE)
        ],
        "status values": [v for v in status_values() if not _shown(v, code)],
    }
    return {kind: sorted(set(words)) for kind, words in found.items()}


def test_the_guide_has_pages() -> None:
    assert {"index.md", "quickstart.md", "configuration.md", "cli.md"} <= set(pages())


def test_the_guide_has_an_entry_for_everything_users_can_name() -> None:
    gaps = {kind: words for kind, words in missing().items() if words}
    assert gaps == {}


if __name__ == "__main__":
    for kind, words in missing().items():
        print(f"{kind}: {', '.join(words) if words else 'none missing'}")
    sys.exit(any(missing().values()))
