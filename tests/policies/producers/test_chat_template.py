"""policies/producers/chat_template.py: the one Llama-3-style template."""

from __future__ import annotations

from policies.producers.chat_template import message_text, render_chat


def test_renders_roles_and_generation_prompt() -> None:
    text = render_chat([{"role": "system", "content": "Be brief."},
                        {"role": "user", "content": "Hi"}])
    assert text == ("<|begin_of_text|>"
                    "<|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>"
                    "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
                    "<|start_header_id|>assistant<|end_header_id|>\n\n")


def test_without_generation_prompt() -> None:
    assert render_chat([{"role": "user", "content": "x"}], add_generation_prompt=False) == (
        "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nx<|eot_id|>")


def test_odd_contents_never_raise() -> None:
    assert message_text(None) == ""
    assert message_text([{"type": "text", "text": "a"}, {"type": "image_url", "image_url": {}},
                         {"type": "text", "text": "b"}]) == "a\nb"
    assert message_text(42) == "42"
    text = render_chat([{"content": "no role"}, {"role": "assistant", "content": None,
                                                 "tool_calls": [{"id": "t"}]}])
    assert text == ("<|begin_of_text|>"
                    "<|start_header_id|>user<|end_header_id|>\n\nno role<|eot_id|>"
                    "<|start_header_id|>assistant<|end_header_id|>\n\n<|eot_id|>"
                    "<|start_header_id|>assistant<|end_header_id|>\n\n")
