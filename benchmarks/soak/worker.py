"""What a soak Task publishes, and how the evidence reads it back.

A Task's result is a directory ``RESULTS/<key>`` published with :func:`servatus.publish`:
``payload.bin`` (bytes derived from the key, so a reader can recompute them) and
``manifest.json`` naming the key, the writer (``<allocation>.<job>.<slot>``, from the step's
environment on the cluster) and the payload's SHA-256. Complete means the manifest reads, names
this key, and the payload is there with that digest; nothing else lies in the directory.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from servatus_publish.publication import Draft, publish

PAYLOAD = "payload.bin"
MANIFEST = "manifest.json"
PAYLOAD_BYTES = 64 * 1024


def payload(key: str) -> bytes:
    """The payload of ``key``'s result: deterministic, so its digest can be checked."""
    block = hashlib.sha256(key.encode()).digest()
    return (block * (PAYLOAD_BYTES // len(block) + 1))[:PAYLOAD_BYTES]


def publish_result(results: Path, key: str, writer: str) -> Path:
    """Publish ``key``'s result under ``results`` as ``writer``; raises
    :class:`servatus.errors.DestinationExists` when it is already there (a rerun keeps the
    first)."""
    data = payload(key)

    def build(draft: Draft) -> None:
        root = Path(draft.path)
        (root / PAYLOAD).write_bytes(data)
        manifest = {"key": key, "writer": writer, "sha256": hashlib.sha256(data).hexdigest()}
        (root / MANIFEST).write_text(json.dumps(manifest, sort_keys=True) + "\n")

    destination = results / key
    publish(destination, build)
    return destination


def check_result(directory: Path, key: str) -> tuple[str | None, tuple[str, ...]]:
    """The writer a published result names and what makes it incomplete (empty: complete)."""
    problems: list[str] = []
    writer: str | None = None
    try:
        manifest = json.loads((directory / MANIFEST).read_text())
    except (OSError, ValueError) as exc:
        return None, (f"manifest unreadable: {type(exc).__name__}",)
    if not isinstance(manifest, dict):
        return None, ("manifest is not an object",)
    writer = manifest.get("writer") if isinstance(manifest.get("writer"), str) else None
    if manifest.get("key") != key:
        problems.append(f"manifest names key {manifest.get('key')!r}")
    try:
        digest = hashlib.sha256((directory / PAYLOAD).read_bytes()).hexdigest()
    except OSError as exc:
        problems.append(f"payload unreadable: {type(exc).__name__}")
    else:
        if digest != manifest.get("sha256") or digest != hashlib.sha256(payload(key)).hexdigest():
            problems.append("payload digest differs")
    extra = sorted(p.name for p in directory.iterdir() if p.name not in (PAYLOAD, MANIFEST))
    if extra:
        problems.append(f"unexpected entries {extra!r}")
    return writer, tuple(problems)
