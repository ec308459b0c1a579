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
