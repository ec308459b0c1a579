"""Logistic regression vs nearest centroid on synthetic embeddings."""

from __future__ import annotations

import numpy as np
import pytest

from policies.semantic.classifier import fit, train_classifier


def clusters(seed: int, spread: float, per_class: int = 12) -> tuple[np.ndarray, list[str]]:
    rng = np.random.default_rng(seed)
    centers = {"a": np.array([1.0, 0, 0, 0]), "b": np.array([0, 1.0, 0, 0]),
               "c": np.array([0, 0, 1.0, 0])}
    rows, labels = [], []
    for label, center in centers.items():
        for _ in range(per_class):
            v = center + rng.normal(0, spread, 4)
            rows.append(v / np.linalg.norm(v))
            labels.append(label)
    return np.array(rows, dtype=np.float32), labels


def test_separable_classes_are_learned_by_both_methods() -> None:
    x, y = clusters(0, 0.1)
    for method in ("logistic-regression", "nearest-centroid"):
        model = fit(method, x, y)
        assert model.labels == ("a", "b", "c")
        assert model.predict(np.array([[0.9, 0.1, 0, 0], [0, 0, 1, 0.1]],
                                      dtype=np.float32)) == ["a", "c"]
        probs = model.probabilities(x)
        assert np.allclose(probs.sum(axis=1), 1.0, atol=1e-5)


def test_auto_reports_both_scores_and_keeps_the_better() -> None:
    x, y = clusters(1, 0.6)
    model, report = train_classifier(x, y, "auto")
    lr, nc = report.cv_accuracy["logistic-regression"], report.cv_accuracy["nearest-centroid"]
    assert lr is not None and nc is not None
    assert report.chosen == ("logistic-regression" if lr > nc else "nearest-centroid")
    assert model.method == report.chosen
    assert report.folds == 5 and dict(report.examples_per_class) == {"a": 12, "b": 12, "c": 12}
    assert "CV accuracy" in report.summary()


def test_on_an_encoder_tuned_on_the_examples_auto_takes_logistic_regression() -> None:
    x, y = clusters(0, 0.05)            # tuned embeddings: both methods score 100 % in CV
    _, untuned = train_classifier(x, y, "auto")
    assert untuned.chosen == "nearest-centroid"          # a tie keeps the simpler one
    model, report = train_classifier(x, y, "auto", tuned_encoder=True)
    assert report.cv_accuracy == untuned.cv_accuracy == {"logistic-regression": 1.0,
                                                          "nearest-centroid": 1.0}
    assert model.method == report.chosen == "logistic-regression"
    assert report.summary().endswith("the encoder was tuned on every example, so this "
                                     "cannot choose)")
    forced, _ = train_classifier(x, y, "nearest-centroid", tuned_encoder=True)
    assert forced.method == "nearest-centroid"


def test_forced_method_and_too_few_examples_for_cv() -> None:
    x, y = clusters(2, 0.1, per_class=1)
    model, report = train_classifier(x, y, "logistic-regression")
    assert model.method == "logistic-regression"
    assert report.cv_accuracy == {"logistic-regression": None, "nearest-centroid": None}


def test_binary_logistic_regression_gives_two_probabilities() -> None:
    x, y = clusters(3, 0.1)
    keep = [i for i, label in enumerate(y) if label != "c"]
    model = fit("logistic-regression", x[keep], [y[i] for i in keep])
    label, confidence = model.classify(np.array([1.0, 0, 0, 0], dtype=np.float32))
    assert label == "a" and 0.5 < confidence <= 1.0


def test_one_class_is_refused() -> None:
    x, _ = clusters(4, 0.1)
    with pytest.raises(ValueError, match="at least two classes"):
        fit("nearest-centroid", x, ["a"] * len(x))
