"""router/body_values.py: a body's JSON values are bounded before it is parsed, by commas and
opening brackets, those inside strings left out before a body of few strings is refused."""

from __future__ import annotations

import aiohttp
import orjson
import pytest

from router.body_values import (
    COUNTED_FROM_BYTES,
    EXACT_FROM_STRINGS,
    check_body_values,
    separators_inside_strings,
    strings_in,
    values_at_most,
)
from router.errors import RequestTooLarge
from tests.router.gateway_support import MODEL, RouterFactory, subset
from workers.fleet import FleetConfig


def _held(value: object) -> int:
    """Containers, their items and members' values, counted."""
    if isinstance(value, list):
        return 1 + sum(map(_held, value))
    if isinstance(value, dict):
        return 1 + sum(map(_held, value.values()))
    return 1


@pytest.mark.parametrize("value", [
    [], [1], [1, 2, 3], {"a": [1, {"b": "c"}], "d": None}, [[1, 2], [3], []],
    ["a, b", "[{", 'quoted " , {'], {"k": 1.5e3, "l": [True, False]},
])
def test_the_bound_outside_strings_is_at_least_the_values_held(value: object) -> None:
    """Every value but a container's first follows a comma: commas and opening brackets
    plus one are at least the values a body holds."""
    body = orjson.dumps(value)
    outside = values_at_most(body) - separators_inside_strings(body)
    assert outside >= _held(value)


def test_the_separators_inside_strings_and_the_strings_are_counted() -> None:
    body = orjson.dumps({"prompt": 'a, [b], {c}, "quoted, [x]" \\ , ', "n": [1, "x,"]})
    assert separators_inside_strings(body) == 8 + 1      # the prompt's, and "x,"'s comma
    assert strings_in(body) == 5        # at most: two names, two values, two escaped quotes


def test_a_body_of_tiny_items_is_refused_and_a_long_text_of_commas_is_not() -> None:
    tiny = b'{"x": [' + b"{}," * COUNTED_FROM_BYTES + b"{}]}"
    with pytest.raises(RequestTooLarge) as refused:
        check_body_values(tiny, limit=1_000_000)
    assert refused.value.status == 413
    assert "more than the router's limit of 1,000,000 JSON values" in str(refused.value)
    strings = b'{"x": [' + b'"ab",' * COUNTED_FROM_BYTES + b'"ab"]}'     # refused unwalked
    assert strings_in(strings) > EXACT_FROM_STRINGS
    with pytest.raises(RequestTooLarge):
        check_body_values(strings, limit=1_000_000)
    text = orjson.dumps({"prompt": "one, two, [three], {four}, " * 200_000})
    assert values_at_most(text) > 1_000_000
    check_body_values(text, limit=1_000_000)          # its commas are the text's
    documents = orjson.dumps({"input": ["a, b, c, d, e, f, g, h, i"] * 150_000})
    assert values_at_most(documents) > 1_000_000
    check_body_values(documents, limit=1_000_000)     # 150,000 values, 1.2 million commas
    check_body_values(b"[" + b"{}," * 1000 + b"{}]", limit=10)     # small: not counted


@pytest.mark.integration
@pytest.mark.parametrize("path", ["/v1/completions", "/tokenize"])
async def test_the_router_refuses_a_body_past_its_limit_and_keeps_serving(
        emulated_fleet: FleetConfig, make_router: RouterFactory, path: str) -> None:
    """--max-body-values: a generation and a utility request alike, refused unparsed in the
    OpenAI error shape; a body under the limit and a small one are served."""
    router = await make_router(subset(emulated_fleet, ["h100-fast"]), max_body_values=100_000)
    ids = b'{"model": "%s", "max_tokens": 1, "prompt": [%s]}'
    past = ids % (MODEL.encode(), b",".join([b"1000"] * 250_000))        # 1.2 MB
    within = orjson.dumps({"model": MODEL, "max_tokens": 1,
                           "prompt": "one, two, three, " * 70_000})    # its commas: the text's
    async with aiohttp.ClientSession() as session:
        async with session.post(router.url + path, data=past,
                                headers={"Content-Type": "application/json"}) as resp:
            assert resp.status == 413
            error = (await resp.json())["error"]
            assert error["code"] == "request_too_large"
            assert "more than the router's limit of 100,000 JSON values" in error["message"]
        async with session.post(router.url + path, data=within,
                                headers={"Content-Type": "application/json"}) as resp:
            assert resp.status != 413, await resp.text()
        small = {"model": MODEL, "max_tokens": 1, "prompt": "hi"}
        async with session.post(router.url + path, json=small) as resp:
            assert resp.status == 200


def test_strings_of_escaped_backslashes_are_counted_as_strings() -> None:
    """Quotes after an escaped backslash were taken for escaped ones: a body of millions of
    ``"\\\\"`` counted as holding no string, and was walked whole."""
    body = b'{"x": [' + b'"\\\\",' * 300_000 + b'"\\\\"]}'
    assert strings_in(body) > EXACT_FROM_STRINGS
    with pytest.raises(RequestTooLarge):
        check_body_values(body, limit=100_000)


def test_a_string_left_open_runs_to_the_end_and_escapes_pair_left_to_right() -> None:
    """A regular expression for a closed string, tried at each quote of a body of unclosed
    ones (``"`` and escaped quotes, then commas), failed and started again at every quote:
    minutes for a 2 MB body, with the event loop held. An open string now runs to the end."""
    assert separators_inside_strings(b'"' + b'\\"' * 1000 + b",,,") == 3
    assert separators_inside_strings(b'["a\\\\", ",", "\\\\\\",[", {}]') == 1 + 2
    body = b'"' + b'\\"' * 2000 + b"," * 2_100_000
    with pytest.raises(RequestTooLarge):
        check_body_values(b"[" + b"0," * 1_100_000 + b"0]", limit=1_000_000)
    check_body_values(body, limit=1_000_000)      # its commas are inside its open string
