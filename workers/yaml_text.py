"""YAML configuration text read strictly, with errors on one line.

PyYAML's ``safe_load`` keeps the last of two equal keys of a mapping without a word (two
``default_profile:`` lines: the second wins), and its errors span several lines with a
quote of the text. ``load_config_yaml`` refuses a repeated key and says where, and
``YamlTextError``'s message is one line: ``line L, column C: what is wrong``.
"""

from __future__ import annotations

from typing import Any

import yaml
from yaml.nodes import MappingNode, SequenceNode


class YamlTextError(ValueError):
    """The text is not valid YAML, or repeats a key; the message is one line."""


class _UniqueKeyLoader(yaml.SafeLoader):
    """``SafeLoader`` that refuses a key a mapping already has."""

    def construct_mapping(self, node: MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            try:
                first = seen.get(key)
            except TypeError:         # an unhashable key: the constructor says so below
                continue
            if first is None:
                seen[key] = key_node.start_mark.line
            else:
                raise YamlTextError(
                    f"line {key_node.start_mark.line + 1}, column "
                    f"{key_node.start_mark.column + 1}: duplicate key {key!r} (first at "
                    f"line {first + 1}; a repeated key would silently replace it)")
        return super().construct_mapping(node, deep=deep)


def yaml_words(value: object) -> str:
    """``value`` as a YAML reader writes it in an error: ``true``, ``false``, ``null``, else
    Python's ``repr`` (a text quoted, a list in brackets)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    return repr(value)


def load_config_yaml(text: str) -> Any:
    """The document of ``text``; ``YamlTextError`` for bad YAML or a repeated key."""
    try:
        return yaml.load(text, Loader=_UniqueKeyLoader)
    except yaml.MarkedYAMLError as exc:
        raise YamlTextError(_one_line(exc)) from None
    except yaml.YAMLError as exc:
        raise YamlTextError(" ".join(str(exc).split())) from None
    except RecursionError:     # thousands of [ or { inside each other
        raise YamlTextError("lists or mappings nested too deeply to read") from None


# contexts that begin where the mistake is (a key whose ':' is missing, a list, mapping or
# quoted text left open); others (a block mapping's start, for a line indented wrong) begin
# far above it, and the problem's line is the one to mend
_CAUSE_CONTEXTS = frozenset({
    "while scanning a simple key", "while parsing a flow sequence",
    "while parsing a flow mapping", "while scanning a quoted scalar"})


def _one_line(exc: yaml.MarkedYAMLError) -> str:
    """Where and what, in one line. When the context is the mistake itself and began on
    another line than the problem was found (a key without its ``:`` is found wrong only on
    the next line, an unclosed list at the next key), both lines are named, the context's
    first: that is the line to mend."""
    mark = exc.problem_mark or exc.context_mark
    where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
    what = " ".join(part for part in (exc.problem, exc.context) if part)
    context = exc.context_mark
    if (exc.problem_mark is not None and context is not None
            and exc.context in _CAUSE_CONTEXTS and context.line != exc.problem_mark.line):
        problem = exc.problem_mark
        return " ".join((
            f"line {context.line + 1}, column {context.column + 1} ({exc.context}): "
            f"{exc.problem or 'invalid'} at line {problem.line + 1}, column "
            f"{problem.column + 1}").split())
    return where + " ".join((what or str(exc)).split())


def key_lines(text: str) -> dict[str, int]:
    """Each key's and list item's line (1-based) in ``text``, by its path as the errors of
    the configuration name it (``profiles.default.scorers[1].weight``); {} for text that is
    not YAML."""
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except (yaml.YAMLError, RecursionError):
        return {}
    lines: dict[str, int] = {}
    pending: list[tuple[Any, str]] = [(root, "")]
    while pending:
        node, path = pending.pop()
        if isinstance(node, MappingNode):
            for key_node, value in node.value:
                key = f"{path}.{key_node.value}" if path else str(key_node.value)
                lines.setdefault(key, key_node.start_mark.line + 1)
                pending.append((value, key))
        elif isinstance(node, SequenceNode):
            for i, item in enumerate(node.value):
                lines.setdefault(f"{path}[{i}]", item.start_mark.line + 1)
                pending.append((item, f"{path}[{i}]"))
    return lines


def with_line(message: str, lines: dict[str, int]) -> str:
    """``message`` (``PATH: what is wrong``) with the line of ``PATH`` added, or of the
    nearest key above it that the text has (a missing key is named by where it belongs):
    ``PATH: what is wrong (line L)``; as it was when no line is known."""
    path = message.split(": ", 1)[0]
    while path:
        line = lines.get(path)
        if line is not None:
            return f"{message} (line {line})"
        cut = max(path.rfind("."), path.rfind("["))
        path = path[:cut] if cut > 0 else ""
    return message
