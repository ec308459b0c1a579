"""The YAML examples in docs/policies.md and in every built-in plugin's docstring are valid."""

from __future__ import annotations

import importlib
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from policies.base import RoutingRequest
from policies.engine import PolicyEngine
from policies.loader import load_routing, parse_routing_text
from policies.registry import default_registry
from workers.fleet import load_fleet

ROOT = Path(__file__).resolve().parents[2]
MODEL = "meta-llama/Llama-3.1-8B-Instruct"
YAML_BLOCK = re.compile(r"```yaml\n(.*?)```", re.DOTALL)
BUILTIN_MODULES = (
    "policies.producers.tokens", "policies.filters.model", "policies.filters.healthy",
    "policies.filters.context_length", "policies.filters.labels",
    "policies.scorers.queue_depth", "policies.scorers.kv_usage", "policies.scorers.inflight",
    "policies.pickers.max_score", "policies.pickers.power_of_two",
    "policies.pickers.round_robin", "policies.pickers.random_choice",
)


def test_the_documented_routing_file_builds_against_the_default_fleet() -> None:
    text = (ROOT / "docs" / "policies.md").read_text()
    example = YAML_BLOCK.findall(text.split("## The file", 1)[1])[0]
    registry = default_registry()
    routing = parse_routing_text(example, registry)
    engine = PolicyEngine.build(routing, load_fleet(ROOT / "config" / "fleet.yaml"), registry)
    assert list(engine.profiles) == ["default", "long"]
    assert [r.name for r in routing.rules] == ["long-prompts", "gold-tenants", "sql"]


@pytest.mark.parametrize("module_name", BUILTIN_MODULES)
def test_docstring_example_is_valid(module_name: str, tmp_path: Path) -> None:
    doc = importlib.import_module(module_name).__doc__ or ""
    blocks = YAML_BLOCK.findall(doc)
    assert blocks, f"{module_name} has no YAML example"
    snippet: dict[str, Any] = yaml.safe_load(blocks[0])
    document: dict[str, Any] = {"profiles": {"default": {}}}
    if "producers" in snippet:
        document["producers"] = snippet["producers"]
        for spec in document["producers"]:          # the example names a model's tokenizer file
            for model, file_name in spec.get("params", {}).get("tokenizers", {}).items():
                (tmp_path / file_name).parent.mkdir(parents=True, exist_ok=True)
                spec["params"]["tokenizers"][model] = str(tmp_path / "tok.json")
        _word_level_tokenizer(tmp_path / "tok.json")
    else:
        document["profiles"]["default"] = snippet
    registry = default_registry()
    routing = parse_routing_text(yaml.safe_dump(document), registry)
    PolicyEngine.build(routing, load_fleet(ROOT / "config" / "fleet.yaml"), registry)


def _word_level_tokenizer(path: Path) -> None:
    import json
    path.write_text(json.dumps({
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": [],
        "normalizer": None, "pre_tokenizer": {"type": "Whitespace"}, "post_processor": None,
        "decoder": None, "model": {"type": "WordLevel", "vocab": {"[UNK]": 0},
                                   "unk_token": "[UNK]"}}))


def test_every_plugin_type_is_documented() -> None:
    docs = "".join(path.read_text() for path in sorted((ROOT / "docs").glob("*.md")))
    undocumented = [plugin.type_name for plugin in default_registry().types()
                    if f"`{plugin.type_name}`" not in docs]
    assert not undocumented, f"plugin types named nowhere in docs/*.md: {undocumented}"
    # the producers' parameter table of docs/policies.md lists each built-in producer
    text = (ROOT / "docs" / "policies.md").read_text()
    table = text.split("| type | provides | params (default) |", 1)[1].split("\n\n", 1)[0]
    listed = {row.split("`")[1] for row in table.splitlines()[2:]}
    assert {plugin.type_name for plugin in default_registry().types("producer")} - {
        "semantic"} <= listed      # (the semantic producer has docs/semantic.md)


PYTHON_BLOCK = re.compile(r"```python\n(.*?)```", re.DOTALL)


def test_the_documented_plugin_file_loads_from_the_documented_routing_file(
        tmp_path: Path, view: Any) -> None:
    """The freshness plugin of "Writing a plugin", saved where its routing file says."""
    section = (ROOT / "docs" / "policies.md").read_text().split("## Writing a plugin", 1)[1]
    (tmp_path / "plugins").mkdir()
    (tmp_path / "plugins" / "freshness.py").write_text(PYTHON_BLOCK.findall(section)[0])
    (tmp_path / "routing.yaml").write_text(YAML_BLOCK.findall(section)[0])
    routing = load_routing(tmp_path / "routing.yaml")
    assert [m.entry for m in routing.plugin_modules] == ["plugins/freshness.py"]
    engine = PolicyEngine.build(routing, load_fleet(ROOT / "config" / "fleet.yaml"), seed=0)
    views = [view("stale", staleness_s=4.0), view("fresh", staleness_s=0.1)]
    decision = engine.decide(RoutingRequest(request_id="r1", model=MODEL), views)
    assert decision.worker_id == "fresh"
    for module in routing.plugin_modules:
        del sys.modules[module.module_name]


def test_the_documented_plugin_file_passes_mypy_strict(tmp_path: Path) -> None:
    """The example is what a plugin author copies: untyped, it failed ``mypy --strict``, and
    a factory typed as its kind's protocol is what lets mypy check the plugin's methods."""
    section = (ROOT / "docs" / "policies.md").read_text().split("## Writing a plugin", 1)[1]
    plugin = tmp_path / "freshness.py"
    plugin.write_text(PYTHON_BLOCK.findall(section)[0])
    checked = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental", "--follow-imports",
         "silent", str(plugin)], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    # the same file with the method misnamed: mypy says the factory returns no Scorer
    plugin.write_text(plugin.read_text().replace("    def score(", "    def scores("))
    checked = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental", "--follow-imports",
         "silent", str(plugin)], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert checked.returncode == 1 and "Incompatible return value type" in checked.stdout, (
        checked.stdout)
