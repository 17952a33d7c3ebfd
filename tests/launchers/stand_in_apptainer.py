#!/usr/bin/python3 -I
"""A stand-in for ``apptainer exec``, for machines without Apptainer (Debian has none).

It accepts the part of Apptainer's documented command line that Servatus uses, refuses anything
else the way Apptainer does (a ``FATAL:`` line, exit 255), and then runs the command as
Apptainer would, on the host's filesystem:

    apptainer exec [--cleanenv|-e] [--nv] [--bind|-B SPEC[,SPEC...]]... [--pwd DIR] IMAGE CMD...

* ``SPEC`` is ``src[:dest[:opts]]`` with ``opts`` ``ro`` or ``rw``; a missing ``src`` is fatal.
  Nothing is mounted: only binds onto the same path (all Servatus makes) are faithful.
* ``IMAGE`` must be a regular file starting with a SIF header.
* The environment: with ``--cleanenv`` none of the host's; without it all of it. Then each
  ``APPTAINERENV_NAME=value`` becomes ``NAME=value``, and ``PATH`` (unless given that way),
  ``APPTAINER_CONTAINER`` and ``APPTAINER_NAME`` are set, as Apptainer sets them. Apptainer also
  sets ``HOME`` and a few others; this stand-in does not.
* The working directory is ``--pwd`` (else the current one); a relative ``CMD`` without ``/`` is
  looked up on the container's ``PATH``; then the process becomes ``CMD`` (its exit is CMD's).

Standard library only, Python 3.11+: it runs as ``/usr/bin/python3`` inside Slurm steps, where
there is no ``PATH`` to find anything else.
"""

from __future__ import annotations

import os
import stat
import sys

FATAL = 255
"""Apptainer's exit status for its own errors."""
PREFIX = "APPTAINERENV_"
CONTAINER_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
"""The ``PATH`` Apptainer gives a container whose image sets none."""
SIF_LAUNCH = b"#!/usr/bin/env run-singularity\n"
SIF_MAGIC = b"SIF_MAGIC"
SIF_MAGIC_OFFSET = 32
BIND_OPTIONS = ("ro", "rw")


class Fatal(Exception):
    """An invocation Apptainer refuses; the message is what it would print."""


def sif_header() -> bytes:
    """The first bytes of a SIF image: tests write them into their stand-in image files."""
    return SIF_LAUNCH.ljust(SIF_MAGIC_OFFSET, b"\0") + SIF_MAGIC + b"\0" + b"\0" * 22


def parse_bind(spec: str) -> tuple[str, str, str]:
    """One ``src[:dest[:opts]]``, as ``(src, dest, opts)``."""
    parts = spec.split(":")
    if not spec or len(parts) > 3 or not all(parts):
        raise Fatal(f"while parsing bind path {spec!r}: wrong bind syntax")
    src = parts[0]
    dest = parts[1] if len(parts) > 1 else src
    opts = parts[2] if len(parts) > 2 else "rw"
    if opts not in BIND_OPTIONS:
        raise Fatal(f"while parsing bind path {spec!r}: {opts!r} is not a valid bind option")
    if not dest.startswith("/"):
        raise Fatal(f"while parsing bind path {spec!r}: destination must be an absolute path")
    if not os.path.exists(src):
        raise Fatal(f"mount source {src} doesn't exist")
    return src, dest, opts


def parse(argv: list[str]) -> tuple[dict[str, object], str, list[str]]:
    """``argv`` after the program name: the options, the image and the command."""
    if not argv or argv[0] != "exec":
        raise Fatal(f"this stand-in only knows 'apptainer exec', got {argv[:1]}")
    words = argv[1:]
    options: dict[str, object] = {"cleanenv": False, "nv": False, "binds": [], "pwd": None}
    while words and words[0].startswith("-"):
        word = words.pop(0)
        name, equals, inline = word.partition("=")
        if name in ("--cleanenv", "-e", "--nv") and not equals:
            options["nv" if name == "--nv" else "cleanenv"] = True
        elif name in ("--bind", "-B", "--pwd"):
            if equals:
                value = inline
            elif words:
                value = words.pop(0)
            else:
                raise Fatal(f"flag needs an argument: {name}")
            if name == "--pwd":
                options["pwd"] = value
            else:
                binds = options["binds"]
                assert isinstance(binds, list)
                binds += [parse_bind(spec) for spec in value.split(",")]
        else:
            raise Fatal(f"unknown flag: {name}")
    if len(words) < 2:
        raise Fatal(f'"exec" requires at least 2 arg(s), only received {len(words)}')
    return options, words[0], words[1:]


def check_image(image: str) -> None:
    try:
        info = os.stat(image)
    except OSError as exc:
        raise Fatal(f"could not open image {image}: {exc.strerror}") from None
    if not stat.S_ISREG(info.st_mode):
        raise Fatal(f"could not open image {image}: not a SIF file (this stand-in runs no sandbox)")
    with open(image, "rb") as handle:
        head = handle.read(SIF_MAGIC_OFFSET + len(SIF_MAGIC))
    if not head.startswith(SIF_LAUNCH) or head[SIF_MAGIC_OFFSET:] != SIF_MAGIC:
        raise Fatal(f"could not open image {image}: image format not recognized")


def environment(host: dict[bytes, bytes], image: str, *, clean: bool) -> dict[bytes, bytes]:
    env = {} if clean else dict(host)
    prefix = PREFIX.encode()
    for name, value in host.items():
        if name.startswith(prefix):
            env.pop(name, None)
            if not name[len(prefix) :]:
                raise Fatal(f"environment variable {name.decode()!r} names no variable")
            env[name[len(prefix) :]] = value
    env.setdefault(b"PATH", CONTAINER_PATH.encode())
    env[b"APPTAINER_CONTAINER"] = os.fsencode(image)
    env[b"APPTAINER_NAME"] = os.fsencode(os.path.basename(image))
    return env


def resolve(command: str, path: bytes) -> str:
    if "/" in command:
        return command
    for directory in os.fsdecode(path).split(":"):
        candidate = os.path.join(directory or ".", command)
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    raise Fatal(f'"{command}": executable file not found in $PATH')


def main(argv: list[str]) -> int:
    try:
        options, image, command = parse(argv)
        check_image(image)
        env = environment(dict(os.environb), image, clean=bool(options["cleanenv"]))
        pwd = options["pwd"]
        if pwd is not None:
            assert isinstance(pwd, str)
            try:
                os.chdir(pwd)
            except OSError as exc:
                raise Fatal(f"could not set working directory {pwd}: {exc.strerror}") from None
        program = resolve(command[0], env[b"PATH"])
        try:
            os.execve(program, command, env)
        except OSError as exc:
            raise Fatal(f"{command[0]}: {exc.strerror}") from None
    except Fatal as exc:
        sys.stderr.write(f"FATAL:   {exc}\n")
        return FATAL
    return FATAL  # not reached: execve replaced this process


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
