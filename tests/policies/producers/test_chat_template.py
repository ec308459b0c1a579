"""policies/producers/chat_template.py: the one Llama-3-style template."""

from __future__ import annotations

from policies.producers.chat_template import message_text, part_text, render_chat
from policies.producers.media import media_mark


def test_renders_roles_and_generation_prompt() -> None:
    text = render_chat([{"role": "system", "content": "Be brief."},
                        {"role": "user", "content": "Hi"}])
    assert text == ("<|begin_of_text|>"
                    "<|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>"
                    "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
                    "<|start_header_id|>assistant<|end_header_id|>\n\n")


def test_text_nested_past_the_recursion_limit_is_no_text() -> None:
    """A text field holding a container is not text (vLLM refuses it); one nested 1,000 deep
    has no ``str`` (RecursionError), so it is never converted."""
    deep: list[object] = []
    for _ in range(1000):
        deep = [deep]
    assert message_text([{"type": "text", "text": deep}, {"type": "text", "text": "b"}]) == "\nb"
    assert message_text({"a": deep}) == ""
    assert part_text(3) == "3" and part_text(None) == "" and part_text(deep) == ""


def test_without_generation_prompt() -> None:
    assert render_chat([{"role": "user", "content": "x"}], add_generation_prompt=False) == (
        "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nx<|eot_id|>")


def test_odd_contents_never_raise() -> None:
    assert message_text(None) == ""
    assert message_text([{"type": "text", "text": "a"}, {"type": "image_url", "image_url": {}},
                         {"type": "text", "text": "b"}]) == f"a\n{media_mark('image', {})}\nb"
    assert message_text(42) == "42"
    text = render_chat([{"content": "no role"}, {"role": "assistant", "content": None,
                                                 "tool_calls": [{"id": "t"}]}])
    assert text == ("<|begin_of_text|>"
                    "<|start_header_id|>user<|end_header_id|>\n\nno role<|eot_id|>"
                    "<|start_header_id|>assistant<|end_header_id|>\n\n<|eot_id|>"
                    "<|start_header_id|>assistant<|end_header_id|>\n\n")


def test_every_text_part_vllm_reads_is_text_and_media_items_stand_in_their_place() -> None:
    """``input_text``, ``output_text`` and ``refusal`` parts were left out (a 601-token
    prompt counted 42), and so was every image, audio and video item."""
    content = [{"type": "input_text", "text": "one"}, {"type": "output_text", "text": "two"},
               {"type": "refusal", "refusal": "three"},
               {"type": "image_url", "image_url": {"url": "https://x/cat.png"}},
               {"type": "input_audio", "input_audio": {"data": "UklGR", "format": "wav"}},
               {"type": "video_url", "video_url": {"url": "https://x/v.mp4"}},
               {"type": "thinking", "thinking": "not rendered"}]
    assert message_text(content).split("\n") == [
        "one", "two", "three", media_mark("image", "https://x/cat.png"),
        media_mark("audio", {"data": "UklGR", "format": "wav"}),
        media_mark("video", "https://x/v.mp4")]


def test_tools_and_tool_calls_keep_their_text_as_a_templates_tojson_writes_it() -> None:
    """A Japanese tool was written as \\uXXXX escapes (json.dumps' default), where Llama
    3.1's template (transformers' tojson) writes its characters: 664 tokens for a prompt the
    engine counts 322 for, and a 3,000-character description refused as over the window."""
    import json

    tool = {"type": "function", "function": {"name": "天気", "description": "東京の天気 <b> & 'x'"}}
    text = render_chat([{"role": "user", "content": "東京の天気は？"}], tools=[tool])
    assert json.dumps(tool, indent=4, ensure_ascii=False) in text
    assert "\\u" not in text
    call = render_chat([{"role": "assistant", "content": None, "tool_calls": [
        {"id": "t", "function": {"name": "天気", "arguments": '{"city":"\\u6771\\u4eac"}'}},
        {"id": "u", "function": {"name": "none", "arguments": ""}},
        {"id": "v", "function": {"name": "bad", "arguments": "{not json"}}]}],
        add_generation_prompt=False)
    # vLLM parses a call's arguments and the template's tojson writes them
    assert ('{"name": "天気", "parameters": {"city": "東京"}}'
            '{"name": "none", "parameters": {}}{"name": "bad", "parameters": {not json}') in call


def test_the_tools_text_is_written_once_for_the_same_tools() -> None:
    """An agent sends the same tools with every turn: writing them with ``json.dumps``'
    indent took 2.2 ms of the tokens producer's 2.3 ms for 30 tools, on every request."""
    from policies.producers.chat_template import ToolsTextCache, write_tools

    tools = [{"type": "function", "function": {"name": f"f{i}", "description": "é",
                                               "parameters": {"n": i}}} for i in range(3)]
    messages = [{"role": "user", "content": "hi"}]
    cache = ToolsTextCache(max_entries=2, max_chars=10_000)
    assert (render_chat(messages, tools=tools, tools_text=cache)
            == render_chat(messages, tools=tools))          # an empty cache is still used
    assert len(cache) == 1 and cache(list(tools)) == write_tools(tools)   # equal: one entry
    assert len(cache) == 1
    other = [{**tools[0], "function": {**tools[0]["function"], "name": "g"}}]
    cache(other)
    assert len(cache) == 2 and cache(other) == write_tools(other)
    kept, other_text = cache(tools), cache(other)
    assert cache(tools) is kept                      # used last now: `other` goes first
    third = [{"type": "function", "function": {"name": "h"}}]
    cache(third)
    assert len(cache) == 2 and cache(tools) is kept        # kept: the very same text
    assert cache(other) is not other_text                  # written again
    long = [{"type": "function", "function": {"name": "x" * 20_000}}]
    assert cache(long) == write_tools(long) and len(cache) == 2      # too long to keep
    huge = [{"type": "function", "function": {"name": "f", "parameters": {"n": 1 << 70}}}]
    assert cache(huge) == write_tools(huge)          # not orjson's: written, not kept
