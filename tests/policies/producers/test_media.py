"""policies/producers/media.py: which parts are media items, their marks and their runs of
tokens."""

from __future__ import annotations

from array import array

import pytest

from policies.producers.media import (
    SAMPLED_CHARS,
    encode_with_media,
    media_mark,
    media_token_id,
    part_media,
    payload_digest,
    without_marks,
)


def encode(text: str) -> array[int]:
    return array("i", map(ord, text))


@pytest.mark.parametrize(("part", "expected"), [
    ({"type": "image_url", "image_url": {"url": "u"}}, ("image", {"url": "u"})),
    ({"type": "input_image", "image_url": "u"}, ("image", "u")),
    ({"type": "input_image", "file_id": "f"}, ("image", "f")),
    ({"type": "image", "source": {"type": "url", "url": "u"}},
     ("image", {"type": "url", "url": "u"})),
    ({"type": "input_audio", "input_audio": {"data": "d"}}, ("audio", {"data": "d"})),
    ({"type": "audio_url", "audio_url": {"url": "a"}}, ("audio", {"url": "a"})),
    ({"type": "video_url", "video_url": {"url": "v"}}, ("video", {"url": "v"})),
    ({"type": "image_embeds", "image_embeds": "e"}, ("image", "e")),
    ({"type": "text", "text": "t"}, None),
    ({"type": "thinking"}, None),
    ({}, None),
])
def test_media_parts_of_every_api(part: dict[str, object],
                                  expected: tuple[str, object] | None) -> None:
    assert part_media(part) == expected


def test_a_url_is_the_same_item_with_or_without_its_detail() -> None:
    assert payload_digest({"url": "u", "detail": "low"}) == payload_digest("u")
    assert payload_digest("u") != payload_digest("v")
    assert len(payload_digest(None)) == len(payload_digest({"odd": object()})) == 16
    audio = {"data": "A" * 100_000, "format": "wav"}
    assert payload_digest(audio) != payload_digest({**audio, "format": "mp3"})
    assert payload_digest(audio) == payload_digest(dict(reversed(audio.items())))


def test_a_large_payload_is_told_apart_by_its_length_and_slices() -> None:
    base = "A" * (SAMPLED_CHARS * 10)
    middle = len(base) // 2
    # another image's bytes differ over kilobytes, which span a slice
    changed_middle = base[:middle] + "B" * 4096 + base[middle + 4096:]
    assert payload_digest(changed_middle) != payload_digest(base)
    # one character between two slices is not seen (the documented limit)
    between = len(base) // 64 // 2
    assert payload_digest(base[:between] + "B" + base[between + 1:]) == payload_digest(base)
    assert payload_digest(base + "A") != payload_digest(base)
    assert payload_digest("B" + base[1:]) != payload_digest(base)
    assert payload_digest(base[:-1] + "B") != payload_digest(base)


def test_each_mark_is_a_run_of_its_items_tokens_in_its_place() -> None:
    cat, dog = media_mark("image", "cat.png"), media_mark("image", "dog.png")
    clip = media_mark("audio", "clip.wav")
    counts = {"image": 3, "audio": 2, "video": 5}
    ids, unlisted, media = encode_with_media(encode, f"ab{cat}c{clip}{dog}", counts, 100)
    cat_id, dog_id = media_token_id(cat[7:23]), media_token_id(dog[7:23])
    clip_id = media_token_id(clip[7:23])
    assert list(ids) == [97, 98, cat_id, cat_id, cat_id, 99, clip_id, clip_id,
                         dog_id, dog_id, dog_id]
    assert (unlisted, media) == (0, 8)
    assert cat_id < 0 and dog_id < 0 and cat_id != dog_id
    plain = encode_with_media(encode, "plain", counts, 100)
    assert list(plain.ids) == [112, 108, 97, 105, 110] and plain[1:] == (0, 0)
    assert encode_with_media(encode, cat, {"image": 0}, 100) == (array("i"), 0, 0)


def test_past_the_listed_budget_each_item_is_one_id_and_the_rest_counted() -> None:
    """A megabyte of 20,000 video parts listed 92 million ids (gigabytes, seconds of
    hashing). Past the budget each item keeps one id, so what follows it still parts."""
    videos = "".join(media_mark("video", f"v{i}") for i in range(20_000))
    ids, unlisted, media = encode_with_media(encode, videos, {"video": 4608}, 10_000)
    assert media == 20_000 * 4608
    assert len(ids) == 10_000 + 20_000 - 3 and len(ids) + unlisted == media
    assert len(set(ids[-100:])) == 100           # the items past the budget: one id each
    assert without_marks(f"a{media_mark('video', 'x')}b") == "ab"
