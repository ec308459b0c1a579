"""Named peer presets: a peer's name → the complete routing configuration that reproduces it.

``kvroute sim --policies round-robin,sglang-cache-aware,...`` and the live harness resolve
peer names here; ``config/policies/<name>.yaml`` holds the same documents for use with
``kvroute serve --routing`` (a test keeps the two identical). Every preset filters on health
and model like the peers do, then lets the peer's own plugins decide.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from policies.config import RoutingConfig
from policies.loader import parse_routing_text
from policies.registry import PluginRegistry

_FILTERS = """\
    filters:
      - {type: healthy}
      - {type: model}
"""


def _profile(body: str, comment: str) -> str:
    return f"# {comment}\nprofiles:\n  default:\n{_FILTERS}{body}"


PRESET_YAML: Mapping[str, str] = MappingProxyType({
    "round-robin": _profile("""\
    scorers:
      - {type: peer-round-robin}
    picker: {type: max-score}
""", "production-stack `roundrobin`: sorted endpoints, counter mod n (peer-routers.md §2.1)"),
    "least-requests": _profile("""\
    scorers:
      - {type: peer-least-requests}
    picker: {type: max-score}
""", "fewest router-tracked in-flight requests, random tie-break (peer-routers.md §2.5)"),
    "sglang-cache-aware": _profile("""\
    scorers:
      - type: sglang-cache-aware
        params: {cache_threshold: 0.3, balance_abs_threshold: 64, balance_rel_threshold: 1.5,
                 eviction_interval_secs: 60, max_tree_size: 67108864}
    picker: {type: max-score}
""", "SGLang cache_aware with the CLI defaults (peer-routers.md §2.2.1)"),
    "llm-d-default": _profile("""\
    scorers:
      - {type: llm-d-queue-scorer, weight: 2}
      - {type: llm-d-kv-cache-utilization-scorer, weight: 2}
      - type: llm-d-prefix-cache-scorer
        weight: 3
        params: {block_size_tokens: 16, max_prefix_blocks: 256, lru_capacity_per_server: 31250}
    picker: {type: max-score}
""", "llm-d built-in default profile: queue 2 + KV 2 + prefix 3, max-score (peer-routers.md §2.3)"),
    "dynamo-kv": _profile("""\
    scorers:
      - type: dynamo-kv-cost
        params: {overlap_score_credit: 1.0, prefill_load_scale: 1.0, ttl_secs: 120}
    picker: {type: dynamo-softmax, params: {temperature: 0.0}}
""", "Dynamo KV router, approximate mode, default weights (peer-routers.md §2.4)"),
    "production-stack-prefix": _profile("""\
    scorers:
      - type: production-stack-prefix
        params: {chunk_size: 128, prefix_min_match_length: 0, qps_window_secs: 60}
    picker: {type: max-score}
""", "production-stack `prefixaware`: 128-char hash trie (peer-routers.md §2.1)"),
})

PEER_NAMES: tuple[str, ...] = tuple(PRESET_YAML)


def routing_for(name: str, registry: PluginRegistry | None = None) -> RoutingConfig:
    """The routing configuration of the peer ``name``; ``KeyError`` names the known ones."""
    text = PRESET_YAML.get(name)
    if text is None:
        raise KeyError(f"unknown peer policy {name!r} (known: {', '.join(PEER_NAMES)})")
    return parse_routing_text(text, registry, source=f"peer preset {name}")
