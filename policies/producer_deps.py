"""Work out which producers a configuration needs, and in which order they run.

Plugin types declare the request fields they read (``needs``: ``num_prompt_tokens``,
``block_hashes``, ``semantic_class``, ...) and producer types the fields they fill
(``provides``). Rules add needs too: a token-length condition needs ``num_prompt_tokens``
and a ``class`` condition needs ``semantic_class``. Producers declared under ``producers:``
keep their params; a needed field nobody declared is provided by the first registered
producer type that provides it, with default params. The result is ordered so that each
producer runs after the producers of the fields it needs, and of the fields it ``uses``
(reads when some other plugin's need brought their producer in, without bringing it in).
"""

from __future__ import annotations

from dataclasses import dataclass

from policies.config import PluginSpec, RoutingConfig
from policies.errors import RoutingConfigError
from policies.params import build_params
from policies.registry import PluginRegistry


@dataclass(frozen=True, slots=True)
class _Need:
    field: str
    path: str   # who needs it, for the error message


def resolve_producers(routing: RoutingConfig, declared: list[PluginSpec],
                      registry: PluginRegistry) -> list[PluginSpec]:
    specs = list(declared)
    pending = _needs_of_config(routing, registry) + [
        _Need(f, s.path) for s in declared for f in _type_needs(registry, s)]
    while pending:
        need = pending.pop(0)
        if _provider(specs, need.field, registry) is not None:
            continue
        candidates = registry.providers_of(need.field)
        if not candidates:
            raise RoutingConfigError(
                f"{need.path}: needs {need.field}, which no installed producer provides")
        chosen = candidates[0]
        spec = PluginSpec(type=chosen.type_name, name=chosen.type_name,
                          params=build_params(chosen.params_type, None, "producers"),
                          path=f"producers[{chosen.type_name}]")
        specs.append(spec)
        pending.extend(_Need(f, spec.path) for f in chosen.needs)
    return _ordered(specs, registry)


def _needs_of_config(routing: RoutingConfig, registry: PluginRegistry) -> list[_Need]:
    needs: list[_Need] = []
    for profile in routing.profiles.values():
        for spec in (*profile.filters, *profile.scorers, profile.picker):
            needs.extend(_Need(f, spec.path) for f in _type_needs(registry, spec))
    for i, rule in enumerate(routing.rules):
        if rule.when.needs_prompt_tokens:
            needs.append(_Need("num_prompt_tokens", f"rules[{i}].when"))
        if rule.when.semantic_class:
            needs.append(_Need("semantic_class", f"rules[{i}].when.class"))
    for name, section in registry.sections.items():
        if name in routing.sections:
            needs.extend(_Need(f, name) for f in section.needs)
    return needs


def _type_needs(registry: PluginRegistry, spec: PluginSpec) -> tuple[str, ...]:
    plugin_type = registry.get(spec.type)
    return plugin_type.needs if plugin_type is not None else ()


def _type_uses(registry: PluginRegistry, spec: PluginSpec) -> tuple[str, ...]:
    plugin_type = registry.get(spec.type)
    return plugin_type.uses if plugin_type is not None else ()


def _provider(specs: list[PluginSpec], field: str, registry: PluginRegistry) -> PluginSpec | None:
    for spec in specs:
        plugin_type = registry.get(spec.type)
        if plugin_type is not None and field in plugin_type.provides:
            return spec
    return None


def _ordered(specs: list[PluginSpec], registry: PluginRegistry) -> list[PluginSpec]:
    ordered: list[PluginSpec] = []
    visiting: set[str] = set()

    def visit(spec: PluginSpec) -> None:
        if spec in ordered:
            return
        if spec.path in visiting:
            raise RoutingConfigError(f"{spec.path}: producers depend on each other in a cycle")
        visiting.add(spec.path)
        for field in _type_needs(registry, spec) + _type_uses(registry, spec):
            provider = _provider(specs, field, registry)
            if provider is not None and provider is not spec:
                visit(provider)
        visiting.discard(spec.path)
        ordered.append(spec)

    for spec in specs:
        visit(spec)
    return ordered
