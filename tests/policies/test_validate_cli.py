"""policies/cli.py: ``kvroute validate`` exit codes and messages."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from router.cli import main
from tests.policies.broken_plugins import write_broken_scorer

ROOT = Path(__file__).resolve().parents[2]


def test_shipped_routing_file_is_valid(capsys: pytest.CaptureFixture[str]) -> None:
    path = ROOT / "config" / "routing.yaml"
    assert main(["validate", str(path), "--fleet", str(ROOT / "config" / "fleet.yaml")]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"{path}: ok: ")
    assert out.count("\n") == 1


def test_invalid_file_exits_1_naming_the_field(tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "routing.yaml"
    path.write_text("profiles:\n  default:\n    scorers: [{type: kv-usage}, "
                    "{type: queue-depth, weight: x}]\n")
    assert main(["validate", str(path)]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == (f"{path}: invalid: profiles.default.scorers[1].weight: "
                            "must be a number, got 'x' (line 3)\n")


@pytest.mark.parametrize(("text", "reason"), [
    ("profiles:\n  default: {scorers: [{type: kv-usage}]}\ndefault_profile: default\n"
     "default_profile: other\n",
     "invalid YAML: line 4, column 1: duplicate key 'default_profile' (first at line 3; a "
     "repeated key would silently replace it)"),
    ("profiles:\n  default:\n    scorers: [{type: kv-usage}\n",
     "invalid YAML: line 3, column 14 (while parsing a flow sequence): expected ',' or ']', "
     "but got '<stream end>' at line 4, column 1"),
    # a key without its colon is found wrong a line later: the key's line is named first
    ("profiles:\n  default:\n    filters: []\n  long\n    picker: {type: random}\n",
     "invalid YAML: line 4, column 3 (while scanning a simple key): could not find expected "
     "':' at line 5, column 11"),
], ids=["repeated key", "unclosed list", "key without colon"])
def test_a_yaml_fault_is_one_line_naming_the_file_once(
        text: str, reason: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "routing.yaml"
    path.write_text(text)
    assert main(["validate", str(path)]) == 1
    assert capsys.readouterr().err == f"{path}: invalid: {reason}\n"


def test_a_fleet_file_given_as_the_routing_file_and_the_other_way_round_say_so(
        capsys: pytest.CaptureFixture[str]) -> None:
    """Each file given in the other's place was refused for its keys alone ("models: unknown
    top-level key"), not for what it is."""
    fleet, routing = ROOT / "config" / "fleet.yaml", ROOT / "config" / "routing.yaml"
    assert main(["validate", str(fleet)]) == 1
    assert capsys.readouterr().err == (
        f"{fleet}: invalid: workers: unknown top-level key: this is a fleet file, not a "
        "routing file (kvroute validate ROUTING_FILE --fleet FLEET_FILE) (line 10)\n")
    assert main(["validate", str(routing), "--fleet", str(routing)]) == 1
    assert capsys.readouterr().err.endswith(
        ": unknown top-level key(s): default_profile, profiles, slo: this is a routing file, "
        "not a fleet file\n")


def test_warnings_do_not_fail_validation(tmp_path: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "routing.yaml"
    path.write_text("profiles: {default: {filters: [healthy], scorers: [inflight]}}\n")
    assert main(["validate", str(path)]) == 0
    assert capsys.readouterr().err == (
        f"{path}: warning: profiles.default.filters: no model filter: requests may go to "
        f"workers that do not serve their model\n{path}: {NO_FLEET_NOTE}\n")


def test_a_picker_of_totals_with_no_scorer_is_warned_of(tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    """``power-of-two`` with no scorer validated ok and picked at random: every total 0."""
    path = tmp_path / "routing.yaml"
    path.write_text("profiles: {default: {filters: [healthy, model], "
                    "picker: {type: power-of-two}}}\n")
    assert main(["validate", str(path)]) == 0
    assert capsys.readouterr().err == (
        f"{path}: warning: profiles.default.picker: power-of-two compares the scorers' totals "
        "and the profile has no scorer: it picks at random (no load is compared; add a "
        "scorer, e.g. inflight or queue-depth, or pick at random on purpose with picker: "
        f"random)\n{path}: {NO_FLEET_NOTE}\n")


@pytest.mark.parametrize("picker", ["", ", picker: {type: max-score}"],
                         ids=["default-picker", "max-score"])
def test_a_max_score_profile_with_no_scorer_is_warned_of(picker: str, tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]
                                                         ) -> None:
    """Filters alone (what a half-finished edit leaves) validated ok and picked at random:
    every total 0, as with every weight 0, which was warned of."""
    path = tmp_path / "routing.yaml"
    path.write_text(f"profiles: {{default: {{filters: [healthy, model]{picker}}}}}\n")
    assert main(["validate", str(path)]) == 0
    assert capsys.readouterr().err == (
        f"{path}: warning: profiles.default.picker: max-score compares the scorers' totals "
        "and the profile has no scorer: it picks at random (no load is compared; add a "
        "scorer, e.g. inflight or queue-depth, or pick at random on purpose with picker: "
        f"random)\n{path}: {NO_FLEET_NOTE}\n")
    # a random pick said as such: no warning
    path.write_text("profiles: {default: {filters: [healthy, model], picker: {type: random}}}\n")
    assert main(["validate", str(path)]) == 0
    assert capsys.readouterr().err == f"{path}: {NO_FLEET_NOTE}\n"


NO_FLEET_NOTE = ("note: without --fleet, the models, pools and sequences it names are not "
                 "checked against a fleet")


def test_a_pool_filter_no_worker_passes_is_refused_with_the_fleet(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The same check as a rule's pool: such a filter validated ok, loaded, and every
    request was answered 503."""
    fleet = str(ROOT / "config" / "fleet.yaml")
    path = tmp_path / "routing.yaml"
    for params, labels in (("{pool: platinum}", "pool=platinum"),
                           ("{match: {pool: premium, region: us}}", "pool=premium, region=us")):
        kind = "pool" if "match" not in params else "labels"
        path.write_text("profiles: {default: {filters: [{type: model}, {type: healthy}, "
                        f"{{type: {kind}, params: {params}}}]}}}}\n")
        assert main(["validate", str(path), "--fleet", fleet]) == 1
        assert capsys.readouterr().err == (
            f"{path}: invalid: profiles.default.filters[2]: no worker of the fleet has "
            f"{labels}: every request would find no candidate (503)\n")
    path.write_text("profiles: {default: {filters: [{type: model}, {type: healthy}, "
                    "{type: labels, params: {match: {pool: premium, region: eu}}}]}}\n")
    assert main(["validate", str(path), "--fleet", fleet]) == 0


def test_rules_that_cannot_match_and_margins_that_leave_no_window_are_warned_of(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Each validated ok with nothing said: rules after a catch-all (the first match wins),
    a rule on a model no worker serves, a margin refusing every request for its length."""
    path = tmp_path / "routing.yaml"
    path.write_text(
        "profiles: {default: {filters: [{type: model}, {type: healthy}, {type: context-length,"
        " params: {margin_tokens: 9000}}], scorers: [inflight]}}\n"
        "rules:\n  - {name: all, then: {pool: {pool: premium}}}\n"
        "  - {name: later, when: {tenant: acme}, then: {pool: {pool: economy}}}\n"
        "  - {name: ghost, when: {model: nope}, then: {pool: {pool: economy}}}\n")
    assert main(["validate", str(path), "--fleet", str(ROOT / "config" / "fleet.yaml")]) == 0
    assert capsys.readouterr().err == "".join(f"{path}: warning: {w}\n" for w in (
        "rules[0] (all) has no conditions and matches every request: the rules after it never "
        "match (later, ghost)",
        "rules[2] (ghost).when.model: no worker of the fleet serves nope: the rule matches no "
        "request",
        "profiles.default.filters[2].params.margin_tokens: 9000 leaves nothing of the longest "
        "context window of the fleet (8192 tokens): profile default holds no request with it, "
        "so it prefers no window (each request goes where its prompt fits without it)"))


def test_an_alias_rule_is_not_warned_of(tmp_path: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    """A rule sending a name no worker serves to one it serves is an alias: every request
    naming it matches. It was warned of as a rule that matches no request."""
    path = tmp_path / "routing.yaml"
    path.write_text(
        "profiles: {default: {filters: [model, healthy], scorers: [inflight]}}\n"
        "rules:\n  - {name: alias, when: {model: gpt-4o-mini}, "
        "then: {model: meta-llama/Llama-3.1-8B-Instruct}}\n")
    assert main(["validate", str(path), "--fleet", str(ROOT / "config" / "fleet.yaml")]) == 0
    assert "warning" not in capsys.readouterr().err
    path.write_text(                          # an alias of an adapter: no warning either
        "profiles: {default: {filters: [model, healthy], scorers: [inflight]}}\n"
        "rules:\n  - {name: alias, when: {model: sql}, "
        "then: {model: meta-llama/Llama-3.1-8B-Instruct, adapter: sql-lora}}\n")
    assert main(["validate", str(path), "--fleet", str(ROOT / "config" / "fleet.yaml")]) == 0
    assert "matches no request" not in capsys.readouterr().err


def test_an_alias_behind_rules_that_take_its_requests_is_warned_of(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """An alias after rules that may match its requests and leave the model alone: those
    requests reached the workers under the alias (404) and /v1/models did not list it, with
    no word from validate. First, it takes every request for it: no warning."""
    path = tmp_path / "routing.yaml"
    alias = ("  - {name: public-names, when: {model: [small]}, "
             "then: {model: meta-llama/Llama-3.1-8B-Instruct}}\n")
    others = ("  - {name: gold, when: {header: {x-tier: gold}}, then: {pool: {pool: premium}}}\n"
              "  - {name: acme-small, when: {model: small, tenant: acme}, then: {profile: "
              "default}}\n"
              "  - {name: acme-other, when: {model: other, tenant: acme}, then: {profile: "
              "default}}\n")
    head = "profiles: {default: {filters: [model, healthy], scorers: [inflight]}}\nrules:\n"
    path.write_text(head + others + alias)
    assert main(["validate", str(path)]) == 0
    assert capsys.readouterr().err.splitlines()[0] == (
        f"{path}: warning: rules[3] (public-names) makes small an alias, but rules[0] (gold), "
        "rules[1] (acme-small) may match its requests first and send them on under that "
        "name (a 404 where no worker serves it), and GET /v1/models does not list it: put "
        "rules[3] first (it then takes every request for the alias)")
    path.write_text(head + alias + others)
    assert main(["validate", str(path)]) == 0
    assert "an alias" not in capsys.readouterr().err
    # no alias: a rule keeping the model (a pool for it), or sending a model the fleet
    # serves to an adapter (the rules before it serve the model as it is)
    fleet = str(ROOT / "config" / "fleet.yaml")
    served = "meta-llama/Llama-3.1-8B-Instruct"
    for rule in (f"{{name: pin, when: {{model: [{served}]}}, then: {{model: {served}, "
                 "pool: {pool: premium}}}",
                 f"{{name: lora, when: {{model: [{served}]}}, then: {{adapter: sql-lora}}}}"):
        path.write_text(head + others + f"  - {rule}\n")
        main(["validate", str(path), "--fleet", fleet])
        assert "an alias" not in capsys.readouterr().err


def test_every_scorer_weighted_0_is_warned_of(tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    """Every weight 0 validated ok: every total 0, so the picker picks at random."""
    path = tmp_path / "routing.yaml"
    path.write_text("profiles: {default: {filters: [healthy, model], scorers: [{type: inflight, "
                    "weight: 0}, {type: kv-usage, weight: 0.0}], picker: {type: max-score}}}\n")
    assert main(["validate", str(path)]) == 0
    assert capsys.readouterr().err == (
        f"{path}: warning: profiles.default.scorers: every weight is 0: every total is 0, so "
        f"max-score picks at random (no load is compared)\n{path}: {NO_FLEET_NOTE}\n")
    # one of them weighed 0 (an index kept warm, scoring nothing): the other decides
    path.write_text("profiles: {default: {filters: [healthy, model], scorers: [{type: inflight, "
                    "weight: 1}, {type: kv-usage, weight: 0.0}], picker: {type: max-score}}}\n")
    assert main(["validate", str(path)]) == 0
    assert "every weight is 0" not in capsys.readouterr().err


def test_a_rule_adapter_no_emulated_worker_loads_is_warned_of(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """It validated ok and every request of the rule went to a worker that answered 404."""
    fleet = str(ROOT / "config" / "examples" / "semantic-fleet.yaml")
    path = tmp_path / "routing.yaml"
    profile = "profiles: {default: {filters: [model, healthy], scorers: [inflight]}}\n"
    path.write_text(profile + "rules:\n"
                    "  - {name: loaded, when: {tenant: a}, then: {model: general, "
                    "adapter: support}}\n"
                    "  - {name: typo, when: {tenant: b}, then: {model: general, "
                    "adapter: suport}}\n"
                    "  - {name: elsewhere, when: {tenant: c}, then: {model: coder, "
                    "adapter: support}}\n"
                    "  - {name: any-model, when: {tenant: d}, then: {adapter: sales}}\n")
    assert main(["validate", str(path), "--fleet", fleet]) == 0
    assert capsys.readouterr().err == "".join(f"{path}: warning: {w}\n" for w in (
        "rules[1] (typo).then.adapter: no worker of the fleet serving general has 'suport' "
        "loaded (emulate.lora_adapters): its requests go to workers without it, which answer "
        "404 (the model does not exist)",
        "rules[2] (elsewhere).then.adapter: no worker of the fleet serving coder has 'support' "
        "loaded (emulate.lora_adapters): its requests go to workers without it, which answer "
        "404 (the model does not exist)",
        "rules[3] (any-model).then.adapter: no worker of the fleet has 'sales' loaded "
        "(emulate.lora_adapters): its requests go to workers without it, which answer 404 (the "
        "model does not exist)"))


def test_a_rule_naming_an_adapter_as_its_model(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A rule matching requests for a loaded adapter was warned of as matching nothing, and
    one sending requests to an adapter as its model was refused without saying that an
    adapter goes in ``then.adapter``."""
    fleet = str(ROOT / "config" / "examples" / "semantic-fleet.yaml")
    profile = "profiles: {default: {filters: [model, healthy], scorers: [inflight]}}\n"
    path = tmp_path / "routing.yaml"
    path.write_text(profile + "rules:\n  - {name: sql, when: {model: support}, "
                    "then: {profile: default}}\n")
    assert main(["validate", str(path), "--fleet", fleet]) == 0
    assert "warning" not in capsys.readouterr().err      # an emulated worker loads it
    path.write_text(profile + "rules:\n  - {name: to, then: {model: support}}\n")
    assert main(["validate", str(path), "--fleet", fleet]) == 1
    assert capsys.readouterr().err.endswith(
        "invalid: rules[0].then.model: 'support' is a LoRA adapter: name it in then.adapter, "
        "with then.model its base model\n")


def test_a_rules_model_and_pool_together_must_be_some_workers(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Each alone was some worker's, so it validated ok; live, every request of the rule was
    answered 503 (and an adapter loaded only outside the pool, 404)."""
    fleet = str(ROOT / "config" / "examples" / "semantic-fleet.yaml")
    path = tmp_path / "routing.yaml"
    profile = "profiles: {default: {filters: [model, healthy], scorers: [inflight]}}\n"
    path.write_text(profile + "rules: [{name: r, when: {tenant: a}, then: {model: math, "
                    "pool: {pool: code}}}]\n")
    assert main(["validate", str(path), "--fleet", fleet]) == 1
    assert capsys.readouterr().err == (
        f"{path}: invalid: rules[0].then: no worker of the fleet serving 'math' has "
        "pool=code: every request of the rule would find no candidate (503)\n")
    path.write_text(profile + "rules: [{name: r, when: {tenant: a}, then: {model: general, "
                    "pool: {pool: general}, adapter: support}}]\n")
    assert main(["validate", str(path), "--fleet", fleet]) == 0
    assert capsys.readouterr().err == ""
    fleet_file = tmp_path / "fleet.yaml"       # the adapter only on the worker outside the pool
    fleet_file.write_text(
        "models: {general: {arch: llama-3-8b}}\nworkers:\n"
        "  - {id: g0, gpu: a100, models: [general], labels: {tier: large}, "
        "emulate: {port: 18401, lora_adapters: [support]}}\n"
        "  - {id: g1, gpu: a100, models: [general], labels: {tier: small}, "
        "emulate: {port: 18402}}\n")
    path.write_text(profile + "rules: [{name: s, when: {tenant: a}, then: {model: general, "
                    "pool: {tier: small}, adapter: support}}]\n")
    assert main(["validate", str(path), "--fleet", str(fleet_file)]) == 0
    assert capsys.readouterr().err == (
        f"{path}: warning: rules[0] (s).then.adapter: no worker of the fleet serving general "
        "with tier=small has 'support' loaded (emulate.lora_adapters): its requests go to "
        "workers without it, which answer 404 (the model does not exist)\n")


def test_a_rule_adapter_is_not_judged_where_a_real_worker_could_load_it(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A real worker's adapters are known only from its /v1/models, while running."""
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text("models: {m: {arch: llama-3-8b}}\n"
                     "workers:\n  - {id: e, gpu: h100, models: [m], emulate: {port: 18301}}\n"
                     "  - {id: r, gpu: h100, models: [m], url: 'http://10.0.0.7:8000'}\n")
    path = tmp_path / "routing.yaml"
    path.write_text("profiles: {default: {filters: [model, healthy], scorers: [inflight]}}\n"
                    "rules: [{name: r, when: {tenant: a}, then: {model: m, adapter: x}}]\n")
    assert main(["validate", str(path), "--fleet", str(fleet)]) == 0
    assert capsys.readouterr().err == ""


def test_rules_with_an_earlier_rules_conditions_are_warned_of(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "routing.yaml"
    path.write_text("profiles: {default: {filters: [model, healthy], scorers: [inflight]}}\n"
                    "rules:\n  - {name: first, when: {tenant: acme}, then: {profile: default}}\n"
                    "  - {name: other, when: {tenant: beta}, then: {profile: default}}\n"
                    "  - {name: again, when: {tenant: acme}, then: {profile: default}}\n")
    assert main(["validate", str(path)]) == 0
    assert capsys.readouterr().err == (
        f"{path}: warning: rules[2] (again) has the conditions of rules[0] (first), which "
        f"matches first: it never matches\n{path}: {NO_FLEET_NOTE}\n")


@pytest.mark.semantic
def test_an_example_of_two_classes_and_a_threshold_of_1_are_warned_of(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "routing.yaml"
    path.write_text("semantic:\n  default_class: chat\n  threshold: 1.0\n  classes:\n"
                    "    code: {examples: [Write a function, fix this bug]}\n"
                    "    chat: {examples: [hello there, '  write  a FUNCTION']}\n"
                    "profiles: {default: {filters: [model, healthy], scorers: [inflight]}}\n")
    assert main(["validate", str(path)]) == 0
    out, err = capsys.readouterr()
    assert out.rstrip().endswith(
        "; semantic: 2 class(es) (code, chat), 4 example(s), default chat")
    assert err == "".join(f"{path}: warning: {w}\n" for w in (
        "semantic.classes: 'write a function' is an example of both code and chat: the "
        "classifier is taught both for it",
        "semantic.threshold: 1 is a confidence no classification reaches: every prompt takes "
        "the default class (chat)")) + f"{path}: {NO_FLEET_NOTE}\n"
    path.write_text(path.read_text().replace("hello there,", "hello there, Hello  there,"))
    assert main(["validate", str(path)]) == 0
    assert ("warning: semantic.classes.chat: 'hello there' is listed 2 times: the classifier "
            "weighs it 2 times, and cross-validation scores it on itself"
            in capsys.readouterr().err)
    path.write_text(path.read_text().replace("hello there, Hello  there,", "hello there,"))
    path.write_text(path.read_text().replace("fix this bug]", "]"))
    assert main(["validate", str(path)]) == 0
    assert ("warning: semantic.classes: code with fewer than two examples: cross-validation "
            "needs two of each class, so classifier: auto cannot compare its two classifiers "
            "and keeps nearest centroid") in capsys.readouterr().err
    path.write_text(path.read_text().replace("  threshold: 1.0\n", "  examples_file: ''\n"))
    assert main(["validate", str(path)]) == 1
    line = path.read_text().splitlines().index("  examples_file: ''") + 1
    assert capsys.readouterr().err == (
        f"{path}: invalid: semantic.examples_file: must be a path (or null for none) (line "
        f"{line})\n")


@pytest.mark.semantic
def test_a_class_no_rule_names_is_warned_of(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A misspelt default_class validated and loaded without a word: every unsure or empty
    prompt then matched no rule and went on to the model the client named."""
    path = tmp_path / "routing.yaml"
    path.write_text("semantic:\n  default_class: smaltalk\n  classes:\n"
                    "    code: {examples: [Write a function, fix this bug]}\n"
                    "    smalltalk: {examples: [hello there, how are you]}\n"
                    "profiles: {default: {filters: [model, healthy], scorers: [inflight]}}\n"
                    "rules:\n  - {name: c, when: {class: code}, then: {model: coder}}\n"
                    "  - {name: s, when: {class: smalltalk}, then: {model: general}}\n")
    assert main(["validate", str(path)]) == 0
    assert capsys.readouterr().err == (
        f"{path}: warning: semantic: no rule names class smaltalk: its prompts go on to the "
        "model the client asked for (the default class: every unsure, empty or unreadable "
        f"prompt)\n{path}: {NO_FLEET_NOTE}\n")
    path.write_text(path.read_text().replace("smaltalk", "smalltalk").replace(
        "  - {name: s, when: {class: smalltalk}, then: {model: general}}\n", ""))
    assert main(["validate", str(path)]) == 0
    assert capsys.readouterr().err == (
        f"{path}: warning: semantic: no rule names class smalltalk: its prompts go on to the "
        "model the client asked for (the default class: every unsure, empty or unreadable "
        f"prompt)\n{path}: {NO_FLEET_NOTE}\n")


def test_time_decisions_without_a_fleet_is_refused_before_anything(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "routing.yaml"
    path.write_text("profiles: {default: {filters: [model, healthy], scorers: [inflight]}}\n")
    assert main(["validate", str(path), "--time-decisions", "5"]) == 2
    assert capsys.readouterr() == ("", "--time-decisions needs --fleet\n")


def test_workers_without_time_decisions_is_refused_before_anything(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``--workers`` counts the worker views of ``--time-decisions``: without it, it was
    taken and did nothing."""
    path = tmp_path / "routing.yaml"
    path.write_text("profiles: {default: {filters: [model, healthy], scorers: [inflight]}}\n")
    fleet = str(ROOT / "config" / "fleet.yaml")
    assert main(["validate", str(path), "--fleet", fleet, "--workers", "8"]) == 2
    assert capsys.readouterr() == ("", "--workers needs --time-decisions\n")
    assert main(["validate", str(path), "--fleet", fleet, "--workers", "8",
                 "--time-decisions", "3"]) == 0
    assert capsys.readouterr().out.splitlines()[-1].startswith("3 requests x 8 workers")


def test_time_decisions_exits_1_naming_the_plugins_that_failed(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A scorer raising on every request validated ok and its timing exited 0: the decisions
    ran without it, which only the tracebacks in between told."""
    write_broken_scorer(tmp_path)
    path = tmp_path / "routing.yaml"
    path.write_text("plugin_modules: [broken.py]\n"
                    "profiles: {default: {filters: [model, healthy], scorers: [broken]}}\n")
    fleet = str(ROOT / "config" / "fleet.yaml")
    assert main(["validate", str(path), "--fleet", fleet]) == 0       # built: fine
    capsys.readouterr()
    assert main(["validate", str(path), "--fleet", fleet, "--time-decisions", "4"]) == 1
    out, err = capsys.readouterr()
    assert out.splitlines()[-1].startswith("4 requests x 3 workers")
    assert err.splitlines()[-1] == (
        f"{path}: invalid: plugins failed and were skipped: broken in 4 of 4 decisions "
        "(their tracebacks are above)")


def test_fleet_mismatch_exits_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "routing.yaml"
    path.write_text("profiles: {default: {}}\nrules: [{name: r, then: {model: nope}}]\n")
    assert main(["validate", str(path)]) == 0                  # no fleet: nothing to check
    assert main(["validate", str(path), "--fleet", str(ROOT / "config" / "fleet.yaml")]) == 1
    assert capsys.readouterr().err.endswith(
        "invalid: rules[0].then.model: no worker of the fleet serves 'nope' (a LoRA adapter "
        "goes in then.adapter, with then.model its base model)\n")


def test_a_rule_sending_embeddings_to_a_generative_model_is_warned_of(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fleet = ROOT / "config" / "examples" / "embeddings-fleet.yaml"
    path = tmp_path / "routing.yaml"
    path.write_text(
        "profiles: {default: {filters: [model, healthy], scorers: [inflight]}}\n"
        "rules:\n"
        "  - {name: chat-only, when: {path: [/v1/chat/completions, /v1/messages]},\n"
        "     then: {model: meta-llama/Llama-3.1-8B-Instruct}}\n"
        "  - {name: to-embedder, when: {path: /v1/responses},\n"
        "     then: {model: Qwen/Qwen3-Embedding-0.6B}}\n"
        "  - {name: all-to-llama, then: {model: meta-llama/Llama-3.1-8B-Instruct}}\n")
    assert main(["validate", str(path), "--fleet", str(fleet)]) == 0
    assert capsys.readouterr().err == (
        f"{path}: warning: rules[1] (to-embedder): sends /v1/responses requests to "
        "`Qwen/Qwen3-Embedding-0.6B`, which runs pooling: they would be answered 500; "
        "scope the rule with when.path\n"
        f"{path}: warning: rules[2] (all-to-llama): sends /v1/embeddings, /score, /v1/score, "
        "/rerank, /v1/rerank, /v2/rerank, /pooling, /classify requests to "
        "`meta-llama/Llama-3.1-8B-Instruct`, which runs generate: they would be answered 500; "
        "scope the rule with when.path\n")
    # on a fleet without embedding models an unscoped rewrite is no concern
    path.write_text("profiles: {default: {filters: [model, healthy], scorers: [inflight]}}\n"
                    "rules: [{name: r, then: {model: meta-llama/Llama-3.1-8B-Instruct}}]\n")
    assert main(["validate", str(path), "--fleet", str(ROOT / "config" / "fleet.yaml")]) == 0
    assert capsys.readouterr().err == ""


@pytest.mark.integration
def test_missing_file_exits_1_in_a_real_process(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "router.cli", "validate",
                           str(tmp_path / "absent.yaml")], cwd=ROOT, capture_output=True,
                          text=True, timeout=60, check=False)
    assert done.returncode == 1
    assert done.stderr.strip().endswith("cannot read routing file: No such file or directory")


def test_a_fleet_that_serve_would_refuse_here_is_a_warning(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text(
        "models: {m: {arch: llama-3-8b}}\n"
        "workers:\n"
        "  - {id: w0, gpu: h100, models: [m], url: 'http://10.0.0.7:8000',"
        " api_key_env: VALIDATE_TEST_KEY}\n"
        f"  - {{id: w1, gpu: h100, models: [m], url: 'https://10.0.0.8:8443',"
        f" tls_ca_file: '{tmp_path / 'none.pem'}'}}\n")
    routing = ROOT / "config" / "routing.yaml"
    monkeypatch.delenv("VALIDATE_TEST_KEY", raising=False)
    assert main(["validate", str(routing), "--fleet", str(fleet)]) == 0
    err = capsys.readouterr().err.splitlines()
    assert err == [
        f"{fleet}: warning: kvroute serve would not start here: worker(s) w0: api_key_env "
        "names VALIDATE_TEST_KEY, which is not set in the environment (set it to the key the "
        "worker was started with, --api-key or VLLM_API_KEY)",
        f"{fleet}: warning: kvroute serve would not start here: worker w1: tls_ca_file "
        f"'{tmp_path / 'none.pem'}' cannot be used: No such file or directory"]
    # a deploy step that gates on the exit code: --strict refuses what would not start
    assert main(["validate", str(routing), "--fleet", str(fleet), "--strict"]) == 1
    assert capsys.readouterr().err.splitlines()[-1] == (
        f"{routing}: refused by --strict: 2 warning(s) above")
    monkeypatch.setenv("VALIDATE_TEST_KEY", "sk-x")
    assert main(["validate", str(routing), "--fleet", str(fleet)]) == 0
    assert "api_key_env" not in capsys.readouterr().err
    fleet.write_text(fleet.read_text().replace(f"tls_ca_file: '{tmp_path / 'none.pem'}'",
                                               "api_key_env: VALIDATE_TEST_KEY"))
    assert main(["validate", str(routing), "--fleet", str(fleet), "--strict"]) == 0


def test_the_admission_section_is_checked_and_summarised(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "routing.yaml"
    base = (ROOT / "config" / "routing.yaml").read_text()
    path.write_text(base + "admission:\n  max_in_flight: 64\n  tenants:\n"
                    "    acme: {requests_per_minute: 600}\n    gold: {priority: 3}\n"
                    "  other_tenants: {tokens_per_minute: 100000}\n")
    assert main(["validate", str(path)]) == 0
    assert capsys.readouterr().out.endswith(
        "; admission: at most 64 in flight, 1024 waiting, 1 tenant budget(s), other tenants "
        "limited\n")
    path.write_text(base + "admission:\n  tenants:\n    acme: {requests_per_minute: -1}\n")
    assert main(["validate", str(path)]) == 1
    assert capsys.readouterr().err == (
        f"{path}: invalid: admission.tenants.acme.requests_per_minute: must be >= 1 (leave it "
        f"out for no limit) (line {len(base.splitlines()) + 3})\n")


def test_an_in_flight_limit_above_what_the_fleet_runs_is_a_warning(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text(
        "models: {m: {arch: llama-3.1-8b}}\nworkers:\n"
        "  - {id: a, gpu: h100, models: [m], url: 'http://10.0.0.1:8000', max_num_seqs: 8}\n"
        "  - {id: b, gpu: h100, models: [m], emulate: {port: 9001, max_num_seqs: 8}}\n")
    path = tmp_path / "routing.yaml"
    base = (ROOT / "config" / "routing.yaml").read_text()
    path.write_text(base + "admission: {max_in_flight: 16}\n")
    assert main(["validate", str(path), "--fleet", str(fleet)]) == 0
    assert "max_in_flight" not in capsys.readouterr().err
    path.write_text(base + "admission: {max_in_flight: 17}\n")
    assert main(["validate", str(path), "--fleet", str(fleet)]) == 0
    assert capsys.readouterr().err == (
        f"{path}: warning: admission.max_in_flight: 17 is above the 16 sequences the fleet's "
        "workers run at once (their max_num_seqs together): past that, requests wait in the "
        "workers' own queues, where tenants' priorities do not apply\n")


def test_waiting_settings_without_an_in_flight_limit_are_a_warning(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Priorities and a queue size with max_in_flight 0 did nothing, and nothing said so."""
    path = tmp_path / "routing.yaml"
    base = (ROOT / "config" / "routing.yaml").read_text()
    path.write_text(base + "admission:\n  tenants: {acme: {requests_per_minute: 60}}\n")
    assert main(["validate", str(path)]) == 0
    assert "warning" not in capsys.readouterr().err        # budgets alone need no limit
    path.write_text(base + "admission:\n  max_waiting: 10\n  tenants:\n"
                    "    gold: {priority: 3}\n    acme: {requests_per_minute: 60}\n")
    assert main(["validate", str(path)]) == 0
    assert capsys.readouterr().err == (
        f"{path}: warning: admission: max_waiting, the priority of gold apply only to "
        "requests waiting for an in-flight slot, and max_in_flight is 0 (no limit): no "
        f"request ever waits; set max_in_flight to use them\n{path}: {NO_FLEET_NOTE}\n")
    path.write_text(base + "admission:\n  tenants:\n    gold: {priority: 3}\n")
    assert main(["validate", str(path)]) == 0
    assert "the priority of gold applies only to requests" in capsys.readouterr().err


def test_tenants_listed_as_they_should_not_be_are_a_warning(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """other_tenants written under tenants made a tenant of that name (every unlisted
    tenant unlimited); a tenant listed with no limit escaped the shared budget: both
    validated ok with nothing said."""
    path = tmp_path / "routing.yaml"
    base = (ROOT / "config" / "routing.yaml").read_text()
    path.write_text(base + "admission:\n  tenants:\n    acme: {requests_per_minute: 100}\n"
                    "    other_tenants: {requests_per_minute: 10}\n")
    assert main(["validate", str(path)]) == 0
    assert capsys.readouterr().err.startswith(
        f"{path}: warning: admission.tenants.other_tenants: a tenant named 'other_tenants'; "
        "the budget of every unlisted tenant is admission.other_tenants, beside tenants, not "
        "in it (none now)\n")
    path.write_text(base + "admission:\n  tenants:\n    acme: {}\n"
                    "  other_tenants: {requests_per_minute: 10}\n")
    assert main(["validate", str(path)]) == 0
    assert capsys.readouterr().err.startswith(
        f"{path}: warning: admission.tenants.acme: nothing set: acme is unlimited, and not "
        "counted in the other_tenants budget either (give it a limit, or a priority if that "
        "is what it is listed for)\n")


def test_a_plugin_file_is_loaded_and_named_in_the_summary(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "own.py").write_text(
        "from dataclasses import dataclass\n\n\n"
        "@dataclass(frozen=True, slots=True)\nclass Params:\n    pass\n\n\n"
        "class Constant:\n    name = 'constant'\n\n"
        "    def score(self, request, workers, cycle):\n"
        "        return {w.id: 0.5 for w in workers}\n\n\n"
        "def register(registry):\n"
        "    registry.register('constant', 'scorer', Params, lambda p, c: Constant())\n")
    path = tmp_path / "routing.yaml"
    path.write_text("plugin_modules: [own.py]\n"
                    "profiles: {default: {scorers: [{type: constant}]}}\n")
    assert main(["validate", str(path)]) == 0
    assert capsys.readouterr().out.rstrip().endswith("; plugin modules: own.py")
    path.write_text("plugin_modules: [missing.py]\n"
                    "profiles: {default: {scorers: [{type: constant}]}}\n")
    assert main(["validate", str(path)]) == 1
    assert capsys.readouterr().err == (
        f"{path}: invalid: plugin_modules[0]: cannot read "
        f"'{(tmp_path / 'missing.py').resolve()}': No such file or directory (line 1)\n")


@pytest.mark.parametrize(("extra", "message"), [
    (["--time-decisions", "-5"], "--time-decisions: must be >= 1, got -5\n"),
    (["--time-decisions", "3", "--workers", "0"], "--workers: must be >= 1, got 0\n"),
    (["--time-decisions", "3", "--workers", "-3"], "--workers: must be >= 1, got -3\n"),
])
def test_time_decisions_counts_out_of_range_are_refused(
        extra: list[str], message: str, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    """``--time-decisions -5`` timed nothing and exited 0; ``--workers 0`` timed the fleet's
    workers and ``--workers -3`` none at all ("3 requests x 0 workers"), printed as timings."""
    path = tmp_path / "routing.yaml"
    path.write_text("profiles: {default: {filters: [model, healthy], scorers: [inflight]}}\n")
    fleet = str(ROOT / "config" / "fleet.yaml")
    assert main(["validate", str(path), "--fleet", fleet, *extra]) == 2
    assert capsys.readouterr() == ("", message)
