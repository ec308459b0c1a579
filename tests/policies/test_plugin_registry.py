"""policies/registry.py: plugin types, sections, and the default registry's modules."""

from __future__ import annotations

import textwrap
from dataclasses import dataclass
from typing import Any

import pytest

from policies.errors import RoutingConfigError
from policies.loader import parse_routing_text
from policies.registry import BUILTIN_PLUGIN_MODULES, PluginRegistry, default_registry


def test_default_registry_has_every_builtin() -> None:
    registry = default_registry()
    names = {t.type_name: t.kind for t in registry.types()}
    for type_name, kind in [("tokens", "producer"), ("model", "filter"), ("healthy", "filter"),
                            ("context-length", "filter"), ("labels", "filter"),
                            ("pool", "filter"), ("queue-depth", "scorer"),
                            ("kv-usage", "scorer"), ("inflight", "scorer"),
                            ("max-score", "picker"), ("power-of-two", "picker"),
                            ("round-robin", "picker"), ("random", "picker")]:
        assert names[type_name] == kind
    assert registry.providers_of("num_prompt_tokens")[0].type_name == "tokens"


def test_teammate_modules_are_listed() -> None:
    for module in ("policies.peers", "policies.semantic", "policies.scorers.prefix",
                   "policies.scorers.estimated_time", "policies.scorers.cost",
                   "policies.pickers.slo_cost", "policies.producers.blocks"):
        assert module in BUILTIN_PLUGIN_MODULES


def test_missing_module_is_skipped_but_a_broken_one_is_not(tmp_path: Any,
                                                           monkeypatch: Any) -> None:
    registry = default_registry(["policies.filters.model", "policies.not_built_yet"])
    assert [t.type_name for t in registry.types()] == ["model"]
    (tmp_path / "broken_plugin_mod.py").write_text("import no_such_dependency_xyz\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ModuleNotFoundError):
        default_registry(["broken_plugin_mod"])


def test_registering_a_taken_name_is_an_error() -> None:
    registry = PluginRegistry()
    registry.register("x", "filter", _NoParams, lambda p, c: None)
    with pytest.raises(ValueError, match="already registered"):
        registry.register("x", "scorer", _NoParams, lambda p, c: None)


@dataclass(frozen=True)
class _NoParams:
    pass


@dataclass(frozen=True)
class _Colours:
    colours: tuple[str, ...]


def _parse_colours(raw: Any, path: str) -> _Colours:
    if not isinstance(raw, list):
        raise RoutingConfigError(f"{path}: must be a list of colours")
    return _Colours(tuple(raw))


def test_extension_section_is_parsed_by_its_owner() -> None:
    registry = default_registry(["policies.filters.model", "policies.pickers.max_score"])
    registry.register_section("colours", _parse_colours)
    text = "profiles: {default: {filters: [{type: model}]}}\ncolours: [red, blue]\n"
    routing = parse_routing_text(text, registry)
    assert routing.section("colours") == _Colours(("red", "blue"))
    with pytest.raises(RoutingConfigError, match=r"^colours: must be a list of colours$"):
        parse_routing_text(textwrap.dedent(text.replace("[red, blue]", "red")), registry)


def test_unregistered_section_is_an_unknown_key() -> None:
    registry = default_registry(["policies.pickers.max_score"])
    with pytest.raises(RoutingConfigError, match=r"^colours: unknown top-level key"):
        parse_routing_text("profiles: {default: {}}\ncolours: [red]\n", registry)


def test_section_parser_value_errors_name_the_section() -> None:
    registry = default_registry(["policies.pickers.max_score"])

    def strict(raw: Any, path: str) -> Any:
        raise ValueError("threshold must be below 1")

    registry.register_section("colours", strict)
    with pytest.raises(RoutingConfigError) as info:
        parse_routing_text("profiles: {default: {}}\ncolours: {}\n", registry)
    assert str(info.value) == "colours: threshold must be below 1"
