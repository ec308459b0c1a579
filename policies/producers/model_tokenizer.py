"""A served model's own tokenizer and chat template, so kvroute counts and hashes as vLLM does.

``ModelTokenizer.from_dir(path)`` reads a HuggingFace model folder (the one vLLM serves):
``tokenizer.json`` (loaded with ``tokenizers``, truncation and padding switched off: some
files ship ``truncation.max_length = 128``, which would cut every long prompt to one block)
and ``tokenizer_config.json`` (its ``chat_template`` and special tokens). vLLM renders chat
messages with that Jinja template and tokenizes the result with ``add_special_tokens=False``;
completions prompts are tokenized with ``add_special_tokens=True``. ``chat_ids`` and
``prompt_ids`` do the same here.

The template is rendered the way ``transformers`` does it: a sandboxed Jinja environment with
``trim_blocks`` and ``lstrip_blocks``, the ``loopcontrols`` extension, ``raise_exception`` and
``strftime_now``, and the tokenizer's special tokens (``bos_token``, ``eos_token``, ...) as
variables. Message contents given as lists of parts are joined (text parts, ``\\n``), as
vLLM's default "string" content format does.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from policies.producers.chat_template import message_text, tool_call_arguments

SPECIAL_TOKEN_KEYS = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token",
                      "cls_token", "mask_token")


# texts from this long are encoded with the GIL let go (``encode_batch``, some 25 µs more a
# call): the tokens producer tokenizes them in a thread (its ``offload_min_chars`` default),
# shorter ones on the event loop, where the GIL is the loop's anyway
GIL_FREE_MIN_CHARS = 16_384


class ModelTokenizerError(ValueError):
    """A model folder lacks a usable tokenizer or chat template."""


class ModelTokenizer:
    """Tokenizer + chat template of one model folder (thread-safe for encoding)."""

    def __init__(self, tokenizer_json: Path, tokenizer_config: Mapping[str, Any]) -> None:
        from tokenizers import Tokenizer

        try:
            tokenizer = Tokenizer.from_file(str(tokenizer_json))
        except Exception as exc:  # the Rust error types are not importable
            raise ModelTokenizerError(f"cannot load tokenizer {tokenizer_json}: {exc}") from exc
        tokenizer.no_truncation()
        tokenizer.no_padding()
        self._tokenizer = tokenizer
        # vLLM's bound of a text's characters: its window times this (``max_chars_per_token``,
        # the longest entry of the vocabulary, added tokens included)
        self.max_chars_per_token = max(map(len, tokenizer.get_vocab(with_added_tokens=True)),
                                       default=0)
        template = tokenizer_config.get("chat_template")
        if isinstance(template, list):   # named templates: take "default"
            named = {t.get("name"): t.get("template") for t in template if isinstance(t, dict)}
            template = named.get("default")
        self.chat_template: str | None = template if isinstance(template, str) else None
        self.special_tokens = {key: _token_text(tokenizer_config.get(key))
                               for key in SPECIAL_TOKEN_KEYS}
        self._compiled: Any = None

    @classmethod
    def from_dir(cls, path: str | Path) -> ModelTokenizer:
        folder = Path(path)
        tokenizer_json = folder / "tokenizer.json"
        if not tokenizer_json.is_file():
            raise ModelTokenizerError(f"{folder}: no tokenizer.json")
        config: Mapping[str, Any] = {}
        config_path = folder / "tokenizer_config.json"
        if config_path.is_file():
            try:
                loaded = json.loads(config_path.read_text())
            except (OSError, ValueError) as exc:
                raise ModelTokenizerError(f"{config_path}: unreadable: {exc}") from exc
            config = loaded if isinstance(loaded, Mapping) else {}
        template_path = folder / "chat_template.jinja"
        if template_path.is_file():      # newer transformers save the template beside it
            config = {**config, "chat_template": template_path.read_text()}
        return cls(tokenizer_json, config)

    def render_chat(self, messages: Sequence[Mapping[str, Any]],
                    add_generation_prompt: bool = True,
                    tools: Sequence[Any] | None = None) -> str:
        """The model's template over ``messages`` (and the ``tools`` offered, as vLLM hands
        them to the template)."""
        if self.chat_template is None:
            raise ModelTokenizerError("the model has no chat template")
        if self._compiled is None:
            self._compiled = _environment().from_string(self.chat_template)
        normalized = [_for_template(m) if isinstance(m, Mapping)
                      else {"role": "user", "content": str(m)} for m in messages]
        text: str = self._compiled.render(messages=normalized,
                                          add_generation_prompt=add_generation_prompt,
                                          tools=list(tools) if tools else None,
                                          **self.special_tokens)
        return text

    def encode(self, text: str, add_special_tokens: bool) -> list[int]:
        ids: list[int]
        if len(text) < GIL_FREE_MIN_CHARS:       # (tokenized on the event loop anyway)
            ids = self._tokenizer.encode(text, add_special_tokens=add_special_tokens).ids
            return ids
        # encode_batch lets go of the GIL while it runs (encode holds it: a 5 MB prompt
        # tokenized in a thread stopped the event loop for seconds)
        [encoding] = self._tokenizer.encode_batch([text], add_special_tokens=add_special_tokens)
        ids = encoding.ids
        return ids

    def chat_ids(self, messages: Sequence[Mapping[str, Any]]) -> list[int]:
        """What vLLM's /v1/chat/completions feeds the engine for ``messages``."""
        return self.encode(self.render_chat(messages), add_special_tokens=False)

    def prompt_ids(self, prompt: str) -> list[int]:
        """What vLLM's /v1/completions feeds the engine for a text prompt."""
        return self.encode(prompt, add_special_tokens=True)


def _for_template(message: Mapping[str, Any]) -> dict[str, Any]:
    """``message`` as vLLM hands it to a chat template: its content as text, an assistant's
    tool calls with their arguments parsed into objects (``_postprocess_messages``)."""
    out = {**message, "content": message_text(message.get("content"))}
    calls = message.get("tool_calls")
    if message.get("role") == "assistant" and isinstance(calls, list):
        out["tool_calls"] = [
            {**call, "function": {**call["function"], "arguments": tool_call_arguments(
                call["function"].get("arguments"))}}
            if isinstance(call, Mapping) and isinstance(call.get("function"), Mapping)
            else call for call in calls]
    return out


def _token_text(value: Any) -> str | None:
    if isinstance(value, Mapping):          # AddedToken serialized as a mapping
        content = value.get("content")
        return content if isinstance(content, str) else None
    return value if isinstance(value, str) else None


def _environment() -> Any:
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message: str) -> None:
        raise ModelTokenizerError(f"chat template: {message}")

    def strftime_now(fmt: str) -> str:
        return datetime.now().strftime(fmt)

    def tojson(value: Any, ensure_ascii: bool = False, indent: int | None = None,
               separators: tuple[str, str] | None = None, sort_keys: bool = False) -> str:
        # transformers' own filter, not Jinja2's (which sorts keys and escapes non-ASCII and
        # HTML characters): a tool's Japanese description is its characters, not \uXXXX
        return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent,
                          separators=separators, sort_keys=sort_keys)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=["jinja2.ext.loopcontrols"])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env
