"""Shell completion of the installed ``servatus`` program (issue #17, docs/completion.md).

First what the program answers each shell's script (click's ``_SERVATUS_COMPLETE`` protocol),
then the scripts themselves in real bash, zsh and fish, where those shells are installed: bash
calls the completion function as its completion would, zsh completes through a pseudo-terminal,
fish through ``complete -C``.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from servatus.cli import COMPLETE_VAR, main

PROGRAM = Path(sys.executable).with_name("servatus")
TOML = """\
default_profile = "cpu"

[profiles.cpu.resources]
cpus = 1

[profiles.gpu-a100.resources]
cpus = 8
"""


@pytest.fixture
def launch(tmp_path: Path) -> Path:
    """A launch directory with a SERVATUS.toml of two profiles; HOME too, so no rc file of the
    machine's user is read."""
    (tmp_path / "SERVATUS.toml").write_text(TOML)
    return tmp_path


def environment(launch: Path, **variables: str) -> dict[str, str]:
    path = f"{PROGRAM.parent}{os.pathsep}{os.environ.get('PATH', '')}"
    return {**os.environ, "PATH": path, "HOME": str(launch), **variables}


def in_shell(launch: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    """A real shell's run in the launch directory, with the installed program on PATH."""
    return subprocess.run(
        argv, env=environment(launch), cwd=launch, capture_output=True, text=True, timeout=60
    )


def answer(launch: Path, instruction: str, words: str, cword: str) -> list[str]:
    """What the installed program answers a shell that completes ``words`` (``cword`` is the
    index of the word being completed, or for fish the word itself)."""
    env = environment(launch, COMP_WORDS=words, COMP_CWORD=cword, **{COMPLETE_VAR: instruction})
    done = subprocess.run(
        [PROGRAM], env=env, cwd=launch, capture_output=True, text=True, timeout=60
    )
    assert (done.returncode, done.stderr) == (0, ""), done
    lines = done.stdout.splitlines()
    return [] if lines == [""] else lines  # no candidate: one empty line


def test_the_bash_script_defines_and_registers_a_function(launch: Path) -> None:
    script = subprocess.run(
        [PROGRAM],
        env=environment(launch, **{COMPLETE_VAR: "bash_source"}),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    assert re.search(r"^_servatus_completion\(\) \{$", script, re.MULTILINE)
    assert "_SERVATUS_COMPLETE=bash_complete" in script
    assert re.search(r"^\s*complete .*-F _servatus_completion servatus$", script, re.MULTILINE)


@pytest.mark.parametrize(
    ("words", "cword", "expected"),
    [
        ("servatus pl", "1", ["plain,plan", "plain,plugins"]),
        ("servatus plan state --ret", "3", ["plain,--retry", "plain,--retry-failed"]),
        ("servatus doctor --profile ", "3", ["plain,cpu", "plain,gpu-a100"]),
        ("servatus plan state --profile g", "4", ["plain,gpu-a100"]),
        ("servatus submit ", "2", ["dir,"]),
        ("servatus submit state pl", "3", ["file,pl"]),
        ("servatus report state --output ", "4", ["file,"]),
        ("servatus profile --config ", "3", ["file,"]),
    ],
)
def test_bash_completes_commands_options_profiles_and_paths(
    launch: Path, words: str, cword: str, expected: list[str]
) -> None:
    assert answer(launch, "bash_complete", words, cword) == expected


def test_zsh_and_fish_get_values_with_their_help(launch: Path) -> None:
    zsh = answer(launch, "zsh_complete", "servatus pl", "1")
    assert zsh[0::3] == ["plain", "plain"]
    assert zsh[1::3] == ["plan", "plugins"]
    assert zsh[2].startswith("Show selected") and zsh[5].startswith("List the loaded plugins")
    zsh = answer(launch, "zsh_complete", "servatus plan state --ret", "3")
    assert zsh[1::3] == ["--retry", "--retry-failed"]
    fish = answer(launch, "fish_complete", "servatus plan state --ret", "--ret")
    assert [line.split("\t")[0] for line in fish] == ["plain,--retry", "plain,--retry-failed"]
    assert fish[0].split("\t")[1] == "Retry this Task."
    fish = answer(launch, "fish_complete", "servatus pl", "pl")
    assert [line.split("\t")[0] for line in fish] == ["plain,plan", "plain,plugins"]


def test_a_config_that_cannot_be_read_completes_no_profile(launch: Path) -> None:
    (launch / "broken.toml").write_text("[profiles.cpu\n")
    words = "servatus doctor --config {} --profile "
    assert answer(launch, "bash_complete", words.format("broken.toml"), "5") == []
    assert answer(launch, "bash_complete", words.format("missing.toml"), "5") == []
    assert answer(launch, "bash_complete", words.format("."), "5") == []
    (launch / "one.toml").write_text("[resources]\ncpus = 1\n")  # no [profiles]: "default"
    assert answer(launch, "bash_complete", words.format("one.toml"), "5") == ["plain,default"]


def test_main_returns_the_completion_exit_code(
    launch: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Through :func:`main`, not only the program: it answers and returns, never raising
    click's ``SystemExit``."""
    monkeypatch.chdir(launch)
    monkeypatch.setenv("COMP_WORDS", "servatus sta")
    monkeypatch.setenv("COMP_CWORD", "1")
    monkeypatch.setenv(COMPLETE_VAR, "bash_complete")
    assert main(["plan", "--help"]) == 0  # the shell's words, not these, are completed
    assert capsys.readouterr() == ("plain,start\nplain,status\n", "")
    monkeypatch.setenv(COMPLETE_VAR, "tcsh_complete")
    assert main([]) == 1  # a shell click does not know
    assert capsys.readouterr() == ("", "")


def real_shell(name: str) -> str:
    found = shutil.which(name)
    if found is None:
        pytest.skip(f"{name} is not installed")
    return found


def test_bash_sources_the_script_and_its_function_completes(launch: Path) -> None:
    bash = real_shell("bash")
    session = """
        source <(_SERVATUS_COMPLETE=bash_source servatus)
        complete -p servatus
        tab() { COMP_WORDS=("$@"); COMP_CWORD=$(( $# - 1 )); COMPREPLY=()
            _servatus_completion servatus; echo "${COMPREPLY[*]}"; }
        tab servatus pl
        tab servatus plan state --ret
        tab servatus plan state --profile ""
    """
    done = in_shell(launch, bash, "--norc", "--noprofile", "-c", session)
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout.splitlines() == [
        "complete -o nosort -F _servatus_completion servatus",
        "plan plugins",
        "--retry --retry-failed",
        "cpu gpu-a100",
    ]


ZPTY = r"""
zmodload zsh/zpty
zpty -b shell 'zsh -f -i'
zpty -w shell 'autoload -Uz compinit && compinit -u -D'
zpty -w shell 'eval "$(_SERVATUS_COMPLETE=zsh_source servatus)" && echo REA""DY'
zpty -r shell ignored '*READY*'
zpty -n -w shell "$1"$'\t\t'
zpty -r shell listed "*$2*"
print -r -- "$listed"
zpty -d shell
"""
"""Type a command line and two tabs into an interactive zsh (``-f``: no rc files) in a
pseudo-terminal, and print what it shows until ``$2`` appears in the listing."""


@pytest.mark.parametrize(
    ("typed", "last", "shown"),
    [
        ("servatus pl", "List the loaded", ["plan", "plugins"]),
        ("servatus plan state --ret", "Retry every", ["--retry", "--retry-failed"]),
    ],
)
def test_zsh_completes_at_a_terminal(launch: Path, typed: str, last: str, shown: list[str]) -> None:
    zsh = real_shell("zsh")
    done = in_shell(launch, zsh, "-f", "-c", ZPTY, "zpty", typed, last)
    assert done.returncode == 0, done.stderr
    screen = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]|[\r\x07]", "", done.stdout)
    listing = [line.split(" -- ")[0].strip() for line in screen.splitlines() if " -- " in line]
    assert listing == shown, screen


def test_fish_completes_through_its_own_engine(launch: Path) -> None:
    fish = real_shell("fish")
    session = """
        source (env _SERVATUS_COMPLETE=fish_source servatus | psub)
        complete -C 'servatus pl'
        complete -C 'servatus plan state --ret'
        complete -C 'servatus doctor --profile '
    """
    done = in_shell(launch, fish, "--no-config", "-c", session)
    assert (done.returncode, done.stderr) == (0, "")
    assert [line.split("\t")[0] for line in done.stdout.splitlines()] == [
        "plan",
        "plugins",
        "--retry",
        "--retry-failed",
        "cpu",
        "gpu-a100",
    ]
