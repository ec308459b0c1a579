"""Faithful re-implementations of other routers' algorithms, as kvroute plugins.

Each module cites the rule and defaults it reproduces (``shared/reference/peer-routers.md``).
``register(registry)`` adds every peer plugin type; ``policies.peers.presets`` turns a peer's
name (``round-robin``, ``least-requests``, ``sglang-cache-aware``, ``llm-d-default``,
``dynamo-kv``, ``production-stack-prefix``) into a complete routing configuration.
"""

from __future__ import annotations

from policies.peers import (
    dynamo_kv,
    least_requests,
    llm_d,
    production_stack,
    round_robin,
    sglang_cache_aware,
    softmax_picker,
)
from policies.registry import PluginRegistry

_MODULES = (round_robin, least_requests, sglang_cache_aware, llm_d, dynamo_kv, softmax_picker,
            production_stack)


def register(registry: PluginRegistry) -> None:
    for module in _MODULES:
        module.register(registry)
