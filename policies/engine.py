"""``PolicyEngine``: a built routing configuration that decides where requests go.

``PolicyEngine.build(routing, fleet)`` instantiates every plugin once (a factory error is a
``RoutingConfigError`` naming the plugin's field). Per request the caller first runs
``engine.producers`` (see ``policies.producers.runner``), then calls ``decide``, which is pure,
synchronous and never raises:

1. the first matching rule picks the profile and may rewrite the model, restrict the
   candidates to a pool (worker labels) and set a LoRA adapter;
2. the profile runs filters → Σ weight·score → picker (``policies.profile``);
3. the ``Decision`` carries the chosen worker (None when no candidate is left), the
   target model (the adapter when one is set), every candidate's scores, the rule, the
   profile, a short reason, and ``attributes`` (``decided_by``: the deciding term, plus
   per-worker numbers plugins recorded for the chosen worker, and the request's
   ``predicted_output_tokens`` when a producer predicted it).

``on_routed`` / ``on_completed`` are forwarded to every plugin that implements them
(``RoutingObserver``); a plugin error there is logged and swallowed too. A rebuilt engine
may take state over from the one it replaces (``take_state_from``): a plugin with
``inherit_state(previous)`` is handed the previous engine's plugin declared at the same
place with the same type.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from types import MappingProxyType
from typing import Any

from policies.base import (
    CandidateScore,
    CycleState,
    Decision,
    Producer,
    RequestOutcome,
    RoutingRequest,
)
from policies.config import PluginSpec, ProfileSpec, RoutingConfig, Rule
from policies.cycle_keys import RULE, TARGET_ADAPTER, TARGET_MODEL, worker_attributes
from policies.errors import RoutingConfigError
from policies.failure_log import PluginFailureLog
from policies.plugin_modules import with_plugin_modules
from policies.producers.runner import FAILED_PRODUCERS
from policies.producers.served_model import ALIAS_TARGET
from policies.profile import Profile, WeightedScorer
from policies.registry import KIND_PROTOCOLS, BuildContext, PluginKind, PluginRegistry
from policies.registry import default_registry as make_default_registry
from policies.rules import first_match, model_aliases
from workers.fleet import FleetConfig
from workers.models import WorkerInfo, WorkerView

log = logging.getLogger(__name__)

POOL_FILTER_NAME = "pool"


class PolicyEngine:
    """Immutable after build, except the plugins' own cross-request state."""

    __slots__ = ("_on_completed", "_on_routed", "_plugins", "aliases", "default_profile",
                 "fingerprint", "producer_failures", "producers", "profiles", "routing")

    def __init__(self, routing: RoutingConfig, producers: Sequence[Producer],
                 profiles: Mapping[str, Profile], plugins: Mapping[str, tuple[str, Any]],
                 fingerprint: str | None = None) -> None:
        """``fingerprint``: the first 12 hex digits of the SHA-256 of the routing content
        ``routing`` was read from (``policies.reloader``), which the decisions name; None for
        a config that came from no file."""
        self.routing = routing
        self.fingerprint = fingerprint
        self.producers: tuple[Producer, ...] = tuple(producers)
        # a producer failing on every request: its traceback once a minute (``produce``)
        self.producer_failures = PluginFailureLog(log)
        self.profiles: Mapping[str, Profile] = MappingProxyType(dict(profiles))
        self.default_profile = routing.default_profile
        # alias -> its target (a model or adapter), for the producers (``name_alias_target``)
        self.aliases: Mapping[str, str] = MappingProxyType(model_aliases(routing.rules))
        self._plugins = MappingProxyType(dict(plugins))   # path -> (type name, plugin)
        # a plugin may implement either hook of RoutingObserver, or both
        self._on_routed: tuple[Callable[[RoutingRequest, Decision], None], ...] = tuple(
            hook for _, p in plugins.values()
            if callable(hook := getattr(p, "on_routed", None)))
        self._on_completed: tuple[Callable[[RoutingRequest, RequestOutcome], None], ...] = tuple(
            hook for _, p in plugins.values()
            if callable(hook := getattr(p, "on_completed", None)))

    def name_alias_target(self, request: RoutingRequest) -> None:
        """Before the producers run: when ``request`` names an alias (a rule whose only
        condition is the model rewrites it), name its target under ``ALIAS_TARGET``, for the
        producers to tokenize and hash it as the target's (``policies.producers.served_model``)."""
        target = self.aliases.get(request.model)
        if target is not None:
            request.attributes[ALIAS_TARGET] = target

    @classmethod
    def build(cls, routing: RoutingConfig, fleet: FleetConfig,
              registry: PluginRegistry | None = None, *, seed: int | None = None,
              previous: PolicyEngine | None = None,
              fingerprint: str | None = None) -> PolicyEngine:
        """Instantiate every plugin of ``routing``; raise ``RoutingConfigError`` on failure.
        ``fingerprint``: that of the content ``routing`` was read from (``__init__``)."""
        registry = with_plugin_modules(
            registry if registry is not None else make_default_registry(),
            routing.plugin_modules)
        check_against_fleet(routing, fleet)
        builder = _Builder(routing, fleet, registry, seed)
        producers = [builder.build(spec, "producer") for spec in routing.producers]
        profiles = {name: builder.build_profile(name, spec)
                    for name, spec in routing.profiles.items()}
        engine = cls(routing, producers, profiles, builder.plugins, fingerprint)
        if previous is not None:
            engine.take_state_from(previous)
        return engine

    def take_state_from(self, previous: PolicyEngine) -> None:
        """Hand each stateful plugin its predecessor (same declared place, same type).

        Call it where the previous engine is used (the event loop), right before the swap,
        so that no decision of the old engine is lost between the hand-over and the swap.
        A plugin's ``inherit_state(previous_plugin)`` should adopt the old state objects
        rather than copy them.
        """
        for path, (type_name, plugin) in self._plugins.items():
            old = previous._plugins.get(path)
            inherit = getattr(plugin, "inherit_state", None)
            if old is None or old[0] != type_name or inherit is None:
                continue
            try:
                inherit(old[1])
            except Exception:
                log.exception("%s: could not take over the previous state; starting fresh", path)

    def decide(self, request: RoutingRequest, views: Sequence[WorkerView], *,
               follow_rules: bool = True) -> Decision:
        """Choose a worker for ``request`` among ``views``. Never raises.

        ``follow_rules=False``: as if no rule matched (the default profile, the requested
        model), for a request whose target is fixed elsewhere (a response's continuation)."""
        try:
            return self._decide(request, views, follow_rules)
        except (Exception, SystemExit):
            request_id = str(getattr(request, "request_id", "?"))
            log.exception("policy engine failed on request %s", request_id)
            return Decision(request_id=request_id, worker_id=None,
                            model=str(getattr(request, "model", "")),
                            profile=self.default_profile, rule=None,
                            reason="no candidate: internal policy error",
                            attributes=MappingProxyType({"decided_by": "error"}))

    def _decide(self, request: RoutingRequest, views: Sequence[WorkerView],
                follow_rules: bool = True) -> Decision:
        rule = first_match(self.routing.rules, request) if follow_rules else None
        action = rule.then if rule is not None else None
        profile = self.profiles[(action.profile if action else None) or self.default_profile]
        model = (action.model if action else None) or request.model
        adapter = action.adapter if action else None
        routed = request if model == request.model else dataclasses.replace(request, model=model)
        cycle = CycleState()
        cycle.write(TARGET_MODEL, model)
        cycle.write(TARGET_ADAPTER, adapter)
        cycle.write(RULE, rule.name if rule else None)
        removed: dict[str, str] = {}
        candidates = _in_pool(views, action.pool, removed) if action and action.pool else views
        result = profile.run(routed, candidates, cycle, removed)
        attributes: dict[str, Any] = {"decided_by": result.decided_by}
        if result.chosen is not None:
            attributes.update(worker_attributes(cycle, result.chosen.worker_id))
        failed = request.attributes.get(FAILED_PRODUCERS)
        skipped = (tuple(failed) if isinstance(failed, (tuple, list)) else ()) + result.skipped
        if skipped:
            attributes["skipped_plugins"] = skipped
        if request.predicted_output_tokens is not None:
            attributes["predicted_output_tokens"] = request.predicted_output_tokens
        return _new_decision(
            request.request_id, result.chosen.worker_id if result.chosen else None,
            adapter or model, profile.name, _rule_name(rule), result.reason, result.candidates,
            result.filtered_out, MappingProxyType(attributes))

    def on_routed(self, request: RoutingRequest, decision: Decision) -> None:
        """The router sent ``request`` where ``decision`` said (RoutingObserver hook)."""
        for hook in self._on_routed:
            try:
                hook(request, decision)
            except Exception:
                log.exception("on_routed of %s failed", _plugin_name(hook))

    def on_completed(self, request: RoutingRequest, outcome: RequestOutcome) -> None:
        """``request`` finished (RoutingObserver hook)."""
        for hook in self._on_completed:
            try:
                hook(request, outcome)
            except Exception:
                log.exception("on_completed of %s failed", _plugin_name(hook))

    def learn_routed(self, worker_id: str, block_hashes: Mapping[int, Sequence[int]]) -> None:
        """Another router replica sent a prompt with these block hashes (block size -> chain)
        to ``worker_id``: each plugin with a ``learn_routed(worker_id, block_hashes)`` learns
        it as if this one had (the ``prefix`` scorer's routing history)."""
        self._each_with("learn_routed", worker_id, block_hashes)

    def forget_model(self, model: str) -> None:
        """No worker serves ``model`` any more: each plugin with a ``forget_model(model)``
        drops what it kept of it (the ``output-length`` producer's statistics)."""
        self._each_with("forget_model", model)

    def forget_worker(self, worker_id: str) -> None:
        """The worker's engine restarted with an empty cache, or the fleet removed it or put
        another server under its id: each plugin with a ``forget_worker(worker_id)`` drops
        what it believed of it."""
        self._each_with("forget_worker", worker_id)

    def _each_with(self, hook_name: str, *args: Any) -> None:
        """``plugin.<hook_name>(*args)`` for each plugin that has it; a failure is logged."""
        for _path, (_type_name, plugin) in self._plugins.items():
            hook = getattr(plugin, hook_name, None)
            if hook is None:
                continue
            try:
                hook(*args)
            except Exception:
                log.exception("%s of %s failed", hook_name, _plugin_name(hook))

    def plugins(self) -> Iterator[tuple[str, str, Any]]:
        """(declared path, type name, instance) of every plugin, producers first."""
        for path, (type_name, plugin) in self._plugins.items():
            yield path, type_name, plugin


# what each kind's protocol asks of a plugin (``policies.base``), named when one lacks them
_KIND_MEMBERS: dict[str, tuple[str, ...]] = {
    "producer": ("name", "produce"), "filter": ("name", "filter"),
    "scorer": ("name", "score"), "picker": ("name", "pick")}


class _Builder:
    """Instantiates plugins from specs, checking each satisfies its kind's protocol."""

    def __init__(self, routing: RoutingConfig, fleet: FleetConfig, registry: PluginRegistry,
                 seed: int | None) -> None:
        self.routing, self.fleet, self.registry, self.seed = routing, fleet, registry, seed
        self.plugins: dict[str, tuple[str, Any]] = {}

    def build_profile(self, name: str, spec: ProfileSpec) -> Profile:
        """A profile's plugins, in declared order, sharing one ``profile_state``."""
        shared: dict[str, Any] = {}
        return Profile(
            name=name,
            filters=tuple(self.build(s, "filter", shared) for s in spec.filters),
            scorers=tuple(WeightedScorer(self.build(s, "scorer", shared), s.weight)
                          for s in spec.scorers),
            picker=self.build(spec.picker, "picker", shared),
            refusing_filters=frozenset(s.name for s in spec.filters
                                       if s.on_failure == "refuse"))

    def build(self, spec: PluginSpec, kind: PluginKind,
              profile_state: dict[str, Any] | None = None) -> Any:
        plugin_type = self.registry.get(spec.type)
        if plugin_type is None or plugin_type.kind != kind:
            raise RoutingConfigError(f"{spec.path}.type: unknown {kind} type {spec.type!r}")
        context = BuildContext(spec.name, spec.path, self.routing, self.fleet, self.seed,
                               profile_state if profile_state is not None else {})
        try:
            plugin = plugin_type.factory(spec.params, context)
        except RoutingConfigError:
            raise
        except (ValueError, TypeError, OSError, ImportError) as exc:
            raise RoutingConfigError(f"{spec.path}: {exc}") from exc
        except (Exception, SystemExit) as exc:   # a factory's failure refuses the config
            log.exception("%s: plugin factory failed", spec.path)
            raise RoutingConfigError(f"{spec.path}: {type(exc).__name__}: {exc}") from exc
        if not isinstance(plugin, KIND_PROTOCOLS[kind]):
            missing = [member for member in _KIND_MEMBERS[kind] if not hasattr(plugin, member)]
            raise RoutingConfigError(
                f"{spec.path}.type: {spec.type!r} did not build a {kind}: its factory returned "
                f"{type(plugin).__name__}, which has no {' and no '.join(missing) or 'such'} "
                "attribute")
        built_name = getattr(plugin, "name", None)
        if built_name != spec.name:
            raise RoutingConfigError(
                f"{spec.path}: plugin {spec.type!r} built an instance named {built_name!r}, "
                f"not {spec.name!r} as declared: its scores and failures would go under "
                "another name (set its name from the factory's context.name)")
        self.plugins[spec.path] = (spec.type, plugin)
        return plugin


def check_against_fleet(routing: RoutingConfig, fleet: FleetConfig) -> None:
    """Rules must rewrite to models and pools that some worker of the fleet has, and a
    ``pool`` or ``labels`` filter must keep some worker (else every request is a 503)."""
    workers = [spec.info for spec in fleet.workers]
    if not workers:
        return
    for profile in routing.profiles.values():
        for spec in profile.filters:
            lacking = _labels_none_has(_filter_labels(spec), workers)
            if lacking:
                raise RoutingConfigError(
                    f"{spec.path}: no worker of the fleet has {lacking}: every request would "
                    "find no candidate (503)")
    adapters = {name for spec in fleet.workers for name in spec.emulated_adapters}
    for i, rule in enumerate(routing.rules):
        model = rule.then.model
        if model is not None and not any(model in w.models for w in workers):
            hint = (f"{model!r} is a LoRA adapter: name it in then.adapter, with then.model "
                    "its base model" if model in adapters else
                    f"no worker of the fleet serves {model!r} (a LoRA adapter goes in "
                    "then.adapter, with then.model its base model)")
            raise RoutingConfigError(f"rules[{i}].then.model: {hint}")
        lacking = _labels_none_has(rule.then.pool, workers)
        if lacking:
            raise RoutingConfigError(f"rules[{i}].then.pool: no worker of the fleet has {lacking}")
        if model is not None and rule.then.pool:
            lacking = _labels_none_has(rule.then.pool, [w for w in workers if model in w.models])
            if lacking:
                raise RoutingConfigError(
                    f"rules[{i}].then: no worker of the fleet serving {model!r} has {lacking}: "
                    "every request of the rule would find no candidate (503)")


def _labels_none_has(labels: Mapping[str, str] | None,
                     workers: Sequence[WorkerInfo]) -> str | None:
    """``labels`` as ``k=v, ...`` when no worker carries them all, else None (None or empty
    labels: any worker has them)."""
    if not labels or any(all(w.labels.get(k) == v for k, v in labels.items())
                         for w in workers):
        return None
    return ", ".join(f"{k}={v}" for k, v in labels.items())


def _filter_labels(spec: PluginSpec) -> Mapping[str, str] | None:
    """The labels a ``pool`` or ``labels`` filter keeps workers by (None: another kind)."""
    if spec.type == "pool":
        return {"pool": spec.params.pool}
    if spec.type == "labels":
        match: Mapping[str, str] = spec.params.match
        return match
    return None


def _in_pool(views: Sequence[WorkerView], pool: Mapping[str, str],
             removed: dict[str, str]) -> list[WorkerView]:
    kept: list[WorkerView] = []
    for view in views:
        if all(view.labels.get(key) == value for key, value in pool.items()):
            kept.append(view)
        else:
            removed[view.id] = POOL_FILTER_NAME
    return kept


# Decision is a frozen slots dataclass without __post_init__: filling its slots through their
# descriptors builds the same object as its __init__ (object.__setattr__ per field), about
# twice as fast; one is built per decision.
(_set_request_id, _set_worker_id, _set_model, _set_profile, _set_rule, _set_reason,
 _set_candidates, _set_filtered_out, _set_attributes) = (vars(Decision)[name].__set__ for name in (
    "request_id", "worker_id", "model", "profile", "rule", "reason", "candidates",
    "filtered_out", "attributes"))


def _new_decision(request_id: str, worker_id: str | None, model: str, profile: str,
                  rule: str | None, reason: str, candidates: Sequence[CandidateScore],
                  filtered_out: Mapping[str, str], attributes: Mapping[str, Any]) -> Decision:
    """``Decision(...)`` with every field given, positionally."""
    decision: Decision = object.__new__(Decision)
    _set_request_id(decision, request_id)
    _set_worker_id(decision, worker_id)
    _set_model(decision, model)
    _set_profile(decision, profile)
    _set_rule(decision, rule)
    _set_reason(decision, reason)
    _set_candidates(decision, candidates)
    _set_filtered_out(decision, filtered_out)
    _set_attributes(decision, attributes)
    return decision


def _rule_name(rule: Rule | None) -> str | None:
    return rule.name if rule is not None else None


def _plugin_name(hook: object) -> str:
    plugin = getattr(hook, "__self__", hook)
    return str(getattr(plugin, "name", type(plugin).__name__))

