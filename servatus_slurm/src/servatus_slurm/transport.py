"""The ``local`` and ``ssh`` transports: run one Slurm or listing command, bounded in time and size.

Both run commands under a scrubbed environment (``PATH=/usr/bin:/bin`` plus ``LANG``, ``LC_ALL``
and ``TZ`` where they are set), so what a command prints never depends on a user's shell setup.
A bare ``argv[0]`` (``find``, ``tail``) is looked up on that ``PATH``; Slurm commands are given as
absolute paths in ``slurm_bin``. Neither transport retries anything.

``ssh`` wraps the command in a small POSIX ``sh`` program that prints random sentinels around the
command's output on stdout and stderr, and the command's exit code after it: login banners and
shell-startup output fall outside the frame and are dropped, and an answer without the closing
sentinel is no answer (:class:`~servatus.errors.Unavailable`), whatever ``ssh`` exited with.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import secrets
import selectors
import shlex
import shutil
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import attrs

from servatus.errors import ConfigurationError, Unavailable, Unreached
from servatus.transport import COMMAND_TIMEOUT, OUTPUT_LIMIT, CommandResult, OnOutput

if TYPE_CHECKING:
    from servatus.config import Target
    from servatus.transport import Transport

SCRUBBED_PATH = "/usr/bin:/bin"
KEPT_LOCALE = ("LANG", "LC_ALL", "TZ")
"""Caller variables a command still sees: they change formats, never which program runs."""

SSH_PASSED = ("HOME", "LOGNAME", "USER", "SSH_AUTH_SOCK", "KRB5CCNAME", "KRB5_CONFIG")
"""The only caller variables ``ssh`` gets: enough for keys, agents and Kerberos, nothing else."""

SSH_OPTIONS = (
    "-T",
    "-o",
    "BatchMode=yes",
    "-o",
    "LogLevel=ERROR",
    "-o",
    "ConnectTimeout=8",
    "-o",
    "ConnectionAttempts=3",
)
SSH_UNAVAILABLE = 255
"""``ssh``'s own exit status when the connection failed."""

REMOTE_ENV = "/usr/bin/env"
DRAIN_GRACE = 1.0
"""Seconds to keep reading after the process exited, in case a grandchild still holds a pipe."""
MESSAGE_TAIL = 2048
"""Bytes of raw stderr kept for the message of an :class:`Unavailable`."""

_HOST = re.compile(r"[A-Za-z0-9_.@:\[\]%/-]+")


def scrubbed_environment(environ: Mapping[str, str]) -> dict[str, str]:
    """The environment of a local command: the fixed ``PATH`` and the caller's locale and zone."""
    env = {"PATH": SCRUBBED_PATH}
    env.update({name: environ[name] for name in KEPT_LOCALE if name in environ})
    return env


def _check_argv(argv: Sequence[str]) -> tuple[str, ...]:
    words = tuple(argv)
    if not words or not words[0]:
        raise ConfigurationError("a command needs a program name")
    if "/" in words[0] and not words[0].startswith("/"):
        raise ConfigurationError(f"a program is an absolute path or a bare name: {words[0]!r}")
    if "=" in words[0]:
        # env(1) would read it as an assignment, and no Slurm or listing program is named so.
        raise ConfigurationError(f"a program name cannot contain '=': {words[0]!r}")
    for word in words:
        if "\0" in word:
            raise ConfigurationError(f"an argument cannot contain a NUL byte: {word!r}")
    return words


# -- running a process with a deadline and bounded reads ---------------------------------------


class _Sink:
    """Keeps at most ``limit`` bytes of a stream and remembers whether more came."""

    def __init__(self, limit: int, listener: OnOutput | None = None) -> None:
        self.limit = limit
        self.listener = listener
        self.data = bytearray()
        self.truncated = False

    def feed(self, chunk: bytes) -> None:
        room = self.limit - len(self.data)
        if len(chunk) > room:
            self.truncated = True
            chunk = chunk[: max(room, 0)]
        self.data += chunk
        if chunk and self.listener is not None:
            self.listener(chunk)

    def close(self) -> None:
        """End of stream; plain sinks need nothing."""


class _Framed:
    """Reads one stream framed by sentinels; keeps only what lies between them, bounded.

    The remote side prints ``OPEN`` and a newline before the command, then ``CLOSE`` (a newline,
    the closing sentinel, and for stdout a space and the exit code, then a newline) after it.
    Bytes before ``OPEN`` are discarded as they arrive, so a large banner costs no memory.
    """

    def __init__(
        self,
        opening: bytes,
        closing: bytes,
        limit: int,
        *,
        with_code: bool,
        listener: OnOutput | None = None,
    ) -> None:
        self.opening = opening
        self.closing = closing
        self.with_code = with_code
        self.body = _Sink(limit, listener)
        self.pending = bytearray()
        self.state = "before"
        self.code: int | None = None

    def feed(self, chunk: bytes) -> None:
        self.pending += chunk
        if self.state == "before":
            at = self.pending.find(self.opening)
            if at < 0:
                del self.pending[: max(len(self.pending) - len(self.opening) + 1, 0)]
                return
            del self.pending[: at + len(self.opening)]
            self.state = "inside"
        if self.state == "inside":
            at = self.pending.find(self.closing)
            if at < 0:
                commit = len(self.pending) - self._held()
                if commit > 0:
                    self.body.feed(bytes(self.pending[:commit]))
                    del self.pending[:commit]
                return
            self.body.feed(bytes(self.pending[:at]))
            del self.pending[: at + len(self.closing)]
            self.state = "code" if self.with_code else "done"
        if self.state == "code":
            end = self.pending.find(b"\n")
            if end < 0:
                if len(self.pending) > 8:
                    self.state = "broken"
                return
            text = bytes(self.pending[:end])
            if re.fullmatch(rb"[0-9]{1,3}", text):
                self.code = int(text)
                self.state = "done"
            else:
                self.state = "broken"
        if self.state in ("done", "broken"):
            self.pending.clear()

    def _held(self) -> int:
        """How many bytes at the end of ``pending`` could begin the closing sentinel: only
        those wait for more, so the body reaches a listener as soon as it cannot be the frame."""
        for size in range(min(len(self.closing) - 1, len(self.pending)), 0, -1):
            if self.pending.endswith(self.closing[:size]):
                return size
        return 0

    def close(self) -> None:
        """End of stream; an open frame stays open, and :attr:`complete` says so."""

    @property
    def complete(self) -> bool:
        return self.state == "done"


def _kill_group(process: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)
    with contextlib.suppress(ProcessLookupError):
        process.kill()
    process.wait()


def _exchange(
    argv: Sequence[str],
    env: Mapping[str, str],
    *,
    stdin: bytes,
    timeout: float,
    out: _Sink | _Framed,
    err: _Sink | _Framed,
    err_tail: bytearray,
) -> int:
    """Run ``argv`` in its own session, feed ``stdin``, read both streams until the deadline.

    Returns the exit status; raises :class:`Unavailable` when the deadline passes (after killing
    the whole process group, so no ``ssh`` or child outlives the call).
    """
    deadline = time.monotonic() + timeout
    process = subprocess.Popen(
        list(argv),
        env=dict(env),
        cwd="/",
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
        close_fds=True,
    )
    assert process.stdin is not None
    assert process.stdout is not None
    assert process.stderr is not None
    selector = selectors.DefaultSelector()
    pending = memoryview(stdin)
    os.set_blocking(process.stdin.fileno(), False)
    if pending:
        selector.register(process.stdin, selectors.EVENT_WRITE)
    else:
        process.stdin.close()
    sinks = {process.stdout.fileno(): out, process.stderr.fileno(): err}
    selector.register(process.stdout, selectors.EVENT_READ)
    selector.register(process.stderr, selectors.EVENT_READ)
    exited_at: float | None = None
    try:
        while selector.get_map():
            now = time.monotonic()
            if now >= deadline:
                _kill_group(process)
                raise Unavailable(
                    f"{os.path.basename(argv[0])} gave no answer within {timeout:g} s"
                )
            if exited_at is None and process.poll() is not None:
                exited_at = now
            if exited_at is not None and now - exited_at > DRAIN_GRACE:
                break  # a grandchild holds the pipe; the command itself is done
            limit = deadline - now if exited_at is None else min(deadline - now, 0.1)
            for key, _events in selector.select(timeout=min(limit, 0.5)):
                fileobj = key.fileobj
                if fileobj is process.stdin:
                    try:
                        written = os.write(process.stdin.fileno(), pending[:65536])
                    except BrokenPipeError:
                        written = len(pending)
                    except BlockingIOError:
                        continue
                    pending = pending[written:]
                    if not pending:
                        selector.unregister(process.stdin)
                        process.stdin.close()
                    continue
                fd = key.fd
                chunk = os.read(fd, 65536)
                if not chunk:
                    selector.unregister(fileobj)
                    continue
                sinks[fd].feed(chunk)
                if fd == process.stderr.fileno():
                    err_tail += chunk
                    del err_tail[: max(len(err_tail) - MESSAGE_TAIL, 0)]
        remaining = max(deadline - time.monotonic(), 0.0)
        try:
            return process.wait(timeout=remaining)
        except subprocess.TimeoutExpired:
            _kill_group(process)
            raise Unavailable(
                f"{os.path.basename(argv[0])} gave no answer within {timeout:g} s"
            ) from None
    finally:
        selector.close()
        for stream in (process.stdin, process.stdout, process.stderr):
            with contextlib.suppress(OSError):
                stream.close()
        if process.returncode is None:
            _kill_group(process)


def _not_started(program: str, exc: OSError) -> tuple[int, bytes, bytes]:
    """The exit code and stderr a shell would give for a program that could not be started,
    naming the program, and for a path through a file the component that is not a directory."""
    if exc.errno == errno.ENOTDIR:
        parent = os.path.dirname(program)
        while parent not in ("/", "") and not os.path.isdir(parent):
            if os.path.lexists(parent):
                break
            parent = os.path.dirname(parent)
        message = f"{program}: cannot execute: {parent} is not a directory"
        return 126, b"", f"{message}\n".encode()
    if exc.errno == errno.ENOEXEC:
        message = f"{program}: cannot execute: not a program the system can run (no #! line?)"
    else:
        message = f"{program}: cannot execute: {exc.strerror or exc}"
    return 126, b"", f"{message}\n".encode()


class _Runs:
    """``run`` and ``stream`` over one ``_run``, which takes a stdout listener or none."""

    __slots__ = ()

    def run(
        self, argv: Sequence[str], *, stdin: bytes = b"", timeout: float = COMMAND_TIMEOUT
    ) -> CommandResult:
        return self._run(argv, stdin, timeout, None)

    def stream(
        self,
        argv: Sequence[str],
        *,
        stdin: bytes = b"",
        timeout: float = COMMAND_TIMEOUT,
        on_stdout: OnOutput,
    ) -> CommandResult:
        """As :meth:`run`, handing each piece of stdout to ``on_stdout`` as it arrives (over
        ``ssh``, only what lies inside the frame: a banner reaches it no more than ``run``'s
        answer)."""
        return self._run(argv, stdin, timeout, on_stdout)

    def _run(
        self, argv: Sequence[str], stdin: bytes, timeout: float, listener: OnOutput | None
    ) -> CommandResult:
        raise NotImplementedError


# -- local ---------------------------------------------------------------------------------------


@attrs.frozen
class LocalTransport(_Runs):
    """Runs commands on this machine (a login node), without a shell."""

    environ: Mapping[str, str] = attrs.field(factory=lambda: dict(os.environ))
    output_limit: int = OUTPUT_LIMIT

    def _run(
        self, argv: Sequence[str], stdin: bytes, timeout: float, listener: OnOutput | None
    ) -> CommandResult:
        words = _check_argv(argv)
        out, err = _Sink(self.output_limit, listener), _Sink(self.output_limit)
        try:
            code = _exchange(
                words,
                scrubbed_environment(self.environ),
                stdin=stdin,
                timeout=timeout,
                out=out,
                err=err,
                err_tail=bytearray(),
            )
        except FileNotFoundError:
            # What a shell would say, so local and ssh report a missing program alike.
            return CommandResult(words, 127, b"", f"{words[0]}: not found\n".encode())
        except PermissionError:
            return CommandResult(words, 126, b"", f"{words[0]}: permission denied\n".encode())
        except OSError as exc:
            if exc.filename != words[0]:
                raise  # not the program failing to start
            return CommandResult(words, *_not_started(words[0], exc))
        return CommandResult(
            words, code, bytes(out.data), bytes(err.data), out.truncated or err.truncated
        )

    def close(self) -> None:
        """Nothing persists between commands."""


@attrs.frozen
class LocalTransportFactory:
    """``local``: run Slurm where Servatus runs (``host`` omitted)."""

    name: str = "local"

    def connect(self, target: Target) -> Transport:
        return LocalTransport()


# -- ssh -----------------------------------------------------------------------------------------


@attrs.frozen
class Frame:
    """The random sentinels of one remote command, as the remote side prints them."""

    token: str

    @classmethod
    def random(cls) -> Frame:
        return cls(secrets.token_hex(16))

    @property
    def halves(self) -> tuple[str, str]:
        middle = len(self.token) // 2
        return self.token[:middle], self.token[middle:]

    @property
    def opening(self) -> bytes:
        return f"{self.token}>\n".encode()

    @property
    def closing(self) -> bytes:
        return f"\n<{self.token}".encode()


def remote_command(argv: Sequence[str], frame: Frame) -> str:
    """The POSIX ``sh`` program ``ssh`` asks the remote login shell to run.

    The remote login shell must be a POSIX one (bash, dash, ksh, zsh), as on every Slurm cluster
    seen; csh-family shells fail the parse, and the call then raises :class:`Unavailable`. The
    sentinels are printed from two halves, so a shell that echoes the command text (``set -v``
    in a startup file) cannot fake them. The command runs under ``env -i`` with the fixed
    ``PATH`` and the remote login's own ``LANG``, ``LC_ALL`` and ``TZ``: the values a user on the
    login node would have. Its stdin is ``ssh``'s, so the bytes given to :meth:`run` reach it.
    """
    words = _check_argv(argv)
    first, second = frame.halves
    locale = " ".join(f'${{{name}+"{name}=${name}"}}' for name in KEPT_LOCALE)
    command = " ".join(shlex.quote(word) for word in words)
    return (
        framed(f"{REMOTE_ENV} -i PATH={SCRUBBED_PATH} {locale} {command}", first, second)
        + '; exit "$s"'
    )


def framed(command: str, first: str, second: str) -> str:
    """``sh`` text that runs ``command`` inside a :class:`Frame` on stdout and stderr, the
    command's exit status after the closing sentinel on stdout and left in ``$s``. ``first``
    and ``second`` are shell words for the frame's two halves (literal, or ``"$1"``), printed
    apart so that text echoing the program cannot hold the sentinel; :func:`unframe` reads one
    stream back."""
    return (
        f"printf '%s%s>\\n' {first} {second}; "
        f"printf '%s%s>\\n' {first} {second} >&2; "
        f"{command}; "
        "s=$?; "
        f"printf '\\n<%s%s %s\\n' {first} {second} \"$s\"; "
        f"printf '\\n<%s%s\\n' {first} {second} >&2"
    )


def unframe(data: bytes, frame: Frame, *, with_code: bool) -> tuple[bytes, int | None] | None:
    """What :func:`framed` printed inside ``frame`` in ``data`` (one whole stream, already
    read), and the exit status for stdout (``with_code``); None when the frame is not whole.
    Bytes outside the frame, such as another frame's, are dropped."""
    closing = frame.closing + (b" " if with_code else b"\n")
    reader = _Framed(frame.opening, closing, len(data) + 1, with_code=with_code)
    reader.feed(data)
    if not reader.complete:
        return None
    return bytes(reader.body.data), reader.code


def ssh_environment(environ: Mapping[str, str]) -> dict[str, str]:
    """What ``ssh`` itself gets from the caller: the login-related variables, nothing else."""
    return {name: environ[name] for name in SSH_PASSED if name in environ}


_SENTINEL = re.compile(r"[0-9a-f]{32}")
"""What a sentinel's token looks like (:meth:`Frame.random`): a line holding one is a frame's,
printed by the remote side, never ssh's own words."""

_NOT_CONNECTED = re.compile(r"ssh: (?:connect to host \S+ port \S+|Could not resolve hostname) ")
"""What OpenSSH's client prints when it made no connection at all: no session can have
started, so no command ran."""


def _never_connected(out: _Framed, err: _Framed, said: Sequence[str]) -> bool:
    """Whether a failed ``ssh`` certainly ran nothing: every line it printed says it could not
    connect, and no frame was opened on either stream (the remote side opens them before the
    command). Any other line, before or after (a hop that failed before another connected, a
    banner, "Connection closed by remote host"), may mean a session ran the command: that is a
    lost answer, never this."""
    opened = out.state != "before" or err.state != "before"
    lines = [line for line in said if line.strip()]
    return not opened and bool(lines) and all(_NOT_CONNECTED.match(line) for line in lines)


def check_host(host: str) -> str:
    """Refuse a destination ``ssh`` would read as an option or that is not one word."""
    if not host or host.startswith("-") or not _HOST.fullmatch(host):
        raise ConfigurationError(f"not a usable ssh destination: {host!r}")
    return host


@attrs.frozen
class SshTransport(_Runs):
    """Runs commands on ``host`` through the user's own OpenSSH client, one connection each.

    ``ssh`` is found on the caller's ``PATH``; it gets only :data:`SSH_PASSED` from the caller's
    environment. Nothing is retried: a command either comes back framed, or the call raises
    :class:`Unavailable`.
    """

    host: str
    environ: Mapping[str, str] = attrs.field(factory=lambda: dict(os.environ))
    output_limit: int = OUTPUT_LIMIT

    def argv(self, command: str) -> list[str]:
        """The exact ``ssh`` command line for one remote command."""
        ssh = shutil.which("ssh", path=self.environ.get("PATH", os.defpath))
        if ssh is None:
            raise ConfigurationError("ssh is not on PATH; install OpenSSH's client")
        return [ssh, *SSH_OPTIONS, check_host(self.host), "--", command]

    def _run(
        self, argv: Sequence[str], stdin: bytes, timeout: float, listener: OnOutput | None
    ) -> CommandResult:
        words = _check_argv(argv)
        frame = Frame.random()
        out = _Framed(
            frame.opening,
            frame.closing + b" ",
            self.output_limit,
            with_code=True,
            listener=listener,
        )
        err = _Framed(frame.opening, frame.closing + b"\n", self.output_limit, with_code=False)
        tail = bytearray()
        ssh_argv = self.argv(remote_command(words, frame))
        status = _exchange(
            ssh_argv,
            ssh_environment(self.environ),
            stdin=stdin,
            timeout=timeout,
            out=out,
            err=err,
            err_tail=tail,
        )
        if not out.complete or out.code is None:
            # ssh's own words: no frame's sentinels, which the remote side wrote (a connection
            # cut after the remote shell started leaves an opening last: this frame's, or one
            # of a program's own frames inside it, such as the evidence listing's), nor the
            # blank line a closing sentinel begins with.
            said = [
                line
                for line in tail.decode(errors="replace").strip().splitlines()
                if line.strip() and not _SENTINEL.search(line)
            ]
            reason = said[-1] if said else f"ssh exited {status} without an answer"
            if status == SSH_UNAVAILABLE and _never_connected(out, err, said):
                raise Unreached(f"cannot reach {self.host}: {reason}")
            if status == SSH_UNAVAILABLE:
                raise Unavailable(f"cannot reach {self.host}: {reason}")
            raise Unavailable(f"no complete answer from {self.host}: {reason}")
        return CommandResult(
            words,
            out.code,
            bytes(out.body.data),
            bytes(err.body.data),
            out.body.truncated or err.body.truncated,
        )

    def close(self) -> None:
        """Nothing persists between commands; a ControlMaster is the user's own."""


@attrs.frozen
class SshTransportFactory:
    """``ssh``: run Slurm on the Target's ``host`` through OpenSSH."""

    name: str = "ssh"

    def connect(self, target: Target) -> Transport:
        if target.host is None:
            raise ConfigurationError("the ssh transport needs [target] host")
        return SshTransport(check_host(target.host))
