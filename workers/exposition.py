"""Sample lines of the Prometheus text exposition format, parsed for the scraper.

The scraper reads about a dozen of the five hundred lines a vLLM ``/metrics`` answer holds,
five times a second per worker. ``prometheus_client``'s parser reads label values character
by character in Python (about 70 µs a line); this one slices each line at its braces and
spaces and reads labels only when asked, with a regular expression that honours the
format's escapes (``\\\\``, ``\\"``, ``\\n``). A line it cannot read raises
``ExpositionError``, as a malformed line does in the reference parser.

    name{label="value",...} value [timestamp]
    name value [timestamp]
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_LABEL = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*(,|$)')
_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*\Z")
_ESCAPES = {"\\\\": "\\", '\\"': '"', "\\n": "\n"}
_ESCAPE = re.compile(r"\\[\\\"n]")
_ESCAPED = re.compile(r"\\.")


class ExpositionError(ValueError):
    """A sample line that is not in the text exposition format."""


@dataclass(frozen=True, slots=True)
class SampleLine:
    name: str
    label_text: str        # between the braces, unparsed ("" without labels)
    value: float

    def labels(self) -> dict[str, str]:
        """The labels, unescaped."""
        labels: dict[str, str] = {}
        text = self.label_text
        position = 0
        while position < len(text):
            match = _LABEL.match(text, position)
            if match is None:
                if text[position:].strip(" ,"):
                    raise ExpositionError(f"bad labels {{{text[:80]}}}")
                break
            value = match.group(2)
            labels[match.group(1)] = (_ESCAPE.sub(lambda m: _ESCAPES[m.group()], value)
                                      if "\\" in value else value)
            position = match.end()
        return labels


def parse_sample_line(line: str) -> SampleLine:
    """One sample line; ``ExpositionError`` when it is malformed."""
    brace = line.find("{")
    space = line.find(" ")
    if brace >= 0 and (space < 0 or brace < space):
        close = line.rfind("}")
        if close < brace:
            raise ExpositionError(f"unclosed labels in {line[:80]!r}")
        name, label_text, rest = line[:brace], line[brace + 1:close], line[close + 1:]
        quotes = (_ESCAPED.sub("", label_text) if "\\" in label_text else label_text).count('"')
        if quotes % 2:
            raise ExpositionError(f"unbalanced quotes in {line[:80]!r}")
    else:
        if space < 0:
            raise ExpositionError(f"no value in {line[:80]!r}")
        name, label_text, rest = line[:space], "", line[space:]
    if not _NAME.match(name):
        raise ExpositionError(f"bad metric name in {line[:80]!r}")
    fields = rest.split()
    if not 1 <= len(fields) <= 2:
        raise ExpositionError(f"bad value in {line[:80]!r}")
    try:
        value = float(fields[0])
    except ValueError:
        raise ExpositionError(f"bad value in {line[:80]!r}") from None
    return SampleLine(name, label_text, value)
