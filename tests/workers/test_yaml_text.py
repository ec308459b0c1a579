"""workers/yaml_text.py: a repeated key is refused where it is, errors are one line."""

from __future__ import annotations

import pytest

from workers.yaml_text import YamlTextError, load_config_yaml


def test_the_document_as_safe_load_reads_it() -> None:
    assert load_config_yaml("a: 1\nb: [x, {c: 2.5}]\n") == {"a": 1, "b": ["x", {"c": 2.5}]}
    assert load_config_yaml("") is None


@pytest.mark.parametrize(("text", "message"), [
    ("a: 1\nb: 2\na: 3\n",
     "line 3, column 1: duplicate key 'a' (first at line 1; a repeated key would silently "
     "replace it)"),
    ("p: {x: 1, y: 2, x: 3}\n", "line 1, column 17: duplicate key 'x' (first at line 1"),
    ("outer:\n  inner:\n    k: 1\n    k: 2\n", "line 4, column 5: duplicate key 'k'"),
])
def test_a_repeated_key_is_refused_where_it_is(text: str, message: str) -> None:
    with pytest.raises(YamlTextError) as info:
        load_config_yaml(text)
    assert str(info.value).startswith(message)


@pytest.mark.parametrize(("text", "message"), [
    ("a: [1, 2\nb: 3\n", "line 1, column 4 (while parsing a flow sequence): expected ',' or ']', "
                         "but got ':' at line 2, column 2"),
    ("a: b: c\n", "line 1, column 5: mapping values are not allowed here"),
    # a key without its colon: its own line first, the line it was found wrong on after
    ("a:\n  b: 1\n  c\n  d: 2\n", "line 3, column 3 (while scanning a simple key): could not "
                                  "find expected ':' at line 4, column 3"),
    # a line indented wrong: its line, not the far line where the enclosing mapping began
    ("p:\n  d:\n    f: []\n    s: []\n   k: {t: 1}\n", "line 5, column 4: expected <block end>, "
                                                  "but found '<block mapping start>'"),
    ("a: !!python/object:os.system x\n", "line 1, column 4: could not determine a constructor"),
])
def test_bad_yaml_is_one_line_saying_where(text: str, message: str) -> None:
    with pytest.raises(YamlTextError) as info:
        load_config_yaml(text)
    assert str(info.value).startswith(message)
    assert "\n" not in str(info.value)


def test_nesting_past_the_parsers_depth_is_one_line() -> None:
    """A few thousand ``[`` inside each other ended in a RecursionError and a traceback of
    thousands of lines, in ``kvroute validate``, at start and in the reload log."""
    with pytest.raises(YamlTextError, match=r"^lists or mappings nested too deeply to read$"):
        load_config_yaml("a: " + "[" * 5000 + "]" * 5000)


def test_an_error_naming_a_field_gets_the_fields_line() -> None:
    """Errors named the field's path alone; in a file of a hundred lines the operator
    counted. The path's line is added, else the nearest key above it the text has."""
    from workers.yaml_text import key_lines, with_line

    text = ("profiles:\n  default:\n    scorers:\n      - {type: inflight}\n"
            "      - type: kv-usage\n        weight: heavy\n")
    lines = key_lines(text)
    assert with_line("profiles.default.scorers[1].weight: must be a number", lines) == (
        "profiles.default.scorers[1].weight: must be a number (line 6)")
    assert with_line("profiles.default.scorers[1].params.x: unknown key", lines) == (
        "profiles.default.scorers[1].params.x: unknown key (line 5)")     # where it belongs
    assert with_line("the file is empty", lines) == "the file is empty"
    assert key_lines("a: [1\n") == {}                                    # not YAML: none
