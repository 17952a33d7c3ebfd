"""The Slurm lane's hook implementations: transports, batch scripts, evidence reading.

Registered through the ``servatus`` entry-point group as ``servatus-slurm``, exactly like a
site's own plugin. The script renderers are imported when a script is rendered: ``status`` and
``plan`` load this plugin for its transports and evidence reader alone.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from servatus.hookspecs import hookimpl
from servatus_slurm.evidence import SlurmEvidenceReader
from servatus_slurm.transport import LocalTransportFactory, SshTransportFactory

if TYPE_CHECKING:
    from servatus.config import Target
    from servatus.evidence import EvidenceReader
    from servatus.script import LeaseOrder, LeaseSpec, ScriptSpec
    from servatus.transport import TransportFactory


@hookimpl
def servatus_transports() -> list[TransportFactory]:
    return [LocalTransportFactory(), SshTransportFactory()]


@hookimpl
def servatus_batch_script(spec: ScriptSpec) -> str | None:
    from servatus_slurm.script import render  # noqa: PLC0415 - only submit renders a script

    return render(spec)


@hookimpl
def servatus_lease_script(spec: LeaseSpec) -> str | None:
    from servatus_slurm.lease import render_lease  # noqa: PLC0415 - as render's

    return render_lease(spec)


@hookimpl
def servatus_lease_order(order: LeaseOrder, target: Target) -> str | None:
    from servatus_slurm.lease import render_order  # noqa: PLC0415 - as render's

    return render_order(order, target)


@hookimpl
def servatus_evidence_reader() -> EvidenceReader | None:
    return SlurmEvidenceReader()
