"""How a prompt is written, next to what it says: a digit feature appended to its embedding.

A sentence encoder reads a text's meaning and barely sees its surface. "Sort -0.1, 0, 1/111714
in ascending order." embeds near programming requests ("sort", "ascending order") and "What is
138 minutes after 6:28 AM?" near small talk, though nearly every character of the first is a
number. ``semantic.digit_weight`` (w) appends one value to each embedding before the
classifier, in training and at request time alike:

    w × √(share of the text's characters that are ASCII digits)

The square root spreads the small shares of ordinary prose (a year, an order number) apart
from zero, and the unit-length embedding keeps w on the same scale for every encoder. The
classifier learns from the examples how much the value counts for each class; ``0`` (the
default) appends nothing. What it does on the labelled sets: ``docs/semantic-accuracy.md``,
"Digits next to the embedding".
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

Matrix = npt.NDArray[np.float32]

_WITHOUT_DIGITS = str.maketrans("", "", "0123456789")


def digit_share(text: str) -> float:
    """The share of ``text``'s characters that are ASCII digits (0 for an empty text)."""
    if not text:
        return 0.0
    return (len(text) - len(text.translate(_WITHOUT_DIGITS))) / len(text)


def classifier_inputs(vectors: Matrix, texts: Sequence[str], digit_weight: float) -> Matrix:
    """``vectors`` (one embedding per text, a row each; one text's may be a single vector)
    with the digit feature of each text appended as a last column; ``vectors`` themselves
    when ``digit_weight`` is 0."""
    if digit_weight == 0.0:
        return vectors
    rows = np.atleast_2d(vectors)
    if len(texts) != len(rows):
        raise ValueError(f"{len(texts)} texts for {len(rows)} embeddings")
    column = np.array([digit_weight * math.sqrt(digit_share(text)) for text in texts],
                      dtype=np.float32).reshape(len(texts), 1)
    result: Matrix = np.hstack([rows.astype(np.float32, copy=False), column])
    return result
