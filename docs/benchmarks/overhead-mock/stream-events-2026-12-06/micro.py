"""One stream through the relay's event reader (``_StreamRelay.feed``) of the tree on
``PYTHONPATH``, the client's write stubbed: the mock worker's chat chunks (vLLM's layout, 194
bytes a token), one event per feed, the usage in a chunk of its own, dropped for a client
that did not ask for it, then ``[DONE]``. CPU time (``-p``), pinned:

    PYTHONPATH=TREE:docs/benchmarks/overhead-mock/stream-events-2026-12-06 taskset -c 1 \\
        python -m timeit -p -r 7 -s "from micro import chunks, one_stream; e = chunks(512)" \\
        "one_stream(e)"
"""

import time

from bench.mock_backend import MockConfig, _token_event, _usage_event
from router.proxy import COMPLETION_STREAM, _StreamRelay
from router.proxy_usage import UsageRewrite


class Relay(_StreamRelay):
    __slots__ = ()

    async def _write(self, data: bytes) -> bool:
        return True


def chunks(tokens: int) -> list[bytes]:
    config = MockConfig(output_tokens=tokens)
    return ([_token_event(config, True, i, usage=False) for i in range(tokens)]
            + [_usage_event(config, True), b"data: [DONE]\n\n"])


def one_stream(events: list[bytes]) -> None:
    relay = Relay(None, {}, UsageRewrite(False), COMPLETION_STREAM,  # type: ignore[arg-type]
                  on_first_token=(time.monotonic, lambda: None))
    for chunk in events:
        coro = relay.feed(chunk)
        try:       # noqa: SIM105 (as measured)
            coro.send(None)
        except StopIteration:
            pass
    assert relay.done
