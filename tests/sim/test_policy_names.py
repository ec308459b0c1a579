"""Policy names of ``kvroute sim --policies``: peers, ``kvroute``, routing files."""

from __future__ import annotations

from pathlib import Path

import pytest

from policies.loader import load_routing
from policies.peers.presets import PEER_NAMES, routing_for
from sim.policy_names import UnknownPolicyError, policy_label, resolve_policy
from workers import project_files

ROOT = Path(__file__).resolve().parents[2]


def test_peer_names_and_kvroute_resolve(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in PEER_NAMES:
        assert resolve_policy(name) == routing_for(name)
    monkeypatch.chdir(tmp_path)      # from any directory: the checkout's routing file
    assert resolve_policy("kvroute") == load_routing(ROOT / "config" / "routing.yaml")


def test_kvroute_is_the_working_directorys_routing_file_first(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "config").mkdir()
    own = (ROOT / "config" / "routing.yaml").read_text().replace("ttft_s: 0.5", "ttft_s: 0.7")
    (tmp_path / "config" / "routing.yaml").write_text(own)
    monkeypatch.chdir(tmp_path)
    resolved = resolve_policy("kvroute")
    assert Path(resolved.source).resolve() == tmp_path / "config" / "routing.yaml"
    assert resolved.slo.ttft_s == 0.7


def test_kvroute_without_a_routing_file_names_what_to_pass(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(project_files, "CHECKOUT", tmp_path / "site-packages")
    with pytest.raises(UnknownPolicyError, match=r"policy 'kvroute': config/routing.yaml: no "
                       r"such file in this directory .*pass --policies FILE \(a routing "
                       r"file's path\)"):
        resolve_policy("kvroute")


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
