"""router/header_values.py: what the router writes in a response header is one line of
visible ASCII, whatever text it came from."""

from __future__ import annotations

from router.header_values import MAX_HEADER_CHARS, header_safe


def test_visible_ascii_passes_and_the_rest_becomes_question_marks() -> None:
    assert header_safe("prefix 0.96 on w3; est ttft 0.21s") == "prefix 0.96 on w3; est ttft 0.21s"
    assert header_safe("w1: holds response r\u2028x\u00e9\n") == "w1: holds response r?x??"
    assert header_safe("x" * 1000) == "x" * MAX_HEADER_CHARS
