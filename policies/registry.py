"""Plugin types by name, and the registry that builds plugin instances from specs.

A plugin type is registered once per registry under a kebab-case type name
(``"queue-depth"``), with its kind (producer, filter, scorer, picker), a frozen parameter
dataclass whose defaults apply to omitted keys, and a factory
``factory(params, context) -> plugin``. Types may declare the request fields they ``need``
(``"num_prompt_tokens"``) and producers declare the fields they ``provide``; the schema
adds the producers a configuration needs, in dependency order.

There is no global registry: ``default_registry()`` builds one and lets each module in
``BUILTIN_PLUGIN_MODULES`` add its types through ``register(registry)``. A listed module that
is not installed is skipped, exactly like ``router.cli`` skips missing command modules.
Packages may also add a top-level section to ``routing.yaml`` with ``register_section``.
"""

from __future__ import annotations

import dataclasses
import importlib
import logging
import random
import zlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from policies.base import Filter, Picker, Producer, Scorer

if TYPE_CHECKING:
    from policies.config import RoutingConfig
    from workers.fleet import FleetConfig

log = logging.getLogger(__name__)

PluginKind = Literal["producer", "filter", "scorer", "picker"]
PLUGIN_KINDS: tuple[PluginKind, ...] = ("producer", "filter", "scorer", "picker")

KIND_PROTOCOLS: Mapping[PluginKind, type] = {
    "producer": Producer, "filter": Filter, "scorer": Scorer, "picker": Picker}

# Modules that contribute plugin types, each exposing ``register(registry)``.
BUILTIN_PLUGIN_MODULES: tuple[str, ...] = (
    "policies.producers.tokens",
    "policies.filters.model",
    "policies.filters.healthy",
    "policies.filters.context_length",
    "policies.filters.labels",
    "policies.scorers.queue_depth",
    "policies.scorers.kv_usage",
    "policies.scorers.inflight",
    "policies.scorers.lora_affinity",
    "policies.pickers.max_score",
    "policies.pickers.power_of_two",
    "policies.pickers.round_robin",
    "policies.pickers.random_choice",
    "policies.admission",
    # token-aware, semantic and peer plugins, present when those parts are installed
    "policies.producers.blocks",
    "policies.producers.output_length",
    "policies.scorers.prefix",
    "policies.scorers.estimated_time",
    "policies.scorers.cost",
    "policies.scorers.routed_share",
    "policies.scorers.prefix_affinity",
    "policies.pickers.slo_cost",
    "policies.semantic",
    "policies.peers",
)


@dataclass(frozen=True, slots=True)
class BuildContext:
    """What a plugin factory may read while building one instance."""

    name: str                   # instance name (defaults to the type name)
    path: str                   # where it is declared, for error messages
    routing: RoutingConfig
    fleet: FleetConfig
    seed: int | None = None     # engine-wide seed; None: nondeterministic
    # state the plugins of one profile share, by key (e.g. one time estimator for the
    # estimated-time and cost scorers); empty for producers, which belong to no profile
    profile_state: dict[str, Any] = field(default_factory=dict)

    def rng(self) -> random.Random:
        """A random generator for this instance: reproducible when the engine is seeded."""
        if self.seed is None:
            return random.Random()
        return random.Random(self.seed ^ zlib.crc32(self.path.encode()))


PluginFactory = Callable[[Any, BuildContext], Any]
SectionParser = Callable[[Any, str], Any]   # (raw YAML value, field path) -> parsed value


@dataclass(frozen=True, slots=True)
class PluginType:
    type_name: str
    kind: PluginKind
    params_type: type
    factory: PluginFactory
    needs: tuple[str, ...] = ()       # request fields it reads, filled by producers
    provides: tuple[str, ...] = ()    # producers: request fields it fills
    uses: tuple[str, ...] = ()        # fields it reads when present: its producers run first


@dataclass(frozen=True, slots=True)
class SectionType:
    name: str
    parser: SectionParser
    needs: tuple[str, ...] = ()       # request fields the section's feature needs


class PluginRegistry:
    """Plugin and section types known to one engine build."""

    __slots__ = ("_sections", "_types")

    def __init__(self) -> None:
        self._types: dict[str, PluginType] = {}
        self._sections: dict[str, SectionType] = {}

    def register(self, type_name: str, kind: PluginKind, params_type: type,
                 factory: PluginFactory, *, needs: Iterable[str] = (),
                 provides: Iterable[str] = (), uses: Iterable[str] = ()) -> None:
        """Add a plugin type. Registering a taken name is a programming error."""
        if type_name in self._types:
            raise ValueError(f"plugin type {type_name!r} is already registered")
        if kind not in PLUGIN_KINDS:
            raise ValueError(f"plugin type {type_name!r}: unknown kind {kind!r}")
        if not (isinstance(params_type, type) and dataclasses.is_dataclass(params_type)):
            raise ValueError(f"plugin type {type_name!r}: its parameters must be a dataclass "
                             f"type, not {params_type!r}")
        for label, fields in (("needs", needs), ("provides", provides), ("uses", uses)):
            if isinstance(fields, str):
                raise ValueError(f"plugin type {type_name!r}: {label} must be a tuple of "
                                 f"field names, not the string {fields!r} (write "
                                 f"({fields!r},))")
        self._types[type_name] = PluginType(type_name, kind, params_type, factory,
                                            tuple(needs), tuple(provides), tuple(uses))

    def register_section(self, name: str, parser: SectionParser, *,
                         needs: Iterable[str] = ()) -> None:
        """Allow a top-level ``name:`` section in routing.yaml, parsed by ``parser``."""
        if name in self._sections:
            raise ValueError(f"section {name!r} is already registered")
        self._sections[name] = SectionType(name, parser, tuple(needs))

    def copy(self) -> PluginRegistry:
        """Another registry holding the same types and sections (to add more to)."""
        other = PluginRegistry()
        other._types = dict(self._types)
        other._sections = dict(self._sections)
        return other

    def type_names(self) -> list[str]:
        """Every registered type's name, in registration order."""
        return list(self._types)

    def get(self, type_name: str) -> PluginType | None:
        return self._types.get(type_name)

    def types(self, kind: PluginKind | None = None) -> list[PluginType]:
        """Registered types (of one kind), in registration order."""
        return [t for t in self._types.values() if kind is None or t.kind == kind]

    def providers_of(self, request_field: str) -> list[PluginType]:
        return [t for t in self._types.values()
                if t.kind == "producer" and request_field in t.provides]

    @property
    def sections(self) -> Mapping[str, SectionType]:
        return self._sections


def default_registry(modules: Iterable[str] = BUILTIN_PLUGIN_MODULES) -> PluginRegistry:
    """A registry holding every plugin type of the installed ``modules``."""
    registry = PluginRegistry()
    for module_name in modules:
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name is not None and module_name.startswith(exc.name):
                continue  # that part of kvroute is not built into this installation
            raise
        register = getattr(module, "register", None)
        if register is None:
            log.debug("plugin module %s has no register(registry); skipped", module_name)
            continue
        register(registry)
    return registry
