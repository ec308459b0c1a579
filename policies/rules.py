"""Rule matching: the first rule whose ``when:`` holds for a request chooses what follows.

Conditions (all given ones must hold): ``model`` (the requested model), ``path``
(one of ``policies.base.ROUTED_PATHS``, each as the client sent it: ``/score`` and
``/v1/score`` are two paths), ``header`` (every listed header equals the
value; names are case-insensitive), ``tenant``, ``min_prompt_tokens`` / ``max_prompt_tokens``
(inclusive bounds on ``request.num_prompt_tokens``, filled by the tokens producer) and
``class`` (``request.semantic_class``, filled by the semantic producer). A condition that
lists several values matches any of them.

``model_aliases(rules)``: the names a rule rewrites whatever else the request says (a
``when:`` of ``model`` alone, a ``then:`` naming a model or adapter), to list beside the
served models.
"""

from __future__ import annotations

from collections.abc import Sequence

from policies.base import RoutingRequest
from policies.config import Rule, RuleMatch


def first_match(rules: Sequence[Rule], request: RoutingRequest) -> Rule | None:
    for rule in rules:
        if matches(rule.when, request):
            return rule
    return None


def model_aliases(rules: Sequence[Rule]) -> dict[str, str]:
    """Alias -> what its requests are sent to (``then.adapter``, else ``then.model``), for
    every rule whose only condition is the model, unless a rule before it that leaves the
    model as it is may match a request for that name (it is matched first, and the name
    reaches the workers unchanged)."""
    aliases: dict[str, str] = {}
    shadowed: set[str] = set()
    for rule in rules:
        target = rule.then.adapter or rule.then.model
        when = rule.when
        if target is None:
            if not when.model:
                break                # it may match any name: whatever follows is behind it
            shadowed.update(when.model)
            continue
        if when.model and not (when.path or when.header or when.tenant
                               or when.semantic_class or when.needs_prompt_tokens):
            for name in when.model:
                if name != target and name not in shadowed:
                    aliases.setdefault(name, target)
    return aliases


def matches(when: RuleMatch, request: RoutingRequest) -> bool:
    if when.model and request.model not in when.model:
        return False
    if when.path and request.path not in when.path:
        return False
    if when.tenant and request.tenant not in when.tenant:
        return False
    if when.semantic_class and request.semantic_class not in when.semantic_class:
        return False
    if when.min_prompt_tokens is not None and request.num_prompt_tokens < when.min_prompt_tokens:
        return False
    if when.max_prompt_tokens is not None and request.num_prompt_tokens > when.max_prompt_tokens:
        return False
    return not when.header or _headers_match(when, request)


def _headers_match(when: RuleMatch, request: RoutingRequest) -> bool:
    lowered = {name.lower(): value for name, value in request.headers.items()}
    return all(lowered.get(name) == value for name, value in when.header.items())
