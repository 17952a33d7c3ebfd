"""The commands about the installation and the cluster rather than a campaign: ``plugins``,
``profile`` and ``doctor``."""

from __future__ import annotations

import click

from servatus.cli.app import cli
from servatus.cli.options import DEFAULT_CONFIG, config_options, example, load_profile_option
from servatus.cli.output import Context, _fail, echo, emit_json, json_option, with_warnings
from servatus.cli.render import doctor_lines, plugins_lines, profile_lines


@cli.command(epilog=example("servatus plugins --json"))
@json_option
def plugins(as_json: bool) -> None:
    """List the loaded plugins and the distributions that brought them."""
    from servatus.plugins import hooks  # noqa: PLC0415 - plugins load only when asked for

    loaded = hooks().plugins()
    launchers = sorted(hooks().launchers)
    transports = sorted(hooks().transports)
    if as_json:
        emit_json(
            {
                "plugins": [
                    {"name": p.name, "distribution": p.distribution, "version": p.version}
                    for p in loaded
                ],
                "launchers": launchers,
                "transports": transports,
            }
        )
        return
    echo(*plugins_lines(loaded, launchers, transports))


@cli.command("profile", epilog=example("servatus profile --profile cpu"))
@config_options
@json_option
def profile_command(config: str | None, profile_name: str | None, as_json: bool) -> None:
    """Show the profile SERVATUS.toml resolves to, with how many Tasks fit one allocation."""
    from servatus.config import capacity, profile_to_document  # noqa: PLC0415

    profile = load_profile_option(config, profile_name)
    fits = capacity(profile.target, profile.resources)
    if as_json:
        emit_json(
            {
                "config": config if config is not None else DEFAULT_CONFIG,
                "profile": profile_to_document(profile),
                "capacity": fits,
            }
        )
        return
    echo(*profile_lines(profile, fits))


@cli.command("doctor", epilog=example("servatus doctor --profile cpu"))
@config_options
@json_option
def doctor_command(config: str | None, profile_name: str | None, as_json: bool) -> None:
    """Check, read-only, what the profile needs from its cluster. Exit 1 if a check fails,
    75 if one went unanswered."""
    from servatus.operations.doctor import diagnose  # noqa: PLC0415

    profile = load_profile_option(config, profile_name)
    context = click.get_current_context().find_object(Context)
    diagnosis = diagnose(profile, connect=context.connect if context else None)
    if as_json:
        emit_json(
            {
                "profile": diagnosis.profile,
                "checks": [
                    {"name": c.name, "status": c.status, "detail": c.detail}
                    for c in diagnosis.checks
                ],
                "warnings": with_warnings(diagnosis.warnings),
                "round_trip": None
                if diagnosis.round_trip is None
                else round(diagnosis.round_trip, 6),
            }
        )
    else:
        echo(*doctor_lines(diagnosis))
    for warning in diagnosis.warnings:  # read by whoever runs it, also when --json goes elsewhere
        _fail(f"warning: {warning}")
    if diagnosis.exit_code:
        raise click.exceptions.Exit(diagnosis.exit_code)
