"""``kvroute semantic eval``'s report: per-class precision and recall, the misclassified
prompts (most confident first) and the JSON form, from predictions made up for the test."""

from __future__ import annotations

import json
from types import MappingProxyType

import numpy as np

from policies.semantic.classifier import TrainingReport
from policies.semantic.evaluation import (
    EvaluationResult,
    MethodResult,
    at_thresholds,
    evaluate,
    format_result,
    format_thresholds,
    result_json,
)

LABELS = ("code", "math", "chat")
TRUTH = ("code", "code", "code", "math", "chat", "chat")
PREDICTED = ("code", "math", "chat", "math", "math", "chat")
CONFIDENCE = (0.9, 0.55, 0.8, 0.7, 0.95, 0.6)
TEXTS = ("def f(): pass", "integrate   x\nplease", "a poem about code " * 20, "2 + 2",
         "how are you", "tell me a joke")


def result() -> EvaluationResult:
    chosen = MethodResult("logistic-regression", accuracy=0.5, accuracy_no_threshold=0.5,
                          unsure=0, predictions=PREDICTED, confidences=CONFIDENCE,
                          top_classes=PREDICTED)
    report = TrainingReport("logistic-regression", {"logistic-regression": 0.9}, 5,
                            {"code": 2, "math": 2, "chat": 2})
    return EvaluationResult(LABELS, TRUTH, "logistic-regression", report,
                            MappingProxyType({"logistic-regression": chosen}))


def test_per_class_counts_precision_and_recall() -> None:
    by_label = {c.label: c for c in result().per_class()}
    assert (by_label["code"].prompts, by_label["code"].predicted, by_label["code"].correct) == (
        3, 1, 1)
    assert by_label["code"].precision == 1.0 and by_label["code"].recall == 1 / 3
    assert by_label["math"].precision == 1 / 3 and by_label["math"].recall == 1.0
    assert by_label["chat"].precision == 0.5 and by_label["chat"].recall == 0.5


def test_a_class_never_predicted_or_absent_has_no_precision_or_recall() -> None:
    chosen = MethodResult("m", 0.0, 0.0, 0, ("code",), (0.5,), ("code",))
    empty = EvaluationResult(("code", "math"), ("math",), "m",
                             TrainingReport("m", {"m": None}, 0, {}),
                             MappingProxyType({"m": chosen}))
    by_label = {c.label: c for c in empty.per_class()}
    assert by_label["code"].precision == 0.0 and by_label["code"].recall is None
    assert by_label["math"].precision is None and by_label["math"].recall == 0.0
    assert "–" in format_result(empty)


def test_long_class_names_stay_apart_in_the_confusion_matrix() -> None:
    labels = ("engineering", "procurement")            # as long as the column: ran together
    chosen = MethodResult("m", 1.0, 1.0, 0, labels, (0.9, 0.9), labels)
    long_names = EvaluationResult(labels, labels, "m", TrainingReport("m", {"m": None}, 2, {}),
                                  MappingProxyType({"m": chosen}))
    lines = format_result(long_names).splitlines()
    header = lines.index("confusion matrix (rows: true class, columns: predicted)")
    assert lines[header + 1].split() == ["engineering", "procurement"]
    assert lines[header + 2].split() == ["engineering", "1", "0"]
    assert lines[header + 3].split() == ["procurement", "0", "1"]


def test_misses_by_true_class_most_confident_first() -> None:
    misses = result().misses()
    assert [(m.row, m.truth, m.predicted) for m in misses] == [
        (2, "code", "chat"), (1, "code", "math"), (4, "chat", "math")]
    assert [m.confidence for m in misses] == [0.8, 0.55, 0.95]


def test_the_report_lists_up_to_n_misses_on_one_line_each() -> None:
    text = format_result(result(), TEXTS, misses=2, width_chars=30)
    lines = text.splitlines()
    assert "misclassified: 3 (the first 2 shown)" in lines
    first = lines.index("misclassified: 3 (the first 2 shown)")
    assert lines[first + 1].startswith("  line 3: code -> chat (80%): a poem about code")
    assert lines[first + 1].endswith("…") and len(lines[first + 1].split(": ", 2)[2]) == 30
    assert lines[first + 2] == "  line 2: code -> math (55%): integrate x please"
    assert len(lines) == first + 3
    assert "misclassified" not in format_result(result(), TEXTS)     # misses=0: none
    header = lines.index("per class (precision: of the prompts predicted as it; recall: of "
                         "its prompts)")
    assert lines[header + 2].split() == ["code", "3", "100.0%", "33.3%"]


def test_a_prompt_sent_to_the_default_class_says_it_was_unsure_and_of_what() -> None:
    chosen = MethodResult("m", 0.0, 0.5, 1, ("chat",), (0.41,), ("math",))
    unsure = EvaluationResult(("code", "math", "chat"), ("code",), "m",
                              TrainingReport("m", {"m": None}, 0, {}),
                              MappingProxyType({"m": chosen}))
    lines = format_result(unsure, ("sum of a list",), misses=1).splitlines()
    assert lines[-1] == "  line 1: code -> chat (unsure: 41% math): sum of a list"


def test_the_json_report_holds_every_miss_with_its_text() -> None:
    data = json.loads(json.dumps(result_json(result(), TEXTS)))
    assert data["accuracy"] == 0.5 and data["chosen"] == "logistic-regression"
    assert data["confusion"] == [[1, 1, 1], [0, 1, 0], [0, 1, 1]]
    assert [m["line"] for m in data["misclassified"]] == [3, 2, 5]
    assert data["misclassified"][2] == {"line": 5, "label": "chat", "predicted": "math",
                                        "confidence": 0.95, "top_class": "math",
                                        "text": "how are you"}
    assert data["per_class"][1] == {"label": "math", "prompts": 1, "predicted": 3,
                                    "correct": 1, "precision": 1 / 3, "recall": 1.0}


def test_evaluate_records_the_top_class_probability_per_prompt() -> None:
    from policies.loader import parse_routing_text
    from policies.semantic.section import SemanticSection

    section = parse_routing_text(
        "profiles: {default: {}}\n"
        "semantic:\n"
        "  default_class: chat\n"
        "  threshold: 0.0\n"
        "  classes:\n"
        "    code: {examples: [a, b]}\n"
        "    math: {examples: [c, d]}\n").section("semantic")
    assert isinstance(section, SemanticSection)
    examples = np.array([[1, 0], [0.9, 0.1], [0, 1], [0.1, 0.9]], dtype=np.float32)
    data = np.array([[1, 0], [0, 1], [0.6, 0.4]], dtype=np.float32)
    outcome = evaluate(section, TrainingReport("logistic-regression", {}, 0, {}), examples,
                       ["code", "code", "math", "math"], data, ["code", "code", "code"])
    chosen = outcome.methods["logistic-regression"]
    assert chosen.predictions == ("code", "math", "code")
    assert all(0.5 < c <= 1.0 for c in chosen.confidences)
    assert chosen.confidences[0] > chosen.confidences[2]     # the clearer prompt, surer
    assert [m.row for m in outcome.misses()] == [1]


GROUPS = ("web", "web", "contest", "contest", "forum", "forum")


def test_accuracy_per_group_least_accurate_first() -> None:
    groups = result().by_group(GROUPS)
    assert [(g.name, g.prompts, g.correct, g.labels) for g in groups] == [
        ("contest", 2, 1, ("code", "math")), ("forum", 2, 1, ("chat",)),
        ("web", 2, 1, ("code",))]
    assert [g.accuracy for g in groups] == [0.5, 0.5, 0.5]
    skewed = result().by_group(("a", "a", "a", "b", "b", "b"))     # a: 1 of 3, b: 2 of 3
    assert [(g.name, g.correct) for g in skewed] == [("a", 1), ("b", 2)]
    try:
        result().by_group(GROUPS[:-1])
    except ValueError as exc:
        assert "5 groups for 6 rows" in str(exc)
    else:
        raise AssertionError("a group list of the wrong length was accepted")


def test_the_report_and_json_show_the_groups_only_when_asked() -> None:
    lines = format_result(result(), TEXTS, groups=GROUPS, group_field="source").splitlines()
    first = lines.index("by source (the least accurate first)")
    assert lines[first + 1].split() == ["prompts", "correct", "accuracy", "classes"]
    assert lines[first + 2].split() == ["contest", "2", "1", "50.0%", "code", "math"]
    assert "by " not in format_result(result(), TEXTS)
    data = json.loads(json.dumps(result_json(result(), TEXTS, GROUPS, "source")))
    assert data["by"]["field"] == "source"
    assert data["by"]["groups"][2] == {"name": "web", "prompts": 2, "correct": 1,
                                       "accuracy": 0.5, "labels": ["code"]}
    assert "by" not in result_json(result(), TEXTS)


def test_misses_are_named_by_their_line_in_the_data_file_when_given() -> None:
    lines = (1, 3, 5, 7, 9, 11)                  # blank lines between the rows
    text = format_result(result(), TEXTS, misses=1, lines=lines)
    assert text.splitlines()[-1].startswith("  line 5: code -> chat (80%)")
    assert [m["line"] for m in result_json(result(), TEXTS, lines=lines)["misclassified"]] == [
        5, 3, 9]
    try:
        format_result(result(), TEXTS, misses=1, lines=lines[:-1])
    except ValueError as exc:
        assert "5 line numbers for 6 rows" in str(exc)
    else:
        raise AssertionError("line numbers of the wrong length were accepted")


def test_accuracy_at_other_thresholds_sends_the_less_confident_to_the_default_class() -> None:
    rows = at_thresholds(result(), (0.0, 0.65, 0.75, 0.96), "chat")
    assert [(r.threshold, r.accuracy) for r in rows] == [
        (0.0, 3 / 6), (0.65, 3 / 6), (0.75, 2 / 6), (0.96, 2 / 6)]
    # only a prompt whose top class was not already the default class counts as sent there
    assert [r.unsure for r in rows] == [0, 1, 2, 4]
    table = format_thresholds(rows, "logistic-regression", "chat").splitlines()
    assert table[0] == "accuracy at other thresholds (logistic-regression; unsure -> chat)"
    assert table[3].split() == ["0.65", "50.0%", "1"]
    assert at_thresholds(result(), (), "chat") == []
