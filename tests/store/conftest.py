"""Fixtures for the store tests."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from store_helpers import SPEC_JSONL, run_servatus


@pytest.fixture
def spec_files(tmp_path: Path) -> Path:
    """The quickstart's tasks.jsonl with its configs/ files; returns the JSONL path."""
    configs = tmp_path / "configs"
    configs.mkdir()
    (configs / "lr-1e-3.json").write_text('{"lr": 0.001}\n')
    (configs / "lr-3e-4.json").write_text('{"lr": 0.0003}\n')
    jsonl = tmp_path / "tasks.jsonl"
    jsonl.write_text(SPEC_JSONL)
    return jsonl


@pytest.fixture
def servatus() -> Callable[..., subprocess.CompletedProcess[str]]:
    return run_servatus
