"""The plugin registers its three parts through the ``servatus`` entry-point group."""

from __future__ import annotations

import importlib.metadata
from pathlib import Path

import pluggy
from slurm_helpers import direct_step, make_spec, make_target

from servatus import hookspecs
from servatus.plugins import Hooks, PluginManager
from servatus_slurm import plugin
from servatus_slurm.evidence import SlurmEvidenceReader
from servatus_slurm.transport import LocalTransport, SshTransport


def test_entry_point_names_the_plugin_module() -> None:
    points = {e.name: e.value for e in importlib.metadata.entry_points(group="servatus")}
    assert points["servatus-slurm"] == "servatus_slurm.plugin"


def test_hooks_reach_the_implementations(tmp_path: Path) -> None:
    pm = PluginManager()
    pm.add_hookspecs(hookspecs)
    pm.register(plugin, name="servatus-slurm")
    pm.check_pending()
    hooks = Hooks(pm)
    assert sorted(hooks.transports) == ["local", "ssh"]
    target = make_target(tmp_path, host="hpc")
    assert isinstance(hooks.transport("ssh").connect(target), SshTransport)
    assert isinstance(hooks.transport("local").connect(target), LocalTransport)
    assert isinstance(hooks.evidence_reader(), SlurmEvidenceReader)
    script = hooks.batch_script(make_spec(target, [direct_step(target, 0, ["/bin/true"])]))
    assert script.startswith("#!/bin/sh\n#SBATCH --job-name=servatus-")
    assert isinstance(pm, pluggy.PluginManager)
