"""policies/schema.py: strict validation of routing.yaml, one case per failure mode."""

from __future__ import annotations

import textwrap

import pytest

from policies.config import RoutingConfig
from policies.errors import RoutingConfigError
from policies.loader import parse_routing_text
from policies.pickers.max_score import MaxScoreParams
from policies.registry import PluginRegistry, default_registry
from policies.scorers.queue_depth import QueueDepthParams

BASE = """
profiles:
  default:
    filters: [{type: model}, {type: healthy}]
    scorers:
      - {type: queue-depth, weight: 2}
      - {type: kv-usage}
"""


def parse(text: str, registry: PluginRegistry | None = None) -> RoutingConfig:
    return parse_routing_text(textwrap.dedent(text), registry or default_registry())


def test_minimal_profile_gets_system_defaults() -> None:
    routing = parse(BASE)
    profile = routing.profiles["default"]
    assert routing.default_profile == "default"
    assert [s.type for s in profile.filters] == ["model", "healthy"]
    assert [(s.name, s.weight) for s in profile.scorers] == [("queue-depth", 2.0),
                                                             ("kv-usage", 1.0)]
    assert profile.scorers[0].params == QueueDepthParams()
    assert profile.picker.type == "max-score"
    assert profile.picker.params == MaxScoreParams()
    assert routing.rules == ()
    assert routing.producers == ()      # nothing here needs token counts
    assert routing.slo.ttft_s is None


def test_params_are_typed_and_defaults_fill_the_rest() -> None:
    routing = parse("""
        profiles:
          default:
            scorers:
              - {type: queue-depth, name: qd, params: {mode: absolute, threshold: 32}}
            picker: {type: max-score, params: {seed: 3}}
        slo: {ttft_s: 1, tpot_s: 0.05}
    """)
    spec = routing.profiles["default"].scorers[0]
    assert spec.name == "qd"
    assert spec.params == QueueDepthParams(mode="absolute", threshold=32, include_running=False)
    assert routing.profiles["default"].picker.params == MaxScoreParams(seed=3)
    assert (routing.slo.ttft_s, routing.slo.tpot_s) == (1.0, 0.05)


def test_context_length_filter_pulls_in_the_tokens_producer() -> None:
    routing = parse("""
        profiles:
          default:
            filters: [{type: context-length}]
    """)
    assert [(p.type, p.path) for p in routing.producers] == [("tokens", "producers[tokens]")]


def test_declared_producer_keeps_its_params() -> None:
    routing = parse("""
        producers: [{type: tokens, params: {offload_min_chars: 10}}]
        profiles:
          default:
            filters: [{type: context-length}]
    """)
    assert len(routing.producers) == 1
    assert routing.producers[0].params.offload_min_chars == 10


@pytest.mark.parametrize(("text", "message"), [
    pytest.param("profiles: {default: {}}\nfoo: 1\n",
                 "foo: unknown top-level key (expected one of: producers, profiles, rules, "
                 "default_profile, slo, plugin_modules)", id="unknown top-level key"),
    pytest.param("- a\n", "<top level>: must be a mapping", id="not a mapping"),
    pytest.param("", "the file is empty (a routing file has profiles:)", id="empty"),
    pytest.param("# nothing yet\n", "the file is empty (a routing file has profiles:)",
                 id="only a comment"),
    pytest.param("rules: []\n", "profiles: required (at least one profile)", id="no profiles"),
    pytest.param(BASE.replace("weight: 2", "weight: heavy"),
                 "profiles.default.scorers[0].weight: must be a number, got 'heavy'",
                 id="bad weight"),
    pytest.param(BASE.replace("weight: 2", "weight: -1"),
                 "profiles.default.scorers[0].weight: must be >= 0", id="negative weight"),
    pytest.param(BASE.replace("weight: 2", "weight: .nan"),
                 "profiles.default.scorers[0].weight: must be a finite number, not nan",
                 id="weight not a number"),
    pytest.param(BASE.replace("weight: 2", "weight: .inf"),
                 "profiles.default.scorers[0].weight: must be a finite number, not inf",
                 id="infinite weight"),
    pytest.param(BASE + "slo: {ttft_s: .nan}\n",
                 "slo.ttft_s: must be a finite number, not nan", id="slo not a number"),
    pytest.param(BASE.replace("{type: kv-usage}", "{type: kv-usage, wieght: 1}"),
                 "profiles.default.scorers[1].wieght: unknown key (expected one of: name, "
                 "params, type, weight)", id="misspelt key"),
    pytest.param(BASE.replace("{type: healthy}", "{type: healthy, weight: 1}"),
                 "profiles.default.filters[1].weight: unknown key (expected one of: name, "
                 "on_failure, params, type)", id="weight on a filter"),
    pytest.param(BASE.replace("{type: kv-usage}", "{type: kv-usag}"),
                 "profiles.default.scorers[1].type: unknown scorer type 'kv-usag' (known: "
                 "inflight, kv-usage, queue-depth; a module listed in plugin_modules: adds types)",
                 id="unknown plugin type"),
    pytest.param(BASE.replace("{type: kv-usage}", "{type: max-score}"),
                 "profiles.default.scorers[1].type: 'max-score' is a picker, not a scorer",
                 id="plugin of the wrong kind"),
    pytest.param(BASE.replace("weight: 2}", "weight: 2, params: {threshold: many}}"),
                 "profiles.default.scorers[0].params.threshold: must be an integer, got 'many'",
                 id="param of the wrong type"),
    pytest.param(BASE.replace("weight: 2}", "weight: 2, params: {threshold: 0}}"),
                 "profiles.default.scorers[0].params.threshold: must be > 0",
                 id="param out of range"),
    pytest.param(BASE.replace("weight: 2}", "weight: 2, params: {mode: fancy}}"),
                 "profiles.default.scorers[0].params.mode: must be one of: relative, absolute; "
                 "got 'fancy'",
                 id="param not in its literal set"),
    pytest.param(BASE.replace("weight: 2}", "weight: 2, params: {thresh: 3}}"),
                 "profiles.default.scorers[0].params.thresh: unknown key (expected one of: "
                 "include_running, mode, threshold)", id="unknown param"),
    pytest.param(BASE.replace("{type: kv-usage}", "{type: queue-depth}"),
                 "profiles.default.scorers[1].name: duplicate plugin name 'queue-depth' in "
                 "profiles.default.scorers (give each instance its own name:)",
                 id="duplicate instance name"),
    pytest.param(BASE + "rules:\n  - {name: r, then: {profile: long}}\n",
                 "rules[0].then.profile: unknown profile 'long' (defined: default)",
                 id="rule names a missing profile"),
    pytest.param(BASE + "default_profile: fast\n",
                 "default_profile: unknown profile 'fast' (defined: default)",
                 id="missing default profile"),
    pytest.param(BASE + "rules:\n  - {name: r, when: {colour: red}, then: {profile: default}}\n",
                 "rules[0].when.colour: unknown key (expected one of: model, path, header, "
                 "tenant, min_prompt_tokens, max_prompt_tokens, class)", id="unknown condition"),
    pytest.param(BASE + "rules:\n  - {name: r, when: {path: /v1/embedding}, "
                        "then: {profile: default}}\n",
                 "rules[0].when.path: '/v1/embedding' is not a routed path (one of "
                 "/v1/chat/completions, /v1/completions, /v1/embeddings, /v1/responses, "
                 "/v1/messages, /score, /v1/score, /rerank, /v1/rerank, /v2/rerank, /pooling, "
                 "/classify)",
                 id="unknown path"),
    pytest.param(BASE + "rules:\n  - {name: r, when: {min_prompt_tokens: 10.5}, "
                        "then: {profile: default}}\n",
                 "rules[0].when.min_prompt_tokens: must be an integer or null, got 10.5",
                 id="non-integer token bound"),
    pytest.param(BASE + "rules:\n  - {name: r, when: {header: {x-tier: 1}}, "
                        "then: {profile: default}}\n",
                 "rules[0].when.header.x-tier: must be a string, got the number 1 (quote it: "
                 "'1')", id="non-string header value"),
    pytest.param(BASE + "rules:\n  - {name: r, then: {}}\n",
                 "rules[0].then: needs at least one of: profile, model, pool, adapter",
                 id="rule without action"),
    *(pytest.param(BASE + f"rules:\n  - {{name: r, when: {{{condition}}}, then: {{model: m}}}}\n",
                   f"rules[0].when.{condition.split(':')[0]}: has no value (a condition without "
                   "one would hold for every request); give it one or remove it",
                   id=f"condition without a value: {condition}")
      for condition in ("tenant: ", "tenant: ''", "path: null", "min_prompt_tokens: ",
                        "model: []", "header: {}", "class: ")),
    *(pytest.param(BASE + f"rules:\n  - {{name: r, then: {{{action}}}}}\n",
                   f"rules[0].then.{action.split(':')[0]}: has no value (a rule whose "
                   "actions have none does nothing, and keeps what it matches from the rules "
                   "after it); give it one or remove it",
                   id=f"actions without a value: {action}")
      for action in ("profile: null", "pool: {}", "adapter: ''", "model: ",
                     "profile: null, model: ''")),
    pytest.param(BASE + "rules:\n  - {name: r, then: {model: m}}\n"
                        "  - {name: r, then: {model: n}}\n",
                 "rules[1].name: duplicate rule name 'r'", id="duplicate rule name"),
    pytest.param(BASE + "slo: {ttft_s: -1}\n", "slo.ttft_s: must be > 0", id="negative slo"),
    pytest.param(BASE + "slo: {p99: 1}\n",
                 "slo.p99: unknown key (expected one of: tpot_s, ttft_s)", id="unknown slo key"),
    pytest.param(BASE + "rules:\n  - {name: r, when: {class: code}, then: {model: m}}\n",
                 "rules[0].when.class: needs semantic_class, which no installed producer "
                 "provides", id="class rule without a classifier"),
])
def test_invalid_config_is_refused_naming_the_field(text: str, message: str) -> None:
    registry = PluginRegistry()
    for module in ("policies.producers.tokens", "policies.filters.model",
                   "policies.filters.healthy", "policies.scorers.queue_depth",
                   "policies.scorers.kv_usage", "policies.scorers.inflight",
                   "policies.pickers.max_score"):
        __import__(module, fromlist=["register"]).register(registry)
    with pytest.raises(RoutingConfigError) as info:
        parse(text, registry)
    assert str(info.value) == message


def test_a_filter_may_refuse_every_worker_when_it_fails() -> None:
    routing = parse(BASE.replace("{type: model}", "{type: model, on_failure: refuse}"))
    assert [f.on_failure for f in routing.profiles["default"].filters] == ["refuse", "pass"]
    with pytest.raises(RoutingConfigError) as info:
        parse(BASE.replace("{type: model}", "{type: model, on_failure: closed}"))
    assert str(info.value).endswith(
        "filters[0].on_failure: must be one of pass, refuse, got 'closed'")
    with pytest.raises(RoutingConfigError) as info:       # a filter's key alone
        parse(BASE.replace("- {type: kv-usage}", "- {type: kv-usage, on_failure: refuse}"))
    assert "scorers[1].on_failure: unknown key" in str(info.value)


def test_invalid_yaml_names_the_source() -> None:
    with pytest.raises(RoutingConfigError, match=r"^<memory>: invalid YAML: "):
        parse("profiles: [unclosed\n")


def test_rules_parse_every_condition_and_action() -> None:
    routing = parse(BASE + textwrap.dedent("""
        rules:
          - name: long-prompts
            when: {model: [a, b], path: /v1/completions, header: {X-Tier: gold}, tenant: t1,
                   min_prompt_tokens: 4000, max_prompt_tokens: 9000}
            then: {profile: default, model: big, pool: {pool: premium}, adapter: sql-lora}
    """))
    rule = routing.rules[0]
    assert rule.name == "long-prompts"
    assert rule.when.model == ("a", "b")
    assert rule.when.path == ("/v1/completions",)
    assert dict(rule.when.header) == {"x-tier": "gold"}
    assert (rule.when.min_prompt_tokens, rule.when.max_prompt_tokens) == (4000, 9000)
    assert (rule.then.profile, rule.then.model, rule.then.adapter) == ("default", "big",
                                                                       "sql-lora")
    assert dict(rule.then.pool) == {"pool": "premium"}
    assert [p.type for p in routing.producers] == ["tokens"]   # token bounds need counts


def test_a_rule_may_name_each_path_of_vllms_pooling_apis() -> None:
    """``/score`` and ``/v1/score`` (``/rerank``, ``/v1/rerank``, ``/v2/rerank``) are paths of
    their own: a rule names the ones it means."""
    routing = parse(BASE + "rules:\n  - {name: r, when: {path: [/score, /v2/rerank, /pooling, "
                           "/classify]}, then: {profile: default}}\n")
    assert routing.rules[0].when.path == ("/score", "/v2/rerank", "/pooling", "/classify")


def test_an_empty_action_beside_one_with_a_value_is_left() -> None:
    """The rule acts (a templated file may render an unused action empty): not refused."""
    routing = parse(BASE + "rules:\n  - {name: r, then: {profile: default, model: null, "
                           "adapter: ''}}\n", default_registry())
    assert routing.rules[0].then.profile == "default"


def test_bare_type_names_are_shorthand() -> None:
    routing = parse("profiles: {default: {filters: [model, healthy], picker: round-robin}}\n")
    profile = routing.profiles["default"]
    assert [(s.type, s.name) for s in profile.filters] == [("model", "model"),
                                                           ("healthy", "healthy")]
    assert profile.picker.type == "round-robin"


def test_a_rule_on_a_class_the_semantic_section_lacks_is_refused() -> None:
    """``when: {class: legal}`` without a class ``legal`` was accepted: a rule that never
    matches, in validate and in a live reload alike."""
    from policies.loader import parse_routing_text

    text = ("semantic:\n  default_class: chat\n  classes:\n"
            "    code: {examples: [write a function]}\n    chat: {examples: [hello there]}\n"
            "profiles: {default: {scorers: [kv-usage]}, fast: {scorers: [queue-depth]}}\n"
            "rules:\n  - {name: ok, when: {class: [code, chat]}, then: {profile: fast}}\n"
            "  - {name: typo, when: {class: legal}, then: {profile: fast}}\n")
    with pytest.raises(RoutingConfigError, match=r"^rules\[1\]\.when\.class: unknown class "
                                                 r"'legal' \(the semantic section's classes: "
                                                 r"chat, code\)$"):
        parse_routing_text(text)
    parse_routing_text(text.replace("class: legal", "class: code"))
