"""OpenAI request bodies → ``RoutingRequest``: one orjson parse and strict, cheap validation.

Only the fields the router needs are checked (model, messages/prompt/input, max_tokens,
stream, stream_options, user); everything else travels to the worker untouched. Errors name
the field the way OpenAI does (``param``) so clients can show them. A pooling request
(embeddings, and vLLM's own ``/score``, ``/rerank``, ``/pooling`` and ``/classify`` with
their other paths: ``policies.base.API_OF_PATH``) is routed as prefills with a single output
step (``max_tokens`` 1), never streamed: embeddings, pooling and classification count their
``input`` (or ``messages``) as embeddings do, a score or a rerank its pairs' texts
(``router.scoring``). A
completions request without ``max_tokens`` is routed as the 16 tokens vLLM gives it
(``CompletionRequest``'s default); a chat one without it may run to the context window. A
Responses API request is routed as its chat turn; it gets a ``request_id`` (vLLM's response
id) when it has none, so the router knows which worker makes which response.
"""

from __future__ import annotations

import hashlib
import json
import math
import secrets
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from itertools import chain
from typing import Any

import orjson

from policies.base import API_OF_PATH, ROUTED_PATHS, RUNNER_OF_PATH, RoutingRequest, is_token_ids
from policies.producers.anthropic_chat import chat_messages, chat_tools
from policies.producers.media import media_mark, part_media
from router.body_values import MAX_BODY_VALUES, check_body_values
from router.errors import EngineBadRequest, InvalidRequest
from router.name_text import is_name_text
from router.scoring import scoring_texts, side_cuts
from workers.invocations import INVOCATIONS_PATH, invocation_path, no_handler_message
from workers.lax_values import lax_bool, lax_int

CHAT_PATH = "/v1/chat/completions"
COMPLETIONS_PATH = "/v1/completions"
COMPLETIONS_DEFAULT_MAX_TOKENS = 16     # vLLM's CompletionRequest.max_tokens default
EMBEDDINGS_PATH = "/v1/embeddings"
RESPONSES_PATH = "/v1/responses"
MESSAGES_PATH = "/v1/messages"          # Anthropic's Messages API
# the paths served without a decision (router.utility_requests)
TOKENIZE_PATH = "/tokenize"
DETOKENIZE_PATH = "/detokenize"
COUNT_TOKENS_PATH = "/v1/messages/count_tokens"
TRANSCRIPTIONS_PATH = "/v1/audio/transcriptions"
TRANSLATIONS_PATH = "/v1/audio/translations"
# vLLM's pooling APIs past embeddings, each path as vLLM serves it
SCORE_PATHS = ("/score", "/v1/score")
RERANK_PATHS = ("/rerank", "/v1/rerank", "/v2/rerank")       # Jina's and Cohere's shape
POOLING_PATH = "/pooling"
CLASSIFY_PATH = "/classify"
POOLING_API_PATHS = (*SCORE_PATHS, *RERANK_PATHS, POOLING_PATH, CLASSIFY_PATH)
assert {CHAT_PATH, COMPLETIONS_PATH, EMBEDDINGS_PATH, RESPONSES_PATH, MESSAGES_PATH,
        *POOLING_API_PATHS} == set(ROUTED_PATHS)
# what a pooling path serves, in words (a generative model's refusal names it)
POOLING_SERVICES = {EMBEDDINGS_PATH: "embeddings", **dict.fromkeys(SCORE_PATHS, "scores"),
                    **dict.fromkeys(RERANK_PATHS, "reranking"), POOLING_PATH: "pooling",
                    CLASSIFY_PATH: "classification"}
assert set(POOLING_SERVICES) == {path for path in ROUTED_PATHS
                                 if RUNNER_OF_PATH[path] == "pooling"}
# longer than any served model name or adapter; the recent-decisions ring keeps the requested
# name, so a longer one (up to the body limit) is refused rather than held
MAX_MODEL_CHARS = 1024
# response ids that a URL path cannot carry: ``/v1/responses/..`` is ``/v1/`` to any client
DOT_SEGMENTS = (".", "..")


@dataclass(slots=True)
class ParsedRequest:
    """The parsed body, the policy's view of it, and what the client asked of the stream."""

    payload: dict[str, Any]
    routing: RoutingRequest
    wants_usage: bool          # stream: the client asked for the final usage chunk
    # the Responses API: this response's id (the client's ``request_id``, else one the router
    # gives it, ``assigned``; None when the request says ``store: false``) and the one it
    # continues, whose worker must serve it
    response_id: str | None = None
    previous_response_id: str | None = None
    response_id_assigned: bool = False
    received_at: float = 0.0   # when the router took the request (monotonic), before any wait
    attempts: int = 0          # attempts at workers begun (each counted when it ends)
    # the worker's path it is sent to, when not its API's (``routing.path``): SageMaker's
    # ``/invocations``, routed as the API its body is (``workers.invocations``)
    upstream_path: str | None = None


UTF8_BOM = b"\xef\xbb\xbf"


def parse_body(body: bytes, max_values: int = MAX_BODY_VALUES) -> dict[str, Any]:
    """Decode a JSON object body, with a clear message for each way it can be wrong; a
    body of more than ``max_values`` JSON values is ``RequestTooLarge``."""
    if not body:
        raise InvalidRequest("Request body is empty; expected a JSON object.")
    if body.startswith(UTF8_BOM):     # as vLLM's parser reads it (some Windows clients)
        body = body[len(UTF8_BOM):]
    check_body_values(body, max_values)     # (413) before the parse: each is an object
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        try:
            text = body.decode("utf-8")
        except UnicodeDecodeError:
            raise InvalidRequest("Request body is not valid UTF-8.") from None
        try:     # JSON orjson refuses and vLLM's parser takes: an escaped lone surrogate
            data = json.loads(text, parse_constant=_not_a_json_number,
                              parse_float=_finite_float)
        except _NotFinite as refused:
            raise InvalidRequest(f"Request body is not valid JSON: {refused} is not a JSON "
                                 "number (JSON has no NaN or Infinity, and no number past "
                                 "±1.8e308)") from None
        except (ValueError, RecursionError):    # nested deeper than either parser goes
            raise InvalidRequest(f"Request body is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise InvalidRequest("Request body must be a JSON object.")
    return data


class _NotFinite(Exception):
    """A number Python's JSON parser takes and JSON has not: NaN, Infinity, 1e400. orjson
    refuses them; re-encoded by orjson for the worker they would become null, changing the
    request silently, so they are refused here as orjson refuses them."""


def _not_a_json_number(literal: str) -> Any:
    raise _NotFinite(literal)


def _finite_float(literal: str) -> float:
    value = float(literal)
    if not math.isfinite(value):
        raise _NotFinite(literal if len(literal) <= 40 else literal[:37] + "...")
    return value


def parse_request(body: bytes, path: str, request_id: str, headers: Mapping[str, str],
                  arrival_time: float, tenant: str | None = None,
                  default_model: str | None = None,
                  runners_of: Callable[[str], frozenset[str]] | None = None,
                  max_body_values: int = MAX_BODY_VALUES) -> ParsedRequest:
    """The request, checked; its tenant is ``tenant`` when given (the one its API key
    names), else ``tenant_of(headers)``. A request that names no model is for
    ``default_model`` when given (a fleet of one model: vLLM serves its own model then).
    A body to ``/invocations`` is parsed as the API it is routed as
    (``workers.invocations``), by what ``runners_of`` says the fleet runs its model as.
    A body of more than ``max_body_values`` JSON values is refused unparsed (413)."""
    data = parse_body(body, max_body_values)
    raw_model = data.get("model")
    # vLLM serves its own model for a request naming none, or naming it "" (a falsy name)
    model = (default_model if raw_model in (None, "") and default_model is not None
             else check_model(raw_model))
    if path != INVOCATIONS_PATH:
        return _parsed(data, len(body), model, path, request_id, headers, arrival_time, tenant)
    # SageMaker's: routed as the API its body is, sent to the worker's own /invocations
    runners = runners_of(model) if runners_of is not None else frozenset()
    routed_as = invocation_path(data, runners)
    if routed_as is None:
        raise EngineBadRequest(no_handler_message(runners))
    try:
        parsed = _parsed(data, len(body), model, routed_as, request_id, headers, arrival_time,
                         tenant)
    except InvalidRequest as refused:
        refused.read_as = routed_as
        raise
    parsed.upstream_path = INVOCATIONS_PATH
    return parsed


def _parsed(data: dict[str, Any], body_bytes: int, model: str, path: str, request_id: str,
            headers: Mapping[str, str], arrival_time: float,
            tenant: str | None) -> ParsedRequest:
    """``parse_request`` of a body decoded, its model known, read as an API's ``path``."""
    messages: Sequence[Mapping[str, Any]] | None = None
    tools: list[dict[str, Any]] | None = None
    prompt = None
    response_id = previous_id = None
    assigned = False
    if RUNNER_OF_PATH.get(path) == "pooling":     # prefills, no decode, never streamed
        messages, prompt = pooling_input(data, path)
        max_tokens: int | None = 1
        stream, wants_usage = False, False
    elif path == RESPONSES_PATH:      # relayed as the worker sends it (usage in its last event)
        messages = _responses_messages(data)
        max_tokens = _check_max_tokens(data, ("max_output_tokens",))
        stream = _check_bool(data, "stream")
        wants_usage = True
        previous_id = _optional_text(data, "previous_response_id")
        if _kept_by_worker(data):
            response_id = _optional_text(data, "request_id")
            if response_id in DOT_SEGMENTS:
                raise InvalidRequest(f"request_id: {response_id!r} cannot name a response: "
                                     "in a URL it is a path step, not a name.",
                                     param="request_id")
            if response_id is None:
                response_id, assigned = f"resp_{secrets.token_hex(16)}", True
    elif path == MESSAGES_PATH:       # relayed as the worker sends it (usage in message_delta)
        messages = anthropic_messages(data)
        tools = chat_tools(data.get("tools"))
        max_tokens = _check_max_tokens(data, ("max_tokens",))
        if max_tokens is None:
            raise InvalidRequest("Missing required parameter: 'max_tokens'.", param="max_tokens")
        stream = _check_bool(data, "stream")
        wants_usage = True
    else:
        if path == CHAT_PATH:
            messages = _check_messages(data.get("messages"))
            tools = _offered_tools(data.get("tools"))
        elif data.get("prompt") is None and _given_embeds(data.get("prompt_embeds")):
            prompt = None       # vLLM's --enable-prompt-embeds: routed with no text counted
        else:
            prompt = _check_prompt(data.get("prompt"))
        # a completion has no max_completion_tokens (vLLM ignores it as an extra field)
        max_tokens = _check_max_tokens(
            data, ("max_tokens",) if path == COMPLETIONS_PATH
            else ("max_completion_tokens", "max_tokens"),
            echo_without_generation=(path == COMPLETIONS_PATH
                                     and lax_bool(data.get("echo")) is True))
        if max_tokens is None and path == COMPLETIONS_PATH:
            max_tokens = COMPLETIONS_DEFAULT_MAX_TOKENS
        stream = _check_bool(data, "stream")
        wants_usage = _check_stream_options(data.get("stream_options"))
        # as vLLM refuses it, judging the body's own value ("false", a text, is true there)
        if data.get("stream_options") and not data.get("stream"):
            raise InvalidRequest("Stream options can only be defined when `stream=True`.",
                                 param="stream_options")
    user = data.get("user")
    if user is not None and not isinstance(user, str):
        raise InvalidRequest("user: must be a string.", param="user")
    routing = RoutingRequest(
        request_id=request_id, model=model, path=path, messages=messages, tools=tools,
        prompt=prompt,
        max_tokens=max_tokens, stream=stream, tenant=tenant or tenant_of(headers),
        session=headers.get("x-session-id") or user, user=user, headers=headers, body=data,
        body_bytes=body_bytes, arrival_time=arrival_time)
    if path in (CHAT_PATH, COMPLETIONS_PATH):       # n choices (best_of sequences)
        routing.choices, routing.returned_choices = choices_of(data), choices_of(data, ("n",))
    elif RUNNER_OF_PATH.get(path) == "pooling":
        routing.truncate_prompt_tokens = prompt_cut(data.get("truncate_prompt_tokens"))
        if API_OF_PATH[path] in ("score", "rerank") and isinstance(prompt, list):
            routing.text_cuts = side_cuts(data, prompt)
    return ParsedRequest(payload=data, routing=routing, wants_usage=wants_usage,
                         response_id=response_id, previous_response_id=previous_id,
                         response_id_assigned=assigned)


# the most sequences per prompt counted (vLLM refuses far fewer): a budget is charged what
# the worker may generate, not what a client writes
MAX_CHOICES = 1024


def choices_of(data: Mapping[str, Any], names: tuple[str, ...] = ("n", "best_of")) -> int:
    """The sequences a chat or completions request generates per prompt: ``n`` choices, or
    ``best_of`` (completions: generated, the best ``n`` sent) when larger (``names`` ("n",):
    those it answers). A value the worker will refuse (not a positive integer) counts as 1:
    its 400 is vLLM's."""
    choices = 1
    for name in names:
        value = lax_int(data.get(name))         # "2" and 2.0 are 2 to vLLM too
        if value is not None and value > choices:
            choices = value
    return min(choices, MAX_CHOICES)


def check_model(model: Any) -> str:
    """The requested model name, or a 400 saying what is wrong with it."""
    if not isinstance(model, str) or not model:
        raise InvalidRequest("You must provide a model parameter (a non-empty string).",
                             param="model")
    if len(model) > MAX_MODEL_CHARS:
        raise InvalidRequest(f"model: must be at most {MAX_MODEL_CHARS} characters, got "
                             f"{len(model)}.", param="model")
    if not is_name_text(model):     # no served name has control characters or lone surrogates
        raise InvalidRequest("model: must be printable text.", param="model")
    return model


def upstream_authorization(headers: Mapping[str, str]) -> str | None:
    """The ``Authorization`` to send a worker that has no key of its own in the fleet file:
    the client's, or its ``x-api-key`` (Anthropic's clients) as the bearer token vLLM's
    ``--api-key`` asks for; None when it sent neither."""
    auth = headers.get("Authorization")
    if auth:
        return auth
    key = headers.get("x-api-key")
    return f"Bearer {key}" if key else None


# the longest x-tenant taken: it is a metric label, a decision log field, a budget's key
MAX_TENANT_CHARS = 256


def tenant_of(headers: Mapping[str, str]) -> str | None:
    """``x-tenant`` if given, else a short digest of the API key (never the key itself): the
    bearer token, or Anthropic clients' ``x-api-key``. An ``x-tenant`` longer than
    ``MAX_TENANT_CHARS`` or not printable text (a line separator, a control character) is
    refused, as a model name is."""
    tenant = headers.get("x-tenant")
    if tenant:     # bytes that are not UTF-8 (kept by aiohttp as escapes) become U+FFFD
        tenant = tenant.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
        if len(tenant) > MAX_TENANT_CHARS or not is_name_text(tenant):
            raise InvalidRequest(f"x-tenant: must be printable text of at most "
                                 f"{MAX_TENANT_CHARS} characters.", param="x-tenant")
        return tenant
    auth = headers.get("authorization", "")
    if auth.lower().startswith("bearer ") and len(auth) > 7:
        return _key_digest(auth[7:])
    key = headers.get("x-api-key")
    return _key_digest(key) if key else None


def _key_digest(key: str) -> str:
    # the key as the client sent it (aiohttp keeps bytes that are not UTF-8 as escapes)
    return "key-" + hashlib.sha256(key.encode("utf-8", "surrogateescape")).hexdigest()[:8]


def _offered_tools(tools: Any) -> list[dict[str, Any]] | None:
    """A chat request's tools, which the template writes into the prompt (the worker checks
    their shape: what is not a list of objects is left to it)."""
    if isinstance(tools, list) and tools and all(isinstance(tool, dict) for tool in tools):
        return tools
    return None


def _check_messages(messages: Any, name: str = "messages") -> list[Mapping[str, Any]]:
    if messages is None:
        raise InvalidRequest(f"Missing required parameter: '{name}'.", param=name)
    if not isinstance(messages, list) or not messages:
        raise InvalidRequest(f"{name}: must be a non-empty array.", param=name)
    for i, message in enumerate(messages):
        if not isinstance(message, dict):
            raise InvalidRequest(f"{name}[{i}]: must be an object.", param=f"{name}[{i}]")
        if not isinstance(message.get("role"), str):
            raise InvalidRequest(f"{name}[{i}].role: required, a string.",
                                 param=f"{name}[{i}].role")
        content = message.get("content")
        if content is not None and not isinstance(content, (str, list)):
            raise InvalidRequest(f"{name}[{i}].content: must be a string or an array.",
                                 param=f"{name}[{i}].content")
    return messages


def _given_embeds(embeds: Any) -> bool:
    """Whether a completion's ``prompt_embeds`` holds some (base64 text, or a list of it)."""
    return (isinstance(embeds, str) and bool(embeds)) or (
        isinstance(embeds, list) and bool(embeds)
        and all(isinstance(item, str) and item for item in embeds))


def _check_prompt(prompt: Any) -> Any:
    if prompt is None:
        raise InvalidRequest("Missing required parameter: 'prompt'.", param="prompt")
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, list) and prompt:
        # by type, in C: a prompt of millions of items is checked in milliseconds
        kinds = {*map(type, prompt)}
        if kinds == {str} or kinds == {int}:       # texts, or token ids (no bool)
            return prompt
        if kinds == {list} and all(prompt) and is_token_ids(chain.from_iterable(prompt)):
            return prompt
    raise InvalidRequest("prompt: must be a string, an array of strings, an array of token ids "
                         "or an array of arrays of token ids.", param="prompt")


def prompt_cut(value: Any) -> int | None:
    """``truncate_prompt_tokens`` as vLLM's pydantic reads it (laxly: ``true``, ``5.0`` and
    ``"5"`` are integers): a count from 0, or -1 (the window); None when absent or not one
    (the engine refuses what it cannot read; the router then counts the texts whole)."""
    cut = lax_int(value)
    return cut if cut is not None and cut >= -1 else None


def pooling_input(data: Mapping[str, Any], path: str
                  ) -> tuple[list[Mapping[str, Any]] | None, Any]:
    """(messages, prompt) of a request to a pooling path: a score's or a rerank's pairs'
    texts (``router.scoring``); else its input as embeddings take it. A ``/pooling``
    request may instead carry an IO processor plugin's ``data``, which only the worker
    reads: routed with nothing counted."""
    api = API_OF_PATH[path]
    if api in ("score", "rerank"):
        return None, scoring_texts(data, rerank=api == "rerank")
    if api != "pooling":
        return _check_embedding_input(data)
    if data.get("input") is None and data.get("messages") is None and (
            data.get("data") is not None):
        return None, None
    return _check_embedding_input(data, "Missing required parameter: 'input' (or 'messages', "
                                        "or an IO processor plugin's 'data').")


def _check_embedding_input(data: Mapping[str, Any],
                           missing: str = "Missing required parameter: 'input'."
                           ) -> tuple[list[Mapping[str, Any]] | None, Any]:
    """(messages, prompt) of an embeddings request, as vLLM takes them: ``input`` a string,
    strings, token ids or lists of them, or chat messages (one conversation or several; also
    under ``messages``). Several conversations are routed as their messages in one list.
    ``missing``: the message when there is neither."""
    raw = data.get("messages")
    param = "messages"
    if raw is None:
        raw, param = data.get("input"), "input"
    if raw is None:
        raise InvalidRequest(missing, param="input")
    if isinstance(raw, list) and raw and all(isinstance(m, dict) for m in raw):
        return _check_messages(raw, param), None
    if (isinstance(raw, list) and raw
            and all(isinstance(c, list) and c and all(isinstance(m, dict) for m in c)
                    for c in raw)):
        return _check_messages([m for conversation in raw for m in conversation], param), None
    if param == "input":
        try:
            return None, _check_prompt(raw)
        except InvalidRequest:
            pass
    raise InvalidRequest(f"{param}: must be a string, an array of strings, an array of token "
                         "ids, an array of arrays of token ids, or chat messages.", param=param)


def _check_bool(data: Mapping[str, Any], key: str) -> bool:
    """A boolean as vLLM takes it (``"yes"``, ``1`` too: ``workers.lax_values``)."""
    value = data.get(key, False)
    if value is None:
        return False
    taken = lax_bool(value)
    if taken is None:
        raise InvalidRequest(f"{key}: must be a boolean.", param=key)
    return taken


def _kept_by_worker(data: Mapping[str, Any]) -> bool:
    """Whether a Responses request asks its worker to keep the response (``store``, true
    when absent): one that is not kept cannot be continued, read back or cancelled, so the
    router records no owner for it (nor gives it an id to record). The type of ``store`` is
    the worker's to check."""
    store = data.get("store", True)
    return store is not False and store is not None


def _optional_text(data: Mapping[str, Any], key: str) -> str | None:
    value = data.get(key)
    if value is None:
        return None
    if not isinstance(value, str) or not value or not value.isprintable() or len(value) > 256:
        raise InvalidRequest(f"{key}: must be printable text of at most 256 characters.",
                             param=key)
    return value


def _responses_messages(data: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The turn as chat messages, to count and hash its tokens: ``instructions`` as the
    system message, then ``input`` (a string, or items; those with a role and text content
    count). The worker validates the rest of the input."""
    raw = data.get("input")
    if raw is None:
        raise InvalidRequest("Missing required parameter: 'input'.", param="input")
    instructions = data.get("instructions")
    if instructions is not None and not isinstance(instructions, str):
        raise InvalidRequest("instructions: must be a string.", param="instructions")
    messages: list[Mapping[str, Any]] = (
        [{"role": "system", "content": instructions}] if instructions else [])
    if isinstance(raw, str):
        return [*messages, {"role": "user", "content": raw}]
    if not isinstance(raw, list) or not raw:
        raise InvalidRequest("input: must be a string or a non-empty array of items.",
                             param="input")
    for item in raw:
        if isinstance(item, dict) and isinstance(item.get("role"), str):
            content = item.get("content")
            if isinstance(content, list):      # its texts, and a mark for each media item
                content = "".join(_responses_part_text(part) for part in content
                                  if isinstance(part, dict))
            if isinstance(content, str):
                messages.append({"role": item["role"], "content": content})
    return messages


def _responses_part_text(part: Mapping[str, Any]) -> str:
    text = part.get("text")
    if isinstance(text, str):
        return text
    media = part_media(part)
    return media_mark(*media) if media is not None else ""


def anthropic_messages(data: Mapping[str, Any]) -> list[dict[str, Any]]:
    """An Anthropic Messages API turn as the chat messages vLLM renders for it, to count and
    hash its tokens (``policies.producers.anthropic_chat``: tool results and tool calls
    count, text blocks are joined as vLLM joins them). The shapes are checked here; the
    worker validates the rest (roles, images)."""
    system = data.get("system")
    if system is not None and not isinstance(system, (str, list)):
        raise InvalidRequest("system: must be a string or an array of content blocks.",
                             param="system")
    raw = data.get("messages")
    if raw is None:
        raise InvalidRequest("Missing required parameter: 'messages'.", param="messages")
    if not isinstance(raw, list) or not raw:
        raise InvalidRequest("messages: must be a non-empty array.", param="messages")
    for i, message in enumerate(raw):
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            raise InvalidRequest(f"messages[{i}]: must be an object with a string role.",
                                 param=f"messages[{i}]")
        if not isinstance(message.get("content"), (str, list)):
            raise InvalidRequest(f"messages[{i}].content: must be a string or an array of "
                                 "content blocks.", param=f"messages[{i}].content")
    return chat_messages(system, raw)


def _check_max_tokens(data: Mapping[str, Any],
                      keys: tuple[str, ...] = ("max_completion_tokens", "max_tokens"),
                      echo_without_generation: bool = False) -> int | None:
    """The answer's token limit: the first of ``keys`` the body sets (each must be an
    integer; only the one taken must be at least 1: vLLM takes ``max_completion_tokens``
    over ``max_tokens`` whatever the other says). ``echo_without_generation``: a completion
    echoing its prompt may ask for 0 tokens (its prompt's logprobs alone), which vLLM
    serves generating one."""
    result: int | None = None
    for key in keys:
        raw = data.get(key)
        if raw is None:
            continue
        # as vLLM's request model takes it: 5.0, "5", true (``workers.lax_values``)
        value = lax_int(raw)
        if value is None:
            raise InvalidRequest(f"{key}: must be an integer.", param=key)
        if result is not None:
            continue
        if value == 0 and echo_without_generation:
            value = 1
        if value < 1:
            raise InvalidRequest(f"{key}: must be at least 1, got {value}.", param=key)
        result = value
    return result


def _check_stream_options(options: Any) -> bool:
    if options is None:
        return False
    if not isinstance(options, dict):
        raise InvalidRequest("stream_options: must be an object.", param="stream_options")
    for name in ("include_usage", "continuous_usage_stats"):   # vLLM: Optional[bool] each
        value = options.get(name)
        if value is not None and lax_bool(value) is None:
            # (the worker would say so, but the second is taken off its body: see upstream_body)
            raise InvalidRequest(f"stream_options.{name}: must be a boolean.",
                                 param=f"stream_options.{name}")
    return lax_bool(options.get("include_usage")) is True


# each digit as "0", anything else as ".": a run of 19 zeros is a run of 19 digits, as long
# as -2**63's, perhaps an integer orjson reads as a float (``bytes.translate`` and ``in`` run
# at memory speed, where a regex took 15-25 ms a MiB on the event loop)
_DIGITS_AS_ZEROS = bytes(ord("0") if ord("0") <= byte <= ord("9") else ord(".")
                         for byte in range(256))
_LONG_DIGIT_RUN = b"0" * 19


def _may_hold_a_long_integer(raw: bytes) -> bool:
    """Whether ``raw`` holds a run of 19 digits (an integer past 64 bits has one)."""
    return _LONG_DIGIT_RUN in raw.translate(_DIGITS_AS_ZEROS)


def _exact_payload(raw: bytes) -> dict[str, Any]:
    """The body as Python's parser reads it (whole integers of any size), for re-encoding;
    it was read by ``parse_body`` before, so it is a JSON object."""
    text = raw[len(UTF8_BOM):] if raw.startswith(UTF8_BOM) else raw
    try:
        data: dict[str, Any] = json.loads(text.decode("utf-8"))
    except RecursionError:
        raise _too_deep_to_forward() from None
    return data


def _too_deep_to_forward() -> InvalidRequest:
    return InvalidRequest(
        "Request body is nested too deeply to forward: the router re-encodes it "
        "(to set the model, the response id or the stream's usage request).")


def upstream_body(parsed: ParsedRequest, raw: bytes, model: str) -> bytes:
    """The bytes to send the worker: the client's own, unless the model or usage must change.

    A stream always asks the worker for the final usage chunk (the router needs the token
    counts); ``router.proxy`` strips it again when the client did not ask for it.
    """
    needs_usage = parsed.routing.stream and not parsed.wants_usage
    if not needs_usage and model == parsed.routing.model and not parsed.response_id_assigned:
        return raw
    # orjson reads an integer past 64 bits as a float: written back so, it would change the
    # request (a JSON schema's const); such a body is read again, exactly, to be re-encoded
    payload = _exact_payload(raw) if _may_hold_a_long_integer(raw) else dict(parsed.payload)
    payload["model"] = model
    if parsed.response_id_assigned:       # the id is known before the worker answers
        payload["request_id"] = parsed.response_id
    if needs_usage:
        options = dict(payload.get("stream_options") or {})
        options["include_usage"] = True
        # vLLM ignores continuous_usage_stats without include_usage: keep it off
        options.pop("continuous_usage_stats", None)
        payload["stream_options"] = options
    try:
        return orjson.dumps(payload)
    except TypeError:       # a lone surrogate (parse_body took it), or past orjson's depth
        try:
            return json.dumps(payload).encode()
        except RecursionError:
            raise _too_deep_to_forward() from None
