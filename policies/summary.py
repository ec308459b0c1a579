"""A one-line description of a routing configuration, and the warnings worth printing about
it, for ``kvroute validate`` and logs."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Set

from policies.admission.section import SECTION_NAME as ADMISSION_SECTION
from policies.admission.section import AdmissionSection
from policies.base import ROUTED_PATHS, RUNNER_OF_PATH
from policies.config import RoutingConfig, RuleMatch
from workers.fleet import FleetConfig
from workers.registry import runners_by_model


def summarize(routing: RoutingConfig) -> str:
    profiles = ", ".join(
        f"{name} ({len(p.filters)} filters, {len(p.scorers)} scorers, {p.picker.type})"
        for name, p in routing.profiles.items())
    producers = ", ".join(spec.type for spec in routing.producers) or "none"
    return (f"{len(routing.profiles)} profile(s): {profiles}; {len(routing.rules)} rule(s); "
            f"default profile {routing.default_profile}; producers: {producers}"
            + _admission(routing) + _semantic(routing) + _plugin_modules(routing))


def _plugin_modules(routing: RoutingConfig) -> str:
    entries = [module.entry for module in routing.plugin_modules]
    return f"; plugin modules: {', '.join(entries)}" if entries else ""


def _semantic(routing: RoutingConfig) -> str:
    section = routing.section("semantic")       # (by name: no import of the classifier)
    classes = getattr(section, "classes", None)
    if not classes:
        return ""
    examples = sum(len(spec.examples) for spec in classes.values())
    more = " and an examples file" if getattr(section, "examples_file", None) else ""
    return (f"; semantic: {len(classes)} class(es) ({', '.join(classes)}), {examples} "
            f"example(s){more}, default {getattr(section, 'default_class', '')}")


def _admission(routing: RoutingConfig) -> str:
    section = routing.section(ADMISSION_SECTION)
    if not isinstance(section, AdmissionSection):
        return ""
    limit = (f"at most {section.max_in_flight} in flight, {section.max_waiting} waiting"
             if section.max_in_flight else "no in-flight limit")
    budgets = sum(budget.limited for budget in section.tenants.values())
    other = "limited" if section.other_tenants.limited else "unlimited"
    return f"; admission: {limit}, {budgets} tenant budget(s), other tenants {other}"


def fleet_warnings(routing: RoutingConfig, fleet: FleetConfig) -> list[str]:
    """Every warning worth giving about ``routing`` served by ``fleet``: what ``kvroute
    validate`` prints, and the router logs when it loads the file."""
    runners = runners_by_model(worker.info for worker in fleet.workers)
    sequences = sum(w.info.max_num_seqs or w.info.gpu.default_max_num_seqs
                    for w in fleet.workers)
    found = warnings(routing, runners) + admission_warnings(routing, sequences)
    if fleet.workers:
        found += _unserved_rule_models(routing, runners, fleet)
        found += _adapters_no_worker_loads(routing, fleet)
        found += _windows_left_by_margins(routing, fleet)
    return found


# pickers that choose by the scorers' totals: with no scorer, or every weight 0, every total
# is 0 and the pick is random (a profile left with its filters alone, as a half-finished edit
# leaves it, picks so under the default max-score; a random pick on purpose is the
# ``random`` picker's)
SCORE_PICKERS = frozenset({"max-score", "power-of-two"})


def warnings(routing: RoutingConfig,
             runners: Mapping[str, Set[str]] | None = None) -> list[str]:
    """Valid but probably unintended: a profile that never checks the model or health; with
    the fleet's ``runners`` (model -> what it runs as), a rule sending requests of some path
    to a model that cannot serve them (the router answers those 500)."""
    found: list[str] = []
    for name, profile in routing.profiles.items():
        types = {spec.type for spec in profile.filters}
        if "model" not in types:
            found.append(f"profiles.{name}.filters: no model filter: requests may go to "
                         "workers that do not serve their model")
        if "healthy" not in types:
            found.append(f"profiles.{name}.filters: no healthy filter: requests may go to "
                         "workers whose last scrape failed or that keep failing requests")
        if profile.picker.type in SCORE_PICKERS and not profile.scorers:
            found.append(f"profiles.{name}.picker: {profile.picker.type} compares the "
                         "scorers' totals and the profile has no scorer: it picks at random "
                         "(no load is compared; add a scorer, e.g. inflight or queue-depth, "
                         "or pick at random on purpose with picker: random)")
        elif (profile.picker.type in SCORE_PICKERS and profile.scorers
              and all(spec.weight == 0 for spec in profile.scorers)):
            found.append(f"profiles.{name}.scorers: every weight is 0: every total is 0, so "
                         f"{profile.picker.type} picks at random (no load is compared)")
    return (found + _shadowed_rules(routing) + _shadowed_aliases(routing, set(runners or {}))
            + _misrouting_rules(routing, runners or {})
            + _semantic_warnings(routing) + _unused_plugin_modules(routing))


def _unused_plugin_modules(routing: RoutingConfig) -> list[str]:
    """A module listed in ``plugin_modules:`` none of whose types or sections the file uses
    (a type name misspelt in the module, or a module listed for nothing)."""
    used = {spec.type for spec in routing.producers}
    for profile in routing.profiles.values():
        used.update(spec.type for spec in (*profile.filters, *profile.scorers, profile.picker))
    found = []
    for i, module in enumerate(routing.plugin_modules):
        if used.isdisjoint(module.types) and not any(
                routing.section(name) is not None for name in module.sections):
            added = ", ".join((*module.types, *module.sections)) or "nothing"
            found.append(f"plugin_modules[{i}] ({module.entry}): the file uses none of what "
                         f"it registers ({added})")
    return found


def _shadowed_rules(routing: RoutingConfig) -> list[str]:
    """Rules after one without conditions, or after one with the same conditions: the first
    match wins, so they never match."""
    found = []
    for i, rule in enumerate(routing.rules):
        if rule.when == RuleMatch() and i + 1 < len(routing.rules):
            later = ", ".join(r.name for r in routing.rules[i + 1:])
            found.append(f"rules[{i}] ({rule.name}) has no conditions and matches every "
                         f"request: the rules after it never match ({later})")
            return found
        earlier = next((j for j in range(i) if routing.rules[j].when == rule.when), None)
        if earlier is not None:
            found.append(f"rules[{i}] ({rule.name}) has the conditions of rules[{earlier}] "
                         f"({routing.rules[earlier].name}), which matches first: it never "
                         "matches")
    return found


def _shadowed_aliases(routing: RoutingConfig, served: Set[str]) -> list[str]:
    """An alias rule (the model its only condition, a model or adapter its target) after
    rules that may match its requests and leave the model as it is: the requests they match
    reach the workers under the alias (no worker serves it: 404), and the alias is not
    listed. First match wins, so the alias goes before them (it then takes all its
    requests). ``served``: the fleet's models, when known (a name the fleet serves is no
    alias: a rule sending it elsewhere is a rewrite, and the rules before it serve it as
    it is)."""
    found = []
    rules = routing.rules
    for i, rule in enumerate(rules):
        when = rule.when
        if (not (rule.then.adapter or rule.then.model) or not when.model
                or when.path or when.header or when.tenant or when.semantic_class
                or when.needs_prompt_tokens):
            continue
        names = set(when.model) - {rule.then.adapter or rule.then.model} - served
        if not names:
            continue
        before = [f"rules[{j}] ({rules[j].name})" for j in range(i)
                  if not (rules[j].then.adapter or rules[j].then.model)
                  and rules[j].when != RuleMatch()      # (warned of as matching everything)
                  and (not rules[j].when.model or names & set(rules[j].when.model))]
        if before:
            found.append(
                f"rules[{i}] ({rule.name}) makes {', '.join(sorted(names))} an alias, but "
                f"{', '.join(before)} may match its requests first and send them on under "
                "that name (a 404 where no worker serves it), and GET /v1/models does not "
                f"list it: put rules[{i}] first (it then takes every request for the alias)")
    return found


def _semantic_warnings(routing: RoutingConfig) -> list[str]:
    """A semantic section's examples written under two classes (the classifier is taught
    both) or twice in one (weighed twice), and a threshold of 1 (no classification is that
    sure: every prompt would take the default class)."""
    section = routing.section("semantic")       # (by name: no import of the classifier)
    classes = getattr(section, "classes", None)
    if not classes:
        return []
    found = []
    seen: dict[str, str] = {}
    for name, spec in classes.items():
        counts = Counter(" ".join(t.split()).lower() for t in spec.examples)
        for text, count in counts.items():
            shown = text if len(text) <= 60 else text[:57] + "..."
            if count > 1:
                found.append(f"semantic.classes.{name}: {shown!r} is listed {count} times: the "
                             f"classifier weighs it {count} times, and cross-validation "
                             "scores it on itself")
            first = seen.setdefault(text, name)
            if first != name:
                found.append(f"semantic.classes: {shown!r} is an example of both {first} and "
                             f"{name}: the classifier is taught both for it")
    lone = [name for name, spec in classes.items() if len(spec.examples) < 2]
    if (lone and getattr(section, "classifier", "") == "auto"
            and not getattr(section, "examples_file", None)):
        found.append(f"semantic.classes: {', '.join(lone)} with fewer than two examples: "
                     "cross-validation needs two of each class, so classifier: auto cannot "
                     "compare its two classifiers and keeps nearest centroid")
    if getattr(section, "threshold", 0.0) >= 1.0:
        found.append("semantic.threshold: 1 is a confidence no classification reaches: every "
                     f"prompt takes the default class ({getattr(section, 'default_class', '')})")
    named = {name for rule in routing.rules for name in rule.when.semantic_class}
    default = getattr(section, "default_class", "")
    unruled = [name for name in dict.fromkeys([*classes, default])
               if name and name not in named]
    if named and unruled:     # (a file whose rules name no class classifies for the log)
        found.append(f"semantic: no rule names class {', '.join(unruled)}: its prompts go on to "
                     "the model the client asked for"
                     + (" (the default class: every unsure, empty or unreadable prompt)"
                        if default in unruled else ""))
    return found


def _unserved_rule_models(routing: RoutingConfig, runners: Mapping[str, Set[str]],
                          fleet: FleetConfig) -> list[str]:
    """A rule's ``when.model`` naming models no worker serves: it matches nothing then,
    unless the rule sends them to a model that is served (an alias). A LoRA adapter an
    emulated worker declares is served; one of a real worker is known only from its
    ``/v1/models`` while running, so where the fleet has real workers the warning says the
    name may be one."""
    adapters = {name for worker in fleet.workers for name in worker.emulated_adapters}
    all_emulated = all(worker.emulated for worker in fleet.workers)
    found = []
    for i, rule in enumerate(routing.rules):
        if rule.then.adapter is not None or rule.then.model is not None:
            continue             # an alias: a then.model no worker serves is refused, and an
            #                      adapter no worker loads has a warning of its own
        unserved = [m for m in rule.when.model if m not in runners and m not in adapters]
        if unserved and len(unserved) == len(rule.when.model):
            unless = "" if all_emulated else (
                " (unless it is a LoRA adapter a worker loads: those are known only at run "
                "time)")
            found.append(f"rules[{i}] ({rule.name}).when.model: no worker of the fleet serves "
                         f"{', '.join(unserved)}{unless}: the rule matches no request")
    return found


def _adapters_no_worker_loads(routing: RoutingConfig, fleet: FleetConfig) -> list[str]:
    """A rule's ``then.adapter`` that no worker able to take its requests has loaded. Only
    emulated workers declare theirs in the fleet file (``emulate.lora_adapters``); a real
    worker's are read from its ``/v1/models`` while running, so where one could take the
    rule's requests nothing is said."""
    found = []
    for i, rule in enumerate(routing.rules):
        adapter, model = rule.then.adapter, rule.then.model
        if adapter is None:
            continue
        pool = rule.then.pool or {}
        able = [w for w in fleet.workers if (model is None or model in w.info.models)
                and all(w.info.labels.get(k) == v for k, v in pool.items())]
        if not able or not all(w.emulated for w in able):
            continue
        if any(adapter in w.emulated_adapters for w in able):
            continue
        serving = f" serving {model}" if model is not None else ""
        if pool:
            serving += " with " + ", ".join(f"{k}={v}" for k, v in pool.items())
        found.append(f"rules[{i}] ({rule.name}).then.adapter: no worker of the fleet{serving} "
                     f"has {adapter!r} loaded (emulate.lora_adapters): its requests go to "
                     "workers without it, which answer 404 (the model does not exist)")
    return found


def _windows_left_by_margins(routing: RoutingConfig, fleet: FleetConfig) -> list[str]:
    """A ``context-length`` filter whose ``margin_tokens`` reach every worker's context
    window holds no request with its margin: the margin is moot (each request goes to the
    windows that hold its prompt without it)."""
    longest = max(w.info.model_spec.max_model_len for w in fleet.workers)
    found = []
    for name, profile in routing.profiles.items():
        for spec in profile.filters:
            if spec.type != "context-length":
                continue
            margin = spec.params.margin_tokens
            if margin >= longest:
                found.append(f"{spec.path}.params.margin_tokens: {margin} leaves nothing of "
                             f"the longest context window of the fleet ({longest} tokens): "
                             f"profile {name} holds no request with it, so it prefers no "
                             "window (each request goes where its prompt fits without it)")
    return found


def admission_warnings(routing: RoutingConfig, fleet_sequences: int) -> list[str]:
    """An in-flight limit above what the fleet runs at once (``fleet_sequences``: its
    workers' ``max_num_seqs`` together) lets the excess wait in the workers' own queues,
    first come first served, where the section's priorities do not reach; without a limit,
    the waiting settings and priorities do nothing at all."""
    section = routing.section(ADMISSION_SECTION)
    if not isinstance(section, AdmissionSection):
        return []
    found = _tenant_warnings(section)
    if section.max_in_flight == 0:
        return found + _unlimited_admission_warnings(section)
    if not fleet_sequences or section.max_in_flight <= fleet_sequences:
        return found
    return [*found, f"admission.max_in_flight: {section.max_in_flight} is above the "
            f"{fleet_sequences} sequences the fleet's workers run at once (their max_num_seqs "
            "together): past that, requests wait in the workers' own queues, where tenants' "
            "priorities do not apply"]


def _tenant_warnings(section: AdmissionSection) -> list[str]:
    """Listed tenants that do not do what they look like: one named like the shared budget
    (written one level too deep: every unlisted tenant stays unlimited), and, with the
    shared budget limited, one listed with nothing set (unlimited, and not in the shared
    budget either)."""
    found = []
    for name, budget in section.tenants.items():
        if name in ("other_tenants", "other-tenants"):
            found.append(f"admission.tenants.{name}: a tenant named {name!r}; the budget of "
                         "every unlisted tenant is admission.other_tenants, beside tenants, "
                         f"not in it ({'limited' if section.other_tenants.limited else 'none'}"
                         " now)")
        elif not budget.limited and not budget.priority and section.other_tenants.limited:
            found.append(f"admission.tenants.{name}: nothing set: {name} is unlimited, and "
                         "not counted in the other_tenants budget either (give it a limit, or "
                         "a priority if that is what it is listed for)")
    return found


def _unlimited_admission_warnings(section: AdmissionSection) -> list[str]:
    """Settings of the waiting line that mean nothing while no request ever waits."""
    defaults = AdmissionSection()
    waiting = [name for name in ("max_waiting", "wait_timeout_s")
               if getattr(section, name) != getattr(defaults, name)]
    ranked = sorted(name for name, budget in section.tenants.items() if budget.priority)
    if section.other_tenants.priority:
        ranked.append("other_tenants")
    found = []
    if waiting or ranked:
        what = ", ".join([*waiting, *(f"the priority of {name}" for name in ranked)])
        verb = "applies" if len(waiting) + len(ranked) == 1 else "apply"
        found.append(f"admission: {what} {verb} only to requests waiting for an in-flight "
                     "slot, and max_in_flight is 0 (no limit): no request ever waits; set "
                     "max_in_flight to use them")
    return found


def _misrouting_rules(routing: RoutingConfig, runners: Mapping[str, Set[str]]
                      ) -> list[str]:
    """Rules rewriting the model for paths its target cannot serve, among the paths some
    model of the fleet serves (an embeddings path on a fleet without embedding models is no
    concern of a rule)."""
    served = {runner for kinds in runners.values() for runner in kinds}
    found = []
    for i, rule in enumerate(routing.rules):
        target = rule.then.model
        if target is None or target not in runners:
            continue
        paths = [path for path in (rule.when.path or ROUTED_PATHS)
                 if RUNNER_OF_PATH[path] in served and RUNNER_OF_PATH[path] not in runners[target]]
        if paths:
            found.append(f"rules[{i}] ({rule.name}): sends {', '.join(paths)} requests to "
                         f"`{target}`, which runs {'/'.join(sorted(runners[target]))}: they "
                         "would be answered 500; scope the rule with when.path")
    return found
