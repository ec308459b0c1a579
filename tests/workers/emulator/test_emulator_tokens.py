"""workers/emulator/tokens.py: ids equal tiktoken's; long prompts are cached in chunks."""

from __future__ import annotations

import tiktoken

from policies.producers.chat_template import render_chat
from workers.emulator.tokens import CHUNK_CHARS, ENCODING_NAME, Tokenizer

ENCODING = tiktoken.get_encoding(ENCODING_NAME)


def _history(turns: int) -> list[dict[str, str]]:
    return [{"role": "user" if n % 2 == 0 else "assistant",
             "content": "\n".join(f"Turn {n}, line {i}: <|endoftext|> costs {i * n} tokens."
                                  for i in range(12))}
            for n in range(turns)]


def test_ids_equal_tiktoken_with_special_tokens_as_text_short_and_long() -> None:
    tokenizer = Tokenizer()
    short = "hello <|endoftext|> world"
    assert tokenizer.encode(short) == ENCODING.encode(short, disallowed_special=())
    long = render_chat(_history(10))
    assert len(long) > 2 * CHUNK_CHARS
    ids = tokenizer.encode(long)
    assert ids == ENCODING.encode(long, disallowed_special=())
    ids.append(-1)                                 # a fresh list: the cache is untouched
    assert tokenizer.encode(long) == ENCODING.encode(long, disallowed_special=())


def test_a_conversations_next_turn_reuses_the_cached_history() -> None:
    tokenizer = Tokenizer()
    earlier = render_chat(_history(10))
    tokenizer.encode(earlier)
    held = tokenizer._cache.total_tokens
    later = render_chat(_history(11))
    assert tokenizer.encode(later) == ENCODING.encode(later, disallowed_special=())
    new_tokens = len(ENCODING.encode_ordinary(later[len(earlier) - 64:]))
    # only the history's last chunk (at most about CHUNK_CHARS characters) and the new
    # message were tokenized and cached again
    assert 0 < tokenizer._cache.total_tokens - held <= new_tokens + CHUNK_CHARS // 2
