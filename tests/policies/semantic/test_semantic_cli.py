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
        ("Implement a Python function to find the longest common subsequence of two input "
         "strings using dynamic programming.", "code"),
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


def test_eval_lists_the_misclassified_and_writes_json(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = tmp_path / "data.jsonl"
    rows = [("Solve for x in the equation 3x + 10 = 5(x - 2).", "math", "exam"),
            ("how do I cancel my pro account?", "math", "shop"),  # labelled wrong on purpose
            ("What are the most effective ways to deal with stress?", "chat", None)]
    data.write_text("\n".join(json.dumps({"text": t, "label": label}
                                         | ({"origin": origin} if origin else {})) + "\n"
                              for t, label, origin in rows))    # a blank line between rows
    report = tmp_path / "report.json"
    assert main(["semantic", "eval", "--routing", str(EXAMPLE_ROUTING), "--data", str(data),
                 "--errors", "5", "--by", "origin", "--json", str(report)]) == 0
    lines = capsys.readouterr().out.splitlines()
    by_origin = lines.index("by origin (the least accurate first)")
    assert [line.split()[:4] for line in lines[by_origin + 2:by_origin + 5]] == [
        ["shop", "1", "0", "0.0%"], ["(none)", "1", "1", "100.0%"], ["exam", "1", "1", "100.0%"]]
    assert "misclassified: 1" in lines
    miss = lines[lines.index("misclassified: 1") + 1]
    assert miss.startswith("  line 3: math -> support (")     # its line in the file
    assert miss.endswith("): how do I cancel my pro account?")
    per_class = {line.split()[0]: line.split()[1:] for line in lines[
        lines.index("per class (precision: of the prompts predicted as it; recall: of its "
                    "prompts)") + 2:by_origin]}
    assert per_class["math"] == ["2", "100.0%", "50.0%"]
    assert per_class["support"] == ["0", "0.0%", "–"]
    written = json.loads(report.read_text())
    assert written["prompts"] == 3 and written["accuracy"] == pytest.approx(2 / 3)
    assert [(m["line"], m["predicted"], m["text"]) for m in written["misclassified"]] == [
        (3, "support", "how do I cancel my pro account?")]
    assert 0.0 < written["misclassified"][0]["confidence"] <= 1.0
    assert [g["name"] for g in written["by"]["groups"]] == ["shop", "(none)", "exam"]


def test_eval_reports_several_files_then_their_accuracies_side_by_side(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    right = tmp_path / "right.jsonl"
    right.write_text(json.dumps({"text": "Solve for x in the equation 3x + 10 = 5(x - 2).",
                                 "label": "math"}) + "\n")
    half = tmp_path / "half.jsonl"
    half.write_text("".join(json.dumps(row) + "\n" for row in [
        {"text": "how do I cancel my pro account?", "label": "support"},
        {"text": "What are the most effective ways to deal with stress?",
         "label": "math"}]))                                  # labelled wrong on purpose
    report = tmp_path / "report.json"
    assert main(["semantic", "eval", "--routing", str(EXAMPLE_ROUTING),
                 "--data", str(right), str(half), "--json", str(report),
                 "--thresholds", "0.3,1.0"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines.index(f"== {right}") < lines.index(f"== {half}")
    assert "prompts: 1" in lines and "prompts: 2" in lines     # each file's own report
    summary = lines[next(i for i, line in enumerate(lines)
                         if line.startswith("== accuracy per data file (")) + 2:]
    header = lines.index(summary[0]) - 1
    assert lines[header].split()[-4:] == ["at", "0.30", "at", "1.00"]
    # at 1.0 every prompt goes to the default class (chat), and none of these is labelled chat
    assert [line.split()[-5:] for line in summary[:2]] == [
        ["1", "1", "100.0%", "100.0%", "0.0%"], ["2", "1", "50.0%", "50.0%", "0.0%"]]
    assert summary[2].split() == ["mean", "of", "2", "files", "75.0%", "75.0%", "0.0%"]
    assert summary[3].split() == ["all", "prompts", "3", "2", "66.7%"]
    assert lines.count("accuracy at other thresholds (logistic-regression; unsure -> chat)") == 2
    written = json.loads(report.read_text())
    assert written["mean_accuracy"] == pytest.approx(0.75)
    assert [(f["data"], f["prompts"]) for f in written["files"]] == [(str(right), 1),
                                                                      (str(half), 2)]
    assert [m["line"] for m in written["files"][1]["misclassified"]] == [2]
    assert [t["threshold"] for t in written["files"][0]["thresholds"]] == [0.3, 1.0]
    assert written["files"][1]["thresholds"][1] == {"threshold": 1.0, "accuracy": 0.0,
                                                    "unsure": 1}


@pytest.mark.parametrize("value", ["0.3,x", "1.5", ""])
def test_eval_refuses_thresholds_that_are_not_probabilities(
        value: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = tmp_path / "data.jsonl"
    data.write_text('{"text": "hello", "label": "chat"}\n')
    with pytest.raises(SystemExit) as exit_info:
        main(["semantic", "eval", "--routing", str(EXAMPLE_ROUTING), "--data", str(data),
              "--thresholds", value])
    assert exit_info.value.code == 2
    assert "argument --thresholds:" in capsys.readouterr().err


def test_eval_names_the_bad_one_of_several_files(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good = tmp_path / "good.jsonl"
    good.write_text('{"text": "hello", "label": "chat"}\n')
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "hello"}\n')
    assert main(["semantic", "eval", "--routing", str(EXAMPLE_ROUTING),
                 "--data", str(good), str(bad)]) == 2
    err = capsys.readouterr().err
    assert f"--data: {bad} line 1: needs a non-empty" in err and str(good) not in err


def test_eval_refuses_a_negative_error_count(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = tmp_path / "data.jsonl"
    data.write_text('{"text": "hello", "label": "chat"}\n')
    assert main(["semantic", "eval", "--routing", str(EXAMPLE_ROUTING), "--data", str(data),
                 "--errors", "-1"]) == 2
    assert "--errors must be >= 0" in capsys.readouterr().err


def test_eval_refuses_bad_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "hello"}\n')
    assert main(["semantic", "eval", "--routing", str(EXAMPLE_ROUTING),
                 "--data", str(bad)]) == 2
    assert "line 1: needs a non-empty \"text\" and a \"label\"" in capsys.readouterr().err
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n\n")                  # blank lines only: nothing to score
    assert main(["semantic", "eval", "--routing", str(EXAMPLE_ROUTING),
                 "--data", str(empty)]) == 2
    assert (f"--data: {empty} has no labelled prompt (rows {{\"text\": ..., \"label\": "
            "...})") in capsys.readouterr().err
    stray = tmp_path / "stray.jsonl"        # refused before the model is built, with its line
    stray.write_text('{"text": "hi", "label": "chat"}\n\n{"text": "sue", "label": "legal"}\n')
    import policies.semantic.cli as semantic_cli

    def no_build(*_: object) -> None:
        raise AssertionError("the model was built (minutes when its encoder trains)")

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(semantic_cli, "_build", no_build)
        assert main(["semantic", "eval", "--routing", str(EXAMPLE_ROUTING),
                     "--data", str(stray)]) == 2
    assert capsys.readouterr().err == (
        f"kvroute semantic eval: --data: {stray}: line 3: label 'legal' is not among the "
        "classes (code, math, support, chat)\n")
    plain = tmp_path / "plain.yaml"
    plain.write_text("profiles: {default: {}}\n")
    assert main(["semantic", "eval", "--routing", str(plain), "--data", str(bad)]) == 2
    assert "has no 'semantic:' section" in capsys.readouterr().err


TINY_ROUTING = """
profiles: {{default: {{}}}}
semantic:
  default_class: chat
  max_tokens: 16
  {fine_tune}
  classes:
    code: {{examples: ["write a python function", "fix this javascript bug"]}}
    chat: {{examples: ["tell me a joke", "how was your day"]}}
"""


def test_train_fine_tunes_once_then_starts_from_the_cache(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("KVROUTE_CACHE_DIR", str(tmp_path / "cache"))
    routing = tmp_path / "routing.yaml"
    routing.write_text(TINY_ROUTING.format(
        fine_tune="fine_tune: {pairs_per_example: 1, batch_size: 4}"))
    assert main(["semantic", "train", "--routing", str(routing)]) == 0
    first = capsys.readouterr()
    assert "fine-tuning the encoder" in first.err and "2/2" in first.err   # 8 pairs, 2 steps
    said = "encoder: fine-tuned, mixed 0.5 with the base model, "     # the default mix
    weights_line = next(line for line in first.out.splitlines() if line.startswith(said))
    weights = Path(weights_line.removeprefix(said))
    assert weights.is_file() and weights.parent == tmp_path / "cache" / "semantic"
    assert weights.name.endswith("-mix0.5.safetensors")
    assert "training: chose" in first.out

    assert main(["semantic", "train", "--routing", str(routing)]) == 0
    again = capsys.readouterr()
    assert "fine-tuning the encoder" not in again.err      # from the cache: no training
    assert weights_line in again.out.splitlines()

    routing.write_text(TINY_ROUTING.format(fine_tune=""))
    assert main(["semantic", "train", "--routing", str(routing)]) == 0
    assert "encoder: not fine-tuned" in capsys.readouterr().out


def test_train_refuses_a_file_without_a_semantic_section(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    plain = tmp_path / "plain.yaml"
    plain.write_text("profiles: {default: {}}\n")
    assert main(["semantic", "train", "--routing", str(plain)]) == 2
    assert "has no 'semantic:' section" in capsys.readouterr().err


def test_errors_name_the_command_as_other_commands_do(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """They began ``error:``, where every other command names itself (``kvroute sim: …``):
    a log searched for ``kvroute semantic`` found none of them."""
    plain = tmp_path / "plain.yaml"
    plain.write_text("profiles: {default: {}}\n")
    assert main(["semantic", "train", "--routing", str(plain)]) == 2
    assert capsys.readouterr().err == (
        f"kvroute semantic train: {plain}: has no 'semantic:' section\n")
    data = tmp_path / "data.jsonl"
    data.write_text('{"text": "hi", "label": "chat"}\n')
    assert main(["semantic", "eval", "--routing", str(plain), "--data", str(data)]) == 2
    assert capsys.readouterr().err == (
        f"kvroute semantic eval: {plain}: has no 'semantic:' section\n")
    assert main(["semantic", "eval", "--routing", str(EXAMPLE_ROUTING), "--data", str(data),
                 "--errors", "-1"]) == 2
    assert capsys.readouterr().err == "kvroute semantic eval: --errors must be >= 0\n"


def test_eval_refuses_a_json_path_it_cannot_write_before_the_model_is_built(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A ``--json`` typo was found only after the evaluation (minutes when the encoder
    trains), as ``[Errno 20] Not a directory: ...``."""
    import policies.semantic.cli as semantic_cli

    data = tmp_path / "data.jsonl"
    data.write_text('{"text": "hello", "label": "chat"}\n')
    blocker = tmp_path / "a-file"
    blocker.write_text("")

    def no_build(*_: object) -> None:
        raise AssertionError("the model was built (minutes when its encoder trains)")

    cases = [(blocker / "report.json", f"cannot write {blocker / 'report.json'}: {blocker}: "
              "not a folder"),
             (tmp_path / "missing" / "report.json",
              f"cannot write {tmp_path / 'missing' / 'report.json'}: {tmp_path / 'missing'}: "
              "no such folder"),
             (tmp_path, f"{tmp_path} is a folder; give a file's name")]
    for path, message in cases:
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(semantic_cli, "_build", no_build)
            assert main(["semantic", "eval", "--routing", str(EXAMPLE_ROUTING),
                         "--data", str(data), "--json", str(path)]) == 2
        assert capsys.readouterr() == ("", f"kvroute semantic eval: --json: {message}\n")
    assert not (tmp_path / "missing").exists()


def test_eval_refuses_a_by_field_no_row_has_before_the_model_is_built(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A typo in ``--by`` grouped every row as one "(none)" group, after the evaluation."""
    import policies.semantic.cli as semantic_cli

    data = tmp_path / "data.jsonl"
    data.write_text('{"text": "hello", "label": "chat", "origin": "a"}\n')

    def no_build(*_: object) -> None:
        raise AssertionError("the model was built (minutes when its encoder trains)")

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(semantic_cli, "_build", no_build)
        assert main(["semantic", "eval", "--routing", str(EXAMPLE_ROUTING), "--data", str(data),
                     "--by", "orign"]) == 2
    assert capsys.readouterr() == (
        "", f"kvroute semantic eval: --by: no row of {data} has the field 'orign'\n")
