"""The Slurm lane's hook implementations: transports, batch scripts, evidence reading.

Registered through the ``servatus`` entry-point group as ``servatus-slurm``, exactly like a
site's own plugin.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from servatus.hookspecs import hookimpl
from servatus_slurm.evidence import SlurmEvidenceReader
from servatus_slurm.script import render
from servatus_slurm.transport import LocalTransportFactory, SshTransportFactory

if TYPE_CHECKING:
    from servatus.evidence import EvidenceReader
    from servatus.script import ScriptSpec
    from servatus.transport import TransportFactory


@hookimpl
def servatus_transports() -> list[TransportFactory]:
    return [LocalTransportFactory(), SshTransportFactory()]


@hookimpl
def servatus_batch_script(spec: ScriptSpec) -> str | None:
    return render(spec)


@hookimpl
def servatus_evidence_reader() -> EvidenceReader | None:
    return SlurmEvidenceReader()
