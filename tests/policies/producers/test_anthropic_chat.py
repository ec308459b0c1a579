"""policies/producers/anthropic_chat.py: a Messages API turn becomes the chat messages vLLM's
own conversion makes (``vllm/entrypoints/anthropic/serving.py``), and the shared template
counts tool calls."""

from __future__ import annotations

import json

from policies.producers.anthropic_chat import chat_messages, system_text
from policies.producers.chat_template import render_chat


def test_system_blocks_are_joined_and_billing_headers_left_out() -> None:
    assert system_text("Be brief.") == "Be brief."
    assert system_text([{"type": "text", "text": "x-anthropic-billing-header: cc=1"},
                        {"type": "text", "text": "Be "}, {"type": "text", "text": "brief."},
                        {"type": "image"}]) == "Be brief."
    assert chat_messages(None, [{"role": "system", "content": "Inline."},
                                {"role": "user", "content": "hi"}]) == [
        {"role": "system", "content": "Inline."}, {"role": "user", "content": "hi"}]


def test_tool_calls_and_results_become_vllms_chat_messages() -> None:
    converted = chat_messages("Sys", [
        {"role": "user", "content": [{"type": "text", "text": "a"},
                                     {"type": "text", "text": "b"}]},
        {"role": "assistant", "content": [
            {"type": "text", "text": "Looking."},
            {"type": "tool_use", "id": "t1", "name": "read", "input": {"path": "/x"}}]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "t1",
             "content": [{"type": "text", "text": "line 1"}, {"type": "image"},
                         {"type": "text", "text": "line 2"}]},
            {"type": "text", "text": "And now?"}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t2",
                                      "content": "only a result"}]},
        {"role": "assistant", "content": [{"type": "tool_result", "content": "odd"}]},
    ])
    assert converted == [
        {"role": "system", "content": "Sys"},
        {"role": "user", "content": [{"type": "text", "text": "a"},
                                     {"type": "text", "text": "b"}]},
        {"role": "assistant", "content": "Looking.", "tool_calls": [
            {"id": "t1", "type": "function",
             "function": {"name": "read", "arguments": json.dumps({"path": "/x"})}}]},
        {"role": "tool", "tool_call_id": "t1", "content": "line 1\nline 2"},
        {"role": "user", "content": "And now?"},
        {"role": "tool", "tool_call_id": "t2", "content": "only a result"},  # its user: none
        {"role": "assistant", "content": "Tool result: odd"},
    ]


def test_the_shared_template_joins_text_parts_and_writes_tool_calls() -> None:
    text = render_chat(chat_messages(None, [
        {"role": "user", "content": [{"type": "text", "text": "a"},
                                     {"type": "text", "text": "b"}]},
        {"role": "assistant", "content": [
            {"type": "tool_use", "id": "t1", "name": "read", "input": {"path": "/x"}}]}]))
    assert "<|end_header_id|>\n\na\nb<|eot_id|>" in text
    assert ('<|end_header_id|>\n\n{"name": "read", "parameters": {"path": "/x"}}<|eot_id|>'
            in text)


def test_a_tool_input_nested_past_the_recursion_limit_is_written_as_an_empty_object() -> None:
    """orjson reads 1,024 levels, json.dumps writes fewer: the conversion raised (a 500 and a
    traceback in the log for any client sending one)."""
    import orjson

    deep = orjson.loads('{"a":' * 1010 + "{}" + "}" * 1010)     # as the router reads a body
    converted = chat_messages(None, [
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "n",
                                           "input": deep}]},
        {"role": "user", "content": "x"}])
    assert converted[0]["tool_calls"][0]["function"]["arguments"] == "{}"
    assert '"parameters": {}' in render_chat(converted, tools=[deep])


def test_an_image_block_stands_in_its_place() -> None:
    """Image blocks added nothing: another image with the same text was the same prompt."""
    from policies.producers.chat_template import message_text
    from policies.producers.media import media_mark

    source = {"type": "base64", "media_type": "image/png", "data": "Y2F0"}
    [alone] = chat_messages(None, [{"role": "user", "content": [
        {"type": "image", "source": source}]}])
    assert message_text(alone["content"]) == media_mark("image", source)
    [both] = chat_messages(None, [{"role": "user", "content": [
        {"type": "image", "source": source}, {"type": "text", "text": "what is it?"}]}])
    assert message_text(both["content"]) == f"{media_mark('image', source)}\nwhat is it?"

