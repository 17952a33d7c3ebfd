"""The local and ssh transports, run for real (ssh through a fake ``ssh`` first on PATH)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from slurm_helpers import PYTHON, make_target

from servatus.config import Target
from servatus.errors import ConfigurationError, Unavailable, Unreached
from servatus.transport import OUTPUT_LIMIT
from servatus_slurm.transport import (
    SSH_OPTIONS,
    Frame,
    LocalTransport,
    LocalTransportFactory,
    SshTransport,
    SshTransportFactory,
    _Framed,
    remote_command,
)

HERE = Path(__file__).resolve().parent
ALL_BYTES = bytes(range(256))
DUMP_ARGS = ["/bin/sh", "-c", 'for a in "$@"; do printf "%s\\0" "$a"; done', "dump"]
"""Prints each following argument NUL-terminated: exact for any argument."""


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    # A zombie still answers kill(0); it is gone for our purposes once it is not running.
    with open(f"/proc/{pid}/stat") as handle:
        return handle.read().split(") ")[-1].startswith("Z")


@pytest.fixture
def fake_ssh(tmp_path: Path) -> dict[str, str]:
    """A caller environment whose PATH finds the fake ssh first, plus variables to filter."""
    bindir = tmp_path / "fakebin"
    bindir.mkdir()
    record = tmp_path / "ssh-record.json"
    source = (HERE / "fake_ssh.py").read_text().replace("@RECORD@", str(record))
    (bindir / "ssh").write_text(f"#!{PYTHON}\n{source}")
    (bindir / "ssh").chmod(0o755)
    return {
        "PATH": f"{bindir}:/usr/bin:/bin",
        "HOME": "/home/laptop",
        "USER": "alice",
        "LOGNAME": "alice",
        "SSH_AUTH_SOCK": "/tmp/agent.sock",
        "KRB5CCNAME": "FILE:/tmp/krb5cc",
        "KRB5_CONFIG": "/etc/krb5.conf",
        "LANG": "de_DE.UTF-8",
        "SSH_ASKPASS": "/usr/bin/askpass",
        "DISPLAY": ":0",
        "LD_PRELOAD": "/evil.so",
        "RECORD": str(record),
    }


def recorded(env: dict[str, str]) -> dict[str, object]:
    return json.loads(Path(env["RECORD"]).read_text())


# -- quoting -------------------------------------------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(st.lists(st.binary(max_size=30).filter(lambda b: b"\0" not in b), max_size=8))
def test_quoting_round_trips_every_byte(words: list[bytes]) -> None:
    args = [os.fsdecode(word) for word in words]
    command = remote_command([*DUMP_ARGS, *args], Frame("00" * 16))
    for shell in ("/bin/sh", "/bin/bash"):
        ran = subprocess.run([shell, "-c", command], capture_output=True, env={})
        out = ran.stdout
        body = out[out.index(b">\n") + 2 : out.rindex(b"\n<")]
        assert body.split(b"\0")[:-1] == words


def test_remote_command_refuses_nul_and_keeps_plain_words_bare() -> None:
    command = remote_command(["/usr/bin/squeue", "%A|%j|%T", "", "it's"], Frame("00" * 16))
    assert " /usr/bin/squeue '%A|%j|%T' '' 'it'\"'\"'s'" in command
    with pytest.raises(ConfigurationError):
        remote_command(["/usr/bin/squeue", "a\0b"], Frame("00" * 16))


def test_sentinels_are_not_in_the_command_text() -> None:
    frame = Frame.random()
    command = remote_command(["/bin/true"], frame)
    assert frame.token not in command
    assert frame.opening not in command.encode() and frame.closing not in command.encode()


# -- ssh -----------------------------------------------------------------------------------------


def test_ssh_command_line_and_environment(fake_ssh: dict[str, str]) -> None:
    transport = SshTransport("hpc", environ=fake_ssh)
    result = transport.run(["/bin/echo", "hello"])
    assert result.returncode == 0
    assert result.stdout == b"hello\n"
    assert result.stderr == b""
    seen = recorded(fake_ssh)
    argv = seen["argv"]
    assert isinstance(argv, list)
    assert argv[:-1] == [*SSH_OPTIONS, "hpc", "--"]
    assert list(SSH_OPTIONS) == [
        "-T",
        "-o",
        "BatchMode=yes",
        "-o",
        "LogLevel=ERROR",
        "-o",
        "ConnectTimeout=8",
        "-o",
        "ConnectionAttempts=3",
    ]
    assert seen["env"] == {
        "HOME": "/home/laptop",
        "USER": "alice",
        "LOGNAME": "alice",
        "SSH_AUTH_SOCK": "/tmp/agent.sock",
        "KRB5CCNAME": "FILE:/tmp/krb5cc",
        "KRB5_CONFIG": "/etc/krb5.conf",
    }


def test_banners_are_dropped_and_output_is_exact(fake_ssh: dict[str, str]) -> None:
    transport = SshTransport("hpc", environ=fake_ssh)
    script = "printf 'out\\nno-newline'; printf 'err\\n' >&2; exit 3"
    result = transport.run(["/bin/sh", "-c", script])
    assert (result.returncode, result.stdout, result.stderr) == (3, b"out\nno-newline", b"err\n")
    assert not result.truncated


def test_stdin_bytes_reach_the_command(fake_ssh: dict[str, str]) -> None:
    transport = SshTransport("hpc", environ=fake_ssh)
    data = ALL_BYTES * 4000  # larger than a pipe buffer
    result = transport.run(["cat"], stdin=data)
    assert result.returncode == 0
    assert result.stdout == data


def test_remote_command_runs_scrubbed(fake_ssh: dict[str, str]) -> None:
    result = SshTransport("hpc", environ=fake_ssh).run(["env"])
    lines = sorted(result.stdout.decode().splitlines())
    # The remote login's own LANG and TZ; its PATH, junk and SLURM_* are gone.
    assert lines == ["LANG=C.UTF-8", "PATH=/usr/bin:/bin", "TZ=Europe/Rome"]


def test_remote_exit_255_is_an_answer(fake_ssh: dict[str, str]) -> None:
    result = SshTransport("hpc", environ=fake_ssh).run(["/bin/sh", "-c", "exit 255"])
    assert result.returncode == 255


def test_missing_remote_program_is_127(fake_ssh: dict[str, str]) -> None:
    result = SshTransport("hpc", environ=fake_ssh).run(["/nonexistent/squeue"])
    assert result.returncode == 127


def test_connection_failure_is_unavailable(fake_ssh: dict[str, str]) -> None:
    with pytest.raises(Unreached, match=r"cannot reach down: .*Connection refused"):
        SshTransport("down", environ=fake_ssh).run(["/bin/true"])


def test_a_host_that_does_not_resolve_is_unreached_by_the_real_client() -> None:
    """OpenSSH's own words for a connection never made (issue #33: a start that never ran
    records its steps unsent instead of leaving them to reconcile)."""
    if shutil.which("ssh") is None:
        pytest.skip("no OpenSSH client")
    with pytest.raises(Unreached, match="Could not resolve hostname"):
        SshTransport("servatus-no-such-host.invalid").run(["/bin/true"], timeout=30)


def test_a_refused_hop_before_a_session_is_no_proof_nothing_ran(
    fake_ssh: dict[str, str], tmp_path: Path
) -> None:
    """Review of #33: ssh said a first gateway refused, then reached the host another way, ran
    the command and lost its answer. Only an ssh that said nothing but that it could not
    connect is Unreached."""
    ran = tmp_path / "ran"
    with pytest.raises(Unavailable) as caught:
        SshTransport("hop", environ=fake_ssh).run(["/bin/sh", "-c", f": >{ran}"])
    assert ran.exists() and not isinstance(caught.value, Unreached)


def test_a_command_that_ran_is_never_unreached(fake_ssh: dict[str, str], tmp_path: Path) -> None:
    """Once a frame opened, the command ran, whatever ssh says after it: no complete answer is
    a lost one (reconcile decides), never "nothing ran"."""
    ran = tmp_path / "ran"
    with pytest.raises(Unavailable) as caught:
        SshTransport("dropped", environ=fake_ssh).run(["/bin/sh", "-c", f": >{ran}; kill -9 $PPID"])
    assert ran.exists() and not isinstance(caught.value, Unreached)


def test_a_session_cut_without_a_word_from_ssh_names_no_sentinel(
    fake_ssh: dict[str, str],
) -> None:
    """The cluster soak (#34) saw "cannot reach servatus-test: <32 hex digits>>" after
    ``ssh -O exit`` cut a command: ssh said nothing, and the last line of its stderr was the
    frame's opening sentinel, which the remote side wrote. The reason is never a sentinel (here
    the login's own noise before it, the last line ssh's stderr held)."""
    with pytest.raises(Unavailable) as caught:
        SshTransport("cut", environ=fake_ssh).run(["/bin/sh", "-c", "kill -9 $PPID"])
    assert not re.search(r"[0-9a-f]{32}", str(caught.value)), str(caught.value)
    assert str(caught.value) == "cannot reach cut: module: command not found"


def test_a_session_cut_inside_a_programs_own_frame_names_no_sentinel(
    fake_ssh: dict[str, str],
) -> None:
    """The field soak (#34) saw the same after 316dd6b: ``status`` reads Slurm and the markers
    inside frames of its own (other tokens than the transport's), so a cut inside one left that
    frame's opening last on stderr."""
    inner = "0123456789abcdef0123456789abcdef"
    for program in (  # cut inside an inner frame; cut just after one closed (a blank line first)
        f"printf '%s>\\n' {inner} >&2; kill -9 $PPID",
        f"printf '%s>\\nwork\\n\\n<%s\\n' {inner} {inner} >&2; kill -9 $PPID",
    ):
        with pytest.raises(Unavailable) as caught:
            SshTransport("cut", environ=fake_ssh).run(["/bin/sh", "-c", program])
        assert not re.search(r"[0-9a-f]{32}", str(caught.value)), str(caught.value)
        assert str(caught.value) in {
            "cannot reach cut: module: command not found",
            "cannot reach cut: work",
        }, str(caught.value)


def test_remote_shell_dying_mid_command_is_unavailable(fake_ssh: dict[str, str]) -> None:
    transport = SshTransport("hpc", environ=fake_ssh)
    with pytest.raises(Unavailable, match="no complete answer"):
        transport.run(["/bin/sh", "-c", "echo partial; kill -9 $PPID"])


def test_deadline_kills_the_whole_group(fake_ssh: dict[str, str]) -> None:
    transport = SshTransport("hang", environ=fake_ssh)
    started = time.monotonic()
    with pytest.raises(Unavailable, match="no answer within 1 s"):
        transport.run(["/bin/true"], timeout=1.0)
    assert time.monotonic() - started < 5
    child = int(Path(fake_ssh["RECORD"] + ".child").read_text())
    deadline = time.monotonic() + 5
    while not gone(child):
        assert time.monotonic() < deadline, "the ssh process group survived the deadline"
        time.sleep(0.05)


def test_output_is_bounded(fake_ssh: dict[str, str]) -> None:
    transport = SshTransport("hpc", environ=fake_ssh, output_limit=1000)
    result = transport.run(["/bin/sh", "-c", "head -c 50000 /dev/zero; echo oops >&2; exit 4"])
    assert result.returncode == 4
    assert result.stdout == b"\0" * 1000
    assert result.stderr == b"oops\n"
    assert result.truncated


def test_large_output_within_the_bound(fake_ssh: dict[str, str]) -> None:
    transport = SshTransport("hpc", environ=fake_ssh)
    result = transport.run(["/bin/sh", "-c", "head -c 3000000 /dev/urandom | od -An -tx1"])
    assert result.returncode == 0 and not result.truncated
    assert len(result.stdout) > 3000000
    assert len(result.stdout) < OUTPUT_LIMIT


def test_ssh_factory_needs_a_usable_host(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError):
        SshTransportFactory().connect(make_target(tmp_path))
    for host in ("-oProxyCommand=evil", "two words", "a\nb", ""):
        with pytest.raises(ConfigurationError):
            SshTransportFactory().connect(make_target(tmp_path, host=host))
    assert isinstance(
        SshTransportFactory().connect(make_target(tmp_path, host="me@hpc")), SshTransport
    )


def test_missing_ssh_is_a_configuration_error(tmp_path: Path) -> None:
    transport = SshTransport("hpc", environ={"PATH": str(tmp_path)})
    with pytest.raises(ConfigurationError, match="ssh is not on PATH"):
        transport.run(["/bin/true"])


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    words=st.lists(st.binary(max_size=20).filter(lambda b: b"\0" not in b), max_size=5),
    stdin=st.binary(max_size=300),
)
def test_random_arguments_and_stdin_over_ssh(
    fake_ssh: dict[str, str], words: list[bytes], stdin: bytes
) -> None:
    transport = SshTransport("hpc", environ=fake_ssh)
    args = [os.fsdecode(word) for word in words]
    dumped = transport.run([*DUMP_ARGS, *args])
    assert dumped.stdout.split(b"\0")[:-1] == words
    assert transport.run(["cat"], stdin=stdin).stdout == stdin


# -- local ---------------------------------------------------------------------------------------


def test_local_environment_is_scrubbed() -> None:
    transport = LocalTransport(
        environ={
            "PATH": "/nowhere",
            "LANG": "C.UTF-8",
            "TZ": "UTC",
            "SECRET": "x",
            "SLURM_CONF": "/wrong",
        }
    )
    result = transport.run(["env"])  # a bare name is found on /usr/bin:/bin
    assert sorted(result.stdout.decode().splitlines()) == [
        "LANG=C.UTF-8",
        "PATH=/usr/bin:/bin",
        "TZ=UTC",
    ]


def test_local_stdin_and_exit_codes() -> None:
    transport = LocalTransport()
    data = ALL_BYTES * 2000
    assert transport.run(["/bin/cat"], stdin=data).stdout == data
    result = transport.run(["/bin/sh", "-c", "echo no >&2; exit 3"])
    assert (result.returncode, result.stderr) == (3, b"no\n")
    assert transport.run(["/nonexistent/sbatch"]).returncode == 127


def test_local_arguments_are_not_interpreted() -> None:
    words = ["$HOME", "a b", "it's", "x\ny", "\udcff", "*"]
    result = LocalTransport().run([*DUMP_ARGS, *words])
    assert result.stdout.split(b"\0")[:-1] == [os.fsencode(w) for w in words]


def test_local_deadline_kills_the_group(tmp_path: Path) -> None:
    pidfile = tmp_path / "pid"
    script = f"/bin/sleep 60 & echo $! > {pidfile}; wait"
    with pytest.raises(Unavailable, match=r"within 0\.5 s"):
        LocalTransport().run(["/bin/sh", "-c", script], timeout=0.5)
    child = int(pidfile.read_text())
    deadline = time.monotonic() + 5
    while not gone(child):
        assert time.monotonic() < deadline
        time.sleep(0.05)


def test_local_grandchild_holding_the_pipe_does_not_stall() -> None:
    started = time.monotonic()
    result = LocalTransport().run(["/bin/sh", "-c", "/bin/sleep 30 & echo hi"], timeout=20)
    assert result.stdout == b"hi\n"
    assert time.monotonic() - started < 5


def test_local_output_is_bounded() -> None:
    result = LocalTransport(output_limit=100).run(["/bin/sh", "-c", "head -c 10000 /dev/zero"])
    assert result.stdout == b"\0" * 100 and result.truncated and result.returncode == 0


def test_factories_are_named() -> None:
    assert LocalTransportFactory().name == "local"
    assert SshTransportFactory().name == "ssh"
    target: Target = make_target(Path("/tmp"))
    assert isinstance(LocalTransportFactory().connect(target), LocalTransport)


@given(
    junk=st.binary(max_size=300),
    body=st.binary(max_size=2000),
    code=st.integers(0, 255),
    cuts=st.lists(st.integers(1, 64), min_size=1, max_size=50),
    limit=st.integers(0, 2500),
)
def test_framing_survives_any_chunking(
    junk: bytes, body: bytes, code: int, cuts: list[int], limit: int
) -> None:
    frame = Frame("ab" * 16)
    stream = junk + frame.opening + body + frame.closing + f" {code}\n".encode() + junk
    framed = _Framed(frame.opening, frame.closing + b" ", limit, with_code=True)
    position, index = 0, 0
    while position < len(stream):
        size = cuts[index % len(cuts)]
        framed.feed(stream[position : position + size])
        position, index = position + size, index + 1
    assert framed.complete and framed.code == code
    assert bytes(framed.body.data) == body[:limit]
    assert framed.body.truncated == (len(body) > limit)


def test_relative_program_paths_are_refused() -> None:
    with pytest.raises(ConfigurationError, match="absolute path or a bare name"):
        LocalTransport().run(["bin/squeue"])


_WAITS_FOR_ITS_READER = (
    "printf '@0 0 5.\\n'; while [ ! -e \"$1\" ]; do sleep 0.05; done; printf '@1 0 6.\\n'"
)


def _streamed(transport: SshTransport | LocalTransport, flag: Path) -> tuple[list[bytes], bytes]:
    """Stream a command that prints its second answer only once the first reached the caller
    (the listener makes ``flag``): it ends only if stdout arrives while it runs."""
    pieces: list[bytes] = []

    def arrived(chunk: bytes) -> None:
        pieces.append(chunk)
        if b"".join(pieces).startswith(b"@0 0 5."):
            flag.touch()

    result = transport.stream(
        ["/bin/sh", "-c", _WAITS_FOR_ITS_READER, "sh", str(flag)], timeout=20, on_stdout=arrived
    )
    return pieces, result.stdout


def test_ssh_stream_hands_the_framed_output_over_while_the_command_runs(
    fake_ssh: dict[str, str], tmp_path: Path
) -> None:
    pieces, stdout = _streamed(SshTransport("hpc", environ=fake_ssh), tmp_path / "flag")
    assert b"".join(pieces) == stdout == b"@0 0 5.\n@1 0 6.\n"  # the banner never reaches it


def test_local_stream_hands_the_output_over_while_the_command_runs(tmp_path: Path) -> None:
    pieces, stdout = _streamed(LocalTransport(), tmp_path / "flag")
    assert b"".join(pieces) == stdout == b"@0 0 5.\n@1 0 6.\n"


@given(st.lists(st.integers(1, 40), max_size=12))
def test_a_frame_holds_back_only_what_could_begin_its_closing(cuts: list[int]) -> None:
    frame = Frame("0123456789abcdef0123456789abcdef")
    heard = bytearray()
    framed = _Framed(
        frame.opening, frame.closing + b" ", 1 << 20, with_code=True, listener=heard.extend
    )
    body = b"@0 0 5.\n@1 0 6.\n<0123 not the end\n"
    stream = b"banner\n" + frame.opening + body
    at = 0
    for cut in cuts:
        framed.feed(stream[at : at + cut])
        at += cut
    framed.feed(stream[at:])
    assert bytes(heard) == body[:-1]  # all but the newline that may begin the closing
    framed.feed(frame.closing + b" 0\n")
    assert framed.complete and bytes(heard) == body
