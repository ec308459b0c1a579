"""Chats with images through the router to emulated workers: each image counts as its
tokens (``policies.producers.media``) for the router and the worker alike, and the same
text about another image is no cached prefix."""

from __future__ import annotations

from typing import Any

import aiohttp
import pytest

from tests.router.gateway_support import MODEL, RouterFactory, subset
from workers.fleet import FleetConfig

pytestmark = pytest.mark.integration


def image_chat(*urls: str, max_tokens: int = 4) -> dict[str, Any]:
    return {"model": MODEL, "max_tokens": max_tokens, "messages": [{"role": "user", "content": [
        *({"type": "image_url", "image_url": {"url": url}} for url in urls),
        {"type": "text", "text": "What is in this image?"}]}]}


async def test_images_count_and_part_the_prefix_for_the_router_and_the_worker(
        emulated_fleet: FleetConfig, make_router: RouterFactory) -> None:
    router = await make_router(subset(emulated_fleet, ["h100-fast", "a100-fast"]))
    async with aiohttp.ClientSession() as session:
        usage = []
        for url in ("https://x/cat.png", "https://x/dog.png", "https://x/cat.png"):
            async with session.post(router.url + "/v1/chat/completions",
                                    json=image_chat(url)) as resp:
                assert resp.status == 200
                usage.append((await resp.json())["usage"]["prompt_tokens"])
        async with session.get(router.url + "/debug/decisions?limit=3") as resp:
            decisions = (await resp.json())["data"][::-1]       # oldest first
        # fifteen images: past the window of 8,192 by the router's estimate of them, which
        # is no reason to refuse them: the worker counts them (here as the router does)
        async with session.post(router.url + "/v1/chat/completions", json=image_chat(
                *(f"https://x/{i}.png" for i in range(15)))) as resp:
            refused = (resp.status, resp.headers["x-kvroute-worker"],
                       (await resp.json())["error"]["message"])
    assert usage[0] == usage[1] == usage[2] >= 576            # the worker counts the image
    assert [d["num_prompt_tokens"] for d in decisions] == usage   # as the router does
    cached = [d["attributes"].get("prefix_match_tokens", 0) for d in decisions]
    assert cached[1] <= 16 and cached[2] >= usage[0] - 16    # the dog: the header at most
    assert refused[0] == 400 and refused[1] != "none", refused     # the worker's own 400
    assert "maximum context length" in refused[2]
