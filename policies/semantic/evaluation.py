"""Accuracy of a semantic configuration on labelled prompts, for ``kvroute semantic eval``.

Both classifier methods are trained on the configuration's examples and scored on the data;
the one the configuration would use (``classifier: auto`` → the better cross-validated one)
is reported with its confusion matrix, each class's precision and recall, and, on request,
the prompts it got wrong with its confidence in each answer (the classes whose examples to
revise) and the accuracy per group of rows (a source, say), worst first, and the accuracy the
chosen classifier would have at other confidence thresholds (from the same probabilities);
for several data files, their accuracies side by side with their mean. Rows
of the data whose label is neither a class nor the default class are refused: they could never
be right.
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
    confidences: tuple[float, ...]   # the classifier's probability of its top class, per row
    top_classes: tuple[str, ...]     # that class, per row (the prediction unless unsure)


@dataclass(frozen=True, slots=True)
class ClassResult:
    label: str
    prompts: int          # rows of this true class
    predicted: int        # rows predicted as this class
    correct: int

    @property
    def precision(self) -> float | None:
        """Share of the rows predicted as this class that are (None: none predicted)."""
        return self.correct / self.predicted if self.predicted else None

    @property
    def recall(self) -> float | None:
        """Share of this class's rows predicted as it (None: the data has none)."""
        return self.correct / self.prompts if self.prompts else None


@dataclass(frozen=True, slots=True)
class Miss:
    row: int              # 0-based index of the data's row
    truth: str
    predicted: str
    confidence: float     # the classifier's probability of ``top``
    top: str              # its most likely class: ``predicted`` unless the threshold said unsure


@dataclass(frozen=True, slots=True)
class GroupResult:
    name: str             # the rows' value of the grouping field
    prompts: int
    correct: int
    labels: tuple[str, ...]   # the true classes of its rows, in the configuration's order

    @property
    def accuracy(self) -> float:
        return self.correct / self.prompts if self.prompts else 0.0


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

    def per_class(self) -> list[ClassResult]:
        """Each class's prompts, predictions and correct ones, in ``labels`` order."""
        matrix = self.confusion()
        return [ClassResult(label, sum(matrix[i]), sum(row[i] for row in matrix), matrix[i][i])
                for i, label in enumerate(self.labels)]

    def misses(self) -> list[Miss]:
        """The rows the chosen classifier got wrong: by true class (``labels`` order), the
        most confident first (the errors its examples invite most strongly)."""
        chosen = self.methods[self.chosen]
        order = {label: i for i, label in enumerate(self.labels)}
        wrong = [Miss(row, true, predicted, confidence, top)
                 for row, (true, predicted, confidence, top) in enumerate(zip(
                     self.truth, chosen.predictions, chosen.confidences, chosen.top_classes,
                     strict=True))
                 if true != predicted]
        return sorted(wrong, key=lambda m: (order[m.truth], -m.confidence, m.row))

    def by_group(self, groups: Sequence[str]) -> list[GroupResult]:
        """The chosen classifier's accuracy per group (``groups``: each row's group, in data
        order), the least accurate first, then the larger, then by name."""
        if len(groups) != len(self.truth):
            raise ValueError(f"{len(groups)} groups for {len(self.truth)} rows")
        prompts: dict[str, int] = {}
        correct: dict[str, int] = {}
        labels: dict[str, set[str]] = {}
        for group, true, predicted in zip(groups, self.truth,
                                          self.methods[self.chosen].predictions, strict=True):
            prompts[group] = prompts.get(group, 0) + 1
            correct[group] = correct.get(group, 0) + (true == predicted)
            labels.setdefault(group, set()).add(true)
        results = [GroupResult(name, prompts[name], correct[name],
                               tuple(label for label in self.labels if label in labels[name]))
                   for name in prompts]
        return sorted(results, key=lambda g: (g.accuracy, -g.prompts, g.name))


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
        confidences = [float(probs[row, best[row]]) for row in range(len(raw))]
        final = _thresholded(confidences, raw, section.threshold, section.default_class)
        results[method] = MethodResult(
            method=method,
            accuracy=_accuracy(final, data_labels),
            accuracy_no_threshold=_accuracy(raw, data_labels),
            unsure=_moved(final, raw),
            predictions=tuple(final),
            confidences=tuple(confidences),
            top_classes=tuple(raw))
    return EvaluationResult(labels, tuple(data_labels), training.chosen, training,
                            MappingProxyType(results))


@dataclass(frozen=True, slots=True)
class ThresholdResult:
    threshold: float
    accuracy: float
    unsure: int           # prompts the threshold sends to the default class from another


def at_thresholds(result: EvaluationResult, thresholds: Sequence[float],
                  default_class: str) -> list[ThresholdResult]:
    """The chosen classifier's accuracy had the confidence threshold been each of
    ``thresholds``: a prompt whose top class has a lower probability goes to
    ``default_class``, as the router would send it."""
    chosen = result.methods[result.chosen]
    out: list[ThresholdResult] = []
    for threshold in thresholds:
        final = _thresholded(chosen.confidences, chosen.top_classes, threshold, default_class)
        out.append(ThresholdResult(threshold, _accuracy(final, result.truth),
                                   _moved(final, chosen.top_classes)))
    return out


def format_thresholds(rows: Sequence[ThresholdResult], method: str, default_class: str) -> str:
    """``at_thresholds``' rows as the table ``kvroute semantic eval --thresholds`` prints."""
    lines = [f"accuracy at other thresholds ({method}; unsure -> {default_class})",
             "threshold  accuracy  unsure -> default"]
    lines += [f"{row.threshold:9.2f}  {100 * row.accuracy:7.1f}%  {row.unsure:6d}"
              for row in rows]
    return "\n".join(lines)


@dataclass(frozen=True, slots=True)
class FileScore:
    """One data file's result, for the side-by-side table of several files."""

    path: str
    prompts: int
    correct: int
    threshold_accuracies: tuple[float, ...] = ()    # accuracy at each of ``--thresholds``

    @property
    def accuracy(self) -> float:
        return self.correct / self.prompts

    @classmethod
    def of(cls, path: str, result: EvaluationResult,
           swept: Sequence[ThresholdResult] = ()) -> FileScore:
        return cls(path, len(result.truth),
                   _correct(result.methods[result.chosen].predictions, result.truth),
                   tuple(row.accuracy for row in swept))


def mean_accuracy(summary: Sequence[FileScore]) -> float:
    """The unweighted mean of the files' accuracies (each file counts once)."""
    return sum(score.accuracy for score in summary) / len(summary)


def format_summary(summary: Sequence[FileScore], method: str,
                   thresholds: Sequence[float] = ()) -> str:
    """The files' accuracies side by side (and at each of ``thresholds``), their mean, and the
    accuracy over all prompts."""
    width = max(len("file"), *(len(score.path) for score in summary))
    extra = "".join(f"  {f'at {t:.2f}':>8}" for t in thresholds)
    lines = [f"== accuracy per data file ({method})",
             f"{'file':<{width}}  prompts  correct  accuracy{extra}"]
    for score in summary:
        swept = "".join(f"  {100 * a:7.1f}%" for a in score.threshold_accuracies)
        lines.append(f"{score.path:<{width}}  {score.prompts:7d}  {score.correct:7d}  "
                     f"{100 * score.accuracy:7.1f}%{swept}")
    means = "".join(
        f"  {100 * sum(s.threshold_accuracies[k] for s in summary) / len(summary):7.1f}%"
        for k in range(len(thresholds)))
    lines.append(f"{f'mean of {len(summary)} files':<{width}}  {'':7}  {'':7}  "
                 f"{100 * mean_accuracy(summary):7.1f}%{means}")
    total = sum(score.prompts for score in summary)
    right = sum(score.correct for score in summary)
    lines.append(f"{'all prompts':<{width}}  {total:7d}  {right:7d}  {100 * right / total:7.1f}%")
    return "\n".join(lines)


def format_result(result: EvaluationResult, texts: Sequence[str] = (), misses: int = 0,
                  width_chars: int = 100, groups: Sequence[str] | None = None,
                  group_field: str = "group", lines: Sequence[int] | None = None) -> str:
    """The report ``kvroute semantic eval`` prints; with ``texts`` (the data's, in order) and
    ``misses`` > 0, also up to that many misclassified prompts, cut to ``width_chars``, each
    named by its line in the data file (``lines``, per row; row + 1 without); with ``groups``
    (each row's value of ``group_field``), the accuracy per group."""
    line_of = _line_numbers(len(result.truth), lines)
    out = [f"prompts: {len(result.truth)}", f"training: {result.training.summary()}"]
    for method, r in result.methods.items():
        mark = "*" if method == result.chosen else " "
        out.append(f"{mark} {method:20s} accuracy {100 * r.accuracy:5.1f}%  "
                   f"(without threshold {100 * r.accuracy_no_threshold:5.1f}%, "
                   f"unsure -> default: {r.unsure})")
    out.append(f"accuracy: {100 * result.accuracy:.1f}% ({result.chosen})")
    width = max(8, *(len(label) for label in result.labels))
    column = width + 2          # two spaces at least between class names side by side
    out.append("confusion matrix (rows: true class, columns: predicted)")
    out.append(" " * width + "".join(f"{label:>{column}}" for label in result.labels))
    for label, row in zip(result.labels, result.confusion(), strict=True):
        out.append(f"{label:<{width}}" + "".join(f"{n:>{column}}" for n in row))
    out.append("per class (precision: of the prompts predicted as it; recall: of its prompts)")
    out.append(f"{'':<{width}}{'prompts':>9}{'precision':>11}{'recall':>8}")
    for c in result.per_class():
        out.append(f"{c.label:<{width}}{c.prompts:>9}{_percent(c.precision):>11}"
                   f"{_percent(c.recall):>8}")
    if groups is not None:
        rows = result.by_group(groups)
        name_width = max(8, *(len(g.name) for g in rows))
        out.append(f"by {group_field} (the least accurate first)")
        out.append(f"{'':<{name_width}}{'prompts':>9}{'correct':>9}{'accuracy':>10}  classes")
        for g in rows:
            out.append(f"{g.name:<{name_width}}{g.prompts:>9}{g.correct:>9}"
                       f"{_percent(g.accuracy):>10}  {' '.join(g.labels)}")
    if misses > 0 and texts:
        wrong = result.misses()
        out.append(f"misclassified: {len(wrong)}"
                   + (f" (the first {misses} shown)" if len(wrong) > misses else ""))
        for miss in wrong[:misses]:
            text = " ".join(texts[miss.row].split())
            if len(text) > width_chars:
                text = text[:width_chars - 1] + "…"
            sure = (f"{100 * miss.confidence:.0f}%" if miss.top == miss.predicted
                    else f"unsure: {100 * miss.confidence:.0f}% {miss.top}")
            out.append(f"  line {line_of[miss.row]}: {miss.truth} -> {miss.predicted} "
                       f"({sure}): {text}")
    return "\n".join(out)


def result_json(result: EvaluationResult, texts: Sequence[str] = (),
                groups: Sequence[str] | None = None, group_field: str = "group",
                lines: Sequence[int] | None = None) -> dict[str, object]:
    """The report as JSON-ready data: every method's scores, the chosen one's confusion
    matrix, per-class results, misclassified rows (by their line in the data file, as in
    ``format_result``, with their text when given) and, with ``groups``, the accuracy per
    group."""
    line_of = _line_numbers(len(result.truth), lines)
    by_group: dict[str, object] = {} if groups is None else {"by": {
        "field": group_field,
        "groups": [{"name": g.name, "prompts": g.prompts, "correct": g.correct,
                    "accuracy": g.accuracy, "labels": list(g.labels)}
                   for g in result.by_group(groups)]}}
    return {
        "prompts": len(result.truth),
        "labels": list(result.labels),
        "chosen": result.chosen,
        "accuracy": result.accuracy,
        "training": result.training.summary(),
        "methods": {method: {"accuracy": r.accuracy,
                             "accuracy_no_threshold": r.accuracy_no_threshold,
                             "unsure": r.unsure}
                    for method, r in result.methods.items()},
        "confusion": result.confusion(),
        "per_class": [{"label": c.label, "prompts": c.prompts, "predicted": c.predicted,
                       "correct": c.correct, "precision": c.precision, "recall": c.recall}
                      for c in result.per_class()],
        "misclassified": [{"line": line_of[m.row], "label": m.truth, "predicted": m.predicted,
                           "confidence": m.confidence, "top_class": m.top,
                           **({"text": texts[m.row]} if texts else {})}
                          for m in result.misses()],
        **by_group,
    }


def _line_numbers(rows: int, lines: Sequence[int] | None) -> Sequence[int]:
    if lines is None:
        return range(1, rows + 1)
    if len(lines) != rows:
        raise ValueError(f"{len(lines)} line numbers for {rows} rows")
    return lines


def _percent(value: float | None) -> str:
    return "–" if value is None else f"{100 * value:.1f}%"


def _thresholded(confidences: Sequence[float], top_classes: Sequence[str], threshold: float,
                 default_class: str) -> list[str]:
    """Each row's class after the threshold: its top class, or the default class where the
    classifier's probability of it is below ``threshold`` (as the router decides)."""
    return [top if confidence >= threshold else default_class
            for confidence, top in zip(confidences, top_classes, strict=True)]


def _moved(final: Sequence[str], top_classes: Sequence[str]) -> int:
    """Rows the threshold moved to the default class from another."""
    return sum(f != top for f, top in zip(final, top_classes, strict=True))


def _correct(predicted: Sequence[str], truth: Sequence[str]) -> int:
    return sum(p == t for p, t in zip(predicted, truth, strict=True))


def _accuracy(predicted: Sequence[str], truth: Sequence[str]) -> float:
    return _correct(predicted, truth) / len(truth) if truth else 0.0
