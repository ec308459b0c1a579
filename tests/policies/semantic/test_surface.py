"""The digit feature appended to embeddings: its value, its column, its weight."""

from __future__ import annotations

import math

import numpy as np
import pytest

from policies.semantic.surface import classifier_inputs, digit_share


@pytest.mark.parametrize(("text", "share"), [
    ("", 0.0),
    ("no digits at all", 0.0),
    ("1234", 1.0),
    ("a1b2", 0.5),
    ("order #5512", 4 / 11),
    ("٣ is an Arabic-Indic three", 0.0),     # ASCII digits only
    ("é9", 0.5),                             # characters, not bytes
])
def test_digit_share_counts_ascii_digits_per_character(text: str, share: float) -> None:
    assert digit_share(text) == pytest.approx(share)


def test_the_feature_is_the_weighted_square_root_in_a_last_column() -> None:
    vectors = np.arange(6, dtype=np.float32).reshape(2, 3)
    inputs = classifier_inputs(vectors, ["ab12", "none"], 4.0)
    assert inputs.shape == (2, 4) and inputs.dtype == np.float32
    np.testing.assert_array_equal(inputs[:, :3], vectors)
    assert inputs[0, 3] == pytest.approx(4.0 * math.sqrt(0.5))
    assert inputs[1, 3] == 0.0


def test_weight_zero_leaves_the_embeddings_as_they_are() -> None:
    vectors = np.ones((2, 3), dtype=np.float32)
    assert classifier_inputs(vectors, ["1", "2"], 0.0) is vectors


def test_one_texts_single_vector_becomes_one_row() -> None:
    inputs = classifier_inputs(np.zeros(3, dtype=np.float32), ["42"], 2.0)
    assert inputs.shape == (1, 4) and inputs[0, 3] == pytest.approx(2.0)


def test_a_text_count_that_does_not_match_the_rows_is_refused() -> None:
    with pytest.raises(ValueError, match="3 texts for 2 embeddings"):
        classifier_inputs(np.zeros((2, 3), dtype=np.float32), ["a", "b", "c"], 1.0)
