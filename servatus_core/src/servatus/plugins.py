"""Building the plugin manager, and the typed face the rest of Servatus calls hooks through.

:func:`get_plugin_manager` registers the built-ins, loads the entry-point group ``servatus`` and
checks every implementation against its spec. :class:`Hooks` wraps the manager with one typed
method per hook, so nothing else calls ``pm.hook.*`` directly.
"""

from __future__ import annotations

import functools
import importlib.metadata
import os
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, TypeVar

import attrs
import pluggy

from servatus import hookspecs
from servatus.errors import ConfigurationError, PluginError

if TYPE_CHECKING:
    from servatus.config import Target
    from servatus.evidence import EvidenceReader
    from servatus.launcher import Launcher
    from servatus.script import LeaseOrder, LeaseSpec, ScriptSpec
    from servatus.transport import TransportFactory

GROUP = hookspecs.PROJECT
BLOCK_VARIABLE = "SERVATUS_DISABLE_PLUGINS"
# Servatus is installed from a clone, not PyPI: name the directory, not an index package.
_INSTALL_SLURM = "install servatus-slurm (from a clone: pip install ./servatus_slurm)"
"""Comma-separated plugin names not to load, like ``pytest -p no:NAME``."""

_N = TypeVar("_N")


@attrs.frozen
class PluginInfo:
    """One loaded plugin: its registered name and the distribution that brought it."""

    name: str
    distribution: str
    version: str


def _blocked() -> set[str]:
    return {name.strip() for name in os.environ.get(BLOCK_VARIABLE, "").split(",") if name.strip()}


class PluginManager(pluggy.PluginManager):
    """pluggy's manager, remembering which distribution brought each plugin."""

    def __init__(self) -> None:
        super().__init__(GROUP)
        self.distributions: dict[str, importlib.metadata.Distribution | None] = {}


def get_plugin_manager() -> PluginManager:
    """Build a manager with every plugin of the ``servatus`` entry-point group.

    The built-ins (the direct launcher here, Slurm, Apptainer and publication in their own
    distributions) are entry points too, so a site's plugin is loaded exactly like ours. Plugin
    names are unique; a duplicate, an import failure or a bad implementation is a
    :class:`PluginError` naming the plugin.
    """
    pm = PluginManager()
    pm.add_hookspecs(hookspecs)
    blocked = _blocked()
    for name in blocked:
        pm.set_blocked(name)
    seen: dict[str, str] = {}
    for entry_point in sorted(importlib.metadata.entry_points(group=GROUP), key=lambda e: e.name):
        if entry_point.name in blocked:
            continue
        dist = entry_point.dist.name if entry_point.dist else "?"
        if entry_point.name in seen:
            if seen[entry_point.name] == dist:
                continue  # the same distribution seen twice on sys.path
            raise PluginError(
                f"plugin name {entry_point.name!r} is registered by both "
                f"{seen[entry_point.name]} and {dist}"
            )
        seen[entry_point.name] = dist
        try:
            plugin = entry_point.load()
        except Exception as exc:  # any import-time failure of foreign code
            raise PluginError(
                f"plugin {entry_point.name!r} from {dist} failed to load: "
                f"{type(exc).__name__}: {exc}"
            ) from exc
        try:
            pm.register(plugin, name=entry_point.name)
        except (ValueError, pluggy.PluginValidationError) as exc:
            raise PluginError(f"plugin {entry_point.name!r} from {dist}: {exc}") from exc
        pm.distributions[entry_point.name] = entry_point.dist
    try:
        pm.check_pending()
    except pluggy.PluginValidationError as exc:
        raise PluginError(f"plugin {pm.get_name(exc.plugin)!r}: {exc}") from exc
    return pm


def _unique(kind: str, items: Iterable[_N], key: Callable[[_N], str]) -> dict[str, _N]:
    by_name: dict[str, _N] = {}
    for item in items:
        name = key(item)
        if name in by_name:
            raise PluginError(f"two plugins provide a {kind} named {name!r}")
        by_name[name] = item
    return by_name


class Hooks:
    """Typed access to the hooks of one plugin manager."""

    def __init__(self, pm: PluginManager) -> None:
        self.pm = pm

    @functools.cached_property
    def launchers(self) -> dict[str, Launcher]:
        results: list[list[Launcher]] = self.pm.hook.servatus_launchers()
        return _unique("launcher", (item for group in results for item in group), _name)

    @functools.cached_property
    def transports(self) -> dict[str, TransportFactory]:
        results: list[list[TransportFactory]] = self.pm.hook.servatus_transports()
        return _unique("transport", (item for group in results for item in group), _name)

    def launcher(self, name: str) -> Launcher:
        try:
            return self.launchers[name]
        except KeyError:
            known = ", ".join(sorted(self.launchers)) or "none"
            raise ConfigurationError(
                f"unknown launcher {name!r}; installed launchers: {known}"
            ) from None

    def transport(self, name: str) -> TransportFactory:
        try:
            return self.transports[name]
        except KeyError:
            known = ", ".join(sorted(self.transports)) or "none"
            raise PluginError(
                f"no transport named {name!r} is installed (installed: {known}); " + _INSTALL_SLURM
            ) from None

    def batch_script(self, spec: ScriptSpec) -> str:
        script: str | None = self.pm.hook.servatus_batch_script(spec=spec)
        if script is None:
            raise PluginError("no plugin renders batch scripts; " + _INSTALL_SLURM)
        return script

    def lease_script(self, spec: LeaseSpec) -> str:
        script: str | None = self.pm.hook.servatus_lease_script(spec=spec)
        if script is None:
            raise PluginError("no plugin renders lease scripts; " + _INSTALL_SLURM)
        return script

    def lease_order(self, order: LeaseOrder, target: Target) -> str:
        text: str | None = self.pm.hook.servatus_lease_order(order=order, target=target)
        if text is None:
            raise PluginError("no plugin renders lease orders; " + _INSTALL_SLURM)
        return text

    def evidence_reader(self) -> EvidenceReader:
        reader: EvidenceReader | None = self.pm.hook.servatus_evidence_reader()
        if reader is None:
            raise PluginError("no plugin reads Slurm evidence; " + _INSTALL_SLURM)
        return reader

    def lock_directory(
        self, dir_fd: int, path: str, *, wait: float = 0.0
    ) -> AbstractContextManager[None]:
        lock: AbstractContextManager[None] | None = self.pm.hook.servatus_lock_directory(
            dir_fd=dir_fd, path=path, wait=wait
        )
        if lock is None:
            raise PluginError("no plugin locks directories; install servatus-publish")
        return lock

    def rename_noreplace(
        self,
        src_dir_fd: int,
        src_name: str,
        dst_dir_fd: int,
        dst_name: str,
        *,
        is_dir: bool,
        path: str,
    ) -> None:
        done: bool | None = self.pm.hook.servatus_rename_noreplace(
            src_dir_fd=src_dir_fd,
            src_name=src_name,
            dst_dir_fd=dst_dir_fd,
            dst_name=dst_name,
            is_dir=is_dir,
            path=path,
        )
        if not done:
            raise PluginError("no plugin commits publications; install servatus-publish")

    def plugins(self) -> list[PluginInfo]:
        """Every loaded plugin with its distribution, for ``servatus plugins``."""
        infos = []
        for name, plugin in sorted(self.pm.list_name_plugin()):
            if plugin is None:  # blocked by name
                continue
            dist = self.pm.distributions.get(name)
            infos.append(
                PluginInfo(
                    name=name,
                    distribution=dist.name if dist else "?",
                    version=dist.version if dist else "?",
                )
            )
        return infos


def _name(item: Any) -> str:
    return str(item.name)


@functools.cache
def hooks() -> Hooks:
    """The process-wide hooks, built on first use so importing Servatus loads no plugins."""
    return Hooks(get_plugin_manager())
