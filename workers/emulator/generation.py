"""``POST /v1/chat/completions`` and ``POST /v1/completions``: admit, run, answer or stream.

Each choice of each prompt is one engine request; all of a response's engine requests share one
output queue. A client that goes away (the handler is cancelled) aborts its engine requests.
``tokenize_body``, ``check_lengths``, ``admit`` and ``next_output`` are the steps, shared with
``/v1/responses`` (``workers.emulator.responses_api``).
"""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import orjson
from aiohttp import web

from policies.producers.media import without_marks
from workers.emulator.errors import (
    ApiError,
    bad_request,
    engine_busy,
    internal_error,
    no_room_to_answer,
    prompt_too_long,
)
from workers.emulator.logprobs import chat_logprobs, completion_logprobs
from workers.emulator.outputs import plan_output
from workers.emulator.protocol import (
    SSE_HEADERS,
    GenerationBody,
    RequestKind,
    check_logprobs_asked,
    check_token_ids,
    parse_generation,
    read_json_body,
)
from workers.emulator.responses import (
    DONE,
    Choice,
    ResponseHeader,
    Usage,
    chat_body,
    chat_content_chunk,
    chat_role_chunk,
    completion_body,
    completion_chunk,
    error_chunk,
    sse,
    usage_chunk,
)
from workers.emulator.runner import OutputQueue
from workers.emulator.state import WORKER, WorkerState
from workers.emulator.tokens import Tokenizer
from workers.engine.api import EngineRequest

LONG_PROMPT_CHARS = 20_000      # tokenize longer prompts off the event loop


@dataclass(slots=True)
class ChoiceState:
    index: int
    prompt_index: int
    texts: list[str] = field(default_factory=list)
    num_tokens: int = 0
    token_ids: list[int] = field(default_factory=list)   # generated, for logprobs
    text_chars: int = 0                                  # of the answer so far, streamed
    finish_reason: str | None = None
    cached_tokens: int = 0
    started: bool = False


@dataclass(slots=True)
class Admitted:
    queue: OutputQueue
    by_request: dict[str, ChoiceState]
    prompt_lens: list[int]
    prompt_texts: list[str]
    prompt_ids: list[list[int]]


async def chat_completions(request: web.Request) -> web.StreamResponse:
    return await _generate(request, "chat")


async def completions(request: web.Request) -> web.StreamResponse:
    return await _generate(request, "completion")


async def _generate(request: web.Request, kind: RequestKind) -> web.StreamResponse:
    worker = request.app[WORKER]
    body = parse_generation(await read_json_body(request), kind)
    model, lora_name = worker.resolve_model(body.model)
    check_serving(worker)
    check_max_tokens(worker, body.max_tokens, body.max_tokens_field)
    prompts, texts = await tokenize_body(worker, body)
    max_tokens = check_lengths(worker, prompts, body.max_tokens,
                               [isinstance(prompt, tuple) for prompt in body.prompts])
    check_min_tokens(body.min_tokens, max_tokens)
    check_logprobs_asked(body, worker.tokenizer.vocab_size)
    check_token_ids(body, worker.tokenizer.vocab_size)
    prefix = "chatcmpl" if kind == "chat" else "cmpl"
    header = ResponseHeader(id=worker.new_request_id(prefix, request, body.request_id),
                            created=int(time.time()),
                            model=model, fingerprint=worker.fingerprint)
    admitted = admit(worker, header.id, body, prompts, texts, max_tokens, lora_name)
    worker.server_load += 1
    try:
        if body.stream:
            return await _stream(request, worker, body, header, admitted)
        return await _complete(worker, body, header, admitted)
    finally:
        worker.server_load -= 1
        for request_id in admitted.by_request:
            worker.runner.abort(request_id)


def chat_echo(body: GenerationBody) -> str:
    """What vLLM puts before a chat answer with ``echo``: the last message's content when it
    is the answer's role (assistant, or the last message's own without a generation prompt),
    its text parts joined by newlines; nothing otherwise."""
    last = body.messages[-1]
    role = "assistant" if body.add_generation_prompt else last.get("role")
    content = last.get("content")
    if last.get("role") != role or not content:
        return ""
    if isinstance(content, list):
        return "\n".join(str(part.get("text", "")) for part in content)
    return str(content)


def check_serving(worker: WorkerState) -> None:
    """A 500 when the engine is down, or when the ``error_rate`` fault picks this request."""
    if worker.faults.error_rate > 0 and worker.rng.random() < worker.faults.error_rate:
        raise internal_error("Emulated internal server error (fault injection: error_rate).")
    if not worker.runner.healthy:
        raise internal_error("EngineCore encountered an issue. See stack trace for the root cause.")


def check_queue(worker: WorkerState, sequences: int) -> None:
    """vLLM's 503 for a request whose ``sequences`` would take the scheduler's waiting
    queue past ``max_num_queued_reqs`` (checked as the request, validated, is admitted)."""
    limit = worker.config.max_num_queued_reqs
    if limit is not None and worker.runner.num_waiting + sequences > limit:
        worker.metrics.admission_rejections.labels(
            model_name=worker.config.model_name, reason="max_num_queued_reqs").inc()
        raise engine_busy()


async def text_deltas(worker: WorkerState, admitted: Admitted) -> AsyncIterator[str]:
    """Each engine step's text of a request's one choice, until it finishes (the Responses
    and Messages APIs). With the ``stall_after_tokens`` fault, silent for good after that many
    tokens, the connection left open."""
    stall, streamed = worker.faults.stall_after_tokens, 0
    while True:
        item = await next_output(admitted)
        if item is None:
            raise internal_error("EngineCore encountered an issue.")
        _, token_ids, finished = item
        yield "".join(worker.tokenizer.piece(t) for t in token_ids)
        streamed += len(token_ids)
        if stall is not None and streamed >= stall:
            for request_id in admitted.by_request:
                worker.runner.abort(request_id)
            await asyncio.Event().wait()
        if finished:
            return


async def tokenize_body(worker: WorkerState, body: GenerationBody
                    ) -> tuple[list[list[int]], list[str]]:
    tok = worker.tokenizer
    limit = worker.max_model_len * tok.max_chars_per_token
    if body.kind == "chat":
        raw: Sequence[str | tuple[int, ...]] = [tok.render_chat(
            body.messages, body.add_generation_prompt, body.tools)]
    else:
        raw = body.prompts
    prompts: list[list[int]] = []
    texts: list[str] = []
    for prompt in raw:
        if isinstance(prompt, tuple):
            bad = next((t for t in prompt if not 0 <= t < tok.vocab_size), None)
            if bad is not None:
                raise bad_request(f"Token id {bad} is out of vocabulary", None)
            prompts.append(list(prompt))
            texts.append(tok.decode(prompt) if body.echo else "")
            continue
        if len(prompt) > limit:
            raise ApiError(
                400, f"This model's maximum context length is {worker.max_model_len} tokens. "
                f"However, your prompt contains {len(prompt)} characters (more than "
                f"{limit} characters, the longest a prompt of {worker.max_model_len} tokens can "
                "be), which exceeds this limit. Please reduce the length of the input prompt.",
                "BadRequestError", "input_text")
        encode = (partial(tok.encode_chat, window=worker.max_model_len)
                  if body.kind == "chat" else tok.encode)
        if len(prompt) > LONG_PROMPT_CHARS:
            ids = await asyncio.get_running_loop().run_in_executor(None, encode, prompt)
        else:
            ids = encode(prompt)
        prompts.append(ids)
        texts.append(without_marks(prompt) if body.kind == "chat" else prompt)
    return prompts, texts


def check_max_tokens(worker: WorkerState, requested: int | None, field: str) -> None:
    """vLLM's 400 for an answer longer than the whole window (checked before the prompt is
    read; one that only overflows with the prompt is clamped, by ``check_lengths``)."""
    m = worker.max_model_len
    if requested is not None and requested > m:
        raise bad_request(
            f"{field}={requested} cannot be greater than max_model_len={m}. Please request "
            f"fewer output tokens. (parameter={field}, value={requested})", field)


def check_lengths(worker: WorkerState, prompts: list[list[int]], requested: int | None,
                  token_ids_given: Sequence[bool] = ()) -> int:
    """The effective max_tokens (vLLM v0.33 clamps to the room left); 400 when none is left.

    As vLLM, every prompt's length is checked (the first too long is refused) before the room
    left for the answer: vLLM tokenizes a text one token past the window at most, so a text
    too long is "at least" that many tokens; prompts given as token ids
    (``token_ids_given[i]``) are counted whole ("at least" too when one past the window)."""
    m = worker.max_model_len
    for i, ids in enumerate(prompts):
        n = len(ids)
        if n == 0:
            raise bad_request("The decoder prompt cannot be empty", None)
        if n > m:
            exact = i < len(token_ids_given) and token_ids_given[i]
            raise prompt_too_long(m, n if exact else m + 1)
    room = m - max((len(ids) for ids in prompts), default=0)
    if room == 0:       # the room left for the answer, 0, is what vLLM's sampling refuses
        raise no_room_to_answer(0)
    return room if requested is None else min(requested, room)


def check_min_tokens(min_tokens: int, max_tokens: int) -> None:
    """vLLM's ``SamplingParams`` checks of ``min_tokens``, against the effective max_tokens."""
    if min_tokens < 0:
        raise bad_request(f"min_tokens must be greater than or equal to 0, got {min_tokens}.",
                          None)
    if min_tokens > max_tokens:
        raise bad_request(f"min_tokens must be less than or equal to max_tokens={max_tokens}, "
                          f"got {min_tokens}.", None)


def admit(worker: WorkerState, response_id: str, body: GenerationBody,
           prompts: list[list[int]], texts: list[str], max_tokens: int,
           lora_name: str | None) -> Admitted:
    check_queue(worker, body.n * len(prompts))
    runner, tok, cfg = worker.runner, worker.tokenizer, worker.config
    # as vLLM 0.32 (``assign_request_id``): the engine's ids add 8 random characters to the
    # request's, so two requests of one id (a client's X-Request-Id sent twice) both run
    engine_id = internal_id(response_id)
    queue: OutputQueue = asyncio.Queue()
    by_request: dict[str, ChoiceState] = {}
    for p, ids in enumerate(prompts):
        worker.metrics.observe_admitted(body.n, [_choice_id(engine_id, p, i)
                                                 for i in range(body.n)])
        for i in range(body.n):
            plan = plan_output(worker.rng, cfg.output_len, max_tokens, body.ignore_eos,
                               tok.output_vocabulary, tok.eos_token_id, body.min_tokens)
            request_id = _choice_id(engine_id, p, i)
            by_request[request_id] = ChoiceState(index=p * body.n + i, prompt_index=p)
            runner.submit(EngineRequest(
                request_id=request_id, prompt_token_ids=ids, output_token_ids=plan.token_ids,
                finish_reason=plan.finish_reason, arrival_time=runner.now(),
                lora_name=lora_name,
                lora_path=worker.lora_paths.get(lora_name) if lora_name else None,
                lora_id=worker.lora_ids.get(lora_name) if lora_name else None,
                cache_salt=body.cache_salt), max_tokens, queue)
    return Admitted(queue, by_request, [len(p) for p in prompts], texts, prompts)


def internal_id(request_id: str) -> str:
    """The engine's id of a request: its own and 8 random hex characters, unique whatever
    the client sends (vLLM 0.32's ``InputProcessor.assign_request_id``)."""
    return f"{request_id}-{secrets.token_hex(4)}"


def _choice_id(engine_id: str, prompt: int, choice: int) -> str:
    """The engine request id of one choice of one prompt."""
    return f"{engine_id}-{prompt}-{choice}"


def _logprobs(tok: Tokenizer, body: GenerationBody, token_ids: list[int], position: int,
              offset: int) -> dict[str, Any] | None:
    """These tokens' log-probabilities as the request asked them (None: not asked)."""
    if body.logprobs is None:
        return None
    if body.kind == "chat":
        return chat_logprobs(tok, token_ids, position, body.logprobs)
    return completion_logprobs(tok, token_ids, position, offset, body.logprobs)


def _prompt_logprobs(tok: Tokenizer, body: GenerationBody,
                     prompt_ids: list[int]) -> dict[str, Any] | None:
    """An echoed prompt's own logprobs, as vLLM gives them for ``echo`` with ``max_tokens``
    0 (the first token has none: nothing comes before it); None when not asked."""
    if body.logprobs is None:
        return None
    shown = completion_logprobs(tok, prompt_ids, 0, 0, body.logprobs)
    if prompt_ids:
        shown["token_logprobs"][0] = None
        shown["top_logprobs"][0] = None
    return shown


async def next_output(admitted: Admitted) -> tuple[ChoiceState, list[int], bool] | None:
    """The next output of any choice: (choice, new token ids, finished); None if the engine died."""
    output = await admitted.queue.get()
    if output is None:
        return None
    choice = admitted.by_request[output.request_id]
    if not choice.started:
        choice.started = True
        choice.cached_tokens = output.num_cached_tokens
    choice.num_tokens += len(output.new_token_ids)
    if output.finished:
        choice.finish_reason = output.finish_reason or "length"
    return choice, list(output.new_token_ids), output.finished


def _usage(worker: WorkerState, admitted: Admitted) -> Usage:
    choices = list(admitted.by_request.values())
    cached: int | None = None
    if worker.config.enable_prompt_tokens_details:
        first_per_prompt = {c.prompt_index: c.cached_tokens for c in reversed(choices)}
        cached = sum(first_per_prompt.values())
    return Usage(prompt_tokens=sum(admitted.prompt_lens),
                 completion_tokens=sum(c.num_tokens for c in choices), cached_tokens=cached)


async def _complete(worker: WorkerState, body: GenerationBody, header: ResponseHeader,
                    admitted: Admitted) -> web.Response:
    tok, stall = worker.tokenizer, worker.faults.stall_after_tokens
    remaining = len(admitted.by_request)
    while remaining:
        item = await next_output(admitted)
        if item is None:
            raise internal_error("EngineCore encountered an issue.")
        choice, token_ids, finished = item
        choice.texts.extend(tok.piece(t) for t in token_ids)
        if body.logprobs is not None:
            choice.token_ids.extend(token_ids)
        if stall is not None and choice.num_tokens >= stall:
            for request_id in admitted.by_request:     # a hung engine generates no more
                worker.runner.abort(request_id)
            await asyncio.Event().wait()          # stalled: never answers
        remaining -= finished
    ordered = sorted(admitted.by_request.values(), key=lambda c: c.index)
    echoed = [(chat_echo(body) if body.kind == "chat" else admitted.prompt_texts[c.prompt_index])
              if body.echo else "" for c in ordered]
    choices = [Choice(c.index, prefix, c.finish_reason or "length",
                      _prompt_logprobs(tok, body, admitted.prompt_ids[c.prompt_index]))
               if body.echo_only else
               Choice(c.index, prefix + "".join(c.texts), c.finish_reason or "length",
                      _logprobs(tok, body, c.token_ids, 0, len(prefix)))
               for c, prefix in zip(ordered, echoed, strict=True)]
    usage = _usage(worker, admitted)
    build = chat_body if body.kind == "chat" else completion_body
    return web.Response(body=orjson.dumps(build(header, choices, usage)),
                        content_type="application/json")


async def _stream(request: web.Request, worker: WorkerState, body: GenerationBody,
                  header: ResponseHeader, admitted: Admitted) -> web.StreamResponse:
    response = web.StreamResponse(headers=SSE_HEADERS)
    await response.prepare(request)
    tok, chat, stall = worker.tokenizer, body.kind == "chat", worker.faults.stall_after_tokens
    failing = worker.faults.error_after_tokens
    remaining, sent_roles, streamed = len(admitted.by_request), False, 0
    while remaining:
        item = await next_output(admitted)
        if item is None:
            await response.write(error_chunk("EngineCore encountered an issue.",
                                             "InternalServerError", 500))
            break
        if failing is not None and streamed >= failing:     # the engine fails the request
            for request_id in admitted.by_request:
                worker.runner.abort(request_id)
            await response.write(error_chunk(
                "Emulated engine failure (fault injection: error_after_tokens).",
                "InternalServerError", 500))
            break
        choice, token_ids, finished = item
        if chat and not sent_roles:
            sent_roles = True
            for c in sorted(admitted.by_request.values(), key=lambda c: c.index):
                role = chat_role_chunk(header, c.index)
                if body.include_usage and body.continuous_usage:    # nothing generated yet
                    role["usage"] = Usage(admitted.prompt_lens[c.prompt_index], 0).compact()
                await response.write(sse(role))
        generated = text = "".join(tok.piece(t) for t in token_ids)
        if not chat and body.echo and choice.num_tokens == len(token_ids):
            echoed = admitted.prompt_texts[choice.prompt_index]
            choice.text_chars, text = len(echoed), echoed + generated   # the answer's start
        reason = choice.finish_reason if finished else None
        if body.echo_only:      # the prompt alone, with its logprobs
            text = admitted.prompt_texts[choice.prompt_index]
            logprobs = _prompt_logprobs(tok, body, admitted.prompt_ids[choice.prompt_index])
        else:
            logprobs = _logprobs(tok, body, token_ids, choice.num_tokens - len(token_ids),
                                 choice.text_chars)
        choice.text_chars += len(generated)
        chunk = (chat_content_chunk if chat else completion_chunk)(header, choice.index, text,
                                                                    reason, logprobs)
        if body.include_usage and body.continuous_usage:
            # vLLM's: this choice's tokens so far, against its own prompt
            chunk["usage"] = Usage(admitted.prompt_lens[choice.prompt_index],
                                   choice.num_tokens).compact()
        if finished and not body.include_usage:
            # vLLM: on every choice's finish chunk, unless a usage chunk follows
            chunk["system_fingerprint"] = header.fingerprint
        await response.write(sse(chunk))
        streamed += len(token_ids)
        if stall is not None and streamed >= stall:
            for request_id in admitted.by_request:
                worker.runner.abort(request_id)
            await asyncio.Event().wait()          # stalled: the connection stays open, silent
        remaining -= finished
    else:
        if body.include_usage:
            await response.write(sse(usage_chunk(header, chat, _usage(worker, admitted))))
    await response.write(DONE)
    await response.write_eof()
    return response
