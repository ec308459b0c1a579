"""Everything one emulated worker holds while it serves, kept in its app (no globals)."""

from __future__ import annotations

import hashlib
import importlib
import random
import secrets
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from workers.emulator.config import EmulatorConfig, FaultConfig
from workers.emulator.errors import model_not_found
from workers.emulator.kv_events import KvEventPublisher
from workers.emulator.metrics import VLLM_VERSION, EmulatorMetrics
from workers.emulator.runner import EngineLike, EngineRunner
from workers.emulator.tokens import Tokenizer


@dataclass(slots=True)
class WorkerState:
    config: EmulatorConfig
    tokenizer: Tokenizer
    runner: EngineRunner
    metrics: EmulatorMetrics
    num_gpu_blocks: int
    max_model_len: int
    faults: FaultConfig
    rng: random.Random
    fingerprint: str
    publisher: KvEventPublisher | None = None
    server_load: int = 0
    created: int = 0
    lora_paths: dict[str, str] = field(default_factory=dict)
    # each adapter's number (vLLM's lora_int_id): 1, 2, ... in the order loaded, kept when
    # one is loaded again in place
    lora_ids: dict[str, int] = field(default_factory=dict)
    lora_ids_given: int = 0
    # /v1/responses kept (with responses_store): id -> (the conversation so far, the answer)
    stored_responses: dict[str, tuple[list[dict[str, Any]], dict[str, Any]]] = field(
        default_factory=dict)

    def resolve_model(self, name: str | None) -> tuple[str, str | None]:
        """(model name to answer with, LoRA adapter or None); unknown names are a 404. No
        name, or "", is the served model (vLLM's ``_is_model_supported`` takes any falsy
        name)."""
        if not name:
            return self.config.served_model_names[0], None
        if name in self.config.served_model_names:
            return name, None
        if name in self.lora_paths:          # as loaded at start or since (runtime updating)
            return name, name
        raise model_not_found(name, list(self.config.served_model_names))

    def add_lora(self, name: str, path: str) -> None:
        """Serve adapter ``name`` from ``path``: a new one takes the next number."""
        self.lora_paths[name] = path
        if name not in self.lora_ids:
            self.lora_ids_given += 1
            self.lora_ids[name] = self.lora_ids_given

    def remove_lora(self, name: str) -> None:
        del self.lora_paths[name]
        del self.lora_ids[name]

    def new_request_id(self, prefix: str, request: web.Request,
                       in_body: str | None = None) -> str:
        """vLLM's: the ``X-Request-Id`` header's, else the body's ``request_id`` (chat and
        completions), else a new one, after ``prefix``."""
        given = request.headers.get("X-Request-Id")
        if given is None:
            given = in_body
        return f"{prefix}-{given}" if given is not None else f"{prefix}-{secrets.token_hex(8)}"


WORKER: web.AppKey[WorkerState] = web.AppKey("worker", WorkerState)


def build_engine(config: EmulatorConfig) -> EngineLike:
    """``workers.engine.core.EngineCore`` for this worker (imported here: built separately)."""
    core = importlib.import_module("workers.engine.core")
    engine: EngineLike = core.EngineCore(config.engine_config())
    return engine


def build_state(config: EmulatorConfig, tokenizer: Tokenizer,
                publisher: KvEventPublisher | None) -> WorkerState:
    engine = build_engine(config)
    num_gpu_blocks = int(getattr(engine, "num_gpu_blocks"))  # noqa: B009 (engine contract)
    max_model_len = int(getattr(engine, "max_model_len"))  # noqa: B009
    metrics = EmulatorMetrics(config, num_gpu_blocks, max_model_len)
    runner = EngineRunner(engine, config.time_scale, metrics, publisher)
    digest = hashlib.sha256(f"{config.model_name}/{config.gpu.name}".encode()).hexdigest()[:8]
    tp = f"-tp{config.tensor_parallel}" if config.tensor_parallel > 1 else ""
    state = WorkerState(
        config=config, tokenizer=tokenizer, runner=runner, metrics=metrics,
        num_gpu_blocks=num_gpu_blocks, max_model_len=max_model_len, faults=config.faults,
        rng=random.Random(config.seed), fingerprint=f"vllm-{VLLM_VERSION}{tp}-{digest}",
        publisher=publisher)
    for name, path in config.lora_adapters.items():
        state.add_lora(name, path)
    return state
