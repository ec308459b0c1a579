"""policies/producer_deps.py: producers added for what plugins need, in dependency order."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pytest

from policies.base import RoutingRequest
from policies.errors import RoutingConfigError
from policies.loader import parse_routing_text
from policies.registry import BuildContext, PluginRegistry, default_registry
from workers.models import WorkerView


@dataclass(frozen=True)
class _P:
    level: int = 0


class _Nop:
    def __init__(self, name: str) -> None:
        self.name = name

    def produce(self, request: RoutingRequest, workers: Sequence[WorkerView]) -> None:
        return None


def _registry() -> PluginRegistry:
    registry = default_registry(["policies.producers.tokens", "policies.pickers.max_score",
                                 "policies.filters.model"])

    def nop(params: _P, context: BuildContext) -> _Nop:
        return _Nop(context.name)

    registry.register("blocks", "producer", _P, nop, needs=["prompt_token_ids"],
                      provides=["block_hashes"])
    registry.register("classes", "producer", _P, nop, provides=["semantic_class"])
    registry.register("prefix", "scorer", _P, nop, needs=["block_hashes"])
    registry.register("loop-a", "producer", _P, nop, needs=["b"], provides=["a"])
    registry.register("loop-b", "producer", _P, nop, needs=["a"], provides=["b"])
    return registry


def test_needs_pull_in_producers_in_order() -> None:
    routing = parse_routing_text("""
profiles: {default: {scorers: [{type: prefix}]}}
rules: [{name: c, when: {class: code}, then: {profile: default}}]
""", _registry())
    assert [p.type for p in routing.producers] == ["tokens", "blocks", "classes"]


def test_declared_producers_are_reordered_after_their_dependencies() -> None:
    routing = parse_routing_text("""
producers: [{type: blocks, params: {level: 2}}, {type: tokens}]
profiles: {default: {}}
""", _registry())
    assert [(p.type, p.path) for p in routing.producers] == [
        ("tokens", "producers[1]"), ("blocks", "producers[0]")]
    assert routing.producers[1].params == _P(level=2)


def test_dependency_cycle_is_an_error() -> None:
    with pytest.raises(RoutingConfigError) as info:
        parse_routing_text("producers: [{type: loop-a}]\nprofiles: {default: {}}\n", _registry())
    assert str(info.value) == "producers[0]: producers depend on each other in a cycle"


def test_a_field_a_producer_uses_orders_without_pulling_in() -> None:
    registry = _registry()

    def nop(params: _P, context: BuildContext) -> _Nop:
        return _Nop(context.name)

    registry.register("lengths", "producer", _P, nop, provides=["predicted"],
                      uses=["block_hashes"])
    alone = parse_routing_text("producers: [{type: lengths}]\nprofiles: {default: {}}\n",
                               registry)
    assert [p.type for p in alone.producers] == ["lengths"]
    with_prefix = parse_routing_text("""
producers: [{type: lengths}]
profiles: {default: {scorers: [{type: prefix}]}}
""", registry)
    assert [p.type for p in with_prefix.producers] == ["tokens", "blocks", "lengths"]
