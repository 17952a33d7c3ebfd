"""The shapes of the ids servatus makes, defined once for the planner that makes them, the store
that keeps them, the batch script that names them and the marker parser that reads them back."""

from __future__ import annotations

import hashlib
import re

ALLOCATION_ID_HEX = 24
"""Allocation ids are 24 lowercase hex digits: short enough for a job name, never guessable."""
ALLOCATION_ID = re.compile(f"[0-9a-f]{{{ALLOCATION_ID_HEX}}}")
"""A whole allocation id, the one shape the planner makes, the store keeps and scripts name."""

JOB_NAME_PREFIX = "servatus-"


def job_name(allocation_id: str) -> str:
    """Slurm job name of an allocation: how ``cancel`` and ``reconcile`` find it by identity."""
    return JOB_NAME_PREFIX + allocation_id


TARGET_KEY_HEX = 16
"""A Target key is this many hex digits of the SHA-256 of the Target's identity."""


def target_key(identity: str) -> str:
    """The short key intents name a Target by: a digest of its identity (canonical JSON)."""
    data = identity.encode("utf-8", "surrogatepass")
    return hashlib.sha256(data).hexdigest()[:TARGET_KEY_HEX]


__all__ = [
    "ALLOCATION_ID",
    "ALLOCATION_ID_HEX",
    "JOB_NAME_PREFIX",
    "TARGET_KEY_HEX",
    "job_name",
    "target_key",
]
