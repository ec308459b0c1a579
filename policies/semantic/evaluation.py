"""Accuracy of a semantic configuration on labelled prompts, for ``kvroute semantic eval``.

Both classifier methods are trained on the configuration's examples and scored on the data;
the one the configuration would use (``classifier: auto`` → the better cross-validated one)
is reported with its confusion matrix. Rows of the data whose label is neither a class nor
the default class are refused: they could never be right.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType

import numpy as np
import numpy.typing as npt

from policies.semantic.classifier import METHODS, TrainingReport, fit
from policies.semantic.section import SemanticSection

Matrix = npt.NDArray[np.float32]


@dataclass(frozen=True, slots=True)
class MethodResult:
    method: str
    accuracy: float              # after the confidence threshold
    accuracy_no_threshold: float
    unsure: int                  # prompts sent to the default class by the threshold
    predictions: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class EvaluationResult:
    labels: tuple[str, ...]
    truth: tuple[str, ...]
    chosen: str
    training: TrainingReport
    methods: Mapping[str, MethodResult]

    @property
    def accuracy(self) -> float:
        return self.methods[self.chosen].accuracy

    def confusion(self) -> list[list[int]]:
        """Rows: true class; columns: predicted class, both in ``labels`` order."""
        index = {label: i for i, label in enumerate(self.labels)}
        matrix = [[0] * len(self.labels) for _ in self.labels]
        for true, predicted in zip(self.truth, self.methods[self.chosen].predictions,
                                   strict=True):
            matrix[index[true]][index[predicted]] += 1
        return matrix


def evaluate(section: SemanticSection, training: TrainingReport, example_vectors: Matrix,
             example_labels: Sequence[str], data_vectors: Matrix,
             data_labels: Sequence[str]) -> EvaluationResult:
    labels = section.labels
    unknown = sorted(set(data_labels) - set(labels))
    if unknown:
        raise ValueError(f"data labels not among the classes ({', '.join(labels)}): "
                         f"{', '.join(unknown)}")
    results: dict[str, MethodResult] = {}
    for method in METHODS:
        model = fit(method, example_vectors, example_labels)
        probs = model.probabilities(data_vectors)
        best = np.argmax(probs, axis=1)
        raw = [model.labels[i] for i in best]
        final = [label if probs[row, best[row]] >= section.threshold else section.default_class
                 for row, label in enumerate(raw)]
        results[method] = MethodResult(
            method=method,
            accuracy=_accuracy(final, data_labels),
            accuracy_no_threshold=_accuracy(raw, data_labels),
            unsure=sum(f != r for f, r in zip(final, raw, strict=True)),
            predictions=tuple(final))
    return EvaluationResult(labels, tuple(data_labels), training.chosen, training,
                            MappingProxyType(results))


def format_result(result: EvaluationResult) -> str:
    lines = [f"prompts: {len(result.truth)}",
             f"training: {result.training.summary()}"]
    for method, r in result.methods.items():
        mark = "*" if method == result.chosen else " "
        lines.append(f"{mark} {method:20s} accuracy {100 * r.accuracy:5.1f}%  "
                     f"(without threshold {100 * r.accuracy_no_threshold:5.1f}%, "
                     f"unsure -> default: {r.unsure})")
    lines.append(f"accuracy: {100 * result.accuracy:.1f}% ({result.chosen})")
    width = max(8, *(len(label) for label in result.labels))
    lines.append("confusion matrix (rows: true class, columns: predicted)")
    lines.append(" " * width + "".join(f"{label:>{width}}" for label in result.labels))
    for label, row in zip(result.labels, result.confusion(), strict=True):
        lines.append(f"{label:<{width}}" + "".join(f"{n:>{width}}" for n in row))
    return "\n".join(lines)


def _accuracy(predicted: Sequence[str], truth: Sequence[str]) -> float:
    if not truth:
        return 0.0
    return sum(p == t for p, t in zip(predicted, truth, strict=True)) / len(truth)
