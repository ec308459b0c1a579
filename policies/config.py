"""The validated, immutable form of ``config/routing.yaml``.

``policies.schema.parse_routing`` builds these from YAML; ``policies.engine.PolicyEngine``
instantiates the plugins they name. Nothing here knows any plugin's parameters: each
``PluginSpec`` carries an already-built parameter dataclass of the plugin's own type.
The YAML schema is documented in ``docs/policies.md``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from policies.errors import ParamError
from policies.plugin_file_modules import FileModuleHold

_EMPTY: Mapping[str, Any] = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class PluginSpec:
    """One plugin instance: its registered type, instance name, params and (scorers) weight.

    ``path`` is where it was declared (``profiles.default.scorers[1]``), for error messages.
    """

    type: str
    name: str
    params: Any
    path: str
    weight: float = 1.0
    # filters only: when it fails, "pass" keeps every worker it was given (the default),
    # "refuse" removes them all (a filter that must never be bypassed: residency, a tenant's
    # own pool): the request is refused, not sent where the filter exists to keep it from
    on_failure: str = "pass"


@dataclass(frozen=True, slots=True)
class ProfileSpec:
    """A scheduling profile: filters, then weighted scorers, then exactly one picker."""

    name: str
    filters: tuple[PluginSpec, ...]
    scorers: tuple[PluginSpec, ...]
    picker: PluginSpec


@dataclass(frozen=True, slots=True)
class RuleMatch:
    """The ``when:`` of a rule; every given condition must hold (an empty match always holds).

    Strings match exactly; a tuple matches any of its members.
    """

    model: tuple[str, ...] = ()
    path: tuple[str, ...] = ()
    header: Mapping[str, str] = field(default_factory=lambda: _EMPTY)
    tenant: tuple[str, ...] = ()
    min_prompt_tokens: int | None = None
    max_prompt_tokens: int | None = None
    semantic_class: tuple[str, ...] = ()

    @property
    def needs_prompt_tokens(self) -> bool:
        return self.min_prompt_tokens is not None or self.max_prompt_tokens is not None


@dataclass(frozen=True, slots=True)
class RuleAction:
    """The ``then:`` of a rule. ``None`` / empty means: leave as is."""

    profile: str | None = None
    model: str | None = None
    pool: Mapping[str, str] = field(default_factory=lambda: _EMPTY)
    adapter: str | None = None


@dataclass(frozen=True, slots=True)
class Rule:
    name: str
    when: RuleMatch
    then: RuleAction


@dataclass(frozen=True, slots=True)
class SloConfig:
    """Service-level objectives read by cost/SLO plugins (seconds; None: no objective)."""

    ttft_s: float | None = None
    tpot_s: float | None = None

    def __post_init__(self) -> None:
        for name in ("ttft_s", "tpot_s"):
            value = getattr(self, name)
            if value is not None and value <= 0:
                raise ParamError(name, "must be > 0")


@dataclass(frozen=True, slots=True)
class PluginModule:
    """One entry of ``plugin_modules:`` once loaded (``policies.plugin_modules``): as
    written, the module's name in ``sys.modules``, and its file (a file entry only), whose
    module it holds there (``policies.plugin_file_modules``) for as long as it lives."""

    entry: str
    module_name: str
    path: str | None = None
    # what its register(registry) added: plugin type names and section names
    types: tuple[str, ...] = ()
    sections: tuple[str, ...] = ()
    hold: FileModuleHold | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True, slots=True)
class RoutingConfig:
    """A whole routing configuration, validated. ``producers`` are the resolved, ordered
    producers the decision needs (declared ones plus those plugins require)."""

    profiles: Mapping[str, ProfileSpec]
    default_profile: str
    rules: tuple[Rule, ...] = ()
    producers: tuple[PluginSpec, ...] = ()
    slo: SloConfig = field(default_factory=SloConfig)
    sections: Mapping[str, Any] = field(default_factory=lambda: _EMPTY)
    source: str = "<memory>"
    plugin_modules: tuple[PluginModule, ...] = ()   # whose types the plugins may be

    def section(self, name: str) -> Any:
        """A parsed extension section (e.g. ``semantic``), or None when absent."""
        return self.sections.get(name)
