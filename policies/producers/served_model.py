"""The model a request's producers prepare it for.

A rule whose only condition is the model makes each name it lists an alias of its target
(``policies.rules.model_aliases``: it rewrites such a request whatever else it says). The
rules run after the producers, so the engine names the target beforehand
(``PolicyEngine.name_alias_target``, under ``ALIAS_TARGET``), and the producers tokenize and
hash the request as the target's, as vLLM serves it: with its base model's tokenizer and, for
an adapter, its block hash keys. A request naming no alias is prepared for the model it names.
"""

from __future__ import annotations

from policies.base import RoutingRequest

# the request attribute holding the target of the alias the request names
ALIAS_TARGET = "alias_target"


def produced_model(request: RoutingRequest) -> str:
    """The model (or adapter) ``request`` is served as: its alias's target, else its own."""
    target = request.attributes.get(ALIAS_TARGET)
    return target if isinstance(target, str) else request.model
