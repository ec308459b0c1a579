"""The trained example classifier: held-out accuracy, bad input, micro-batching, cache."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from policies.base import RoutingRequest
from policies.semantic.classifier import train_classifier
from policies.semantic.evaluation import evaluate
from policies.semantic.model import (
    SemanticModel,
    embed_all,
    field_text,
    load_examples,
    read_labelled_jsonl,
    read_labelled_rows,
)
from policies.semantic.producer import SemanticProducer
from policies.semantic.surface import classifier_inputs
from policies.semantic.text import clean_text
from tests.policies.semantic.semantic_support import EXAMPLE_ROUTING, HELDOUT

pytestmark = pytest.mark.semantic


def test_examples_respect_the_limit_and_are_not_in_the_heldout_set(
        example_model: SemanticModel) -> None:
    texts, labels = load_examples(example_model.section, EXAMPLE_ROUTING.parent)
    assert max(Counter(labels).values()) <= 20
    heldout = {json.loads(line)["text"].strip().lower()[:40]
               for line in HELDOUT.read_text().splitlines()}
    assert not {t.strip().lower()[:40] for t in texts} & heldout


def test_heldout_accuracy_is_at_least_90_percent(example_model: SemanticModel) -> None:
    section = example_model.section
    rows = read_labelled_jsonl(HELDOUT, "heldout")
    assert len(rows) >= 250 and {label for _, label in rows} == set(section.labels)
    texts, labels = load_examples(section, EXAMPLE_ROUTING.parent)
    cleaned = [clean_text(t, section.max_chars) for t, _ in rows]
    result = evaluate(section, example_model.report,
                      example_model.embed_inputs(texts), labels,
                      example_model.embed_inputs(cleaned),
                      [label for _, label in rows])
    assert result.accuracy >= 0.9
    assert set(result.methods) == {"logistic-regression", "nearest-centroid"}
    assert sum(map(sum, result.confusion())) == len(rows)


def test_each_class_gets_its_obvious_prompt(example_model: SemanticModel) -> None:
    prompts = {
        "code": "Write a Go function that parses a JSON config file and returns a struct.",
        "math": "What is the derivative of x^2 * sin(x)?",
        "support": "I was charged twice for order 5512, how do I get a refund?",
        "chat": "Suggest a relaxing weekend itinerary for a trip to Lisbon.",
    }
    for label, text in prompts.items():
        assert example_model.classify(text).label == label, text


async def test_an_unsure_request_gets_the_default_class_and_keeps_its_predicted_one(
        example_model: SemanticModel, monkeypatch: pytest.MonkeyPatch) -> None:
    # a threshold of 1 leaves the classifier unsure of everything: the default class is
    # given, and the probability recorded is that of the class it predicted, named beside it
    section = dataclasses.replace(example_model.section, threshold=1.0)
    monkeypatch.setattr(example_model, "section", section)
    producer = SemanticProducer("semantic", example_model)
    request = RoutingRequest(request_id="unsure", model="auto", messages=[
        {"role": "user", "content": "What is the derivative of x^2 * sin(x)?"}])
    await producer.produce_async(request, ())
    assert request.semantic_class == section.default_class == "chat"
    assert request.attributes["semantic_outcome"] == "unsure"
    assert request.attributes["semantic_predicted"] == "math"
    assert 0.0 < request.attributes["semantic_confidence"] < 1.0


BAD_INPUTS: list[tuple[str, Any]] = [
    ("empty", [{"role": "user", "content": ""}]),
    ("whitespace", [{"role": "user", "content": "   \n\t "}]),
    ("only images", [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]}]),
    ("only tool calls", [{"role": "assistant", "tool_calls": [
        {"id": "1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "1", "content": "result"}]),
    ("no messages", []),
]


@pytest.mark.parametrize(("case", "messages"), BAD_INPUTS, ids=[c for c, _ in BAD_INPUTS])
async def test_inputs_without_text_get_the_default_class(
        example_model: SemanticModel, case: str, messages: Any) -> None:
    producer = SemanticProducer("semantic", example_model)
    request = RoutingRequest(request_id=case, model="auto", messages=messages)
    assert not producer.should_offload(request)
    await producer.produce_async(request, ())
    assert request.semantic_class == "chat"
    assert request.attributes["semantic_outcome"] == "empty"


async def test_huge_and_invalid_prompts_are_classified_not_refused(
        example_model: SemanticModel) -> None:
    producer = SemanticProducer("semantic", example_model)
    huge = "def handler(event):\n    return parse(event)\n" * 25_000      # about 1 MB
    cases = {"huge": huge, "surrogate": "how do I cancel my order \ud800 please",
             "bytes": b"how do I cancel my order \xff\xfe please"}
    for name, content in cases.items():
        request = RoutingRequest(request_id=name, model="auto",
                                 messages=[{"role": "user", "content": content}])
        producer.produce(request, ())
        assert request.attributes["semantic_outcome"] in ("classified", "unsure"), name
        assert request.semantic_class in example_model.section.labels
    request = RoutingRequest(request_id="huge2", model="auto",
                             messages=[{"role": "user", "content": huge}])
    await producer.produce_async(request, ())
    assert request.semantic_class == "code"


async def test_int8_texts_resolve_one_by_one_and_repeat_text_hits_the_cache(
        example_model: SemanticModel) -> None:
    assert example_model.section.quantize   # int8 runs each text alone: no gathering wait
    section = dataclasses.replace(
        example_model.section,
        batch=dataclasses.replace(example_model.section.batch, window_ms=40.0))
    model = SemanticModel(section, example_model.embedder, example_model.classifier,
                          example_model.report)
    producer = SemanticProducer("semantic", model)
    texts = ["Sort a list in Rust", "Integrate x^3 from 0 to 2", "Where is my parcel 77?",
             "Tell me a story about a dragon"]
    requests = [RoutingRequest(request_id=str(i), model="auto",
                               messages=[{"role": "user", "content": t}])
                for i, t in enumerate(texts)]
    try:
        await asyncio.gather(*(producer.produce_async(r, ()) for r in requests))
        assert model.batcher.stats.batch_sizes == [1, 1, 1, 1]
        again = RoutingRequest(request_id="again", model="auto",
                               messages=[{"role": "user", "content": texts[0]}])
        assert not producer.should_offload(again)      # cached: answered inline
        producer.produce(again, ())
    finally:
        model.close()
    assert model.batcher.stats.batch_sizes == [1, 1, 1, 1]
    assert model.batcher.cache.hits >= 1
    assert again.semantic_class == requests[0].semantic_class == "code"
    assert all(isinstance(r.attributes["semantic_classify_s"], float) for r in requests)


def test_low_confidence_goes_to_the_default_class(example_model: SemanticModel) -> None:
    strict = SemanticModel(dataclasses.replace(example_model.section, threshold=1.0),
                           example_model.embedder, example_model.classifier,
                           example_model.report)
    try:
        result = strict.classify("Write a Python function that reverses a string")
    finally:
        strict.close()
    assert result.outcome == "unsure" and result.label == "chat"
    assert result.predicted == "code"


def test_the_digit_feature_reaches_the_classifier(example_model: SemanticModel) -> None:
    """With ``digit_weight`` the classifier is trained on the embedding plus that column, a
    terse numeric question becomes more likely math than without it, and a model of that
    section classifies through the same column."""
    section = dataclasses.replace(example_model.section, digit_weight=4.0)
    texts, labels = load_examples(section, EXAMPLE_ROUTING.parent)
    embeddings = embed_all(example_model.embedder, texts)
    without, _ = train_classifier(embeddings, labels, "logistic-regression",
                                  tuned_encoder=True)
    with_digits, report = train_classifier(classifier_inputs(embeddings, texts, 4.0), labels,
                                           "logistic-regression", tuned_encoder=True)
    assert with_digits.weights.shape[1] == embeddings.shape[1] + 1
    question = "Order 17, -3.5, 2/9, 0.04 and 88 from the largest to the smallest."
    vector = embed_all(example_model.embedder, [question])
    math_with = with_digits.probabilities(classifier_inputs(vector, [question], 4.0))[
        0, with_digits.labels.index("math")]
    assert math_with > without.probabilities(vector)[0, without.labels.index("math")]
    model = SemanticModel(section, example_model.embedder, with_digits, report)
    try:
        result = model.classify(question)
    finally:
        model.close()
    assert result.predicted == with_digits.labels[int(np.argmax(
        with_digits.probabilities(classifier_inputs(vector, [question], 4.0))[0]))]


def test_labelled_rows_keep_their_line_and_fields(tmp_path: Path) -> None:
    data = tmp_path / "data.jsonl"
    data.write_text('\n{"text": "a", "label": "code", "source": "x", "n": 3}\n\n'
                    '{"text": "b", "label": "chat"}\n')
    rows = read_labelled_rows(data, "--data")
    assert [(r.line, r.text, r.label) for r in rows] == [(2, "a", "code"), (4, "b", "chat")]
    assert [field_text(r, "source") for r in rows] == ["x", "(none)"]
    assert field_text(rows[0], "n") == "3"
    assert read_labelled_jsonl(data, "--data") == [("a", "code"), ("b", "chat")]


def test_a_class_without_examples_or_an_unknown_label_is_refused_naming_it(
        tmp_path: Path) -> None:
    """A class with no examples was accepted and never chosen, its rules never matching."""
    from policies.errors import RoutingConfigError
    from policies.semantic.section import parse_semantic_section

    examples = tmp_path / "examples.jsonl"
    examples.write_text('{"text": "sue my landlord", "label": "legal"}\n')
    raw = {"default_class": "chat", "examples_file": "examples.jsonl",
           "classes": {"chat": {"examples": ["hi"]}, "code": {"examples": ["def f"]},
                       "legal": {}}}
    texts, labels = load_examples(parse_semantic_section(raw, "semantic"), tmp_path)
    assert labels == ["chat", "code", "legal"]           # its examples from the file: fine
    assert texts[-1] == "sue my landlord"
    examples.write_text('\n{"text": "sue my landlord", "label": "legl"}\n')
    with pytest.raises(RoutingConfigError) as info:
        load_examples(parse_semantic_section(raw, "semantic"), tmp_path)
    assert str(info.value) == (f"semantic.examples_file: {examples} line 2: label 'legl' "
                               "is not a declared class (declared: chat, code, legal)")
    examples.write_text("")
    with pytest.raises(RoutingConfigError) as info:
        load_examples(parse_semantic_section(raw, "semantic"), tmp_path)
    assert str(info.value) == ("semantic.classes.legal: no examples, in the YAML or in "
                               "examples_file: the classifier could never choose it, nor a "
                               "rule on it match")
