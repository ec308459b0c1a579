"""Resolves the policy names of ``kvroute sim --policies`` to routing configurations.

A name is one of the peer presets (``policies.peers.presets``: round-robin, least-requests,
sglang-cache-aware, llm-d-default, dynamo-kv, production-stack-prefix), ``kvroute`` (the
repository's ``config/routing.yaml``), or a path to a routing YAML file.
"""

from __future__ import annotations

from pathlib import Path

from policies.config import RoutingConfig
from policies.errors import RoutingConfigError
from policies.loader import load_routing

KVROUTE = "kvroute"
DEFAULT_ROUTING = Path(__file__).resolve().parent.parent / "config" / "routing.yaml"


class UnknownPolicyError(ValueError):
    """A policy name is neither a peer, ``kvroute``, nor a readable routing file."""


def resolve_policy(name: str) -> RoutingConfig:
    if name == KVROUTE:
        return load_routing(DEFAULT_ROUTING)
    if name.endswith((".yaml", ".yml")) or "/" in name:
        if not Path(name).is_file():
            raise UnknownPolicyError(f"policy {name!r}: no such routing file")
        return load_routing(name)
    from policies.peers.presets import routing_for
    try:
        return routing_for(name)
    except KeyError as exc:
        raise UnknownPolicyError(f"{exc.args[0]}; or use 'kvroute' or a routing YAML path") \
            from exc


def policy_label(name: str) -> str:
    """Short label for tables and plots: a file's stem, else the name itself."""
    return Path(name).stem if name.endswith((".yaml", ".yml")) else name


__all__ = ["KVROUTE", "RoutingConfigError", "UnknownPolicyError", "policy_label",
           "resolve_policy"]
