"""Classes from embeddings: logistic regression or nearest centroid, chosen by cross-validation.

``train_classifier(vectors, labels, method)`` fits on the labelled example embeddings. With
``method="auto"`` both candidates are scored by stratified k-fold cross-validation on those
examples (k = min(5, smallest class size)) and the one with the higher mean accuracy is kept
(a tie keeps nearest centroid, the simpler one; on an encoder fine-tuned on the examples,
logistic regression: see ``train_classifier``); the ``TrainingReport`` carries both scores.

Prediction is plain numpy on the fitted parameters (no scikit-learn call per request):

* logistic regression (multinomial, L2, ``C=LOGREG_C``): softmax of ``x·Wᵀ + b``;
* nearest centroid: cosine similarity to each class's normalised mean embedding, turned into
  probabilities by a softmax with temperature ``CENTROID_TEMPERATURE``.

``classify`` returns the most probable class and its probability; the caller applies the
confidence threshold.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Literal

import numpy as np
import numpy.typing as npt

ClassifierMethod = Literal["auto", "logistic-regression", "nearest-centroid"]
METHODS: tuple[str, ...] = ("logistic-regression", "nearest-centroid")
LOGREG_C = 10.0
CENTROID_TEMPERATURE = 0.05
MAX_FOLDS = 5

Matrix = npt.NDArray[np.float32]


@dataclass(frozen=True, slots=True)
class LinearClassifier:
    """softmax(x·Wᵀ + b) over ``labels``; also how nearest centroid is evaluated."""

    method: str
    labels: tuple[str, ...]
    weights: Matrix        # (classes, dim)
    bias: Matrix           # (classes,)
    scale: float = 1.0     # logits are multiplied by this before the softmax

    def probabilities(self, vectors: Matrix) -> Matrix:
        logits = (np.atleast_2d(vectors) @ self.weights.T + self.bias) * self.scale
        logits -= logits.max(axis=1, keepdims=True)
        exp = np.exp(logits)
        result: Matrix = (exp / exp.sum(axis=1, keepdims=True)).astype(np.float32)
        return result

    def classify(self, vector: Matrix) -> tuple[str, float]:
        probs = self.probabilities(vector)[0]
        best = int(np.argmax(probs))
        return self.labels[best], float(probs[best])

    def predict(self, vectors: Matrix) -> list[str]:
        return [self.labels[i] for i in np.argmax(self.probabilities(vectors), axis=1)]


@dataclass(frozen=True, slots=True)
class TrainingReport:
    """What training found: cross-validated accuracy per method (None: too few examples)."""

    chosen: str
    cv_accuracy: Mapping[str, float | None]
    folds: int
    examples_per_class: Mapping[str, int]
    tuned_encoder: bool = False     # the encoder was fine-tuned on these very examples

    def summary(self) -> str:
        scores = ", ".join(f"{m} {_pct(a)}" for m, a in self.cv_accuracy.items())
        if self.tuned_encoder:
            return (f"chose {self.chosen} ({self.folds}-fold CV accuracy: {scores}; the "
                    f"encoder was tuned on every example, so this cannot choose)")
        return f"chose {self.chosen} ({self.folds}-fold CV accuracy: {scores})"


def fit(method: str, vectors: Matrix, labels: Sequence[str]) -> LinearClassifier:
    """Fit one method on all the given examples."""
    classes = tuple(sorted(set(labels)))
    if len(classes) < 2:
        raise ValueError("semantic classification needs examples of at least two classes")
    y = np.array([classes.index(label) for label in labels])
    if method == "nearest-centroid":
        centroids = np.stack([vectors[y == i].mean(axis=0) for i in range(len(classes))])
        centroids /= np.linalg.norm(centroids, axis=1, keepdims=True).clip(min=1e-9)
        return LinearClassifier(method, classes, centroids.astype(np.float32),
                                np.zeros(len(classes), dtype=np.float32),
                                scale=1.0 / CENTROID_TEMPERATURE)
    if method == "logistic-regression":
        from sklearn.linear_model import LogisticRegression

        model = LogisticRegression(C=LOGREG_C, max_iter=2000).fit(vectors, y)
        weights, bias = model.coef_, model.intercept_
        if len(classes) == 2:   # binary: sklearn keeps one row; softmax([0, z]) == sigmoid(z)
            weights = np.vstack([np.zeros_like(weights), weights])
            bias = np.concatenate([[0.0], bias])
        return LinearClassifier(method, classes, weights.astype(np.float32),
                                bias.astype(np.float32))
    raise ValueError(f"unknown classifier method {method!r}")


def cross_validate(method: str, vectors: Matrix, labels: Sequence[str],
                   folds: int, seed: int = 0) -> float:
    from sklearn.model_selection import StratifiedKFold

    y = np.array(labels)
    correct = 0
    splitter = StratifiedKFold(n_splits=folds, shuffle=True, random_state=seed)
    for train_idx, test_idx in splitter.split(vectors, y):
        model = fit(method, vectors[train_idx], [labels[i] for i in train_idx])
        predicted = model.predict(vectors[test_idx])
        correct += sum(p == t for p, t in zip(predicted, y[test_idx], strict=True))
    return correct / len(labels)


def train_classifier(vectors: Matrix, labels: Sequence[str],
                     method: ClassifierMethod = "auto", *,
                     tuned_encoder: bool = False) -> tuple[LinearClassifier, TrainingReport]:
    """Fit the classifier to use, and report both methods' cross-validated accuracy.

    ``tuned_encoder``: the embeddings come from an encoder fine-tuned on these examples
    (``policies.semantic.fine_tune``). Every held-out fold was then part of the encoder's
    training, so cross-validation scores both methods near 100 % and cannot choose; ``auto``
    takes logistic regression, the head SetFit trains on its tuned encoder."""
    counts = {label: labels.count(label) for label in sorted(set(labels))}
    folds = min(MAX_FOLDS, min(counts.values())) if counts else 0
    scores: dict[str, float | None] = {
        m: cross_validate(m, vectors, labels, folds) if folds >= 2 and len(counts) >= 2 else None
        for m in METHODS}
    if method == "auto" and tuned_encoder:
        chosen = "logistic-regression"
    elif method == "auto":
        lr, nc = scores["logistic-regression"], scores["nearest-centroid"]
        chosen = "logistic-regression" if lr is not None and nc is not None and lr > nc \
            else "nearest-centroid"
    else:
        chosen = method
    report = TrainingReport(chosen, MappingProxyType(scores), folds, MappingProxyType(counts),
                            tuned_encoder)
    return fit(chosen, vectors, labels), report


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:.1f}%"
