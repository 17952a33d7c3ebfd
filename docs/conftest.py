"""Every example in the user's guide runs here, through Sybil, against ``FakeScheduler``.

Each page runs in its own empty launch directory, top to bottom, sharing one namespace:

* a code block captioned with a file name (```` ```{code-block} toml ```` with
  ``:caption: SERVATUS.toml``) is written to that file, as the reader would save it;
* a ``python`` block runs (``fake``, the page's :class:`~servatus.testing.FakeScheduler`, and
  ``clock``, the frozen clock it and Servatus read, are in the namespace);
* a ``console`` block runs each ``$ servatus ...`` line through :func:`servatus.cli.main` with
  ``connect=fake`` and compares what it printed (stdout and stderr, as a terminal shows them)
  with the lines below it, ``...`` matching anything; a last line ``[exit N]`` is the exit code
  (0 without one). ``$ cat FILE`` prints a file of the launch directory,
  ``$ python3 FILE.py`` runs a script of the page in its own process, and
  ``$ servatus ... | jq ARGS`` pipes the command's stdout through the real ``jq``.
* ``% invisible-code-block: python`` runs Python the reader does not see (moving the fake's
  jobs along, advancing the clock); ``% skip: next`` skips a block that needs a real cluster.

Ids and times are made repeatable: campaign ids come from a seeded generator and the clock
stands at 2026-12-01 09:00:00 UTC until a page advances it, so printed ids, times and run times
are the ones a page shows.
"""

from __future__ import annotations

import contextlib
import doctest
import io
import os
import random
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sybil import Example, Sybil
from sybil.evaluators.python import PythonEvaluator
from sybil.parsers.abstract.lexers import LexerCollection
from sybil.parsers.markdown.lexers import DirectiveInHTMLCommentLexer, FencedCodeBlockLexer
from sybil.parsers.myst import SkipParser
from sybil.parsers.myst.lexers import DirectiveInPercentCommentLexer, DirectiveLexer

from servatus.cli import main
from servatus.testing import FakeScheduler

HERE = Path(__file__).resolve().parent
START = 1796115600.0  # 2026-12-01T09:00:00Z
EXIT_LINE = "[exit "
CHECKER = doctest.OutputChecker()
FLAGS = doctest.ELLIPSIS


class Clock:
    """A clock that stands still until a page moves it: output with times is repeatable."""

    def __init__(self, now: float = START) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


class GuideBlocks:
    """One Sybil parser for every fenced block and code directive of a page, dispatched by what
    the block is: a captioned file, Python, or a console session."""

    def __init__(self) -> None:
        self.lexers = LexerCollection(
            [
                FencedCodeBlockLexer(
                    language=r".+", mapping={"language": "arguments", "source": "source"}
                ),
                DirectiveLexer(directive=r"(code-block|code)", arguments=".+"),
                DirectiveInPercentCommentLexer(directive=r"invisible-code-block", arguments=".+"),
                DirectiveInHTMLCommentLexer(directive=r"invisible-code-block", arguments=".+"),
            ]
        )
        self.python = PythonEvaluator()

    def __call__(self, document: Any) -> Iterator[Any]:
        for region in self.lexers(document):
            language = str(region.lexemes["arguments"]).strip()
            caption = (region.lexemes.get("options") or {}).get("caption")
            region.parsed = region.lexemes["source"]
            if caption:
                region.evaluator = _writer(caption)
            elif language == "python":
                region.evaluator = self._python
            elif language == "console":
                region.evaluator = run_console
            else:
                continue
            yield region

    def _python(self, example: Example) -> str | None:
        _page(example)
        return self.python(example)


def _writer(name: str) -> Any:
    def write(example: Example) -> None:
        path = Path(_page(example)["launch"]) / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(str(example.parsed))

    return write


def run_console(example: Example) -> str | None:
    """Run a console block's commands in order; the first whose output differs fails it."""
    namespace = _page(example)
    command: str | None = None
    expected: list[str] = []
    problems: list[str] = []
    for line in [*str(example.parsed).splitlines(), None]:
        if line is None or line.startswith("$ "):
            if command is not None:
                problem = _check(namespace, command, expected)
                if problem:
                    problems.append(problem)
                    break
            command, expected = (line[2:] if line else None), []
        elif command is not None:
            expected.append(line)
    return "\n".join(problems) or None


def _check(namespace: dict[str, Any], command: str, expected: list[str]) -> str | None:
    code = 0
    if expected and expected[-1].startswith(EXIT_LINE):
        code = int(expected.pop()[len(EXIT_LINE) : -1])
    printed, got = _run(namespace, shlex.split(command))
    want = "\n".join(expected) + "\n" if expected else ""
    if got == code and CHECKER.check_output(want, printed, FLAGS):
        return None
    return f"$ {command}\nexpected (exit {code}):\n{want}got (exit {got}):\n{printed}"


def _run(namespace: dict[str, Any], argv: list[str]) -> tuple[str, int]:
    if "|" in argv:
        return _pipe_to_jq(namespace, argv[: argv.index("|")], argv[argv.index("|") + 1 :])
    out = io.StringIO()
    launch = Path(namespace["launch"])
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        if argv[:1] == ["servatus"]:
            code = main(argv[1:], connect=namespace["fake"])
        elif argv[:1] == ["cat"] and len(argv) == 2:
            out.write((launch / argv[1]).read_text())
            code = 0
        elif argv[:1] == ["python3"] and len(argv) == 2 and argv[1].endswith(".py"):
            code = _script(launch, argv[1], out)
        else:
            raise ValueError(f"the guide's console blocks run servatus, cat, python3: {argv}")
    return out.getvalue(), code


def _script(launch: Path, name: str, out: io.StringIO) -> int:
    """``python3 FILE.py``: a script of the page run as a reader runs it, in its own process
    with the Python running the tests (the page's clock and ids do not reach it), stdout and
    stderr in the order written."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    done = subprocess.run(
        [sys.executable, name],
        cwd=launch,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=120,
        check=False,
    )
    out.write(done.stdout)
    return done.returncode


def _pipe_to_jq(namespace: dict[str, Any], first: list[str], jq: list[str]) -> tuple[str, int]:
    """``servatus ... | jq ...`` as a shell runs it: servatus' stdout into jq, its stderr to the
    terminal, and the pipeline's exit code jq's. jq runs for real, since what the reader copies
    is its filter; CI installs it, elsewhere the example is skipped."""
    if first[:1] != ["servatus"] or jq[:1] != ["jq"] or "|" in jq:
        raise ValueError(f"the guide's pipes are servatus ... | jq ...: {first} | {jq}")
    program = shutil.which("jq")
    if program is None:
        if os.environ.get("CI"):
            pytest.fail("the guide's jq examples need jq (apt-get install jq)")
        pytest.skip("needs jq")
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        main(first[1:], connect=namespace["fake"])
    done = subprocess.run(
        [program, *jq[1:]], input=out.getvalue(), capture_output=True, text=True, check=False
    )
    return err.getvalue() + done.stdout + done.stderr, done.returncode


def _ids(seed: str) -> Any:
    generator = random.Random(seed)  # noqa: S311 - repeatable ids for the guide, not secrets
    return lambda: uuid.UUID(int=generator.getrandbits(128), version=4)


def _page(example: Example) -> dict[str, Any]:
    """The page's namespace, set up by its first example (Sybil's own setup runs before the
    page's path is known): launch directory, clock, ids, fake."""
    namespace = example.namespace
    if "fake" not in namespace:
        patch = pytest.MonkeyPatch()
        launch = Path(tempfile.mkdtemp(prefix=f"guide-{Path(example.path).stem}-"))
        clock = Clock()
        patch.setattr(time, "time", clock)
        patch.setattr(uuid, "uuid4", _ids(str(Path(example.path).relative_to(HERE))))
        patch.setenv("TZ", "UTC")
        patch.setenv("HOME", str(launch))
        time.tzset()
        patch.chdir(launch)
        namespace.update(
            launch=str(launch), clock=clock, fake=FakeScheduler(clock=clock), patch=patch
        )
    return namespace


def teardown(namespace: dict[str, Any]) -> None:
    if "patch" in namespace:
        namespace["patch"].undo()
        time.tzset()
        shutil.rmtree(namespace["launch"], ignore_errors=True)


pytest_collect_file = Sybil(
    parsers=[SkipParser(), GuideBlocks()],
    patterns=["*.md"],
    excludes=["development/*", "development/**/*", "examples/**/*"],
    teardown=teardown,
).pytest()
