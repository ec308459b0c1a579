"""Semantic routing: classify each prompt by sentence embeddings and route its class.

Registers the ``semantic:`` section of routing.yaml (``policies.semantic.section``) and the
``semantic`` producer that sets ``request.semantic_class``; rules then match
``when: {class: ...}`` and rewrite the model, pick a LoRA adapter, restrict to a pool or choose
a profile, and the profile's token-aware scorers pick the replica inside that set. Importing
this package never imports torch: the model loads only when a configuration uses it.

```yaml
semantic:
  default_class: chat
  threshold: 0.5
  classes:
    code: {examples: ["Write a Python function that parses a CSV file", "..."]}
    math: {examples: ["Solve for x: 3x + 10 = 5(x - 2)", "..."]}
    chat: {examples: ["Write a travel blog post about Hawaii", "..."]}
rules:
  - name: code-to-coder
    when: {class: code}
    then: {model: coder}
  - name: math-adapter
    when: {class: math}
    then: {adapter: math-lora, pool: {tier: gpu-large}, profile: latency}
```

See docs/semantic.md.
"""

from __future__ import annotations

from policies.registry import PluginRegistry
from policies.semantic.producer import (
    PROVIDES,
    TYPE_NAME,
    SemanticProducerParams,
    build_semantic_producer,
)
from policies.semantic.section import SECTION_NAME, parse_semantic_section


def register(registry: PluginRegistry) -> None:
    registry.register_section(SECTION_NAME, parse_semantic_section, needs=PROVIDES)
    registry.register(TYPE_NAME, "producer", SemanticProducerParams, build_semantic_producer,
                      provides=PROVIDES)
