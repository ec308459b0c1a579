"""``kvroute semantic eval`` on a small labelled file, and its errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from router.cli import main
from tests.policies.semantic.semantic_support import EXAMPLE_ROUTING

pytestmark = pytest.mark.semantic


def test_eval_prints_accuracy_both_classifiers_and_confusion(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = tmp_path / "data.jsonl"
    rows = [   # training examples of the file: this checks the command, not the classifier
        ("Implement a binary search algorithm to find a specific element in a sorted array.",
         "code"),
        ("Solve for x in the equation 3x + 10 = 5(x - 2).", "math"),
        ("how do I cancel my pro account?", "support"),
        ("What are the most effective ways to deal with stress?", "chat")]
    data.write_text("".join(json.dumps({"text": t, "label": label}) + "\n"
                            for t, label in rows))
    assert main(["semantic", "eval", "--routing", str(EXAMPLE_ROUTING),
                 "--data", str(data)]) == 0
    out = capsys.readouterr().out
    assert "prompts: 4" in out
    assert "logistic-regression" in out and "nearest-centroid" in out
    assert "accuracy: 100.0%" in out
    lines = out.splitlines()
    header = lines.index("confusion matrix (rows: true class, columns: predicted)")
    assert lines[header + 1].split() == ["code", "math", "support", "chat"]
    assert lines[header + 2].split() == ["code", "1", "0", "0", "0"]


def test_eval_refuses_bad_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "hello"}\n')
    assert main(["semantic", "eval", "--routing", str(EXAMPLE_ROUTING),
                 "--data", str(bad)]) == 2
    assert "line 1: needs a non-empty \"text\" and a \"label\"" in capsys.readouterr().err
    plain = tmp_path / "plain.yaml"
    plain.write_text("profiles: {default: {}}\n")
    assert main(["semantic", "eval", "--routing", str(plain), "--data", str(bad)]) == 2
    assert "has no 'semantic:' section" in capsys.readouterr().err
