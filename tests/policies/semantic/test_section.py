"""The semantic: section: strict parsing, and refusal when the extra is not installed."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from policies.errors import RoutingConfigError
from policies.semantic.section import parse_semantic_section

REPO_ROOT = Path(__file__).resolve().parents[3]
CLASSES = {"code": {"examples": ["write a function"]}, "chat": {"examples": ["hello there"]}}


def test_defaults_and_labels() -> None:
    section = parse_semantic_section({"default_class": "other", "classes": CLASSES}, "semantic")
    assert section.threshold == 0.5 and section.text == "last-user"
    assert section.max_tokens == 64 and section.max_chars == 64 * 16
    assert section.batch.window_ms == 2.0 and section.batch.max_size == 16
    assert section.labels == ("code", "chat", "other")
    assert section.classes["code"].examples == ("write a function",)
    assert section.digit_weight == 0.0
    assert section.tail_tokens == 0 and section.tail_chars == 0


def test_tail_tokens_keep_the_end_of_long_texts_in_characters_too() -> None:
    section = parse_semantic_section({"default_class": "chat", "classes": CLASSES,
                                      "max_tokens": 64, "tail_tokens": 31}, "semantic")
    assert section.max_chars == 64 * 16 and section.tail_chars == 31 * 16


def test_an_integer_digit_weight_is_read_as_a_number() -> None:
    section = parse_semantic_section({"default_class": "chat", "classes": CLASSES,
                                      "digit_weight": 4}, "semantic")
    assert section.digit_weight == 4.0 and isinstance(section.digit_weight, float)


@pytest.mark.parametrize(("raw", "message"), [
    ({"default_class": "chat", "classes": CLASSES, "threshold": 1.5},
     "semantic.threshold: must be within 0..1"),
    ({"default_class": "chat", "classes": CLASSES, "text": "everything"},
     "semantic.text: must be one of: last-user, all-user, system+last-user"),
    ({"default_class": "chat", "classes": CLASSES, "max_tokens": 4096},
     "semantic.max_tokens: must be within 8..256"),
    ({"default_class": "chat", "classes": {"code": {"examples": [""]}}},
     "semantic.classes.code.examples: must not contain empty strings"),
    ({"default_class": "chat", "classes": CLASSES, "batch": {"window_ms": 500}},
     "semantic.batch.window_ms: must be within 0..50"),
    ({"default_class": "chat", "classes": CLASSES, "runtime": "tensorrt"},
     "semantic.runtime: must be one of torch, onnx"),
    ({"default_class": "chat", "classes": CLASSES, "digit_weight": -1},
     "semantic.digit_weight: must be within 0..100"),
    ({"default_class": "chat", "classes": CLASSES, "digit_weight": "many"},
     "semantic.digit_weight"),
    ({"default_class": "chat", "classes": CLASSES, "max_tokens": 64, "tail_tokens": 62},
     "semantic.tail_tokens: must be within 0..61"),
    ({"default_class": "chat", "classes": CLASSES, "tail_tokens": -1},
     "semantic.tail_tokens: must be within 0..61"),
    ({"classes": CLASSES}, "semantic.default_class: required"),
    ({"default_class": "chat", "classes": {**CLASSES, " ": {"examples": ["can he evict me"]}}},
     "semantic.classes: a class name must not be empty"),
    ({"default_class": "chat", "classes": CLASSES, "colour": "red"},
     "semantic.colour: unknown key"),
    (None, "semantic: must be a mapping"),
])
def test_bad_sections_name_the_field(raw: object, message: str) -> None:
    with pytest.raises(RoutingConfigError) as info:
        parse_semantic_section(raw, "semantic")
    assert str(info.value).startswith(message)


BLOCKED_VALIDATE = textwrap.dedent("""
    import importlib.abc, sys

    class Block(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in {"torch", "sentence_transformers"}:
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)
            return None

    sys.meta_path.insert(0, Block())
    from router.cli import main
    code = main(["validate", sys.argv[1]])
    assert "torch" not in sys.modules
    sys.exit(code)
""")


def run_validate_without_extra(routing: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", BLOCKED_VALIDATE, str(routing)],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)


def test_validate_refuses_a_semantic_rule_without_the_extra(tmp_path: Path) -> None:
    result = run_validate_without_extra(REPO_ROOT / "config/examples/semantic.yaml")
    assert result.returncode == 1, result.stderr
    assert "semantic: semantic routing needs the 'semantic' extra" in result.stderr
    assert "missing: torch==2.13.0, sentence-transformers" in result.stderr
    assert "pip install -e '.[semantic]' in a checkout" in result.stderr


def test_validate_refuses_a_class_rule_without_section_or_extra(tmp_path: Path) -> None:
    routing = tmp_path / "routing.yaml"
    routing.write_text(textwrap.dedent("""
        profiles: {default: {filters: [{type: model}]}}
        rules:
          - {name: code, when: {class: code}, then: {model: coder}}
    """))
    result = run_validate_without_extra(routing)
    assert result.returncode == 1, result.stderr
    assert "semantic routing needs the 'semantic' extra" in result.stderr


def test_validate_without_semantic_accepts_and_never_imports_torch() -> None:
    result = run_validate_without_extra(REPO_ROOT / "config/routing.yaml")
    assert result.returncode == 0, result.stderr
    assert "ok" in result.stdout


def test_a_class_rule_without_a_section_is_refused_whatever_the_file_is_called(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from router.cli import main
    routing = tmp_path / "classes.yaml"
    routing.write_text(textwrap.dedent("""
        profiles: {default: {filters: [{type: model}]}}
        rules:
          - {name: code, when: {class: code}, then: {model: coder}}
    """))
    assert main(["validate", str(routing)]) == 1
    assert ("semantic classes are used but the routing file has no 'semantic:' section "
            "declaring them") in capsys.readouterr().err
