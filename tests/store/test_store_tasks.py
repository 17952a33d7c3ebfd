"""Task validation and the JSONL format."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from servatus.campaign import create_state
from servatus.cli import main
from servatus.errors import ConfigurationError
from servatus.tasks import Task, check_unique, read_jsonl


@pytest.mark.parametrize(
    "key",
    [
        "lr-1e-3",
        "lr-3e-4",
        "lr-0.001-seed-2",
        "az-small",
        "train-a",
        "eval-7",
        f"lr-{1e-3}-seed-{0}",
        f"lr-{1e-4}-seed-{2}",
        "A",
        "9",
        "a_b.c-d",
        "x" * 128,
    ],
)
def test_good_keys(key: str) -> None:
    assert Task(key, ["python", "train.py"]).key == key


@pytest.mark.parametrize(
    "key",
    ["", ".", "..", "-rf", ".hidden", "_x", "a/b", "a b", "a\nb", "é", "x" * 129, "a:b", "a%b"],
)
def test_bad_keys(key: str) -> None:
    with pytest.raises(ConfigurationError, match="bad Task key"):
        Task(key, ["python"])


def test_quickstart_keys_are_valid() -> None:
    keys = [f"lr-{lr}-seed-{seed}" for lr in (1e-3, 3e-4, 1e-4) for seed in range(3)]
    assert keys[0] == "lr-0.001-seed-0"
    assert len({Task(key, ["python", "train.py"]).key for key in keys}) == 9


def test_args_become_a_tuple_and_must_be_strings() -> None:
    assert Task("k", ["python", "train.py"]).args == ("python", "train.py")
    with pytest.raises(ConfigurationError, match="not one string"):
        Task("k", "python")
    with pytest.raises(ConfigurationError, match="empty"):
        Task("k", [])
    with pytest.raises(ConfigurationError, match="NUL"):
        Task("k", ["python", "a\0b"])
    with pytest.raises(ConfigurationError):
        Task("k", ["python", 3])  # type: ignore[list-item]
    with pytest.raises(ConfigurationError):
        Task("k", ["python", "\udcff"])  # not encodable as UTF-8


def test_stdin_is_bytes() -> None:
    assert Task("k", ["a"], stdin=b"x").stdin == b"x"
    assert Task("k", ["a"], stdin=bytearray(b"x")).stdin == b"x"
    with pytest.raises(ConfigurationError, match="bytes"):
        Task("k", ["a"], stdin="text")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"SERVATUS_TASK_KEY": "x"}, "reserved"),
        ({"SERVATUS_ANYTHING": "x"}, "reserved"),
        ({"1X": "x"}, "bad environment variable name"),
        ({"A-B": "x"}, "bad environment variable name"),
        ({"A=B": "x"}, "bad environment variable name"),
        ({"": "x"}, "bad environment variable name"),
        ({"A": "x\0y"}, "without NUL"),
        ({"A": 1}, "without NUL"),
    ],
)
def test_bad_env(env: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        Task("k", ["a"], env=env)  # type: ignore[arg-type]


def test_env_is_immutable_and_copied() -> None:
    source = {"WANDB_MODE": "offline", "_X1": ""}
    task = Task("k", ["a"], env=source)
    source["WANDB_MODE"] = "online"
    assert task.env["WANDB_MODE"] == "offline"
    with pytest.raises(TypeError):
        task.env["A"] = "b"  # type: ignore[index]
    assert task.env == {"WANDB_MODE": "offline", "_X1": ""}


def test_identity_is_the_whole_value() -> None:
    base = Task("k", ["python", "train.py"], stdin=b"1", env={"A": "1"})
    assert base == Task("k", ("python", "train.py"), stdin=b"1", env={"A": "1"})
    assert hash(base) == hash(Task("k", ("python", "train.py"), stdin=b"1", env={"A": "1"}))
    assert base != Task("k", ["python", "train.py"], stdin=b"2", env={"A": "1"})
    assert base != Task("k", ["python", "train.py"], stdin=b"1", env={"A": "2"})
    assert base != Task("k", ["python", "eval.py"], stdin=b"1", env={"A": "1"})
    assert base != Task("j", ["python", "train.py"], stdin=b"1", env={"A": "1"})
    with pytest.raises(AttributeError):
        base.key = "other"  # type: ignore[misc]


def test_check_unique_refuses_a_key_twice() -> None:
    with pytest.raises(ConfigurationError, match="more than once"):
        check_unique([Task("a", ["x"]), Task("a", ["x"])])


# -- JSONL --------------------------------------------------------------------------------------


def test_spec_example(spec_files: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir("/")  # stdin_file resolves against the file's directory, not the cwd
    tasks = read_jsonl(spec_files)
    assert tasks == (
        Task("lr-1e-3", ["python", "train.py"], stdin=b'{"lr": 0.001}\n'),
        Task(
            "lr-3e-4",
            ["python", "train.py"],
            stdin=b'{"lr": 0.0003}\n',
            env={"WANDB_MODE": "offline"},
        ),
    )


def test_absolute_stdin_file(tmp_path: Path) -> None:
    data = tmp_path / "data.bin"
    data.write_bytes(b"\0\1\2")
    jsonl = tmp_path / "sub" / "t.jsonl"
    jsonl.parent.mkdir()
    jsonl.write_text(json.dumps({"key": "a", "args": ["x"], "stdin_file": str(data)}) + "\n")
    assert read_jsonl(jsonl)[0].stdin == b"\0\1\2"


def test_empty_file_has_no_tasks(tmp_path: Path) -> None:
    (tmp_path / "t.jsonl").write_bytes(b"")
    assert read_jsonl(tmp_path / "t.jsonl") == ()


@pytest.mark.parametrize(
    ("content", "line", "message"),
    [
        ('{"key": "a", "args": ["x"]}', 1, "newline"),
        ('{"key": "a", "args": ["x"]}\n{"key": "b", "args": ["x"]}', 2, "newline"),
        ('{"key": "a", "args": ["x"]}\n\n', 2, "JSON"),
        ('{"key": "a", "args": ["x"], "extra": 1}\n', 1, 'unknown field "extra"'),
        ('{"key": "a", "args": ["x"], "stdin": "hello"}\n', 1, 'unknown field "stdin"'),
        ('{"args": ["x"]}\n', 1, 'missing field "key"'),
        ('{"key": "a"}\n', 1, 'missing field "args"'),
        ('{"key": "a", "args": "x"}\n', 1, "args"),
        ('{"key": "a", "args": [1]}\n', 1, "args"),
        ('{"key": 1, "args": ["x"]}\n', 1, "key"),
        ('{"key": "a", "args": ["x"], "env": {"A": 1}}\n', 1, "env"),
        ('{"key": "a", "args": ["x"], "env": ["A"]}\n', 1, "env"),
        ('{"key": "a", "key": "b", "args": ["x"]}\n', 1, "twice"),
        ('["a"]\n', 1, "JSON object"),
        ("{not json}\n", 1, "JSON"),
        ('{"key": "a", "args": ["x"], "x": NaN}\n', 1, "NaN"),
        ('{"key": "a", "args": ["x"]}\n{"key": "a", "args": ["y"]}\n', 2, "line 1"),
        ('{"key": "a", "args": ["x"]}\n{"key": "a", "args": ["x"]}\n', 2, "line 1"),
        ('{"key": "a/b", "args": ["x"]}\n', 1, "bad Task key"),
        ('{"key": "a", "args": []}\n', 1, "empty"),
        ('{"key": "a", "args": ["x"], "stdin_file": "missing.json"}\n', 1, "missing.json"),
        ('{"key": "a", "args": ["x"], "env": {"SERVATUS_SLOT": "1"}}\n', 1, "reserved"),
    ],
)
def test_errors_name_file_and_line(tmp_path: Path, content: str, line: int, message: str) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text(content)
    with pytest.raises(ConfigurationError, match=f"bad.jsonl:{line}: ") as caught:
        read_jsonl(path)
    assert message in str(caught.value)


def test_invalid_utf8_names_the_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_bytes(b'{"key": "a", "args": ["x"]}\n{"key": "\xff"}\n')
    with pytest.raises(ConfigurationError, match=r"bad.jsonl:2: "):
        read_jsonl(path)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match=r"nope\.jsonl"):
        read_jsonl(tmp_path / "nope.jsonl")


SLURM_LINE = '{"key": "a", "args": ["x"], "env": {"SLURM_CPUS": "2"}}'
AUTHORING_ERRORS = [
    ('{"key": "a", "args": ["x"], "cpus": 2}', 'unknown field "cpus"; a Task line has "key", '
     '"args" and optionally "stdin_file" and "env"'),
    ('{"key": "a", "args": ["x"], "b": 1, "c": 2}', 'unknown fields "b", "c"; a Task line has'),
    ('{"key": "a", "args": ["x"], "env": ["A"]}', '"env" must be an object of strings'),
    ('{"key": "a", "args": ["x"], "env": {"A": 1}}', '"env" must be an object of strings'),
    ('{"key": "a", "args": "x"}', '"args" must be an array of strings'),
    ('{"key": "a", "args": ["x", 2]}', '"args" must be an array of strings'),
    ('{"key": 7, "args": ["x"]}', '"key" must be a string'),
    ('{"key": "a", "args": ["x"], "stdin_file": 3}', '"stdin_file" must be a string, a path'),
    ('{"key": "a", "args": ["x"], "stdin_file": "x\\u0000y"}', '"stdin_file" must be a path '
     "without NUL bytes"),
    ('{"key": "a", "args": ["x"], "stdin_file": "missing.json"}', "cannot read stdin_file "
     "'{dir}/missing.json': No such file or directory"),
    ('{"key": "a", "args": ["x"], "stdin_file": "."}', "cannot read stdin_file '{dir}': Is a "
     "directory"),
    ('{"key": "a", "args": ["x"], "stdin_file": "/dev/null"}', "cannot read stdin_file "
     "'/dev/null': it is not a regular file"),
    ('{"args": ["x"]}', 'missing field "key"'),
    ('{"key": "a", "key": "b", "args": ["x"]}', 'field "key" appears twice'),
    ('{"key": ', "not valid JSON: Expecting value at column 9"),
    ('["a"]', 'a Task line must be a JSON object with "key", "args"'),
    (SLURM_LINE, "Task a: SLURM_CPUS is Slurm's; no SLURM_* variable reaches a step"),
    ('{"key": "a", "args": ["x"], "env": {"A": "\\u0000"}}', "Task a: env A must be a UTF-8"),
]  # fmt: skip


@pytest.mark.parametrize("command", ["create", "ensure", "append"])
@pytest.mark.parametrize(("line", "said"), AUTHORING_ERRORS)
def test_every_authoring_error_names_file_and_line_in_the_authors_terms(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str, line: str, said: str
) -> None:
    """The third line is bad; the message is the file, the line, and what is wrong in the
    words of the file, never cattrs' paths or Python's types."""
    state = tmp_path / "state"
    if command == "append":
        create_state(state, [Task("first", ["x"])], appendable=True)
    path = tmp_path / "tasks.jsonl"
    path.write_text(f'{{"key": "z", "args": ["x"]}}\n{{"key": "y", "args": ["x"]}}\n{line}\n')
    journal = (state / "journal").read_bytes() if command == "append" else None
    assert main([command, str(state), str(path)]) == 1
    err = capsys.readouterr().err
    expected = said.format(dir=tmp_path)
    assert err.startswith(f"servatus: ConfigurationError: {path}:3: {expected}"), err
    assert err.count("\n") == 1 and "@ $" not in err and "dict[" not in err
    if journal is None:
        assert not (state / "journal").exists()
    else:
        assert (state / "journal").read_bytes() == journal
