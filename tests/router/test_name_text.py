"""``router.name_text``: the names people write in their own scripts are names; text shown as
other text, or cut into lines, is not."""

from __future__ import annotations

import pytest

from router.name_text import is_name_text


@pytest.mark.parametrize("name", [
    "acme", "東京", "شرکت\u200cما", "\U0001f468\u200d\U0001f469\u200d\U0001f467",
    "काम\u200dगार", "full\u3000width", "a b", "\u2764\ufe0f"],
    ids=["ascii", "cjk", "zwnj", "zwj-emoji", "zwj-hindi", "ideographic-space", "space",
         "variation-selector"])
def test_names_in_every_script_are_names(name: str) -> None:
    assert is_name_text(name)


@pytest.mark.parametrize("name", [
    "a\tb", "a\nb", "a\u2028b", "a\x85b", "ab\u202ecod.exe", "a\u2066b", "a\u200fb",
    "a\ud800b", "a\ue000b", "a\U000e0000b", "acme\u200b", "acme\U000e0041", "\ufeffbom",
    "soft\u00adhyphen", "\u200d", "\u3000", "  "],
    ids=["tab", "newline", "line-separator", "next-line", "rlo", "isolate", "rlm",
         "lone-surrogate", "private-use", "unassigned", "zero-width-space", "tag", "bom",
         "soft-hyphen", "only-a-joiner", "only-a-space", "only-spaces"])
def test_controls_separators_and_bidi_controls_are_not(name: str) -> None:
    assert not is_name_text(name)
