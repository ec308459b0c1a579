"""The emulator's ``POST /invocations`` (SageMaker's, as vLLM serves it): a body is answered
by the handler of the API it is (``workers.invocations``), among those of the model's
runner; a body none takes is vLLM's 400."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping

from aiohttp import web

from workers.emulator.embeddings import embeddings
from workers.emulator.errors import bad_request
from workers.emulator.generation import chat_completions, completions
from workers.emulator.pooling_api import pooling
from workers.emulator.protocol import read_json_body
from workers.emulator.scoring import rerank, score
from workers.invocations import invocation_path, no_handler_message

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

_HANDLERS: Mapping[str, Handler] = {
    "/v1/chat/completions": chat_completions, "/v1/completions": completions,
    "/v1/embeddings": embeddings, "/rerank": rerank, "/score": score, "/pooling": pooling}


def invocations(runner: str) -> Handler:
    """The ``/invocations`` handler of a model run as ``runner`` (``generate``, ``pooling``)."""
    runners = frozenset({runner})

    async def handle(request: web.Request) -> web.StreamResponse:
        path = invocation_path(await read_json_body(request), runners)
        if path is None:
            raise bad_request(no_handler_message(runners))
        return await _HANDLERS[path](request)     # (it reads the body aiohttp kept)

    return handle
