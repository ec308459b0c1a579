"""sim/semantic_policies.py and the simulator's text: ``kvroute sim`` with semantic classes."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from router.cli import main
from sim.semantic_policies import text_notes, train_ahead
from sim.traces import load_trace

REPO_ROOT = Path(__file__).resolve().parents[2]
SEMANTIC_FLEET = REPO_ROOT / "config/examples/semantic-fleet.yaml"

PROMPTS = {
    "code": ["Write a Python function that reverses a linked list in place.",
             "Fix this JavaScript: const x = [1,2,3].mapp(v => v * 2);"],
    "math": ["What is the integral of x squared from 0 to 3?",
             "Solve for x: 3x + 7 = 22."],
    "support": ["My order never arrived and I want a refund for it.",
                "I was charged twice for my subscription this month, please help."],
    "chat": ["Tell me a fun fact about octopuses.",
             "What is a good name for a golden retriever puppy?"],
}
MODEL_OF = {"code": "coder", "math": "math", "support": "general", "chat": "general"}


def semantic_routing(path: Path, fine_tune: str = "") -> Path:
    """A routing file sending each class to its model (no fine-tuning unless given)."""
    classes = "\n".join(f"    {name}:\n      examples: {json.dumps(examples)}"
                        for name, examples in PROMPTS.items())
    adapter = {"support": ", adapter: support"}        # loaded by general-0 only
    rules = "\n".join(f"  - {{name: {name}, when: {{class: {name}}}, then: {{model: "
                      f"{MODEL_OF[name]}{adapter.get(name, '')}}}}}" for name in PROMPTS)
    path.write_text(f"semantic:\n  default_class: chat\n  threshold: 0.0\n{fine_tune}"
                    f"  classes:\n{classes}\n"
                    "profiles:\n  default:\n    filters: [{type: model}, {type: healthy}]\n"
                    "    scorers: [{type: queue-depth}]\n"
                    f"rules:\n{rules}\n")
    return path


def generic_trace(path: Path, rows: list[dict[str, object]]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def test_requests_without_text_are_said_to_take_the_default_class(tmp_path: Path) -> None:
    routing = str(semantic_routing(tmp_path / "semantic.yaml"))
    lengths = load_trace(generic_trace(tmp_path / "lengths.jsonl", [
        {"arrival_s": 0.1 * i, "prompt_tokens": 100, "output_tokens": 10} for i in range(4)]))
    assert text_notes([routing, "round-robin"], lengths) == [
        f"{routing}: the trace's requests carry no text (only a generic trace's \"prompt\" "
        "rows do): each is classified as the default class 'chat', and rules on other "
        "classes never match"]
    mixed = load_trace(generic_trace(tmp_path / "mixed.jsonl", [
        {"arrival_s": 0.0, "prompt": "Solve for x: 2x = 4.", "output_tokens": 10},
        {"arrival_s": 0.1, "prompt_tokens": 100, "output_tokens": 10}]))
    assert text_notes([routing], mixed) == [
        f"{routing}: 1 of the trace's 2 requests carry no text (a \"prompt\"): they are "
        "classified as the default class 'chat'"]
    texts = load_trace(generic_trace(tmp_path / "texts.jsonl", [
        {"arrival_s": 0.0, "prompt": "Solve for x: 2x = 4.", "output_tokens": 10}]))
    assert text_notes([routing], texts) == []
    assert text_notes(["round-robin"], lengths) == []       # no semantic classes: nothing


@pytest.mark.semantic
def test_each_class_of_a_text_trace_is_simulated_on_its_models_workers(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The simulator passed token ids as the prompt: every request took the default class."""
    routing = semantic_routing(tmp_path / "semantic.yaml")
    rows: list[dict[str, object]] = []
    for turn in range(3):
        for name, prompts in PROMPTS.items():
            for prompt in prompts:
                rows.append({"arrival_s": 0.05 * len(rows), "prompt": prompt,
                             "output_tokens": 20, "tenant": f"{name}-{turn}"})
    trace = generic_trace(tmp_path / "trace.jsonl", rows)
    out = tmp_path / "out"
    assert main(["sim", "--trace", str(trace), "--fleet", str(SEMANTIC_FLEET), "--policies",
                 f"{routing},round-robin", "--out", str(out)]) == 0
    err = capsys.readouterr().err
    assert "carry no text" not in err
    assert f"unless a rule of {routing} sends it to another model" in err
    from workers.fleet import load_fleet
    models = {w.info.id: w.info.models for w in load_fleet(SEMANTIC_FLEET).workers}
    with (out / "requests" / "semantic.csv").open() as fh:
        records = list(csv.DictReader(fh))
    assert len(records) == len(rows)
    for record in records:
        name = str(rows[int(record["index"])]["tenant"]).split("-")[0]
        assert MODEL_OF[name] in models[record["worker_id"]], (name, record)
        if name == "support":      # the adapter's worker: its view lists it, as live
            assert record["worker_id"] == "general-0", record
    with (out / "requests" / "round-robin.csv").open() as fh:     # peers see no classes
        assert {models[r["worker_id"]][0] for r in csv.DictReader(fh)} == {"coder"}


@pytest.mark.semantic
def test_an_encoder_to_fine_tune_is_trained_ahead_with_a_bar_once(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("KVROUTE_CACHE_DIR", str(tmp_path / "cache"))
    routing = str(semantic_routing(tmp_path / "tuned.yaml", fine_tune=(
        "  max_tokens: 32\n  fine_tune: {pairs_per_example: 1, batch_size: 8}\n")))
    train_ahead([routing, "round-robin"])
    assert f"fine-tuning the encoder of {routing}" in capsys.readouterr().err
    assert list((tmp_path / "cache" / "semantic").glob("*-mix0.5.safetensors"))
    train_ahead([routing])                       # cached: nothing trained, no bar
    assert "fine-tuning" not in capsys.readouterr().err
