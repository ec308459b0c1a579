"""policies/rules.py: first match wins; every condition."""

from __future__ import annotations

from typing import Any

import pytest

from policies.base import RoutingRequest
from policies.config import Rule, RuleAction, RuleMatch
from policies.rules import first_match, matches, model_aliases


def req(**fields: Any) -> RoutingRequest:
    return RoutingRequest("r", fields.pop("model", "m"), **fields)


@pytest.mark.parametrize(("when", "request_fields", "expected"), [
    (RuleMatch(), {}, True),
    (RuleMatch(model=("m", "n")), {"model": "n"}, True),
    (RuleMatch(model=("m",)), {"model": "x"}, False),
    (RuleMatch(path=("/v1/completions",)), {"path": "/v1/completions"}, True),
    (RuleMatch(path=("/v1/completions",)), {}, False),
    (RuleMatch(header={"x-tier": "gold"}), {"headers": {"X-Tier": "gold"}}, True),
    (RuleMatch(header={"x-tier": "gold"}), {"headers": {"x-tier": "silver"}}, False),
    (RuleMatch(header={"x-tier": "gold"}), {}, False),
    (RuleMatch(tenant=("t1",)), {"tenant": "t1"}, True),
    (RuleMatch(tenant=("t1",)), {}, False),
    (RuleMatch(min_prompt_tokens=100), {"num_prompt_tokens": 100}, True),
    (RuleMatch(min_prompt_tokens=100), {"num_prompt_tokens": 99}, False),
    (RuleMatch(max_prompt_tokens=100), {"num_prompt_tokens": 100}, True),
    (RuleMatch(max_prompt_tokens=100), {"num_prompt_tokens": 101}, False),
    (RuleMatch(semantic_class=("code",)), {"semantic_class": "code"}, True),
    (RuleMatch(semantic_class=("code",)), {}, False),
    (RuleMatch(model=("m",), tenant=("t1",)), {"tenant": "t2"}, False),
])
def test_conditions(when: RuleMatch, request_fields: dict[str, Any], expected: bool) -> None:
    assert matches(when, req(**request_fields)) is expected


def test_first_match_wins() -> None:
    rules = (Rule("a", RuleMatch(tenant=("t1",)), RuleAction(profile="x")),
             Rule("b", RuleMatch(), RuleAction(profile="y")),
             Rule("c", RuleMatch(), RuleAction(profile="z")))
    assert first_match(rules, req(tenant="t1")) is rules[0]
    assert first_match(rules, req(tenant="t2")) is rules[1]
    assert first_match(rules[:1], req()) is None


def test_model_aliases_are_the_rules_on_the_model_alone() -> None:
    def rule(name: str, when: RuleMatch, then: RuleAction) -> Rule:
        return Rule(name, when, then)

    rules = [
        rule("tenant", RuleMatch(model=("fast",), tenant=("acme",)), RuleAction(model="big")),
        rule("alias", RuleMatch(model=("fast", "gpt-4o-mini")), RuleAction(model="small")),
        rule("again", RuleMatch(model=("fast",)), RuleAction(model="other")),
        rule("adapter", RuleMatch(model=("sql",)), RuleAction(model="small", adapter="sql-lora")),
        rule("pool", RuleMatch(model=("pooled",)), RuleAction(pool={"pool": "a"})),
        rule("long", RuleMatch(model=("long",), min_prompt_tokens=9), RuleAction(model="big")),
        rule("self", RuleMatch(model=("small",)), RuleAction(model="small")),
    ]
    assert model_aliases(rules) == {"fast": "small", "gpt-4o-mini": "small", "sql": "sql-lora"}


def test_an_alias_behind_a_rule_that_matches_first_is_no_alias() -> None:
    """A rule before the alias's (on a path, or naming the alias with a tenant) matches its
    requests first and never rewrites the model: it was listed in /v1/models all the same."""
    alias = Rule("alias", RuleMatch(model=("gpt-4o-mini", "small")), RuleAction(model="m"))
    chat = Rule("chat", RuleMatch(path=("/v1/chat/completions",)), RuleAction(profile="p"))
    acme = Rule("acme", RuleMatch(model=("small",), tenant=("acme",)), RuleAction(profile="p"))
    assert model_aliases([chat, alias]) == {}
    assert model_aliases([acme, alias]) == {"gpt-4o-mini": "m"}
    assert model_aliases([alias, chat]) == {"gpt-4o-mini": "m", "small": "m"}
