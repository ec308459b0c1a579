"""policies/producers/served_model.py: the model a request's producers prepare it for."""

from __future__ import annotations

from policies.base import RoutingRequest
from policies.producers.served_model import ALIAS_TARGET, produced_model


def test_the_alias_target_when_named_else_the_requested_model() -> None:
    request = RoutingRequest("r", "gpt-4o-mini")
    assert produced_model(request) == "gpt-4o-mini"
    request.attributes[ALIAS_TARGET] = "meta-llama/Llama-3.1-8B-Instruct"
    assert produced_model(request) == "meta-llama/Llama-3.1-8B-Instruct"
