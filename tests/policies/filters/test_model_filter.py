"""policies/filters/model.py: target model and adapter preference."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from policies.base import CycleState, RoutingRequest
from policies.cycle_keys import TARGET_ADAPTER, TARGET_MODEL
from policies.filters.model import ModelFilter, ModelFilterParams
from workers.models import WorkerView

ViewFactory = Callable[..., WorkerView]


def ids(views: object) -> list[str]:
    return [v.id for v in views]  # type: ignore[attr-defined]


def test_keeps_workers_serving_the_requested_model(view: ViewFactory) -> None:
    views = [view("a", models=("m1",)), view("b", models=("m2", "m1")), view("c", models=("m2",)),
             view("d", models=("m3",), lora_adapters=("m1",))]
    kept = ModelFilter("model", ModelFilterParams()).filter(
        RoutingRequest("r", "m1"), views, CycleState())
    assert ids(kept) == ["a", "b", "d"]


def test_rewritten_target_model_wins_over_the_request(view: ViewFactory) -> None:
    cycle = CycleState()
    cycle.write(TARGET_MODEL, "m2")
    views = [view("a", models=("m1",)), view("b", models=("m2",))]
    kept = ModelFilter("model", ModelFilterParams()).filter(RoutingRequest("r", "m1"), views, cycle)
    assert ids(kept) == ["b"]


@pytest.mark.parametrize(("mode", "loaded_somewhere", "expected"), [
    ("prefer-loaded", True, ["b"]),
    ("prefer-loaded", False, ["a", "b"]),
    ("require-loaded", True, ["b"]),
    ("require-loaded", False, []),
    ("any", True, ["a", "b"]),
])
def test_adapter_modes(view: ViewFactory, mode: str, loaded_somewhere: bool,
                       expected: list[str]) -> None:
    cycle = CycleState()
    cycle.write(TARGET_MODEL, "base")
    cycle.write(TARGET_ADAPTER, "lora")
    adapters = ("lora",) if loaded_somewhere else ()
    views = [view("a", models=("base",)), view("b", models=("base",), lora_adapters=adapters),
             view("c", models=("other",))]
    kept = ModelFilter("model", ModelFilterParams(adapter=mode)).filter(  # type: ignore[arg-type]
        RoutingRequest("r", "base"), views, cycle)
    assert ids(kept) == expected


@pytest.mark.parametrize(("mode", "expected"), [
    ("prefer-loaded", ["b"]),
    ("require-loaded", ["b"]),
    ("any", ["a", "b"]),
])
def test_an_adapter_of_the_rules_base_model_only(view: ViewFactory, mode: str,
                                                 expected: list[str]) -> None:
    """An adapter name loaded on workers of two base models: a rule naming the base model
    with it was sent to the other base model's worker, which answered with that model."""
    cycle = CycleState()
    cycle.write(TARGET_MODEL, "llama")
    cycle.write(TARGET_ADAPTER, "sql-lora")
    views = [view("a", models=("llama",)),
             view("b", models=("llama",), lora_adapters=("sql-lora",)),
             view("m", models=("mistral",), lora_adapters=("sql-lora",))]
    kept = ModelFilter("model", ModelFilterParams(adapter=mode)).filter(  # type: ignore[arg-type]
        RoutingRequest("r", "sql"), views, cycle)
    assert ids(kept) == expected


def test_a_rules_base_model_without_the_adapter_loaded_falls_back_to_its_own_workers(
        view: ViewFactory) -> None:
    cycle = CycleState()
    cycle.write(TARGET_MODEL, "llama")
    cycle.write(TARGET_ADAPTER, "sql-lora")
    views = [view("a", models=("llama",)),
             view("m", models=("mistral",), lora_adapters=("sql-lora",))]
    kept = ModelFilter("model", ModelFilterParams()).filter(
        RoutingRequest("r", "sql"), views, cycle)
    assert ids(kept) == ["a"]


def test_an_adapter_rule_without_a_base_model_keeps_every_worker_with_it(
        view: ViewFactory) -> None:
    """``then: {adapter: solo-lora}`` alone: the target model is the alias the client named,
    which no worker runs, so any worker with the adapter loaded is kept."""
    cycle = CycleState()
    cycle.write(TARGET_MODEL, "solo")
    cycle.write(TARGET_ADAPTER, "solo-lora")
    views = [view("a", models=("llama",), lora_adapters=("solo-lora",)),
             view("b", models=("llama",)),
             view("m", models=("mistral",), lora_adapters=("solo-lora",))]
    kept = ModelFilter("model", ModelFilterParams()).filter(
        RoutingRequest("r", "solo"), views, cycle)
    assert ids(kept) == ["a", "m"]
