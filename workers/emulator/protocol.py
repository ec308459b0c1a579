"""Parse and validate OpenAI request bodies the way vLLM's pydantic models do.

A body that fails here gets a vLLM-shaped 400 naming the field; unknown fields are accepted and
ignored (vLLM's models use ``extra="allow"``).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import orjson
from aiohttp import web

from workers.emulator.errors import (
    ApiError,
    FieldError,
    bad_request,
    no_room_to_answer,
    unsupported_media_type,
    validation_error,
    validation_errors,
    vllm_check,
)
from workers.lax_values import lax_bool, lax_float, lax_int, lax_int_error

RequestKind = Literal["chat", "completion"]
MAX_N = 128
# a stream's headers, as vLLM's (Starlette's StreamingResponse of text/event-stream) send them
SSE_HEADERS = {"Content-Type": "text/event-stream; charset=utf-8"}
GREEDY_TEMPERATURE = 1e-5       # below it vLLM samples greedily (its _SAMPLING_EPS)
STREAM_OPTIONS_WITHOUT_STREAM = ("Stream options can only be defined when `stream=True`. "
                                 "(parameter=stream_options)")


@dataclass(frozen=True, slots=True)
class GenerationBody:
    """The fields of a chat or completion request the emulator acts on."""

    kind: RequestKind
    model: str | None
    prompts: tuple[str | tuple[int, ...], ...]      # completion: one per prompt
    messages: tuple[Mapping[str, Any], ...]           # chat
    add_generation_prompt: bool
    max_tokens: int | None
    ignore_eos: bool
    n: int
    stream: bool
    include_usage: bool
    continuous_usage: bool
    cache_salt: str | None
    echo: bool
    min_tokens: int = 0      # tokens generated before EOS may end the answer (vLLM's)
    tools: tuple[Mapping[str, Any], ...] = ()      # chat: offered, written into the prompt
    logprobs: int | None = None     # alternatives asked per token (None: no logprobs asked)
    max_tokens_field: str = "max_tokens"    # the field max_tokens came from, as errors name it
    # a completion echoing its prompt with max_tokens 0: its prompt (and the prompt's
    # logprobs) is the answer; one token is generated, as vLLM does, and not shown
    echo_only: bool = False
    request_id: str | None = None           # the body's (vLLM: used when no X-Request-Id)
    prompt_logprobs: int | None = None      # checked as vLLM does, not answered
    # token ids vLLM checks against the vocabulary: logit_bias's keys, stop_token_ids,
    # allowed_token_ids (None: not given)
    logit_bias_ids: tuple[int, ...] = ()
    stop_token_ids: tuple[int, ...] = ()
    allowed_token_ids: tuple[int, ...] | None = None


async def read_json_body(request: web.Request) -> Mapping[str, Any]:
    """The JSON object of a POST, as vLLM takes it: a JSON content type, else 400."""
    ctype = request.headers.get("Content-Type", "application/json")
    if ctype.split(";")[0].strip().lower() != "application/json":
        raise unsupported_media_type()
    return decode_json(await request.read())


def body_not_parsed() -> web.HTTPBadRequest:
    """FastAPI's answer to a body it cannot read (not UTF-8): no ``error`` object."""
    return web.HTTPBadRequest(body=b'{"detail":"There was an error parsing the body"}',
                              content_type="application/json")


def decode_json(raw: bytes) -> Mapping[str, Any]:
    """The JSON object of a request body, or FastAPI's 400 as vLLM answers it: no body is a
    missing one, malformed JSON a ``json_invalid`` at its character, a body that is no
    object a ``model_attributes_type``; a body that is not UTF-8 (or nested past Python's
    recursion limit) FastAPI's plain ``detail``.
    Python's JSON reader takes what orjson does not: a UTF-8 BOM, ``NaN``, ``Infinity``, and
    an escaped lone surrogate, which vLLM's tokenizer then refuses (a 400 here at once)."""
    try:
        data = orjson.loads(raw) if raw else None
    except orjson.JSONDecodeError:
        try:
            data = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise validation_error(str(exc.pos), "JSON decode error", "json_invalid", {},
                                   {"error": exc.msg}) from None
        except (ValueError, RecursionError):   # not UTF-8, or nested past Python's limit
            raise body_not_parsed() from None
        if _holds_lone_surrogate(data):
            raise bad_request(LONE_SURROGATE, None) from None
    if data is None:
        raise validation_error("", "Field required", "missing", None)
    if not isinstance(data, dict):
        raise validation_error("", "Input should be a valid dictionary or object to extract "
                               "fields from", "model_attributes_type", data)
    return data


# vLLM's answer to a text holding an escaped lone surrogate (``"\\ud800"``, valid JSON that
# orjson refuses): its tokenizer's error, as a 400
LONE_SURROGATE = ("TextEncodeInput must be Union[TextInputSequence, Tuple[InputSequence, "
                  "InputSequence]]")


def _holds_lone_surrogate(data: Any) -> bool:
    """Whether a value Python's JSON reader took holds a lone surrogate (no UTF-8 has one)."""
    try:
        json.dumps(data, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return True
    except (ValueError, RecursionError):
        return False
    return False


MAX_LOGPROBS = 20
TOOL_CHOICE_USAGE = 'Correct usage: `{"type": "function", "function": {"name": "my_function"}}`'


def _tool_usage_error(message: str, parameter: str) -> ApiError:
    return bad_request(f"{message} (parameter={parameter})", parameter)


def check_tool_usage(data: Mapping[str, Any]) -> None:
    """vLLM's checks of a chat request's ``tools`` and ``tool_choice``, in its order and
    words: no empty list of tools, no ``tool_choice`` (other than "none") without tools, and
    a named choice that names one of them."""
    tools = data.get("tools")
    if tools == []:
        raise _tool_usage_error("`tools` must not be an empty array. Either provide at least "
                                "one tool or omit the field entirely.", "tools")
    choice = data.get("tool_choice")
    if choice is None or choice == "none":
        return
    if tools is None:
        raise _tool_usage_error("When using `tool_choice`, `tools` must be set.", "tool_choice")
    if not isinstance(choice, dict):
        if choice in ("auto", "required"):
            return
        raise _tool_usage_error(f"Invalid value for `tool_choice`: {choice}! Only named tools, "
                                '"none", "auto" or "required" are supported.', "tool_choice")
    function = choice.get("function")
    if not isinstance(function, dict):
        raise _tool_usage_error(f"Invalid value for `function`: `{function}` in `tool_choice`! "
                                f"{TOOL_CHOICE_USAGE}", "tool_choice.function")
    if "name" not in function:
        raise _tool_usage_error("Expected field `name` in `function` in `tool_choice`! "
                                f"{TOOL_CHOICE_USAGE}", "tool_choice.function.name")
    name = function["name"]
    if not isinstance(name, str) or not name:
        raise _tool_usage_error(f"Invalid `name` in `function`: `{name}` in `tool_choice`! "
                                f"{TOOL_CHOICE_USAGE}", "tool_choice.function.name")
    named = (tool.get("function") for tool in tools if isinstance(tool, dict)) \
        if isinstance(tools, list) else ()
    if not any(isinstance(f, dict) and f.get("name") == name for f in named):
        raise _tool_usage_error("The tool specified in `tool_choice` does not match any of the "
                                "specified `tools`", "tool_choice")


def parse_generation(data: Mapping[str, Any], kind: RequestKind) -> GenerationBody:
    f = BodyFields(data)
    max_tokens_field, echo_only = "max_tokens", False
    messages: tuple[Mapping[str, Any], ...] = ()
    prompts: tuple[str | tuple[int, ...], ...] = ()
    tools: tuple[Mapping[str, Any], ...] = ()
    if kind == "chat":
        messages = _messages(data)
        check_tool_usage(data)
        check_generation_prompt(data)
        offered = data.get("tools")
        if offered is not None and not isinstance(offered, list):
            raise validation_error("tools", "Input should be a valid list", "list_type",
                                   offered)
        tools = tuple(tool for tool in offered or () if isinstance(tool, dict))
        max_tokens = f.opt_int("max_completion_tokens")
        if max_tokens is None:
            max_tokens = f.opt_int("max_tokens")
        else:
            max_tokens_field = "max_completion_tokens"
    else:
        prompts = _prompts(data)
        max_tokens = f.opt_int("max_tokens", default=16)
        if max_tokens == 0 and f.boolean("echo", False):     # vLLM: echo_without_generation
            max_tokens, echo_only = 1, True
        if data.get("suffix") is not None:      # vLLM 0.33's answer for a model without FIM
            raise bad_request("suffix is only supported for models with FIM completion "
                              "rendering", "suffix")
    stream_options = data.get("stream_options")
    if stream_options is not None and not isinstance(stream_options, dict):
        raise validation_error("stream_options", "Input should be a valid dictionary or object "
                               "to extract fields from", "model_attributes_type", stream_options)
    so = BodyFields(stream_options or {}, prefix="stream_options.")
    if stream_options and not data.get("stream"):     # vLLM's validate_stream_options
        raise bad_request(STREAM_OPTIONS_WITHOUT_STREAM, "stream_options")
    if max_tokens is not None and max_tokens < 1:     # vLLM's sampling parameters' words
        raise no_room_to_answer(max_tokens)
    n = f.opt_int("n", default=1)
    assert n is not None
    if n < 1:
        raise bad_request(f"n must be at least 1, got {n}.", None)
    if n > MAX_N:
        raise validation_error("n", f"Input should be less than or equal to {MAX_N}",
                               "less_than_equal", n)
    for name in ("presence_penalty", "frequency_penalty"):
        f.opt_number(name)
    logprobs = _check_sampling(f, kind)
    temperature = f.opt_number("temperature")
    if n > 1 and temperature is not None and temperature < GREEDY_TEMPERATURE:
        raise bad_request(f"n must be 1 when using greedy sampling, got {n}.", None)
    _check_response_format(data.get("response_format"))
    f.opt_int("seed", lo=INT64_MIN, hi=INT64_MAX)
    f.opt_str("user")
    prompt_logprobs = f.opt_int("prompt_logprobs")
    if prompt_logprobs is None and kind == "chat" and f.boolean("echo", False):
        prompt_logprobs = f.opt_int("top_logprobs", default=0)     # vLLM: echo asks them
    return GenerationBody(
        kind=kind, model=f.opt_str("model"), prompts=prompts, messages=messages, tools=tools,
        add_generation_prompt=f.boolean("add_generation_prompt", True),
        max_tokens=max_tokens, ignore_eos=f.boolean("ignore_eos", False), n=n,
        stream=f.boolean("stream", False),
        include_usage=so.boolean("include_usage", False),
        continuous_usage=so.boolean("continuous_usage_stats", False),
        cache_salt=_cache_salt(data.get("cache_salt")), echo=f.boolean("echo", False),
        min_tokens=f.opt_int("min_tokens", default=0) or 0, logprobs=logprobs,
        max_tokens_field=max_tokens_field, request_id=f.opt_str("request_id"),
        echo_only=echo_only, prompt_logprobs=prompt_logprobs,
        logit_bias_ids=_logit_bias_ids(data.get("logit_bias")),
        stop_token_ids=tuple(_token_ids(data, "stop_token_ids") or ()),
        allowed_token_ids=_token_ids(data, "allowed_token_ids"),
    )


INT64_MIN, INT64_MAX = -(2 ** 63), 2 ** 63 - 1


def check_generation_prompt(data: Mapping[str, Any]) -> None:
    """vLLM's refusals of ``continue_final_message`` with ``add_generation_prompt``: both
    set true (its request validator), or the latter left to its default, true (the chat
    template's renderer)."""
    if not data.get("continue_final_message"):
        return
    if data.get("add_generation_prompt"):
        raise bad_request("Cannot set both `continue_final_message` and "
                          "`add_generation_prompt` to True.", None)
    if BodyFields(data).boolean("add_generation_prompt", True):
        raise bad_request(
            "continue_final_message and add_generation_prompt are not compatible. Use "
            "continue_final_message when you want the model to continue the final message, "
            "and add_generation_prompt when you want to add a header that will prompt it to "
            "start a new assistant message instead.", None)


def _check_response_format(response_format: Any) -> None:
    """vLLM's ``validate_response_format``: a ``json_schema`` format carries its schema."""
    if isinstance(response_format, dict) and response_format.get("type") == "json_schema" \
            and response_format.get("json_schema") is None:
        raise vllm_check("When response_format type is 'json_schema', the 'json_schema' field "
                         "must be provided.", "response_format")


def _logit_bias_ids(value: Any) -> tuple[int, ...]:
    """``logit_bias``'s keys as token ids (a mapping, keys that read as integers: vLLM's
    words otherwise)."""
    if value is None:
        return ()
    if not isinstance(value, dict):
        raise validation_error("logit_bias", "Input should be a valid dictionary", "dict_type",
                               value)
    ids, bad = [], []
    for key in value:
        try:
            ids.append(int(key))
        except ValueError:
            bad.append(key)
    if bad:
        raise vllm_check(f"logit_bias contains key(s) that cannot be converted to integer "
                         f"token IDs: {bad}", "logit_bias", bad)
    return tuple(ids)


def _token_ids(data: Mapping[str, Any], name: str) -> tuple[int, ...] | None:
    """An optional list of token ids (vLLM's ``list[int]``), None when not given."""
    value = data.get(name)
    if value is None:
        return None
    if not isinstance(value, list):
        raise validation_error(name, "Input should be a valid list", "list_type", value)
    for i, item in enumerate(value):
        if lax_int(item) is None:
            message, kind = lax_int_error(item)
            raise validation_error(f"{name}.{i}", message, kind, item)
    return tuple(int(lax_int(item)) for item in value)   # type: ignore[arg-type]


def check_token_ids(body: GenerationBody, vocab_size: int) -> None:
    """vLLM's ``SamplingParams`` checks of the token ids a request names, in its order:
    logit_bias's keys, stop_token_ids, allowed_token_ids (none empty)."""
    for name, ids in (("logit_bias", body.logit_bias_ids),
                      ("stop_token_ids", body.stop_token_ids)):
        bad = [t for t in ids if not 0 <= t < vocab_size]
        if bad:
            raise vllm_check(f"token_id(s) {bad} in {name} contain out-of-vocab token ids. "
                             f"Vocabulary size: {vocab_size}", name, bad)
    allowed = body.allowed_token_ids
    if allowed is not None and not allowed:
        raise vllm_check("allowed_token_ids is not None and empty!", "allowed_token_ids", [])
    if allowed and any(not 0 <= t < vocab_size for t in allowed):
        raise vllm_check("allowed_token_ids contains out-of-vocab token id!",
                         "allowed_token_ids", list(allowed))


def body_request_id(data: Mapping[str, Any]) -> str | None:
    """The body's ``request_id`` (a text): what vLLM names a request after when no
    X-Request-Id came."""
    return BodyFields(data).opt_str("request_id")


def _cache_salt(value: Any) -> str | None:
    """vLLM's ``validate_cache_salt``: none, or a non-empty text of at most 128 characters
    without ``@``, ``/``, a backslash or NUL."""
    if value is None:
        return None
    if not isinstance(value, str) or not value:
        raise bad_request("Parameter 'cache_salt' must be a non-empty string if provided. "
                          "(parameter=cache_salt)", "cache_salt")
    if len(value) > 128 or any(char in "@/\\\x00" for char in value):
        raise bad_request("Parameter 'cache_salt' must be at most 128 characters and must not "
                          "contain '@', '/', '\\\\', or NUL. (parameter=cache_salt)", "cache_salt")
    return value


def check_sampling_ranges(data: Mapping[str, Any]) -> None:
    """vLLM's ``SamplingParams`` checks of the sampling ranges, in its words and order
    (``_verify_args``); the Messages API's too, which vLLM turns into a chat request."""
    f = BodyFields(data)
    for name in ("presence_penalty", "frequency_penalty"):
        penalty = f.opt_number(name)
        if penalty is not None and not -2.0 <= penalty <= 2.0:
            raise bad_request(f"{name} must be in [-2, 2], got {float(penalty)}.", None)
    repetition = f.opt_number("repetition_penalty")
    if repetition is not None and not math.isfinite(repetition):
        raise bad_request(f"repetition_penalty must be a finite number, got {repetition}.",
                          None)
    if repetition is not None and repetition <= 0.0:
        raise bad_request(f"repetition_penalty must be greater than zero, got "
                          f"{float(repetition)}.", None)
    temperature = f.opt_number("temperature")
    if temperature is not None and not math.isfinite(temperature):
        raise bad_request(f"temperature must be a finite number, got {temperature}. "
                          f"(parameter=temperature, value={temperature})", "temperature")
    if temperature is not None and temperature < 0.0:
        value = float(temperature)
        raise bad_request(f"temperature must be non-negative, got {value}. "
                          f"(parameter=temperature, value={value})", "temperature")
    if temperature is not None and temperature > 2.0:
        value = float(temperature)
        raise bad_request(f"temperature must be in [0, 2], got {value}. "
                          f"(parameter=temperature, value={value})", "temperature")
    top_p = f.opt_number("top_p")
    if top_p is not None and not 0.0 < top_p <= 1.0:
        value = float(top_p)
        raise bad_request(f"top_p must be in (0, 1], got {value}. "
                          f"(parameter=top_p, value={value})", "top_p")
    top_k = f.opt_int("top_k")
    if top_k is not None and top_k < 0 and top_k != -1:
        raise bad_request(f"top_k must be 0 (disable), or at least 1, got {top_k}.", None)
    min_p = f.opt_number("min_p")
    if min_p is not None and not 0.0 <= min_p <= 1.0:
        raise bad_request(f"min_p must be in [0, 1], got {float(min_p)}.", None)


def _check_sampling(f: BodyFields, kind: RequestKind) -> int | None:
    """vLLM's ``SamplingParams`` checks of what the emulator takes but does not model: the
    sampling ranges, the logprobs asked (at most ``MAX_LOGPROBS``, the engine's default
    ``max_logprobs``) and ``stop`` (a string or a list of them). Returns the alternatives
    asked per token (chat: ``top_logprobs``, 0 with ``logprobs`` alone; completions:
    ``logprobs``), None when no logprobs are asked."""
    check_sampling_ranges(f.data)
    _check_logprobs_fields(f.data, kind)
    wanted: int | None
    if kind == "chat":
        asked = f.opt_int("top_logprobs")
        wanted = (asked or 0) if f.boolean("logprobs", False) else None
    else:
        asked = wanted = f.opt_int("logprobs")
    if asked is not None and asked > MAX_LOGPROBS:
        raise bad_request(f"Requested sample logprobs of {asked}, which is greater than max "
                          f"allowed: {MAX_LOGPROBS} (parameter=logprobs, value={asked})",
                          "logprobs")
    _check_stop(f.data.get("stop"))
    return wanted


def _check_logprobs_fields(data: Mapping[str, Any], kind: RequestKind) -> None:
    """vLLM's ``check_logprobs`` (a validator run on the raw body, before its fields are
    typed): ``prompt_logprobs`` and ``top_logprobs`` (chat) or ``logprobs`` (completions)
    must be numbers, -1 or at least 0, no prompt logprobs in a stream, and chat's
    ``top_logprobs`` past 0 only with ``logprobs``."""
    sample = "top_logprobs" if kind == "chat" else "logprobs"
    for name in ("prompt_logprobs", sample):
        value = data.get(name)
        if value is not None and not isinstance(value, int | float):
            raise vllm_check(f"`{name}` must be an integer.", name, value)
    prompt = data.get("prompt_logprobs")
    if prompt is not None:
        if data.get("stream") and (prompt > 0 or prompt == -1):
            raise vllm_check("`prompt_logprobs` are not available when `stream=True`.",
                             "prompt_logprobs")
        if prompt < 0 and prompt != -1:
            raise vllm_check("`prompt_logprobs` must be a positive value or -1.",
                             "prompt_logprobs", prompt)
    asked = data.get(sample)
    if asked is not None and asked < 0 and asked != -1:
        raise vllm_check(f"`{sample}` must be a positive value or -1.", sample, asked)
    if kind == "chat" and asked is not None and (asked == -1 or asked > 0) and \
            not data.get("logprobs"):
        raise vllm_check("when using `top_logprobs`, `logprobs` must be set to true.",
                         "top_logprobs")


def check_logprobs_asked(body: GenerationBody, vocab_size: int) -> None:
    """vLLM's ``SamplingParams`` check of the logprobs asked against the engine's
    ``max_logprobs`` (``MAX_LOGPROBS``), -1 being the whole vocabulary: the sample
    logprobs, then the prompt's."""
    for asked, name, words in ((body.logprobs, "logprobs", "sample"),
                               (body.prompt_logprobs, "prompt_logprobs", "prompt")):
        wanted = vocab_size if asked == -1 else asked
        if wanted is not None and wanted > MAX_LOGPROBS:
            raise vllm_check(f"Requested {words} logprobs of {wanted}, which is greater than "
                             f"max allowed: {MAX_LOGPROBS}", name, wanted)


MAX_STOP_STRINGS = 4        # vLLM's VLLM_MAX_STOP_STRINGS


def _check_stop(stop: Any) -> None:
    """``stop``: a text, or a list of at most ``MAX_STOP_STRINGS`` texts (vLLM's union type,
    whose refusals name each branch), none of them empty."""
    if stop is None:
        return
    as_text: FieldError = ("stop", "Input should be a valid string", "string_type", stop, None)
    if isinstance(stop, list):
        wrong: list[FieldError] = [
            (f"stop.{i}", "Input should be a valid string", "string_type", item, None)
            for i, item in enumerate(stop) if not isinstance(item, str)]
        if wrong:
            raise validation_errors([as_text, *wrong])
        if len(stop) > MAX_STOP_STRINGS:
            raise validation_errors([as_text, (
                "stop", f"List should have at most {MAX_STOP_STRINGS} items after validation, "
                f"not {len(stop)}", "too_long", stop,
                {"field_type": "List", "max_length": MAX_STOP_STRINGS,
                 "actual_length": len(stop)})])
    elif not isinstance(stop, str):
        raise validation_errors([as_text, ("stop", "Input should be a valid list", "list_type",
                                           stop, None)])
    if stop == "" or (isinstance(stop, list) and "" in stop):
        raise bad_request("stop cannot contain an empty string.", None)


def _messages(data: Mapping[str, Any]) -> tuple[Mapping[str, Any], ...]:
    if "messages" not in data:
        raise validation_error("messages", "Field required", "missing", dict(data))
    messages = data["messages"]
    if not isinstance(messages, list):
        raise validation_error("messages", "Input should be a valid list", "list_type", messages)
    if not messages:            # vLLM's chat template renderer's words
        raise bad_request("Cannot apply chat template to an empty conversation. Provide at "
                          "least one message.", None)
    for i, message in enumerate(messages):
        where = f"messages.{i}"
        if not isinstance(message, dict):
            raise validation_error(where, "Input should be a valid dictionary", "model_type",
                                   message)
        role = message.get("role")
        if not isinstance(role, str) or not role:
            raise validation_error(f"{where}.role", "Field required", "missing", message)
        content = message.get("content")
        if content is None or isinstance(content, str):
            continue
        if not isinstance(content, list) or not all(
                isinstance(p, dict) and isinstance(p.get("type"), str) for p in content):
            raise validation_error(f"{where}.content", "Input should be a valid string",
                                   "string_type", content)
        for j, part in enumerate(content):
            if part["type"] == "text" and not isinstance(part.get("text"), str):
                raise validation_error(f"{where}.content.{j}.text", "Input should be a valid "
                                       "string", "string_type", part.get("text"))
    return tuple(messages)


def _prompts(data: Mapping[str, Any]) -> tuple[str | tuple[int, ...], ...]:
    prompt = data.get("prompt")
    if prompt is None or prompt == "":         # vLLM 0.32's words
        raise bad_request("Either prompt or prompt_embeds must be provided and non-empty. "
                          "(parameter=prompt)", "prompt")
    if isinstance(prompt, str):
        return (prompt,)
    if isinstance(prompt, list) and prompt:
        if all(isinstance(p, str) for p in prompt):
            return tuple(prompt)
        if all(_is_token(t) for t in prompt):
            return (tuple(prompt),)
        if all(isinstance(p, list) and all(_is_token(t) for t in p) for p in prompt):
            return tuple(tuple(p) for p in prompt)
    if isinstance(prompt, list) and not prompt:
        raise bad_request("You must pass at least one prompt", None)
    raise validation_error("prompt", "Input should be a valid string, a list of strings, a list "
                           "of token ids or a list of lists of token ids", "union_type", prompt)


def _is_token(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


class BodyFields:
    """Typed optional fields of one JSON object; errors name the field."""

    def __init__(self, data: Mapping[str, Any], prefix: str = "") -> None:
        self.data = data
        self.prefix = prefix

    def opt_int(self, name: str, lo: int | None = None, default: int | None = None,
                hi: int | None = None) -> int | None:
        """An optional integer; with ``hi``, ``lo`` and ``hi`` are the field's pydantic
        bounds (``ge``/``le``: vLLM's validation errors), else ``lo`` is a minimum worded
        as the emulator's own 400."""
        raw = self.data.get(name)
        if raw is None:
            return default
        value = lax_int(raw)            # "4", 4.0, true: as vLLM's pydantic takes them
        if value is None:
            message, kind = lax_int_error(raw)
            raise validation_error(self.prefix + name, message, kind, raw)
        if hi is not None:
            if lo is not None and value < lo:
                raise validation_error(self.prefix + name, f"Input should be greater than or "
                                       f"equal to {lo}", "greater_than_equal", raw, {"ge": lo})
            if value > hi:
                raise validation_error(self.prefix + name, f"Input should be less than or "
                                       f"equal to {hi}", "less_than_equal", raw, {"le": hi})
            return int(value)
        if lo is not None and value < lo:
            raise ApiError(400, f"{name} must be at least {lo}, got {value}.",
                           "BadRequestError", self.prefix + name)
        return int(value)

    def opt_number(self, name: str) -> float | None:
        raw = self.data.get(name)
        if raw is None:
            return None
        value = lax_float(raw)          # "0.1", true: as vLLM's pydantic takes them
        if value is None:
            if isinstance(raw, str):
                raise validation_error(self.prefix + name, "Input should be a valid number, "
                                       "unable to parse string as a number", "float_parsing",
                                       raw)
            raise validation_error(self.prefix + name, "Input should be a valid number",
                                   "float_type", raw)
        return value

    def opt_str(self, name: str) -> str | None:
        value = self.data.get(name)
        if value is not None and not isinstance(value, str):
            raise validation_error(self.prefix + name, "Input should be a valid string",
                                   "string_type", value)
        return value

    def boolean(self, name: str, default: bool) -> bool:
        raw = self.data.get(name)
        if raw is None:
            return default
        value = lax_bool(raw)           # "yes", 1: as vLLM's pydantic takes them
        if value is None:
            if isinstance(raw, str | int | float):
                raise validation_error(self.prefix + name, "Input should be a valid boolean, "
                                       "unable to interpret input", "bool_parsing", raw)
            raise validation_error(self.prefix + name, "Input should be a valid boolean",
                                   "bool_type", raw)
        return value


def token_list(data: Mapping[str, Any], name: str) -> Sequence[int]:
    """A required list of token ids (``/detokenize``)."""
    value = data.get(name)
    if not isinstance(value, list) or not all(_is_token(t) for t in value):
        raise validation_error(name, "Input should be a valid list of integers", "list_type",
                               value)
    return value
