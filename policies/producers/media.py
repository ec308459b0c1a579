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
  16 KiB of it (a 20 MB image is neither copied nor hashed whole on the event loop: its
  length and 64 slices spread over it; two uncompressed payloads of one length that differ
  only between the slices, raw audio say, take one digest);
* ``encode_with_media(encode, text, media_tokens, listed)``: ``encode(text)`` with each mark
  turned into a run of ``media_tokens[kind]`` copies of one id drawn from its digest
  (negative: no tokenizer's), the text between marks encoded piece by piece, as an
  ``Encoded``: the ids, the media tokens counted but not listed, and the media tokens in
  all. At most ``listed`` media ids are listed in all (at least one per item, so prompts
  around different items still part there): a body of 20,000 video parts (a megabyte) is
  92 million tokens that no one lists or hashes;
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
from typing import Any, NamedTuple

MARK_OPEN = "\ue000"
MARK_CLOSE = "\ue001"
_MARK = re.compile("\ue000(image|audio|video):([0-9a-f]{16})\ue001")

DEFAULT_MEDIA_TOKENS: Mapping[str, int] = {"image": 576, "audio": 750, "video": 4608}
MEDIA_KINDS = tuple(DEFAULT_MEDIA_TOKENS)

# a string longer than this is hashed by its length and SAMPLES slices of SLICE_CHARS
SAMPLED_CHARS = 16 * 1024
SAMPLES = 64
SLICE_CHARS = 256

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
    """16 hex digits of the payload (see the module docstring): a string by its length and
    what ``_feed`` reads of it, a mapping by its keys and values, a list by its items."""
    if isinstance(payload, Mapping) and isinstance(payload.get("url"), str):
        payload = payload["url"]        # {"url": ..., "detail": ...}: the image is the URL
    digest = hashlib.blake2b(digest_size=8)
    _feed(digest, payload, 0)
    return digest.hexdigest()


def _feed(digest: Any, value: Any, depth: int) -> None:
    """Feed ``value`` to ``digest``: a string of up to ``SAMPLED_CHARS`` whole, a longer one
    by its length and ``SAMPLES`` slices spread over it (read in place: a 20 MB data URL is
    neither copied nor encoded whole); containers item by item, 8 levels deep at most."""
    if isinstance(value, str):
        size = len(value)
        digest.update(b"s%d:" % size)
        if size <= SAMPLED_CHARS:
            digest.update(value.encode("utf-8", "surrogatepass"))
            return
        last = size - SLICE_CHARS
        for k in range(SAMPLES):
            start = last * k // (SAMPLES - 1)
            digest.update(value[start:start + SLICE_CHARS].encode("utf-8", "surrogatepass"))
    elif isinstance(value, Mapping) and depth < 8:
        digest.update(b"m%d:" % len(value))
        keys = sorted(value, key=str) if len(value) <= SAMPLES else list(value)[:SAMPLES]
        for key in keys:
            _feed(digest, str(key), depth + 1)
            _feed(digest, value[key], depth + 1)
    elif isinstance(value, (list, tuple)) and depth < 8:
        digest.update(b"l%d:" % len(value))
        for item in value[:SAMPLES]:
            _feed(digest, item, depth + 1)
    elif value is None or isinstance(value, (bool, int, float)):
        digest.update(repr(value).encode())
    else:
        digest.update(type(value).__name__.encode())


def media_token_id(digest: str) -> int:
    """The id an item's run of tokens repeats: negative (no tokenizer's), from its digest."""
    return -1 - (int(digest[:8], 16) & 0x3FFFFFFF)


class Encoded(NamedTuple):
    ids: array[int]       # the text's ids and the media runs listed
    unlisted: int         # media tokens counted but not in ``ids``
    media: int            # media tokens in all (listed or not)


def encode_with_media(encode: Callable[[str], array[int]], text: str,
                      media_tokens: Mapping[str, int], listed: int) -> Encoded:
    """``encode(text)``, each media mark in it a run of ``media_tokens[kind]`` tokens, of
    which at most ``listed`` in all are in the ids (see the module docstring; the ids are
    ``encode``'s own array when the text holds no mark)."""
    if MARK_OPEN not in text:         # O(1) for an ASCII text: the mark is wider than it
        return Encoded(encode(text), 0, 0)
    out = array("i")
    start = unlisted = media = 0
    for found in _MARK.finditer(text):
        if found.start() > start:
            out.extend(encode(text[start:found.start()]))
        kind, digest = found.groups()
        count = media_tokens.get(kind, 0)
        shown = min(count, max(listed, 1)) if count else 0
        out.extend(array("i", [media_token_id(digest)]) * shown)
        listed -= shown
        unlisted += count - shown
        media += count
        start = found.end()
    if start < len(text):
        out.extend(encode(text[start:]))
    return Encoded(out, unlisted, media)


def without_marks(text: str) -> str:
    """``text`` with its media marks left out (text shown to a client: an echoed prompt)."""
    return _MARK.sub("", text) if MARK_OPEN in text else text

