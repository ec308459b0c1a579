"""Resolves the policy names of ``kvroute sim --policies`` to routing configurations.

A name is one of the peer presets (``policies.peers.presets``: round-robin, least-requests,
sglang-cache-aware, llm-d-default, dynamo-kv, production-stack-prefix), ``kvroute`` (the
default routing file ``config/routing.yaml``, found as ``kvroute up`` finds it:
``workers.project_files``), or a path to a routing YAML file.
"""

from __future__ import annotations

from pathlib import Path

from policies.config import RoutingConfig
from policies.errors import RoutingConfigError
from policies.loader import load_routing
from workers.project_files import DEFAULT_ROUTING, MissingDefaultFile, default_file

KVROUTE = "kvroute"


class UnknownPolicyError(ValueError):
    """A policy name is neither a peer, ``kvroute``, nor a readable routing file."""


def resolve_policy(name: str) -> RoutingConfig:
    if name == KVROUTE:
        try:
            return load_routing(default_file(DEFAULT_ROUTING, "--policies"))
        except MissingDefaultFile as exc:
            raise UnknownPolicyError(f"policy {KVROUTE!r}: {exc} (a routing file's path)") \
                from exc
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
