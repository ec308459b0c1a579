"""Runtime LoRA updating: ``POST /v1/load_lora_adapter`` and ``/v1/unload_lora_adapter``.

Served as vLLM serves them when started with ``VLLM_ALLOW_RUNTIME_LORA_UPDATING=True``
(``runtime_lora_updating: true`` in the emulator's config; otherwise the paths are a plain
404): an adapter loaded is served under its name from the next request on and listed by
``/v1/models`` (its path as the card's ``root``), and its blocks are hashed with that path;
one unloaded is no longer served (its name is vLLM's 404) nor listed. Answers and refusals
are vLLM's (``entrypoints/openai/serving_models.py``): a plain-text ``Success: ...`` line; a
field missing is pydantic's 400; an empty name or path, or a name already loaded (unless
``load_inplace``), is a 400 ``InvalidUserInput``; unloading a name not loaded is a 404
``NotFoundError``.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from workers.emulator.errors import ApiError, validation_error
from workers.emulator.protocol import decode_json
from workers.emulator.state import WORKER

LOAD_PATH = "/v1/load_lora_adapter"
UNLOAD_PATH = "/v1/unload_lora_adapter"


def _text(data: Any, key: str) -> str:
    """A required string field, refused as vLLM's pydantic model refuses it."""
    if key not in data:
        raise validation_error(key, "Field required", "missing", data)
    value = data[key]
    if not isinstance(value, str):
        raise validation_error(key, "Input should be a valid string", "string_type", value)
    return value


async def load_lora_adapter(request: web.Request) -> web.Response:
    worker = request.app[WORKER]
    data = decode_json(await request.read())
    name, path = _text(data, "lora_name"), _text(data, "lora_path")
    if not name or not path:
        raise ApiError(400, "Both 'lora_name' and 'lora_path' must be provided.",
                       "InvalidUserInput")
    if name in worker.lora_paths and data.get("load_inplace") is not True:
        raise ApiError(400, f"The lora adapter '{name}' has already been loaded.",
                       "InvalidUserInput")
    worker.add_lora(name, path)
    return web.Response(text=f"Success: LoRA adapter '{name}' added successfully.")


async def unload_lora_adapter(request: web.Request) -> web.Response:
    worker = request.app[WORKER]
    data = decode_json(await request.read())
    name = _text(data, "lora_name")
    if not name and not data.get("lora_int_id"):
        raise ApiError(400, "either 'lora_name' and 'lora_int_id' needs to be provided.",
                       "InvalidUserInput")
    if name not in worker.lora_paths:
        raise ApiError(404, f"The lora adapter '{name}' cannot be found.", "NotFoundError")
    worker.remove_lora(name)
    return web.Response(text=f"Success: LoRA adapter '{name}' removed successfully.")
