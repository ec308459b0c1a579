"""policies/engine.py: rules, rewrites, pools, adapters, fault isolation, observers."""

from __future__ import annotations

import textwrap
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pytest

from policies.base import (
    CandidateScore,
    CycleState,
    Decision,
    RequestOutcome,
    RoutingRequest,
)
from policies.cycle_keys import record_worker_attribute
from policies.engine import PolicyEngine
from policies.errors import RoutingConfigError
from policies.loader import parse_routing_text
from policies.registry import BuildContext, PluginRegistry, default_registry
from workers.fleet import FleetConfig, load_fleet
from workers.models import WorkerView

EMPTY_FLEET = FleetConfig({}, {}, ())
MODEL = "meta-llama/Llama-3.1-8B-Instruct"
ViewFactory = Callable[..., WorkerView]

ROUTING = """
profiles:
  default:
    filters: [{type: model}, {type: healthy}]
    scorers: [{type: queue-depth}, {type: kv-usage}]
    picker: {type: max-score, params: {seed: 1}}
  cheap:
    filters: [{type: model}]
    picker: {type: round-robin}
rules:
  - name: gold
    when: {header: {x-tier: gold}}
    then: {pool: {pool: premium}}
  - name: long
    when: {min_prompt_tokens: 1000}
    then: {profile: cheap, model: big-model}
  - name: sql
    when: {tenant: analysts}
    then: {adapter: sql-lora}
"""


def engine_for(text: str = ROUTING, registry: PluginRegistry | None = None,
               fleet: FleetConfig = EMPTY_FLEET) -> PolicyEngine:
    registry = registry or default_registry()
    routing = parse_routing_text(textwrap.dedent(text), registry)
    return PolicyEngine.build(routing, fleet, registry, seed=0)


def request(**fields: Any) -> RoutingRequest:
    return RoutingRequest(request_id="r1", model=fields.pop("model", MODEL), **fields)


@pytest.fixture
def fleet_views(view: ViewFactory) -> list[WorkerView]:
    return [
        view("h100-0", waiting=0, kv_usage=0.5, labels={"pool": "premium"}),
        view("a100-0", waiting=2, kv_usage=0.0, labels={"pool": "standard"}),
        view("l40s-0", waiting=4, kv_usage=0.2, labels={"pool": "economy"}),
    ]


def test_default_profile_scores_every_candidate(fleet_views: list[WorkerView]) -> None:
    decision = engine_for().decide(request(), fleet_views)
    assert (decision.worker_id, decision.profile, decision.rule) == ("h100-0", "default", None)
    assert decision.model == MODEL
    assert [(c.worker_id, c.total, dict(c.scores)) for c in decision.candidates] == [
        ("h100-0", 1.5, {"queue-depth": 1.0, "kv-usage": 0.5}),
        ("a100-0", 1.5, {"queue-depth": 0.5, "kv-usage": 1.0}),
        ("l40s-0", 0.8, {"queue-depth": 0.0, "kv-usage": 0.8}),
    ]
    assert decision.attributes["decided_by"] == "max-score"   # a tie, broken by the picker


def test_reason_names_the_deciding_scorer(view: ViewFactory) -> None:
    views = [view("w1", waiting=0, kv_usage=0.1), view("w2", waiting=3, kv_usage=0.1)]
    decision = engine_for().decide(request(), views)
    assert decision.worker_id == "w1"
    assert decision.reason == "queue-depth 1.00 on w1 vs 0.00 on w2; total 1.90 vs 0.90"
    assert decision.attributes["decided_by"] == "queue-depth"
    assert [c.worker_id for c in decision.candidates] == ["w1", "w2"]


def test_power_of_two_is_explained_against_the_other_worker_it_drew(
        view: ViewFactory) -> None:
    """The reason compared the chosen worker with the next one by total, often one the
    picker never drew."""
    engine = engine_for("""
        profiles:
          default:
            filters: [{type: model}]
            scorers: [{type: queue-depth}]
            picker: {type: power-of-two, params: {seed: 5}}
    """)
    views = [view("w1", waiting=0), view("w2", waiting=2), view("w3", waiting=4)]
    seen = set()
    for n in range(40):
        decision = engine.decide(RoutingRequest(request_id=f"r{n}", model=MODEL), views)
        compared = decision.reason.split(" vs ")[1].split(";")[0]     # "<score> on <worker>"
        other = compared.split(" on ")[1].rstrip(")")
        seen.add((decision.worker_id, other))
        assert other != decision.worker_id
    # w2 chosen against w3 (drawn with it), not against w1, the next one by total
    assert ("w2", "w3") in seen and ("w2", "w1") not in seen
    assert ("w1", "w3") in seen         # w1 against w3: w2, next by total, was not drawn


def test_header_rule_restricts_to_the_pool(fleet_views: list[WorkerView]) -> None:
    decision = engine_for().decide(request(headers={"X-Tier": "gold"}), fleet_views)
    assert (decision.worker_id, decision.rule) == ("h100-0", "gold")
    assert dict(decision.filtered_out) == {"a100-0": "pool", "l40s-0": "pool"}
    assert [c.worker_id for c in decision.candidates] == ["h100-0"]
    assert decision.attributes["decided_by"] == "only-candidate"


def test_token_rule_switches_profile_and_rewrites_the_model(view: ViewFactory) -> None:
    views = [view("small", waiting=0), view("big", models=("big-model",), waiting=9)]
    decision = engine_for().decide(request(num_prompt_tokens=1500), views)
    assert (decision.rule, decision.profile, decision.model) == ("long", "cheap", "big-model")
    assert decision.worker_id == "big"
    assert dict(decision.filtered_out) == {"small": "model"}


def test_rules_can_be_set_aside_for_a_request_whose_target_is_fixed(view: ViewFactory) -> None:
    views = [view("small", waiting=0), view("big", models=("big-model",), waiting=9)]
    decision = engine_for().decide(request(num_prompt_tokens=1500), views, follow_rules=False)
    assert (decision.rule, decision.profile, decision.model) == (None, "default", MODEL)
    assert decision.worker_id == "small"
    assert dict(decision.filtered_out) == {"big": "model"}


def test_adapter_prefers_workers_that_have_it_loaded(view: ViewFactory) -> None:
    views = [view("w1", waiting=0), view("w2", waiting=5, lora_adapters=("sql-lora",))]
    decision = engine_for().decide(request(tenant="analysts"), views)
    assert (decision.worker_id, decision.model, decision.rule) == ("w2", "sql-lora", "sql")
    assert dict(decision.filtered_out) == {"w1": "model"}
    unloaded = [view("w1", waiting=3), view("w3", waiting=0)]
    decision = engine_for().decide(request(tenant="analysts"), unloaded)
    assert (decision.worker_id, decision.model) == ("w3", "sql-lora")


def test_no_candidate_gives_none_with_reason(view: ViewFactory) -> None:
    views = [view("w1", healthy=False), view("w2", models=("other",))]
    decision = engine_for().decide(request(), views)
    assert decision.worker_id is None
    assert decision.reason == "no candidate: 2 worker(s) filtered out (1 by model, 1 by healthy)"
    assert decision.attributes["decided_by"] == "no-candidate"
    assert engine_for().decide(request(), []).reason == "no candidate: no workers"
    gold = engine_for().decide(request(headers={"x-tier": "gold"}), views[:1])
    assert (gold.worker_id, gold.rule) == (None, "gold")
    assert gold.reason == "no candidate: 1 worker(s) filtered out (1 by pool)"


@dataclass(frozen=True)
class _NoParams:
    pass


class _Exploding:
    def __init__(self, name: str) -> None:
        self.name = name

    def filter(self, request: RoutingRequest, workers: Sequence[WorkerView],
               cycle: CycleState) -> Sequence[WorkerView]:
        raise RuntimeError("filter bug")

    def score(self, request: RoutingRequest, workers: Sequence[WorkerView],
              cycle: CycleState) -> Mapping[str, float]:
        raise RuntimeError("scorer bug")

    def pick(self, request: RoutingRequest, candidates: Sequence[CandidateScore],
             cycle: CycleState) -> CandidateScore:
        raise RuntimeError("picker bug")


class _Odd:
    """Scores out of range, NaN, and a missing worker; records an attribute."""

    name = "odd"

    def score(self, request: RoutingRequest, workers: Sequence[WorkerView],
              cycle: CycleState) -> Mapping[str, float]:
        for view in workers:
            record_worker_attribute(cycle, "estimated_ttft_s", view.id, len(view.id) / 10)
        return {"w1": 7.0, "w2": float("nan")}


def _registry_with_faulty_plugins() -> PluginRegistry:
    registry = default_registry()
    for kind in ("filter", "scorer", "picker"):
        registry.register(f"exploding-{kind}", kind, _NoParams,  # type: ignore[arg-type]
                          lambda p, c: _Exploding(c.name))
    registry.register("odd", "scorer", _NoParams, lambda p, c: _Odd())
    return registry


def test_decide_never_raises_when_plugins_throw(view: ViewFactory) -> None:
    engine = engine_for("""
        profiles:
          default:
            filters: [{type: exploding-filter}, {type: healthy}]
            scorers: [{type: exploding-scorer}, {type: odd, weight: 2}, {type: queue-depth}]
            picker: {type: exploding-picker}
    """, _registry_with_faulty_plugins())
    views = [view("w1", waiting=5), view("w2"), view("w33", healthy=False)]
    decision = engine.decide(request(), views)
    assert decision.worker_id == "w1"          # fallback: best total 2*1.0 + 0.0
    assert dict(decision.filtered_out) == {"w33": "healthy"}
    assert {c.worker_id: dict(c.scores) for c in decision.candidates} == {
        "w1": {"odd": 1.0, "queue-depth": 0.0}, "w2": {"odd": 0.0, "queue-depth": 1.0}}
    assert decision.attributes["skipped_plugins"] == (
        "exploding-filter", "exploding-scorer", "exploding-picker")
    assert decision.attributes["estimated_ttft_s"] == 0.2


class _Careless:
    """Returns what is not a result of its kind: a generator of views, None."""

    def __init__(self, name: str, returned: str) -> None:
        self.name = name
        self.returned = returned

    def filter(self, request: RoutingRequest, workers: Sequence[WorkerView],
               cycle: CycleState) -> Any:
        return (w for w in workers) if self.returned == "generator" else None

    def pick(self, request: RoutingRequest, candidates: Sequence[CandidateScore],
             cycle: CycleState) -> Any:
        return None


@pytest.mark.parametrize("returned", ["generator", "none"])
def test_a_plugin_returning_no_result_of_its_kind_is_skipped(view: ViewFactory,
                                                              returned: str) -> None:
    """A filter's generator or None was a 503 for every request; a picker's None chose the
    first candidate, named as the picker's choice."""
    registry = default_registry()
    for kind in ("filter", "picker"):
        registry.register(f"careless-{kind}", kind, _NoParams,  # type: ignore[arg-type]
                          lambda p, c: _Careless(c.name, returned))
    engine = engine_for("""
        profiles:
          default:
            filters: [{type: careless-filter}]
            scorers: [{type: queue-depth}]
            picker: {type: careless-picker}
    """, registry)
    decision = engine.decide(request(), [view("busy", waiting=5), view("idle")])
    assert decision.worker_id == "idle"                 # the best total
    assert decision.attributes["skipped_plugins"] == ("careless-filter", "careless-picker")
    assert decision.attributes["decided_by"] == "picker-failed"
    assert decision.reason == "idle: best total 1.00 (picker careless-picker failed)"


class _Forger:
    """A filter that returns other objects than the views it was given."""

    def __init__(self, name: str, returned: str) -> None:
        self.name = name
        self.returned = returned

    def filter(self, request: RoutingRequest, workers: Sequence[WorkerView],
               cycle: CycleState) -> Any:
        if self.returned == "ids":
            return [w.id for w in workers][:1]
        import dataclasses as dc

        return [dc.replace(w) for w in workers]


@pytest.mark.parametrize("returned", ["ids", "copies"])
def test_a_filter_returning_other_objects_is_skipped(view: ViewFactory, returned: str) -> None:
    """Ids, or copies of the views, left no candidate (a 503 for every request) or kept
    views the filter had not been given, unreported."""
    registry = default_registry()
    registry.register("forger", "filter", _NoParams,  # type: ignore[arg-type]
                      lambda p, c: _Forger(c.name, returned))
    engine = engine_for("""
        profiles:
          default:
            filters: [{type: forger}]
            scorers: [{type: queue-depth}]
    """, registry)
    views = [view("busy", waiting=5), view("idle")]
    decision = engine.decide(request(), views)
    assert decision.worker_id == "idle" and dict(decision.filtered_out) == {}
    assert decision.attributes["skipped_plugins"] == ("forger",)


def test_producers_that_failed_are_named_with_the_plugins_skipped(view: ViewFactory) -> None:
    from policies.producers.runner import run_producers_sync

    class Failing:
        name = "failing-producer"

        def produce(self, request: RoutingRequest, workers: Sequence[WorkerView]) -> None:
            raise RuntimeError("producer bug")

    routed = request()
    assert run_producers_sync([Failing()], routed, []) == ["failing-producer"]
    decision = engine_for().decide(routed, [view("w1")])
    assert decision.worker_id == "w1"
    assert decision.attributes["skipped_plugins"] == ("failing-producer",)


def test_decide_survives_broken_views() -> None:
    decision = engine_for().decide(request(), [object()])  # type: ignore[list-item]
    assert decision.worker_id is None
    assert decision.reason == "no candidate: internal policy error"


class _Recorder:
    def __init__(self, name: str) -> None:
        self.name = name
        self.events: list[str] = []

    def filter(self, request: RoutingRequest, workers: Sequence[WorkerView],
               cycle: CycleState) -> Sequence[WorkerView]:
        return workers

    def on_routed(self, request: RoutingRequest, decision: Decision) -> None:
        self.events.append(f"routed {decision.worker_id}")
        raise RuntimeError("observer bug")

    def on_completed(self, request: RoutingRequest, outcome: RequestOutcome) -> None:
        self.events.append(f"completed {outcome.status}")


def test_observers_get_routed_and_completed(fleet_views: list[WorkerView]) -> None:
    registry = default_registry()
    recorders: list[_Recorder] = []

    def factory(params: object, context: BuildContext) -> _Recorder:
        recorders.append(_Recorder(context.name))
        return recorders[-1]

    registry.register("recorder", "filter", _NoParams, factory)
    engine = engine_for("profiles: {default: {filters: [{type: recorder}]}}", registry)
    decision = engine.decide(request(), fleet_views)
    engine.on_routed(request(), decision)
    engine.on_completed(request(), RequestOutcome("r1", str(decision.worker_id), 200))
    assert recorders[0].events == [f"routed {decision.worker_id}", "completed 200"]


def test_fleet_check_refuses_rewrites_the_fleet_cannot_serve() -> None:
    fleet = load_fleet(_repo_root() / "config" / "fleet.yaml")
    with pytest.raises(RoutingConfigError) as info:
        engine_for(ROUTING, fleet=fleet)
    assert str(info.value) == ("rules[1].then.model: no worker of the fleet serves "
                               "'big-model' (a LoRA adapter goes in then.adapter, with "
                               "then.model its base model)")
    text = ROUTING.replace("big-model", MODEL).replace("premium", "platinum")
    with pytest.raises(RoutingConfigError) as info:
        engine_for(text, fleet=fleet)
    assert str(info.value) == "rules[0].then.pool: no worker of the fleet has pool=platinum"


def test_rebuilt_engine_inherits_round_robin_position(fleet_views: list[WorkerView]) -> None:
    text = "profiles: {default: {picker: {type: round-robin}}}"
    first = engine_for(text)
    assert first.decide(request(), fleet_views).worker_id == "a100-0"
    registry = default_registry()
    second = PolicyEngine.build(parse_routing_text(text, registry), EMPTY_FLEET, registry,
                                previous=first)
    assert second.decide(request(), fleet_views).worker_id == "h100-0"
    assert second.decide(request(), fleet_views).worker_id == "l40s-0"


def _repo_root() -> Any:
    from pathlib import Path
    return Path(__file__).resolve().parents[2]


def test_any_factory_failure_is_a_config_error() -> None:
    registry = default_registry()

    def broken(params: object, context: BuildContext) -> object:
        raise RuntimeError("model weights missing")

    registry.register("broken", "scorer", _NoParams, broken)
    with pytest.raises(RoutingConfigError) as info:
        engine_for("profiles: {default: {scorers: [{type: broken}]}}", registry)
    assert str(info.value) == ("profiles.default.scorers[0]: RuntimeError: "
                               "model weights missing")


class _CompletionCounter:
    """Implements only on_completed (half of RoutingObserver)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.completed = 0

    def score(self, request: RoutingRequest, workers: Sequence[WorkerView],
              cycle: CycleState) -> Mapping[str, float]:
        return {}

    def on_completed(self, request: RoutingRequest, outcome: RequestOutcome) -> None:
        self.completed += 1


def test_a_plugin_may_implement_one_hook_only(fleet_views: list[WorkerView]) -> None:
    registry = default_registry()
    counters: list[_CompletionCounter] = []

    def factory(params: object, context: BuildContext) -> _CompletionCounter:
        counters.append(_CompletionCounter(context.name))
        return counters[-1]

    registry.register("counter", "scorer", _NoParams, factory)
    engine = engine_for("profiles: {default: {scorers: [{type: counter}]}}", registry)
    decision = engine.decide(request(), fleet_views)
    engine.on_routed(request(), decision)
    engine.on_completed(request(), RequestOutcome("r1", "h100-0", 200))
    engine.on_completed(request(), RequestOutcome("r1", "h100-0", 500))
    assert counters[0].completed == 2


def test_a_forgotten_worker_leaves_no_incumbents_nor_learnt_state_in_the_default_profile(
        ) -> None:
    """``forget_worker`` reached the prefix scorer and the estimator's coefficients only:
    the decode guard's incumbents, the online correction and the routed prefill of a
    worker stayed (an id churned through the fleet file for ever, a restarted engine's
    finished requests held as still decoding)."""
    import random
    from array import array

    from bench.decision import MODEL, held_incumbents, synthetic_fleet, synthetic_views
    from policies.loader import load_routing
    from tests.conftest import REPO_ROOT

    fleet = synthetic_fleet(2)
    engine = PolicyEngine.build(load_routing(REPO_ROOT / "config/routing.yaml"), fleet, seed=0)
    views = synthetic_views(fleet, random.Random(0))
    for n in range(40):
        tokens = array("i", range(n * 1000, n * 1000 + 600))
        routed = RoutingRequest(request_id=f"r{n}", model=MODEL, path="/v1/completions",
                                prompt=tokens, max_tokens=200, arrival_time=n * 0.01)
        routed.prompt_token_ids, routed.num_prompt_tokens = tokens, len(tokens)
        for producer in engine.producers:
            if producer.name != "tokens":
                producer.produce(routed, views)
        decision = engine.decide(routed, views)
        engine.on_routed(routed, decision)
    assert held_incumbents(engine, fleet) > 0
    estimators = [plugin.estimator for _, _, plugin in engine.plugins()
                  if hasattr(plugin, "estimator")]
    assert any(est.arrivals.rate(spec.info.id, 1.0) > 0.0
               for est in estimators for spec in fleet.workers)
    for spec in fleet.workers:
        engine.forget_worker(spec.info.id)
    assert held_incumbents(engine, fleet) == 0
    assert estimators and all(est.arrivals.rate(spec.info.id, 1.0) == 0.0
                              for est in estimators for spec in fleet.workers)


def test_an_alias_names_its_target_for_the_producers() -> None:
    """The rules run after the producers: a request naming an alias was tokenized and hashed
    as the alias, which no tokenizer or adapter knows. A rule on the model alone names its
    target beforehand; a rule with more conditions (a tenant's) does not, as it may not match."""
    from policies.producers.served_model import ALIAS_TARGET, produced_model

    engine = engine_for(ROUTING.split("rules:")[0] + (
        "rules:\n"
        "  - name: public\n"
        "    when: {model: [gpt-4o-mini]}\n"
        f"    then: {{model: {MODEL}}}\n"
        "  - name: sql-alias\n"
        "    when: {model: [sql]}\n"
        f"    then: {{model: {MODEL}, adapter: sql-lora}}\n"
        "  - name: tenant-only\n"
        "    when: {model: [special], tenant: analysts}\n"
        "    then: {model: big-model}\n"))
    for named, target in (("gpt-4o-mini", MODEL), ("sql", "sql-lora"), ("special", "special"),
                          (MODEL, MODEL)):
        routed = request(model=named)
        engine.name_alias_target(routed)
        assert produced_model(routed) == target, named
        assert (ALIAS_TARGET in routed.attributes) == (named != target), named
