"""Parse a ``routing.yaml`` document into a ``RoutingConfig``, strictly.

Steps (after llm-d's config loader): strict shape check (unknown keys are errors) → plugin
specs resolved against the registry with their typed params → system defaults (picker
``max-score``, scorer weight 1.0, instance name = type name) → cross references (rules name
existing profiles, instance names unique within a profile) → producers resolved from what
the plugins and rules need. Every error is a ``RoutingConfigError`` starting with the path.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from types import MappingProxyType
from typing import Any

from policies.base import ROUTED_PATHS
from policies.config import (
    PluginSpec,
    ProfileSpec,
    RoutingConfig,
    Rule,
    RuleAction,
    RuleMatch,
    SloConfig,
)
from policies.errors import RoutingConfigError
from policies.params import build_params, coerce
from policies.plugin_modules import PLUGIN_MODULES_KEY, load_plugin_modules, registered
from policies.producer_deps import resolve_producers
from policies.registry import PluginKind, PluginRegistry, SectionParser

CORE_SECTIONS = ("producers", "profiles", "rules", "default_profile", "slo")
DEFAULT_PICKER = "max-score"
_PLUGIN_KEYS = {"type", "name", "params"}
_SCORER_KEYS = _PLUGIN_KEYS | {"weight"}
_FILTER_KEYS = _PLUGIN_KEYS | {"on_failure"}
FILTER_FAILURE_MODES = ("pass", "refuse")
_PROFILE_KEYS = ("filters", "scorers", "picker")
_WHEN_KEYS = ("model", "path", "header", "tenant", "min_prompt_tokens", "max_prompt_tokens",
              "class")
_THEN_KEYS = ("profile", "model", "pool", "adapter")


def parse_routing(data: Any, registry: PluginRegistry, source: str = "<memory>") -> RoutingConfig:
    """Validate ``data`` (the YAML document) and build the configuration."""
    if data is None:
        raise RoutingConfigError("the file is empty (a routing file has profiles:)")
    doc = _mapping(data, "<top level>", allow_none=False)
    registry, modules = registered(
        registry, load_plugin_modules(doc.get(PLUGIN_MODULES_KEY), source_folder(source)))
    known = (*CORE_SECTIONS, PLUGIN_MODULES_KEY, *registry.sections)
    if "workers" in doc and "profiles" not in doc:
        raise RoutingConfigError("workers: unknown top-level key: this is a fleet file, not a "
                                 "routing file (kvroute validate ROUTING_FILE --fleet "
                                 "FLEET_FILE)")
    _check_keys(doc, known, "", what="top-level key")
    sections = {name: _parse_section(section.parser, doc[name], name)
                for name, section in registry.sections.items() if name in doc}
    profiles = _parse_profiles(doc.get("profiles"), registry)
    default_profile = doc.get("default_profile", "default")
    if not isinstance(default_profile, str):
        raise RoutingConfigError("default_profile: must be a string")
    if default_profile not in profiles:
        raise RoutingConfigError(
            f"default_profile: unknown profile {default_profile!r} "
            f"(defined: {', '.join(profiles)})")
    rules = _parse_rules(doc.get("rules"), profiles)
    _check_rule_classes(rules, sections.get("semantic"))
    declared = _parse_plugin_list(doc.get("producers"), "producers", "producer", registry)
    slo = build_params(SloConfig, doc.get("slo"), "slo")
    routing = RoutingConfig(
        profiles=MappingProxyType(profiles), default_profile=default_profile,
        rules=tuple(rules), producers=(), slo=slo,
        sections=MappingProxyType(sections), source=source, plugin_modules=modules)
    producers = resolve_producers(routing, declared, registry)
    return RoutingConfig(
        profiles=routing.profiles, default_profile=default_profile, rules=routing.rules,
        producers=tuple(producers), slo=slo, sections=routing.sections, source=source,
        plugin_modules=modules)


def source_folder(source: str) -> Path:
    """Where a routing file's relative paths start: its folder (the working directory for
    a document parsed from memory, ``<memory>``)."""
    if source.startswith("<"):
        return Path.cwd()
    return Path(source).resolve().parent


def _check_rule_classes(rules: Sequence[Rule], semantic: Any) -> None:
    """A rule's ``when.class`` must be a class the semantic section can give (a typo would
    be a rule that never matches)."""
    classes = getattr(semantic, "classes", None)
    if classes is None:
        return
    known = {*classes, semantic.default_class}
    for i, rule in enumerate(rules):
        for name in rule.when.semantic_class or ():
            if name not in known:
                raise RoutingConfigError(
                    f"rules[{i}].when.class: unknown class {name!r} (the semantic section's "
                    f"classes: {', '.join(sorted(known))})")


def _parse_section(parser: SectionParser, raw: Any, name: str) -> Any:
    try:
        return parser(raw, name)
    except RoutingConfigError:
        raise
    except (ValueError, TypeError, KeyError) as exc:
        raise RoutingConfigError(f"{name}: {exc}") from exc


def _parse_profiles(raw: Any, registry: PluginRegistry) -> dict[str, ProfileSpec]:
    if raw is None:
        raise RoutingConfigError("profiles: required (at least one profile)")
    profiles_raw = _mapping(raw, "profiles", allow_none=False)
    if not profiles_raw:
        raise RoutingConfigError("profiles: required (at least one profile)")
    profiles: dict[str, ProfileSpec] = {}
    for name, body in profiles_raw.items():
        path = f"profiles.{name}"
        if not isinstance(name, str):
            raise RoutingConfigError(f"{path}: profile names must be strings")
        spec = _mapping(body, path)
        _check_keys(spec, _PROFILE_KEYS, path)
        filters = _parse_plugin_list(spec.get("filters"), f"{path}.filters", "filter", registry)
        scorers = _parse_plugin_list(spec.get("scorers"), f"{path}.scorers", "scorer", registry)
        picker_raw = spec.get("picker") or {"type": DEFAULT_PICKER}
        picker = _parse_plugin(picker_raw, f"{path}.picker", "picker", registry)
        _check_unique_names((*filters, *scorers), path)
        profiles[name] = ProfileSpec(name, tuple(filters), tuple(scorers), picker)
    return profiles


def _parse_plugin_list(raw: Any, path: str, kind: PluginKind,
                       registry: PluginRegistry) -> list[PluginSpec]:
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise RoutingConfigError(f"{path}: must be a list")
    specs = [_parse_plugin(item, f"{path}[{i}]", kind, registry) for i, item in enumerate(raw)]
    _check_unique_names(specs, path)
    return specs


def _parse_plugin(raw: Any, path: str, kind: PluginKind, registry: PluginRegistry) -> PluginSpec:
    if isinstance(raw, str):
        raw = {"type": raw}
    spec = _mapping(raw, path, allow_none=False)
    keys = _SCORER_KEYS if kind == "scorer" else _FILTER_KEYS if kind == "filter" else (
        _PLUGIN_KEYS)
    _check_keys(spec, sorted(keys), path)
    type_name = spec.get("type")
    if not isinstance(type_name, str):
        raise RoutingConfigError(f"{path}.type: required, a plugin type name")
    plugin_type = registry.get(type_name)
    if plugin_type is None:
        known = ", ".join(sorted(t.type_name for t in registry.types(kind)))
        raise RoutingConfigError(f"{path}.type: unknown {kind} type {type_name!r} (known: {known}; "
                                 f"a module listed in {PLUGIN_MODULES_KEY}: adds types)")
    if plugin_type.kind != kind:
        raise RoutingConfigError(
            f"{path}.type: {type_name!r} is a {plugin_type.kind}, not a {kind}")
    name = spec.get("name", type_name)
    if not isinstance(name, str) or not name:
        raise RoutingConfigError(f"{path}.name: must be a non-empty string")
    weight = coerce(float, spec.get("weight", 1.0), f"{path}.weight")
    if weight < 0:
        raise RoutingConfigError(f"{path}.weight: must be >= 0")
    try:
        params: Any = build_params(plugin_type.params_type, spec.get("params"),
                                   f"{path}.params")
    except RoutingConfigError:
        raise
    except (Exception, SystemExit) as exc:     # a parameter dataclass the loader cannot read
        raise RoutingConfigError(
            f"{path}.params: the parameters of plugin type {type_name!r} cannot be read: "
            f"{type(exc).__name__}: {exc}") from exc
    on_failure = spec.get("on_failure", "pass")
    if on_failure not in FILTER_FAILURE_MODES:
        raise RoutingConfigError(
            f"{path}.on_failure: must be one of {', '.join(FILTER_FAILURE_MODES)}, got "
            f"{on_failure!r}")
    return PluginSpec(type=type_name, name=name, params=params, path=path, weight=weight,
                      on_failure=on_failure)


def _check_unique_names(specs: Sequence[PluginSpec], path: str) -> None:
    seen: set[str] = set()
    for spec in specs:
        if spec.name in seen:
            raise RoutingConfigError(
                f"{spec.path}.name: duplicate plugin name {spec.name!r} in {path} "
                "(give each instance its own name:)")
        seen.add(spec.name)


def _parse_rules(raw: Any, profiles: Mapping[str, ProfileSpec]) -> list[Rule]:
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise RoutingConfigError("rules: must be a list")
    rules: list[Rule] = []
    names: set[str] = set()
    for i, item in enumerate(raw):
        path = f"rules[{i}]"
        body = _mapping(item, path, allow_none=False)
        _check_keys(body, ("name", "when", "then"), path)
        name = body.get("name", f"rule-{i}")
        if not isinstance(name, str) or not name:
            raise RoutingConfigError(f"{path}.name: must be a non-empty string")
        if name in names:
            raise RoutingConfigError(f"{path}.name: duplicate rule name {name!r}")
        names.add(name)
        when = _parse_when(body.get("when"), f"{path}.when")
        then = _parse_then(body.get("then"), f"{path}.then", profiles)
        rules.append(Rule(name, when, then))
    return rules


def _parse_when(raw: Any, path: str) -> RuleMatch:
    body = _mapping(raw, path)
    _check_keys(body, _WHEN_KEYS, path)
    # a condition left without a value (``tenant:`` alone, a template that rendered nothing)
    # would hold for every request: the rule would catch all of them
    _refuse_empty_values(body, path, "a condition without one would hold for every request")
    min_tokens = _optional_count(body.get("min_prompt_tokens"), f"{path}.min_prompt_tokens")
    max_tokens = _optional_count(body.get("max_prompt_tokens"), f"{path}.max_prompt_tokens")
    if min_tokens is not None and max_tokens is not None and min_tokens > max_tokens:
        raise RoutingConfigError(f"{path}.max_prompt_tokens: must be >= min_prompt_tokens")
    header = coerce(Mapping[str, str], body.get("header", {}), f"{path}.header")
    return RuleMatch(
        model=_one_or_many(body.get("model"), f"{path}.model"),
        path=_routed_paths(body.get("path"), f"{path}.path"),
        header=MappingProxyType({k.lower(): v for k, v in header.items()}),
        tenant=_one_or_many(body.get("tenant"), f"{path}.tenant"),
        min_prompt_tokens=min_tokens, max_prompt_tokens=max_tokens,
        semantic_class=_one_or_many(body.get("class"), f"{path}.class"))


def _parse_then(raw: Any, path: str, profiles: Mapping[str, ProfileSpec]) -> RuleAction:
    body = _mapping(raw, path, allow_none=False)
    _check_keys(body, _THEN_KEYS, path)
    if not body:
        raise RoutingConfigError(f"{path}: needs at least one of: {', '.join(_THEN_KEYS)}")
    # a rule whose every action is without a value does nothing, yet, matching first, keeps
    # the requests it matches from every later rule (one empty beside a real one is left:
    # the rule acts, as a templated file may render it)
    if all(_empty(value) for value in body.values()):
        _refuse_empty_values(body, path, "a rule whose actions have none does nothing, and "
                             "keeps what it matches from the rules after it")
    profile = coerce(str | None, body.get("profile"), f"{path}.profile")
    if profile is not None and profile not in profiles:
        raise RoutingConfigError(
            f"{path}.profile: unknown profile {profile!r} (defined: {', '.join(profiles)})")
    pool = coerce(Mapping[str, str], body.get("pool", {}), f"{path}.pool")
    return RuleAction(
        profile=profile,
        model=coerce(str | None, body.get("model"), f"{path}.model"),
        pool=pool,
        adapter=coerce(str | None, body.get("adapter"), f"{path}.adapter"))


def _empty(value: Any) -> bool:
    return value is None or value == "" or value == {} or value == []


def _refuse_empty_values(body: Mapping[Any, Any], path: str, why: str) -> None:
    for key, value in body.items():
        if _empty(value):
            raise RoutingConfigError(f"{path}.{key}: has no value ({why}); give it one or "
                                     "remove it")


def _one_or_many(raw: Any, path: str) -> tuple[str, ...]:
    if raw is None:
        return ()
    if isinstance(raw, str):
        return (raw,)
    if isinstance(raw, list) and raw and all(isinstance(x, str) for x in raw):
        return tuple(raw)
    raise RoutingConfigError(f"{path}: must be a string or a non-empty list of strings")


def _routed_paths(raw: Any, path: str) -> tuple[str, ...]:
    paths = _one_or_many(raw, path)
    unknown = [p for p in paths if p not in ROUTED_PATHS]
    if unknown:
        raise RoutingConfigError(f"{path}: {unknown[0]!r} is not a routed path (one of "
                                 f"{', '.join(ROUTED_PATHS)})")
    return paths


def _optional_count(raw: Any, path: str) -> int | None:
    value = coerce(int | None, raw, path)
    if value is not None and value < 0:
        raise RoutingConfigError(f"{path}: must be >= 0")
    return value  # type: ignore[no-any-return]


def _mapping(raw: Any, path: str, allow_none: bool = True) -> Mapping[Any, Any]:
    if raw is None and allow_none:
        return {}
    if not isinstance(raw, Mapping):
        raise RoutingConfigError(f"{path}: must be a mapping")
    return raw


def _check_keys(body: Mapping[Any, Any], allowed: Sequence[str], path: str,
                what: str = "key") -> None:
    for key in body:
        if key not in allowed:
            where = f"{path}.{key}" if path else str(key)
            raise RoutingConfigError(
                f"{where}: unknown {what} (expected one of: {', '.join(allowed)})")
