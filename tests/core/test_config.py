"""SERVATUS.toml: loading, every rule of the Configuration reference, and ``servatus profile``."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from servatus.cli import main
from servatus.config import (
    Apptainer,
    Profile,
    Resources,
    Target,
    capacity,
    format_duration,
    parse_duration,
    parse_time_limit,
    profile_from_document,
    profile_problems,
    profile_to_document,
    round_up_to_minute,
)
from servatus.errors import ConfigurationError

DATA = Path(__file__).parent / "data"
SPEC_FILES = {"quickstart": DATA / "quickstart.toml", "giano": DATA / "giano.toml"}
SPEC_FILES["research"] = DATA / "research.toml"
SPEC_PROFILES = {
    "quickstart": ["a100"],
    "giano": ["rtx2080", "l40", "cpu"],
    "research": ["a100", "l40s", "l40", "h100", "cpu", "eval", "smoke", "l40-solo"],
}

DROP = object()
"""An override value that removes the key."""

TARGET: dict[str, Any] = {
    "slurm_bin": "/usr/bin",
    "work_root": "/w/sweep",
    "log_root": "/w/sweep/logs",
    "partitions": ["p"],
    "max_tasks_per_allocation": 4,
    "max_cpus_per_allocation": 16,
    "max_memory_mib_per_allocation": 65536,
    "max_time_limit": "1-00:00:00",
}
RESOURCES: dict[str, Any] = {"cpus": 4, "memory_mib": 8192, "time_limit": "01:00:00"}


def literal(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, list):
        return "[" + ", ".join(literal(item) for item in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{json.dumps(k)} = {literal(v)}" for k, v in value.items()) + "}"
    raise TypeError(value)


def table(header: str | None, values: dict[str, Any]) -> str:
    lines = [f"[{header}]"] if header else []
    lines += [f"{json.dumps(key)} = {literal(value)}" for key, value in values.items()]
    return "\n".join(lines) + "\n\n"


def merged(base: dict[str, Any], changes: dict[str, Any] | None) -> dict[str, Any]:
    result = dict(base)
    for key, value in (changes or {}).items():
        if value is DROP:
            result.pop(key, None)
        else:
            result[key] = value
    return result


def document(
    *,
    top: dict[str, Any] | None = None,
    target: dict[str, Any] | None = None,
    resources: dict[str, Any] | None = None,
    profiles: dict[str, dict[str, dict[str, Any]]] | None = None,
) -> str:
    """A SERVATUS.toml: the valid defaults above with changes, then profile tables."""
    text = table(None, top or {})
    text += table("target", merged(TARGET, target))
    text += table("resources", merged(RESOURCES, resources))
    for name, tables in (profiles or {}).items():
        text += f"[profiles.{json.dumps(name)}]\n\n"
        for header, values in tables.items():
            text += table(f"profiles.{json.dumps(name)}.{header}", values)
    return text


@pytest.fixture
def write(tmp_path: Path) -> Any:
    def write(text: str) -> Path:
        path = tmp_path / "SERVATUS.toml"
        path.write_text(text)
        return path

    return write


def load(write: Any, text: str, name: str | None = None) -> Profile:
    return Profile.load(write(text), name=name)


def refused(write: Any, text: str, name: str | None = None) -> str:
    with pytest.raises(ConfigurationError) as info:
        load(write, text, name)
    message = str(info.value)
    assert "\n" not in message
    return message


# The spec's configurations ----------------------------------------------------------------------


def test_the_spec_files_list_every_profile() -> None:
    for cluster, path in SPEC_FILES.items():
        with path.open("rb") as file:
            assert sorted(tomllib.load(file)["profiles"]) == sorted(SPEC_PROFILES[cluster])


@pytest.mark.parametrize(
    ("cluster", "name"),
    [(cluster, name) for cluster, names in SPEC_PROFILES.items() for name in names],
)
def test_every_spec_profile_loads_and_fits(cluster: str, name: str) -> None:
    profile = Profile.load(SPEC_FILES[cluster], name=name)
    assert profile.name == name
    assert profile_problems(profile) == ()
    assert capacity(profile.target, profile.resources) >= 1
    assert profile.target.launcher == "apptainer"


def test_quickstart_resolves_the_documented_values() -> None:
    profile = Profile.load(SPEC_FILES["quickstart"])
    target, resources = profile.target, profile.resources
    assert profile.name == "a100"
    assert target.host == "hpc"
    assert target.apptainer == Apptainer(
        executable="/usr/bin/apptainer",
        image="/scratch/alice/images/train.sif",
        binds=("/datasets:/datasets:ro",),
    )
    assert target.partitions == ("gpu",)
    assert target.max_time_limit == 2 * 86400
    assert (target.gpu_gres, target.max_gpus_per_allocation) == ("gpu:a100", 4)
    assert resources == Resources(
        cpus=16, memory_mib=65536, time_limit=12 * 3600, gpus=1, signal_before_end=600
    )
    assert capacity(target, resources) == 4


def test_research_l40s_takes_gpus_from_document_defaults() -> None:
    profile = Profile.load(SPEC_FILES["research"], name="l40s")
    assert (profile.resources.cpus, profile.resources.memory_mib) == (104, 196608)
    assert profile.resources.gpus == 1
    assert profile.resources.time_limit == 72 * 3600
    assert profile.target.max_tasks_per_allocation == 2
    assert (profile.target.account, profile.target.qos) == ("default", "limitjob3node2")
    assert profile.target.gpu_gres == "gpu:l40s"
    assert capacity(profile.target, profile.resources) == 2


def test_research_defaults_to_a100_and_profiles_override_key_by_key() -> None:
    a100 = Profile.load(SPEC_FILES["research"])
    assert a100.name == "a100"
    assert a100.target.gpu_gres == "gpu:a100_80GB"
    assert a100.target.max_gpus_per_allocation == 1
    l40 = Profile.load(SPEC_FILES["research"], name="l40")
    assert (l40.resources.cpus, l40.resources.memory_mib) == (64, 98304)
    assert l40.target.max_cpus_per_allocation == 128
    assert l40.target.max_memory_mib_per_allocation == 196608
    eval_ = Profile.load(SPEC_FILES["research"], name="eval")
    assert eval_.target.partitions == ("amdepyc9754", "a100")
    assert (eval_.resources.time_limit, eval_.target.max_time_limit) == (21600, 21600)
    assert eval_.target.gpu_gres is None
    assert capacity(eval_.target, eval_.resources) == 8
    smoke = Profile.load(SPEC_FILES["research"], name="smoke")
    assert (smoke.resources.time_limit, smoke.target.max_time_limit) == (1800, 1800)


def test_cpu_profiles_have_no_gpus() -> None:
    giano = Profile.load(SPEC_FILES["giano"], name="cpu")
    assert (giano.resources.gpus, giano.target.gpu_gres) == (0, None)
    assert giano.target.max_gpus_per_allocation == 0
    assert giano.resources.time_limit == 4 * 3600
    assert capacity(giano.target, giano.resources) == 2
    research = Profile.load(SPEC_FILES["research"], name="cpu")
    assert (research.resources.gpus, research.target.gpu_gres) == (0, None)
    assert research.resources.cpus == 128


def test_giano_default_is_rtx2080() -> None:
    profile = Profile.load(SPEC_FILES["giano"])
    assert profile.name == "rtx2080"
    assert profile.target.partitions == ("rtx2080",)
    assert profile.target.max_time_limit == 3 * 86400
    assert profile.resources.signal_before_end is None


# Choosing a profile -----------------------------------------------------------------------------


def test_explicit_name_beats_default_profile(write: Any) -> None:
    text = document(top={"default_profile": "a"}, profiles={"a": {}, "b": {}})
    assert load(write, text).name == "a"
    assert load(write, text, "b").name == "b"


def test_a_sole_profile_selects_itself(write: Any) -> None:
    assert load(write, document(profiles={"only": {}})).name == "only"


def test_a_file_without_profiles_is_the_profile_default(write: Any) -> None:
    assert load(write, document()).name == "default"
    assert load(write, document(), "default").name == "default"
    message = refused(write, document(), "gpu")
    assert "unknown profile 'gpu'" in message
    assert "default" in message


def test_an_unknown_name_lists_the_known_ones(write: Any) -> None:
    message = refused(write, document(profiles={"b": {}, "a": {}}), "c")
    assert message.endswith("SERVATUS.toml: unknown profile 'c'; known: a, b")


def test_several_profiles_and_no_default_is_an_error(write: Any) -> None:
    message = refused(write, document(profiles={"b": {}, "a": {}}))
    assert "several profiles (a, b) and no default_profile" in message


def test_default_profile_must_name_a_profile(write: Any) -> None:
    text = document(top={"default_profile": "gone"}, profiles={"a": {}})
    assert "default_profile 'gone' names no profile; known: a" in refused(write, text)
    assert "default_profile 'gone'" in refused(write, text, "a")


def test_profile_tables_override_document_tables_key_by_key(write: Any) -> None:
    text = document(
        target={"binds": ["/data"], "apptainer": "/usr/bin/apptainer", "image": "/i/a.sif"},
        profiles={
            "x": {
                "target": {"partitions": ["q", "r"], "binds": ["/other:/mnt:rw"]},
                "resources": {"cpus": 8},
            }
        },
    )
    profile = load(write, text)
    assert profile.target.partitions == ("q", "r")
    assert profile.target.work_root == "/w/sweep"
    assert profile.target.apptainer == Apptainer(
        "/usr/bin/apptainer", "/i/a.sif", ("/other:/mnt:rw",)
    )
    assert (profile.resources.cpus, profile.resources.memory_mib) == (8, 8192)


def test_missing_required_keys_are_named(write: Any) -> None:
    text = document(target={"slurm_bin": DROP}, resources={"cpus": DROP})
    message = refused(write, text)
    assert "profile 'default': missing target.slurm_bin, resources.cpus" in message


# Unknown keys and types -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "path"),
    [
        ({"top": {"defaults_profile": "a"}}, "defaults_profile"),
        ({"target": {"gpus": 1}}, "target.gpus"),
        ({"resources": {"gpu": 1}}, "resources.gpu"),
        ({"profiles": {"a100": {"resource": {"cpus": 1}}}}, "profiles.a100.resource"),
        (
            {"profiles": {"a100": {"target": {"gpu_gress": "gpu"}}}},
            "profiles.a100.target.gpu_gress",
        ),
        ({"profiles": {"a100": {"resources": {"mem": 1}}}}, "profiles.a100.resources.mem"),
    ],
)
def test_unknown_keys_are_rejected_with_their_path(
    write: Any, kwargs: dict[str, Any], path: str
) -> None:
    file = write(document(**kwargs))
    with pytest.raises(ConfigurationError) as info:
        Profile.load(file)
    assert str(info.value) == f"{file}: {path}: unknown key"


def test_unknown_keys_in_unselected_profiles_are_rejected(write: Any) -> None:
    text = document(
        top={"default_profile": "a"},
        profiles={"a": {}, "b": {"target": {"partition": ["x"]}}},
    )
    assert "profiles.b.target.partition: unknown key" in refused(write, text)


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        ({"resources": {"cpus": "4"}}, "resources.cpus: expected an integer, got a string"),
        ({"resources": {"cpus": True}}, "resources.cpus: expected an integer, got a boolean"),
        ({"resources": {"cpus": 4.0}}, "resources.cpus: expected an integer, got a float"),
        ({"target": {"partitions": "p"}}, "target.partitions: expected an array, got a string"),
        ({"target": {"partitions": ["p", 3]}}, "target.partitions[1]: expected a string"),
        ({"target": {"host": 7}}, "target.host: expected a string, got an integer"),
        ({"target": {"max_time_limit": 3600}}, "target.max_time_limit: expected a string"),
        ({"top": {"profiles": 5}}, "profiles: expected a table"),
        ({"top": {"target": "x"}}, "target: expected a table"),
        (
            {"target": {"launcher_options": {"a": 1}}},
            "target.launcher_options.a: expected a string",
        ),
        ({"target": {"launcher_options": ["a"]}}, "target.launcher_options: expected a table"),
    ],
)
def test_wrong_types_are_rejected(write: Any, kwargs: dict[str, Any], expected: str) -> None:
    if "top" in kwargs:  # a key given twice is a TOML error, so write this one by hand
        key, value = next(iter(kwargs["top"].items()))
        text = f"{key} = {literal(value)}\n"
    else:
        text = document(**kwargs)
    assert expected in refused(write, text)


def test_every_problem_is_reported_on_one_line(write: Any) -> None:
    text = document(target={"slurm_bin": "bin", "log_root": "/l/%j"}, resources={"cpus": 0})
    message = refused(write, text)
    assert "target.slurm_bin: 'bin' is not an absolute path" in message
    assert "target.log_root: '/l/%j' must not contain '%'" in message
    assert "resources.cpus: must be positive, got 0" in message


# Values -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("target", "expected"),
    [
        ({"slurm_bin": "usr/bin"}, "target.slurm_bin: 'usr/bin' is not an absolute path"),
        ({"work_root": "w"}, "target.work_root: 'w' is not an absolute path"),
        ({"work_root": "/w,x"}, "target.work_root: '/w,x' must not contain ','"),
        ({"work_root": "/w:x"}, "target.work_root: '/w:x' must not contain ':'"),
        ({"log_root": "logs"}, "target.log_root: 'logs' is not an absolute path"),
        ({"log_root": "/logs/%j"}, "target.log_root: '/logs/%j' must not contain '%'"),
        ({"apptainer": "apptainer", "image": "/i.sif"}, "target.apptainer: 'apptainer' is not"),
        ({"apptainer": "/a", "image": "i.sif"}, "target.image: 'i.sif' is not an absolute path"),
        ({"apptainer": "/a", "image": "/i:x.sif"}, "target.image: '/i:x.sif' must not contain"),
        ({"partitions": []}, "target.partitions: must name at least one partition"),
        ({"partitions": [""]}, "target.partitions[0]: must not be empty"),
        ({"partitions": ["a,b"]}, "target.partitions[0]: 'a,b' is not one partition name"),
        ({"host": "-oProxyCommand=x"}, "target.host: '-oProxyCommand=x' is not an SSH"),
        ({"host": ""}, "target.host: must not be empty"),
        ({"slurm_bin": "/usr/bin\n"}, "contains a control character"),
        ({"gpu_gres": "gpu:2", "max_gpus_per_allocation": 2}, "'gpu:2' has a count"),
        ({"max_tasks_per_allocation": 0}, "target.max_tasks_per_allocation: must be positive"),
        ({"max_cpus_per_allocation": -1}, "target.max_cpus_per_allocation: must be positive"),
        ({"max_memory_mib_per_allocation": 0}, "max_memory_mib_per_allocation: must be positive"),
        ({"max_allocations_per_submit": 0}, "target.max_allocations_per_submit: must be positive"),
        ({"max_script_bytes": 0}, "target.max_script_bytes: must be positive, got 0"),
        ({"max_gpus_per_allocation": -1}, "target.max_gpus_per_allocation: must not be negative"),
        ({"max_time_limit": "0:00:00"}, "target.max_time_limit: invalid time limit '0:00:00'"),
        ({"launcher": ""}, "target.launcher: must not be empty"),
    ],
)
def test_target_value_rules(write: Any, target: dict[str, Any], expected: str) -> None:
    assert expected in refused(write, document(target=target))


@pytest.mark.parametrize(
    ("resources", "expected"),
    [
        ({"cpus": 0}, "resources.cpus: must be positive, got 0"),
        ({"memory_mib": -5}, "resources.memory_mib: must be positive, got -5"),
        ({"gpus": -1}, "resources.gpus: must not be negative, got -1"),
        ({"time_limit": "1h"}, "resources.time_limit: invalid duration '1h'"),
        ({"time_limit": "0:00:00"}, "resources.time_limit: invalid time limit '0:00:00'"),
        ({"signal_before_end": "0:00:00"}, "resources.signal_before_end: invalid duration"),
        ({"signal_before_end": 600}, "resources.signal_before_end: expected a string"),
    ],
)
def test_resources_value_rules(write: Any, resources: dict[str, Any], expected: str) -> None:
    assert expected in refused(write, document(resources=resources))


def test_max_gpus_may_be_zero(write: Any) -> None:
    assert load(write, document(target={"max_gpus_per_allocation": 0})).resources.gpus == 0


def test_optional_target_keys_pass_through(write: Any) -> None:
    text = document(
        target={
            "host": "alice@hpc",
            "account": "acct",
            "qos": "normal",
            "constraint": "a100|h100",
            "max_allocations_per_submit": 3,
            "max_script_bytes": 4096,
        }
    )
    target = load(write, text).target
    assert (target.host, target.account, target.qos) == ("alice@hpc", "acct", "normal")
    assert (target.constraint, target.max_allocations_per_submit) == ("a100|h100", 3)
    assert target.max_script_bytes == 4096


def test_defaults_of_optional_keys(write: Any) -> None:
    profile = load(write, document())
    assert profile.target.host is None
    assert profile.target.max_script_bytes == 1048576
    assert profile.target.max_allocations_per_submit is None
    assert (profile.target.gpu_gres, profile.target.max_gpus_per_allocation) == (None, 0)
    assert (profile.resources.gpus, profile.resources.signal_before_end) == (0, None)


@pytest.mark.parametrize("bind", ["/a", "/a:/b", "/a:/b:ro", "/a:/b:rw", "/datasets:/datasets:ro"])
def test_valid_binds(write: Any, bind: str) -> None:
    text = document(target={"apptainer": "/usr/bin/apptainer", "image": "/i.sif", "binds": [bind]})
    assert load(write, text).target.apptainer == Apptainer("/usr/bin/apptainer", "/i.sif", (bind,))


@pytest.mark.parametrize(
    "bind", ["a", "/a:b", "/a:/b:rx", "/a:/b:ro:x", "/a,/b", "", "/a:", ":/b", "/a:/b:"]
)
def test_invalid_binds(write: Any, bind: str) -> None:
    text = document(target={"apptainer": "/usr/bin/apptainer", "image": "/i.sif", "binds": [bind]})
    assert "target.binds[0]:" in refused(write, text)


# Pairs of keys ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("target", "resources", "expected"),
    [
        ({"gpu_gres": "gpu"}, {}, "target.gpu_gres and target.max_gpus_per_allocation: set both"),
        ({"max_gpus_per_allocation": 2}, {}, "target.gpu_gres and target.max_gpus_per_allocation"),
        ({"max_gpus_per_allocation": 2}, {"gpus": 1}, "resources.gpus = 1 needs target.gpu_gres"),
        ({"apptainer": "/usr/bin/apptainer"}, {}, "target.apptainer and target.image: set both"),
        ({"image": "/i.sif"}, {}, "target.apptainer and target.image: set both or neither"),
        ({"binds": ["/data"]}, {}, "target.binds needs target.apptainer and target.image"),
        (
            {"launcher": "apptainer"},
            {},
            'target.launcher = "apptainer" needs target.apptainer and target.image',
        ),
        (
            {},
            {"signal_before_end": "01:00:00"},
            "resources.signal_before_end (01:00:00) must be shorter than resources.time_limit",
        ),
    ],
)
def test_keys_that_go_together(
    write: Any, target: dict[str, Any], resources: dict[str, Any], expected: str
) -> None:
    message = refused(write, document(target=target, resources=resources))
    assert "profile 'default':" in message
    assert expected in message


def test_gpus_with_their_gres_load(write: Any) -> None:
    text = document(target={"gpu_gres": "gpu:a100", "max_gpus_per_allocation": 4})
    text += table("profiles.g.resources", {"gpus": 2})
    profile = load(write, text)
    assert (profile.target.gpu_gres, profile.resources.gpus) == ("gpu:a100", 2)
    assert capacity(profile.target, profile.resources) == 2


# Ceilings ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("resources", "expected"),
    [
        ({"cpus": 17}, "resources.cpus = 17 exceeds target.max_cpus_per_allocation = 16"),
        (
            {"memory_mib": 65537},
            "resources.memory_mib = 65537 exceeds target.max_memory_mib_per_allocation = 65536",
        ),
        ({"gpus": 3}, "resources.gpus = 3 exceeds target.max_gpus_per_allocation = 2"),
        (
            {"time_limit": "1-00:00:01"},
            "resources.time_limit = 1-00:01:00 exceeds target.max_time_limit = 1-00:00:00",
        ),
    ],
)
def test_a_profile_above_a_ceiling_is_refused(
    write: Any, resources: dict[str, Any], expected: str
) -> None:
    text = document(
        target={"gpu_gres": "gpu", "max_gpus_per_allocation": 2},
        top={"default_profile": "big"},
        profiles={"big": {"resources": resources}},
    )
    message = refused(write, text)
    assert "profile 'big':" in message
    assert expected in message


def test_a_time_limit_longer_than_a_campaign_records_is_refused(write: Any) -> None:
    """A campaign's journal holds durations below 2**36 s: a longer time limit would be recorded
    in an intent before its sbatch, and every later read of the campaign would refuse it."""
    longest = {"max_time_limit": "999999-00:00:00"}
    profile = load(write, document(target=longest, resources={"time_limit": "795364-07:32:00"}))
    assert profile.resources.time_limit == 2**36 - 16
    message = refused(write, document(target=longest, resources={"time_limit": "795364-07:33:00"}))
    assert message.endswith(
        "resources.time_limit = 795364-07:33:00 is longer than a campaign records "
        "(at most 795364-07:32:00)"
    )


def test_a_profile_at_its_ceilings_loads(write: Any) -> None:
    text = document(
        resources={"cpus": 16, "memory_mib": 65536, "time_limit": "24:00:00"},
    )
    profile = load(write, text)
    assert capacity(profile.target, profile.resources) == 1


# Durations --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("0:00:00", 0),
        ("0:10:00", 600),
        ("00:10:00", 600),
        ("12:00:00", 43200),
        ("72:00:00", 259200),
        ("3-00:00:00", 259200),
        ("1-09:12:03", 119523),
        ("100:00:01", 360001),
    ],
)
def test_parse_duration(text: str, seconds: int) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize(
    "text", ["", "10", "10:00", "1:60:00", "1:00:60", "1-24:00:00", "-1:00:00", " 1:00:00", "1h"]
)
def test_invalid_durations(text: str) -> None:
    with pytest.raises(ConfigurationError, match="invalid duration"):
        parse_duration(text)


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(0, "00:00:00"), (600, "00:10:00"), (57600, "16:00:00"), (259200, "3-00:00:00")],
)
def test_format_duration(seconds: int, text: str) -> None:
    assert format_duration(seconds) == text


def test_format_duration_refuses_negative() -> None:
    with pytest.raises(ValueError, match="negative"):
        format_duration(-1)


@given(st.integers(min_value=0, max_value=10**9))
def test_format_then_parse_is_identity(seconds: int) -> None:
    assert parse_duration(format_duration(seconds)) == seconds


@given(st.integers(min_value=0, max_value=10**9))
def test_round_up_to_minute_is_the_next_whole_minute(seconds: int) -> None:
    rounded = round_up_to_minute(seconds)
    assert rounded % 60 == 0
    assert seconds <= rounded < seconds + 60


@pytest.mark.parametrize(
    ("text", "seconds"), [("0:00:30", 60), ("1:00:01", 3660), ("1:00:00", 3600), ("0:00:01", 60)]
)
def test_time_limits_round_up_to_whole_minutes(write: Any, text: str, seconds: int) -> None:
    assert parse_time_limit(text) == seconds
    profile = load(write, document(target={"max_time_limit": text}, resources={"time_limit": text}))
    assert (profile.resources.time_limit, profile.target.max_time_limit) == (seconds, seconds)


def test_signal_before_end_keeps_its_seconds(write: Any) -> None:
    profile = load(write, document(resources={"signal_before_end": "0:00:30"}))
    assert profile.resources.signal_before_end == 30


# Launchers --------------------------------------------------------------------------------------


def test_launcher_defaults_follow_apptainer(write: Any) -> None:
    assert load(write, document()).target.launcher == "direct"
    text = document(target={"apptainer": "/usr/bin/apptainer", "image": "/i.sif"})
    assert load(write, text).target.launcher == "apptainer"


def test_a_site_launcher_and_its_options_merge_key_by_key(write: Any) -> None:
    text = document(
        target={"launcher": "site", "launcher_options": {"module": "cuda/12", "wrap": "a"}},
        profiles={"x": {"target.launcher_options": {"wrap": "b", "extra": "c"}}},
    )
    target = load(write, text).target
    assert target.launcher == "site"
    assert target.launcher_options == (("extra", "c"), ("module", "cuda/12"), ("wrap", "b"))


def test_launcher_direct_leaves_inherited_apptainer_keys_unused(write: Any) -> None:
    text = document(
        target={"apptainer": "/usr/bin/apptainer", "image": "/i.sif", "binds": ["/d"]},
        profiles={"venv": {"target": {"launcher": "direct"}}},
    )
    target = load(write, text).target
    assert (target.launcher, target.apptainer) == ("direct", None)


def test_an_empty_binds_array_needs_no_apptainer(write: Any) -> None:
    assert load(write, document(target={"binds": []})).target.apptainer is None


def test_python_values_with_direct_and_apptainer_are_contradictory() -> None:
    target = make_target(launcher="direct", apptainer=Apptainer("/a", "/i.sif"))
    profile = Profile("p", target, Resources(cpus=1, memory_mib=1, time_limit=60))
    assert profile_problems(profile) == (
        'target.launcher = "direct" would ignore target.apptainer and target.image',
    )


def test_a_site_launcher_may_use_the_apptainer_keys(write: Any) -> None:
    text = document(target={"launcher": "site", "apptainer": "/a", "image": "/i.sif"})
    assert load(write, text).target.apptainer == Apptainer("/a", "/i.sif")


# Reading files ----------------------------------------------------------------------------------


def test_a_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="cannot read: No such file"):
        Profile.load(tmp_path / "SERVATUS.toml")


def test_a_directory(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="cannot read"):
        Profile.load(tmp_path)


def test_invalid_toml(write: Any) -> None:
    assert "invalid TOML" in refused(write, "[target\n")


def test_invalid_utf8(tmp_path: Path) -> None:
    path = tmp_path / "SERVATUS.toml"
    path.write_bytes(b'host = "\xff"\n')
    with pytest.raises(ConfigurationError, match="invalid TOML"):
        Profile.load(path)


# Documents --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("cluster", "name"),
    [(cluster, name) for cluster, names in SPEC_PROFILES.items() for name in names],
)
def test_profile_documents_round_trip_through_json(cluster: str, name: str) -> None:
    profile = Profile.load(SPEC_FILES[cluster], name=name)
    document_ = json.loads(json.dumps(profile_to_document(profile)))
    assert profile_from_document(document_) == profile


def test_profile_document_shape(write: Any) -> None:
    text = document(target={"launcher": "site", "launcher_options": {"b": "2", "a": "1"}})
    data = profile_to_document(load(write, text))
    assert data["name"] == "default"
    assert data["target"]["launcher_options"] == {"a": "1", "b": "2"}
    assert data["target"]["apptainer"] is None
    assert data["target"]["max_time_limit"] == 86400
    assert data["resources"] == {
        "cpus": 4,
        "memory_mib": 8192,
        "time_limit": 3600,
        "gpus": 0,
        "signal_before_end": None,
    }


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (lambda d: d.update(extra=1), "extra: unknown key"),
        (lambda d: d["target"].pop("work_root"), "target.work_root: required key missing"),
        (lambda d: d["resources"].update(cpus=64), "resources.cpus = 64 exceeds"),
        (lambda d: d["resources"].update(time_limit=90), "not a whole number of minutes"),
        (lambda d: d["target"].update(partitions="p"), "target.partitions: expected an array"),
        (lambda d: d["target"].update(work_root="/a:b"), "must not contain ':'"),
    ],
)
def test_tampered_documents_are_refused(write: Any, change: Any, expected: str) -> None:
    data = profile_to_document(load(write, document()))
    change(data)
    with pytest.raises(ConfigurationError, match=r"^plan: ") as info:
        profile_from_document(data, where="plan")
    assert expected in str(info.value)


def test_a_document_must_be_a_table() -> None:
    with pytest.raises(ConfigurationError, match="expected a table, got an array"):
        profile_from_document([])


# Values built in Python -------------------------------------------------------------------------


def make_target(**changes: Any) -> Target:
    values: dict[str, Any] = {
        "slurm_bin": "/usr/bin",
        "work_root": "/w",
        "log_root": "/l",
        "partitions": ("p",),
        "max_tasks_per_allocation": 8,
        "max_cpus_per_allocation": 64,
        "max_memory_mib_per_allocation": 100000,
        "max_time_limit": 86400,
        "gpu_gres": "gpu",
        "max_gpus_per_allocation": 3,
    }
    values.update(changes)
    return Target(**values)


@pytest.mark.parametrize(
    ("target", "resources", "fits"),
    [
        ({}, {"cpus": 8, "memory_mib": 1000}, 8),
        ({}, {"cpus": 16, "memory_mib": 1000}, 4),
        ({}, {"cpus": 1, "memory_mib": 30000}, 3),
        ({}, {"cpus": 1, "memory_mib": 1000, "gpus": 2}, 1),
        ({"max_gpus_per_allocation": 0, "gpu_gres": None}, {"cpus": 1, "memory_mib": 1}, 8),
        ({}, {"cpus": 65, "memory_mib": 1}, 0),
    ],
)
def test_capacity(target: dict[str, Any], resources: dict[str, Any], fits: int) -> None:
    needs: dict[str, Any] = {"time_limit": 3600, **resources}
    assert capacity(make_target(**target), Resources(**needs)) == fits


def test_profile_problems_for_python_values() -> None:
    good = Profile("p", make_target(), Resources(cpus=1, memory_mib=1, time_limit=60))
    assert profile_problems(good) == ()
    bad = Profile(
        "p",
        make_target(work_root="rel", partitions=()),
        Resources(cpus=0, memory_mib=1, time_limit=61),
    )
    problems = profile_problems(bad)
    assert "target.work_root: 'rel' is not an absolute path" in problems
    assert "target.partitions: must name at least one partition" in problems
    assert "resources.cpus: must be positive, got 0" in problems
    assert "resources.time_limit: 61 s is not a whole number of minutes" in problems


# servatus profile ---------------------------------------------------------------------------------


def test_cli_profile_json(capsys: pytest.CaptureFixture[str]) -> None:
    path = SPEC_FILES["research"]
    assert main(["profile", "--config", str(path), "--profile", "l40s", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["config"] == str(path)
    assert out["capacity"] == 2
    assert out["profile"] == profile_to_document(Profile.load(path, name="l40s"))
    assert out["profile"]["target"]["launcher"] == "apptainer"


def test_cli_profile_human(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["profile", "--config", str(SPEC_FILES["quickstart"])]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "profile a100"
    assert any(line.split() == ["max_time_limit", "2-00:00:00"] for line in lines)
    assert any(line.split() == ["signal_before_end", "00:10:00"] for line in lines)
    assert any(line.split() == ["launcher", "apptainer"] for line in lines)
    assert any(line.split() == ["binds", "/datasets:/datasets:ro"] for line in lines)
    assert lines[-1] == "capacity: 4 Tasks per allocation"


def test_cli_profile_reads_servatus_toml_in_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "SERVATUS.toml").write_text(document(resources={"cpus": 8}))
    monkeypatch.chdir(tmp_path)
    assert main(["profile", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["config"] == "SERVATUS.toml"
    assert (out["profile"]["name"], out["capacity"]) == ("default", 2)


@pytest.mark.parametrize(
    ("args", "text", "expected"),
    [
        (
            [],
            document(profiles={"a100": {"target": {"gpu_gress": "gpu"}}}),
            "servatus: ConfigurationError: {path}: profiles.a100.target.gpu_gress: unknown key",
        ),
        (
            ["--profile", "x"],
            document(profiles={"a": {}}),
            "servatus: ConfigurationError: {path}: unknown profile 'x'; known: a",
        ),
        (
            [],
            document(resources={"cpus": 17}),
            "servatus: ConfigurationError: {path}: profile 'default': "
            "resources.cpus = 17 exceeds target.max_cpus_per_allocation = 16",
        ),
    ],
)
def test_cli_profile_errors_are_one_line_exit_1(
    write: Any,
    capsys: pytest.CaptureFixture[str],
    args: list[str],
    text: str,
    expected: str,
) -> None:
    path = write(text)
    assert main(["profile", "--config", str(path), *args]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == expected.format(path=path) + "\n"


def test_cli_profile_missing_config(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["profile"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("servatus: ConfigurationError: SERVATUS.toml: cannot read")
    assert err.count("\n") == 1


def test_signal_before_end_fits_slurms_sixteen_bits(tmp_path: Path) -> None:
    """Caught when the profile loads (plan, doctor), not first at submit."""
    from testkit import CPU_PROFILE

    long = CPU_PROFILE.replace('"01:00:00"', '"24:00:00"').replace('"00:05:00"', '"20:00:00"')
    path = tmp_path / "SERVATUS.toml"
    path.write_text(long.replace("cpus = 1\n", 'cpus = 1\nsignal_before_end = "18:12:16"\n'))
    with pytest.raises(ConfigurationError, match=r"at most 18:12:15: Slurm keeps --signal"):
        Profile.load(path)
    path.write_text(long.replace("cpus = 1\n", 'cpus = 1\nsignal_before_end = "18:12:15"\n'))
    assert Profile.load(path).resources.signal_before_end == 65535
