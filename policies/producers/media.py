"""Images, audio and video in a prompt: where they are, which they are, and the tokens they take.

A vision or audio model's engine turns each media item of a chat into a run of placeholder
tokens (an image is hundreds to thousands of them) and keys the KV-cache blocks that hold it
with a hash of the item (vLLM's ``mm_hash`` extra key): the same text around another image
shares no block after the image's place. The router does not decode media; it stands each
item in for such a run, so that its token counts, time and cost estimates and context-length
checks see the item's size, and its prefix hashes part where the items differ:

* ``media_mark(kind, payload)``: the text a chat renderer (``chat_template.message_text``)
  writes in an item's place: ``"\\ue000image:<digest>\\ue001"``, the digest (16 hex digits)
  of the item's payload (its URL or data URL, its embeddings, its source), of at most
  ``SAMPLED_BYTES`` of it (a 20 MB image is not hashed whole on the event loop: its length
  and three slices);
* ``encode_with_media(encode, text, media_tokens)``: ``encode(text)`` with each mark turned
  into ``media_tokens[kind]`` copies of one id drawn from its digest (negative: no
  tokenizer's), the text between marks encoded piece by piece;
* ``part_media(part)``: the (kind, payload) of a content part that is an item: OpenAI chat
  (``image_url``, ``input_audio``, ``audio_url``, ``video_url``, the ``*_embeds`` parts),
  the Responses API (``input_image``, ``input_audio``) and Anthropic (``image``) shapes.

The token counts are estimates, the same for every model; a fleet's routing file sets its
own (``tokens`` producer, ``media_tokens``). The defaults: 576 for an image (LLaVA-1.5's 24 x
24 patches of a 336-pixel image), 750 for an audio clip (Qwen2-Audio's 25 a second for 30
seconds), 4,608 for a video (LLaVA-NeXT-Video's 32 frames of 144). Text never holds the
marks' private-use characters by accident; one a client writes is taken for an item.
"""

from __future__ import annotations

import hashlib
import re
from array import array
from collections.abc import Callable, Mapping
from typing import Any

import orjson

MARK_OPEN = "\ue000"
MARK_CLOSE = "\ue001"
_MARK = re.compile("\ue000(image|audio|video):([0-9a-f]{16})\ue001")

DEFAULT_MEDIA_TOKENS: Mapping[str, int] = {"image": 576, "audio": 750, "video": 4608}
MEDIA_KINDS = tuple(DEFAULT_MEDIA_TOKENS)

# a payload longer than this is hashed by its length and three slices of a third of it each
SAMPLED_BYTES = 48 * 1024

# content part type -> (kind, the field holding its payload)
_PART_TYPES: Mapping[str, tuple[str, str]] = {
    "image_url": ("image", "image_url"), "input_image": ("image", "image_url"),
    "image_embeds": ("image", "image_embeds"), "image_pil": ("image", "image_pil"),
    "image": ("image", "source"),                          # Anthropic's block
    "input_audio": ("audio", "input_audio"), "audio_url": ("audio", "audio_url"),
    "audio_embeds": ("audio", "audio_embeds"),
    "video_url": ("video", "video_url"), "video_embeds": ("video", "video_embeds"),
}


def part_media(part: Mapping[str, Any]) -> tuple[str, Any] | None:
    """(kind, payload) of a content part that is a media item, else None."""
    kind_and_field = _PART_TYPES.get(part.get("type"))  # type: ignore[arg-type]
    if kind_and_field is None:
        return None
    kind, field = kind_and_field
    payload = part.get(field)
    if kind == "image" and payload is None and part.get("type") == "input_image":
        payload = part.get("file_id")      # the Responses API's other way to name one
    return kind, payload


def media_mark(kind: str, payload: Any) -> str:
    """The text standing in for one item in a rendered prompt."""
    return f"{MARK_OPEN}{kind}:{payload_digest(payload)}{MARK_CLOSE}"


def payload_digest(payload: Any) -> str:
    """16 hex digits of the payload: a string (a URL, a data URL, base64) as it is, anything
    else as its JSON; past ``SAMPLED_BYTES``, its length and three slices."""
    if isinstance(payload, Mapping) and isinstance(payload.get("url"), str):
        payload = payload["url"]        # {"url": ..., "detail": ...}: the image is the URL
    if isinstance(payload, str):
        data = payload.encode("utf-8", "surrogatepass")
    else:
        try:
            data = orjson.dumps(payload, option=orjson.OPT_SORT_KEYS)
        except (TypeError, orjson.JSONEncodeError):
            data = repr(type(payload)).encode()
    digest = hashlib.blake2b(digest_size=8)
    if len(data) <= SAMPLED_BYTES:
        digest.update(data)
    else:
        third, middle = SAMPLED_BYTES // 3, len(data) // 2
        digest.update(len(data).to_bytes(8, "big"))
        digest.update(data[:third])
        digest.update(data[middle - third // 2:middle + third - third // 2])
        digest.update(data[-third:])
    return digest.hexdigest()


def media_token_id(digest: str) -> int:
    """The id an item's run of tokens repeats: negative (no tokenizer's), from its digest."""
    return -1 - (int(digest[:8], 16) & 0x3FFFFFFF)


def encode_with_media(encode: Callable[[str], array[int]], text: str,
                      media_tokens: Mapping[str, int]) -> array[int]:
    """``encode(text)``, each media mark in it a run of ``media_tokens[kind]`` tokens (an
    array of its own when the text holds a mark, else ``encode``'s own)."""
    if MARK_OPEN not in text:         # O(1) for an ASCII text: the mark is wider than it
        return encode(text)
    out = array("i")
    start = 0
    for found in _MARK.finditer(text):
        if found.start() > start:
            out.extend(encode(text[start:found.start()]))
        kind, digest = found.groups()
        out.extend(array("i", [media_token_id(digest)]) * media_tokens.get(kind, 0))
        start = found.end()
    if start < len(text):
        out.extend(encode(text[start:]))
    return out


def count_media(text: str) -> dict[str, int]:
    """How many items of each kind ``text`` holds."""
    counts: dict[str, int] = {}
    if MARK_OPEN in text:
        for found in _MARK.finditer(text):
            counts[found.group(1)] = counts.get(found.group(1), 0) + 1
    return counts
