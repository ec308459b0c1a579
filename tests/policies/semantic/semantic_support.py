"""Paths of the semantic example files, shared by the semantic tests and their fixtures."""

from __future__ import annotations

from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[3]
EXAMPLE_ROUTING = REPO_ROOT / "config/examples/semantic.yaml"
EXAMPLE_FLEET = REPO_ROOT / "config/examples/semantic-fleet.yaml"
HELDOUT = REPO_ROOT / "config/examples/semantic-eval/heldout.jsonl"
