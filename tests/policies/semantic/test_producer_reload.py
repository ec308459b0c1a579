"""On reload the semantic producer keeps the embedding cache only when the embeddings are
the same: same text window and arithmetic, and the same encoder weights."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest

from policies.semantic.cache import text_key
from policies.semantic.classifier import train_classifier
from policies.semantic.model import SemanticModel
from policies.semantic.producer import SemanticProducer
from policies.semantic.section import SemanticSection, parse_semantic_section

CLASSES = {"code": {"examples": ["write a function"]}, "chat": {"examples": ["hello"]}}


class AxisEmbedder:
    """Pure-logic stand-in for the encoder: 'write ...' on one axis, anything else on another."""

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        rows = [[1.0, 0.0] if text.startswith("write") else [0.0, 1.0] for text in texts]
        return np.array(rows, dtype=np.float32).reshape(len(texts), 2)


def model(section: SemanticSection, weights: Path | None) -> SemanticModel:
    vectors = AxisEmbedder().embed(["write a", "write b", "hi", "hello"])
    classifier, report = train_classifier(vectors, ["code", "code", "chat", "chat"],
                                          "nearest-centroid")
    return SemanticModel(section, AxisEmbedder(), classifier, report, weights)


@pytest.mark.parametrize(("change", "weights", "kept"), [
    ({}, None, True),
    ({"threshold": 0.9}, None, True),                # the classifier, not the embeddings
    ({"max_tokens": 32}, None, False),
    ({"tail_tokens": 20}, None, False),              # a long text's window changes
    ({"fine_tune": {}}, Path("/cache/minilm-tuned-b.safetensors"), False),
])
def test_the_cache_survives_a_reload_only_with_the_same_embeddings(
        change: dict[str, object], weights: Path | None, kept: bool) -> None:
    old_section = parse_semantic_section({"default_class": "chat", "classes": CLASSES},
                                         "semantic")
    new_section = parse_semantic_section({"default_class": "chat", "classes": CLASSES,
                                          **change}, "semantic")
    old = SemanticProducer("semantic", model(old_section, None))
    new = SemanticProducer("semantic", model(new_section, weights))
    try:
        assert old.model.classify("write a parser").label == "code"
        assert old.model.batcher.cache.get(text_key("write a parser")) is not None
        new.inherit_state(old)
        cached = new.model.batcher.cache.get(text_key("write a parser"))
        assert (cached is not None) is kept
    finally:
        new.close()
        old.close()


def test_two_fine_tuned_encoders_do_not_share_a_cache() -> None:
    section = parse_semantic_section({"default_class": "chat", "classes": CLASSES,
                                      "fine_tune": {}}, "semantic")
    old = SemanticProducer("semantic", model(section, Path("/c/minilm-tuned-a.safetensors")))
    same = SemanticProducer("semantic", model(section, Path("/c/minilm-tuned-a.safetensors")))
    other = SemanticProducer("semantic", model(section, Path("/c/minilm-tuned-b.safetensors")))
    try:
        old.model.classify("write a parser")
        same.inherit_state(old)
        assert same.model.batcher.cache is old.model.batcher.cache
        other.inherit_state(same)
        assert other.model.batcher.cache is not same.model.batcher.cache
    finally:
        for producer in (old, same, other):
            producer.close()
