"""Policy names of ``kvroute sim --policies``: peers, ``kvroute``, routing files."""

from __future__ import annotations

from pathlib import Path

import pytest

from policies.loader import load_routing
from policies.peers.presets import PEER_NAMES, routing_for
from sim.policy_names import DEFAULT_ROUTING, UnknownPolicyError, policy_label, resolve_policy

ROOT = Path(__file__).resolve().parents[2]


def test_peer_names_and_kvroute_resolve() -> None:
    for name in PEER_NAMES:
        assert resolve_policy(name) == routing_for(name)
    assert DEFAULT_ROUTING == ROOT / "config" / "routing.yaml"
    assert resolve_policy("kvroute") == load_routing(DEFAULT_ROUTING)


def test_routing_file_path_resolves_and_is_labelled_by_its_stem() -> None:
    path = str(ROOT / "config" / "examples" / "token-aware.yaml")
    assert resolve_policy(path) == load_routing(path)
    assert policy_label(path) == "token-aware"
    assert policy_label("dynamo-kv") == "dynamo-kv"


def test_unknown_names_and_missing_files_are_refused() -> None:
    with pytest.raises(UnknownPolicyError, match="unknown peer policy 'fastest'"):
        resolve_policy("fastest")
    with pytest.raises(UnknownPolicyError, match="no such routing file"):
        resolve_policy("missing/routing.yaml")
