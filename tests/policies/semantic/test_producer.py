"""The semantic producer in the policy engine: each class goes to its model's workers, and the
token-aware scorers still choose the replica within the class."""

from __future__ import annotations

from typing import Any

import pytest

from policies.base import RoutingRequest
from policies.engine import PolicyEngine
from policies.loader import load_routing
from policies.producers.runner import run_producers_sync
from policies.registry import BUILTIN_PLUGIN_MODULES, BuildContext, default_registry
from policies.semantic.model import SemanticModel
from policies.semantic.producer import PROVIDES, SemanticProducer, SemanticProducerParams
from policies.semantic.section import SECTION_NAME, parse_semantic_section
from tests.policies.conftest import make_view
from tests.policies.semantic.semantic_support import EXAMPLE_FLEET, EXAMPLE_ROUTING
from workers.fleet import load_fleet
from workers.models import WorkerView

pytestmark = pytest.mark.semantic

PROMPTS = {
    "code": "Write a TypeScript function that debounces another function.",
    "math": "Find all real solutions of x^2 - 5x + 6 = 0.",
    "support": "I need to change the delivery address of order 88412.",
    "chat": "What are some good habits for a healthy morning routine?",
}


@pytest.fixture(scope="module")
def engine(example_model: SemanticModel) -> PolicyEngine:
    """The example routing file's engine, its semantic producer on the shared trained model."""
    registry = default_registry(m for m in BUILTIN_PLUGIN_MODULES if m != "policies.semantic")
    registry.register_section(SECTION_NAME, parse_semantic_section, needs=PROVIDES)

    def shared(params: SemanticProducerParams, context: BuildContext) -> SemanticProducer:
        return SemanticProducer(context.name, example_model)

    registry.register("semantic", "producer", SemanticProducerParams, shared, provides=PROVIDES)
    return PolicyEngine.build(load_routing(EXAMPLE_ROUTING, registry), load_fleet(EXAMPLE_FLEET),
                              registry, seed=0)


def fleet_views(**overrides: dict[str, Any]) -> list[WorkerView]:
    views = []
    for spec in load_fleet(EXAMPLE_FLEET).workers:
        info = spec.info
        adapters = tuple((spec.emulate or {}).get("lora_adapters") or ())
        fields: dict[str, Any] = {"lora_adapters": adapters, **overrides.get(info.id, {})}
        views.append(make_view(info.id, models=info.models, labels=info.labels, gpu=info.gpu,
                               **fields))
    return views


def classify(engine: PolicyEngine, text: str) -> RoutingRequest:
    request = RoutingRequest(request_id=text[:8], model="auto",
                             messages=[{"role": "user", "content": text}])
    assert run_producers_sync(engine.producers, request, []) == []
    return request


def test_each_class_goes_to_its_model(engine: PolicyEngine) -> None:
    expected = {"code": ("coder", {"coder-0", "coder-1"}), "math": ("math", {"math-0"}),
                "support": ("support", {"general-0"}),
                "chat": ("general", {"general-0", "general-1"})}
    for label, text in PROMPTS.items():
        request = classify(engine, text)
        assert request.semantic_class == label
        decision = engine.decide(request, fleet_views())
        model, workers = expected[label]
        assert decision.model == model, label
        assert decision.worker_id in workers, label
        assert decision.rule is not None


def test_support_prefers_the_worker_with_the_adapter_loaded(engine: PolicyEngine) -> None:
    request = classify(engine, PROMPTS["support"])
    busy_adapter_worker = fleet_views(**{"general-0": {"waiting": 8, "running": 30}})
    decision = engine.decide(request, busy_adapter_worker)
    assert decision.worker_id == "general-0"
    assert decision.filtered_out.get("general-1") == "model"


def test_token_aware_choice_within_the_class(engine: PolicyEngine) -> None:
    request = classify(engine, PROMPTS["code"])
    first = engine.decide(request, fleet_views(**{"coder-0": {"waiting": 6, "kv_usage": 0.7}}))
    second = engine.decide(request, fleet_views(**{"coder-1": {"waiting": 6, "kv_usage": 0.7}}))
    assert (first.worker_id, second.worker_id) == ("coder-1", "coder-0")
    assert {c.worker_id for c in first.candidates} == {"coder-0", "coder-1"}


LONG_PROMPT_QUESTIONS = {
    "code": "Write a Python function that reads this text from a file and counts how many times "
            "each word appears, then prints the ten most common words.",
    "math": "If the lake house cost $240 per night and we stayed 12 nights, split evenly among "
            "4 people, how much did each person pay?",
}


@pytest.mark.parametrize("label", sorted(LONG_PROMPT_QUESTIONS))
def test_a_long_prompt_is_classified_with_its_end(engine: PolicyEngine,
                                                  example_model: SemanticModel,
                                                  label: str) -> None:
    section = example_model.section
    assert section.tail_tokens > 0
    story = ("Our family spent the summer at a lake house with a wooden dock, long walks, "
             "board games in the evening and a lot of talk about books and films. ") * 20
    # the start alone, all the window read before tail_tokens, is chat
    assert example_model.classify(story[:section.max_chars]).label == "chat"
    assert classify(engine, story + LONG_PROMPT_QUESTIONS[label]).semantic_class == label
