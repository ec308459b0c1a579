from __future__ import annotations

from pathlib import Path

import pytest

from policies.loader import load_routing
from policies.peers.presets import PEER_NAMES, PRESET_YAML, routing_for
from workers.fleet import load_fleet

REPO = Path(__file__).resolve().parents[3]


def test_every_preset_file_matches_the_embedded_preset() -> None:
    files = sorted(p.stem for p in (REPO / "config" / "policies").glob("*.yaml"))
    assert files == sorted(PEER_NAMES)
    for name in PEER_NAMES:
        assert (REPO / "config" / "policies" / f"{name}.yaml").read_text() == PRESET_YAML[name]
        assert load_routing(REPO / "config" / "policies" / f"{name}.yaml").profiles.keys() == {
            "default"}


def test_unknown_peer_names_the_known_ones() -> None:
    with pytest.raises(KeyError, match="sglang-cache-aware"):
        routing_for("nginx")


@pytest.mark.parametrize("name", PEER_NAMES)
def test_each_preset_builds_an_engine_that_routes(name: str) -> None:
    from policies.engine import PolicyEngine
    from tests.policies.peers.peer_fixtures import make_request, make_view
    from workers.views import build_view  # noqa: F401  (the live path builds views this way)

    fleet = load_fleet(REPO / "config" / "fleet.yaml")
    engine = PolicyEngine.build(routing_for(name), fleet, seed=1)
    views = [make_view("w0"), make_view("w1", inflight=1)]
    request = make_request("r1", tokens=range(64), at=1.0)
    decision = engine.decide(request, views)
    assert decision.worker_id in {"w0", "w1"}
    assert decision.profile == "default"
    engine.on_routed(request, decision)


def test_a_rebuilt_engine_keeps_the_sglang_trees() -> None:
    from policies.engine import PolicyEngine
    from tests.policies.peers.peer_fixtures import make_request, make_view

    fleet = load_fleet(REPO / "config" / "fleet.yaml")
    first = PolicyEngine.build(routing_for("sglang-cache-aware"), fleet, seed=1)
    views = [make_view("w0", inflight=1), make_view("w1")]
    request = make_request("r1", tokens=range(64), at=1.0)
    decision = first.decide(request, views)
    assert decision.worker_id == "w1"                       # miss: least loaded
    first.on_routed(request, decision)
    second = PolicyEngine.build(routing_for("sglang-cache-aware"), fleet, seed=1,
                                previous=first)
    loaded = [make_view("w0"), make_view("w1", inflight=3)]
    again = second.decide(make_request("r2", tokens=range(64), at=2.0), loaded)
    assert (again.worker_id, again.attributes["decided_by"]) == ("w1", "cache")
