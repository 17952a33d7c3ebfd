"""The ``servatus`` command.

Conventions every command keeps: errors are one line ``servatus: <ErrorClass>: <message>`` and the
exit code of the spec's Recovery playbook (never a traceback); ``--json`` prints exact machine
output, one document whatever the exit (:func:`~servatus.cli.output.json_option`); human output
escapes every non-printable character, a newline inside a value too
(:func:`~servatus.cli.output.echo`).

The click group and the program around it are in :mod:`servatus.cli.app`; each command group is
in a module of its own, which adds its commands to the group when this package is imported. A
command imports the campaign, the engine or the configuration when it runs, not at the top of its
module, so that ``--version`` and each shell completion, which load every command module, load
none of them.
"""

from servatus.cli import authoring, environment, observing, planning, repair  # noqa: F401
from servatus.cli.app import COMPLETE_VAR, cli, console, main
from servatus.cli.output import echo, json_text

__all__ = ["COMPLETE_VAR", "cli", "console", "echo", "json_text", "main"]
