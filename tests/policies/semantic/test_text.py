"""The text a request is classified by: modes, content parts, bad input."""

from __future__ import annotations

import json
from typing import Any

from policies.base import RoutingRequest
from policies.semantic.text import clean_text, request_text


def chat(*messages: dict[str, Any]) -> RoutingRequest:
    return RoutingRequest(request_id="r", model="auto", messages=list(messages))


CONVERSATION = chat(
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "first question"},
    {"role": "assistant", "content": "an answer"},
    {"role": "user", "content": [{"type": "text", "text": "second"},
                                 {"type": "image_url", "image_url": {"url": "data:..."}},
                                 {"type": "text", "text": "question"}]},
)


def test_last_user_is_the_default_mode_and_skips_images() -> None:
    assert request_text(CONVERSATION, "last-user", 1000) == "second\nquestion"


def test_all_user_joins_user_messages_oldest_first() -> None:
    assert request_text(CONVERSATION, "all-user", 1000) == "first question\n\nsecond\nquestion"


def test_system_plus_last_user() -> None:
    assert request_text(CONVERSATION, "system+last-user", 1000) == \
        "You are terse.\n\nsecond\nquestion"


def test_only_images_or_tool_calls_give_no_text() -> None:
    images = chat({"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": "https://example.com/a.png"}}]})
    tools = chat({"role": "user", "content": None},
                 {"role": "assistant", "tool_calls": [{"id": "1", "type": "function",
                                                       "function": {"name": "f"}}]},
                 {"role": "tool", "tool_call_id": "1", "content": "42"})
    assert request_text(images, "last-user", 1000) == ""
    assert request_text(tools, "last-user", 1000) == ""
    assert request_text(chat(), "last-user", 1000) == ""


def test_completions_prompts() -> None:
    def prompt(p: Any) -> RoutingRequest:
        return RoutingRequest(request_id="r", model="m", path="/v1/completions", prompt=p)

    assert request_text(prompt("solve x"), "last-user", 100) == "solve x"
    assert request_text(prompt(["a", "b"]), "last-user", 100) == "b"
    assert request_text(prompt([1, 2, 3]), "last-user", 100) == ""
    assert request_text(prompt(None), "last-user", 100) == ""


def test_a_megabyte_prompt_is_cut_to_max_chars() -> None:
    huge = chat({"role": "user", "content": "x" * 1_000_000})
    assert request_text(huge, "last-user", 1024) == "x" * 1024


def test_a_tail_keeps_the_end_of_a_long_prompt_and_leaves_short_ones_whole() -> None:
    huge = chat({"role": "user", "content": "x" * 1_000_000 + "the question?"})
    assert request_text(huge, "last-user", 1024, 64) == \
        "x" * 1024 + "\n" + "x" * (64 - len("the question?")) + "the question?"
    short = chat({"role": "user", "content": "y" * 1000 + " end"})
    assert request_text(short, "last-user", 1000, 64) == "y" * 1000 + " end"
    assert clean_text(b"head " + b"z" * 10_000 + b" \xc3\xa9nd", 5, 4) == "head\n\u00e9nd"


def test_a_tail_reads_the_last_text_parts_of_a_message() -> None:
    parts = [{"type": "text", "text": f"part {i}"} for i in range(10_000)]
    parts.insert(5000, {"type": "image_url", "image_url": {"url": "data:,"}})
    text = request_text(chat({"role": "user", "content": parts}), "last-user", 13, 13)
    assert text == "part 0\npart 1\n998\npart 9999"   # 13 characters from each end
    few = [{"type": "text", "text": "first"}, {"type": "text", "text": "last"}]
    assert request_text(chat({"role": "user", "content": few}), "last-user", 100, 100) == \
        "first\nlast"


def test_invalid_unicode_is_replaced_not_raised() -> None:
    assert clean_text(b"caf\xc3\xa9 \xff\xfe ok", 100) == "café \ufffd\ufffd ok"
    lone_surrogate = "bad \ud800 text"
    cleaned = clean_text(lone_surrogate, 100)
    assert cleaned == "bad ? text"
    cleaned.encode("utf-8")   # valid now


def test_malformed_messages_are_skipped() -> None:
    messages: list[Any] = ["not a mapping", {"role": "user", "content": 5},
                           {"role": "user", "content": [{"type": "text", "text": 7}]}]
    weird = RoutingRequest(request_id="r", model="m", messages=messages)
    assert request_text(weird, "all-user", 100) == ""


def test_responses_media_marks_are_no_text() -> None:
    # router.protocol reads a Responses API message's parts as one string, an image as a
    # mark holding a digest: an image alone was classified by the digest's hex digits
    from router.protocol import parse_request

    def responses(content: list[dict[str, Any]]) -> RoutingRequest:
        body = {"model": "m", "input": [{"role": "user", "content": content}]}
        return parse_request(json.dumps(body).encode(), "/v1/responses", "r", {}, 0.0).routing

    image = {"type": "input_image", "image_url": "data:image/png;base64," + "iVBORw0KGgo" * 50}
    assert request_text(responses([image, image]), "last-user", 1024, 496) == ""
    with_text = responses([{"type": "input_text", "text": "Solve 2x = 4"}, image,
                           {"type": "input_text", "text": "for x"}])
    assert request_text(with_text, "last-user", 1024) == "Solve 2x = 4 for x"
    # a mark cut by the head's end or the tail's start leaves nothing of itself
    long = responses([{"type": "input_text", "text": "a" * 20}, image,
                      {"type": "input_text", "text": "b" * 20}])
    assert set(request_text(long, "last-user", 24, 4)) <= {"a", "b", "\n", " "}


def test_a_private_use_character_of_the_users_takes_no_words_with_it() -> None:
    """U+E000 (a Nerd Fonts glyph) in a plain chat deleted the rest of its line, and a
    U+E001 at a line's start the line's head: words the classifier never saw."""
    text = ("my prompt shows \ue000 then: refactor this Rust function\n"
            "\ue001 marks a todo: summarise the python traceback")
    request = RoutingRequest(request_id="r", model="m",
                             messages=[{"role": "user", "content": text}])
    seen = request_text(request, "last-user", 1024)
    # (a lone U+E001 opening a line reads as the end of a cut mark: it alone goes)
    assert "\ue000 then: refactor this Rust function\n" in seen
    assert seen.endswith(" marks a todo: summarise the python traceback")
    mark = "\ue000image:0123456789abcdef\ue001"
    for cut, left in ((f"see {mark} now", "see   now"), (f"abc {mark[:9]}", "abc"),
                      (f"{mark[3:]} tail", "tail"), (f"x\n{mark[-1:]} y", "x\n  y")):
        request = RoutingRequest(request_id="r", model="m",
                                 messages=[{"role": "user", "content": cut}])
        assert request_text(request, "last-user", 1024) == left, cut
