"""Request traces drawn from ServeGen's per-client workload statistics.

ServeGen (Alibaba Bailian) publishes per-client *distributions*, not requests: for each
client, 600 s windows of ``window_start_s, rate_req_per_s, interarrival_cv, pattern, param1,
param2`` (``chunk-<client>-trace.csv``; ``pattern`` the fitted inter-arrival distribution,
``Gamma`` (shape, scale) or ``Weibull`` (shape, scale), empty when the client is idle), and
6 h windows of length distributions (``chunk-<client>-dataset.json``: per window, fields
``input_tokens`` and ``output_tokens``, each a Python-literal ``{value: probability}``).

``servegen_requests`` turns them into requests:

* **Arrivals**, per client and 600 s window: a renewal process whose gaps follow the window's
  fitted distribution, rescaled to the window's measured rate (the fit's own mean can differ
  from it by tens of per cent in sparse windows; its shape, hence the burstiness, is kept).
  Each window starts afresh at a uniform point of its first gap.
* **Lengths**: input and output tokens drawn independently from the client's distributions
  for the 6 h window holding the arrival (ServeGen publishes the two marginals, not their
  joint law). A client without a dataset for that window sends nothing then; one without a
  dataset file at all is skipped and counted.
* Prompts are unique (``prompt_tokens``: ServeGen carries no prefix information); each
  request names its client as ``tenant``.

Each client's window draws from its own ``random.Random`` seeded by ``(seed, client, window)``,
so the same seed gives the same requests, whatever span is asked for and whichever other
clients are there. The result
is written as the simulator's generic JSONL (``sim.traces``), for ``kvroute sim --trace``::

    kvroute trace servegen --archive ../shared/traces/servegen/servegen_reason_deepseek-r1.tar.gz \\
        --start 0 --duration 600 --out servegen-r1.jsonl.gz
"""

from __future__ import annotations

import ast
import bisect
import csv
import gzip
import io
import json
import math
import random
import re
import tarfile
import zlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

RATE_WINDOW_S = 600
LENGTH_WINDOW_S = 21_600
_MEMBER = re.compile(r"(?:^|/)chunk-(\d+)-(trace\.csv|dataset\.json)$")


class ServeGenError(ValueError):
    """The archive is unreadable or malformed; the message names the member and line."""


@dataclass(frozen=True, slots=True)
class RateWindow:
    start_s: float
    rate: float            # requests per second, measured
    pattern: str           # "Gamma", "Weibull" or "" (idle)
    shape: float           # of the fitted law (its scale is replaced by the measured rate)


@dataclass(frozen=True, slots=True)
class LengthLaw:
    """A discrete distribution of token counts, sampled by inverse CDF."""

    values: tuple[int, ...]
    cumulative: tuple[float, ...]

    def draw(self, rng: random.Random) -> int:
        u = rng.random() * self.cumulative[-1]
        return self.values[min(bisect.bisect_right(self.cumulative, u), len(self.values) - 1)]


@dataclass(frozen=True, slots=True)
class Client:
    client_id: str
    windows: tuple[RateWindow, ...]
    inputs: Mapping[int, LengthLaw]     # 6 h window start -> law
    outputs: Mapping[int, LengthLaw]


@dataclass(frozen=True, slots=True)
class ServeGenRequest:
    arrival_s: float       # from the start of the requested span
    prompt_tokens: int
    output_tokens: int
    tenant: str


@dataclass(frozen=True, slots=True)
class Workload:
    clients: tuple[Client, ...]
    without_lengths: tuple[str, ...]     # clients with rates but no dataset file


def read_archive(path: str | Path) -> Workload:
    """Clients of a ServeGen ``.tar.gz`` (or a folder of the same ``chunk-*`` files)."""
    p = Path(path)
    members: dict[tuple[str, str], str] = {}
    try:
        if p.is_dir():
            for file in sorted(p.rglob("chunk-*")):
                match = _MEMBER.search(file.as_posix())
                if match:
                    members[(match.group(1), match.group(2))] = file.read_text()
        else:
            with _open_tar(p) as archive:
                for member in archive:
                    match = _MEMBER.search(member.name)
                    if not match or not member.isfile():
                        continue
                    handle = archive.extractfile(member)
                    if handle is not None:
                        members[(match.group(1), match.group(2))] = handle.read().decode()
    except UnicodeDecodeError as exc:
        raise ServeGenError(f"{p}: cannot read ServeGen data: a chunk-* file is not UTF-8 "
                            f"text ({exc.reason})") from exc
    except OSError as exc:
        raise ServeGenError(f"{p}: cannot read ServeGen data: {exc.strerror or exc}") from exc
    except (EOFError, zlib.error, tarfile.TarError) as exc:
        # a truncated or corrupt archive fails while it is read, in gzip, zlib or tarfile
        reason = " ".join(str(exc).split()) or type(exc).__name__
        raise ServeGenError(f"{p}: cannot read ServeGen data: truncated or corrupt archive "
                            f"({reason})") from exc
    ids = sorted({client for client, _ in members}, key=int)
    if not any(kind == "trace.csv" for _, kind in members):
        raise ServeGenError(f"{p}: no chunk-<client>-trace.csv files")
    clients: list[Client] = []
    without: list[str] = []
    for client in ids:
        rates = members.get((client, "trace.csv"))
        if rates is None:
            continue
        dataset = members.get((client, "dataset.json"))
        if dataset is None:
            without.append(client)
            continue
        where = f"{p}: chunk-{client}"
        inputs, outputs = _length_laws(dataset, f"{where}-dataset.json")
        clients.append(Client(client, _rate_windows(rates, f"{where}-trace.csv"), inputs,
                              outputs))
    if not clients:
        raise ServeGenError(f"{p}: no client has both a trace.csv and a dataset.json "
                            "(length distributions are needed to draw requests)")
    return Workload(tuple(clients), tuple(without))


def _open_tar(p: Path) -> tarfile.TarFile:
    try:
        return tarfile.open(p, "r:*")
    except tarfile.ReadError as exc:        # its message lists every method it tried
        raise ServeGenError(f"{p}: cannot read ServeGen data: not a readable tar archive "
                            "(plain, .gz, .bz2 or .xz) nor a folder") from exc


def servegen_requests(workload: Workload, start_s: float, duration_s: float,
                      seed: int = 0) -> list[ServeGenRequest]:
    """Requests arriving in ``[start_s, start_s + duration_s)``, sorted by arrival."""
    if not (duration_s > 0 and math.isfinite(duration_s)):
        raise ServeGenError(f"duration must be a finite number > 0 seconds, got {duration_s}")
    if not math.isfinite(start_s):
        raise ServeGenError(f"start must be a finite number of seconds, got {start_s}")
    end_s = start_s + duration_s
    requests: list[ServeGenRequest] = []
    for client in workload.clients:
        tenant = f"client-{client.client_id}"
        for window in client.windows:
            if window.start_s + RATE_WINDOW_S <= start_s or window.start_s >= end_s:
                continue
            key = int(window.start_s // LENGTH_WINDOW_S) * LENGTH_WINDOW_S
            inputs, outputs = client.inputs.get(key), client.outputs.get(key)
            if inputs is None or outputs is None:
                continue
            # one generator per (seed, client, window): a window's requests are the same
            # whatever span asks for them
            rng = random.Random(f"{seed}:{client.client_id}:{window.start_s}")
            for arrival in _window_arrivals(window, rng):
                prompt, output = max(1, inputs.draw(rng)), max(1, outputs.draw(rng))
                if start_s <= arrival < end_s:
                    requests.append(ServeGenRequest(arrival - start_s, prompt, output, tenant))
    requests.sort(key=lambda r: (r.arrival_s, r.tenant))
    return requests


def write_jsonl(requests: list[ServeGenRequest], path: str | Path) -> None:
    """The simulator's generic JSONL (gzip when the name ends in ``.gz``), written beside
    ``path`` and renamed over it once whole: an interrupted draw left a valid gzip of a few
    dozen rows, which ``kvroute scorecard`` then took for the drawn trace on every run."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    partial = p.with_name(f".{p.name}.partial")
    opener = gzip.open if p.suffix == ".gz" else open
    try:
        with opener(partial, "wt") as out:
            for r in requests:
                out.write(json.dumps({"arrival_s": round(r.arrival_s, 6),
                                      "prompt_tokens": r.prompt_tokens,
                                      "output_tokens": r.output_tokens,
                                      "tenant": r.tenant}) + "\n")
        partial.replace(p)
    finally:
        partial.unlink(missing_ok=True)


def _window_arrivals(window: RateWindow, rng: random.Random) -> Iterator[float]:
    """One window's arrivals: a renewal process whose gaps follow the window's fitted law
    rescaled to a mean of 1 / measured rate, started at a uniform point of the first gap."""
    if window.rate <= 0 or not window.pattern:
        return
    mean_gap, shape = 1.0 / window.rate, window.shape
    if window.pattern == "Gamma":
        unit = 1.0 / shape                            # Gamma(shape, 1 / shape) has mean 1

        def gap() -> float:
            return rng.gammavariate(shape, unit) * mean_gap
    else:
        unit = 1.0 / math.gamma(1.0 + 1.0 / shape)   # Weibull(unit, shape) has mean 1

        def gap() -> float:
            return rng.weibullvariate(unit, shape) * mean_gap
    window_end = window.start_s + RATE_WINDOW_S
    at = window.start_s + rng.random() * gap()
    while at < window_end:
        yield at
        at += gap()


def _rate_windows(text: str, where: str) -> tuple[RateWindow, ...]:
    windows: list[RateWindow] = []
    for lineno, row in enumerate(csv.reader(io.StringIO(text)), start=1):
        if not row:
            continue
        if len(row) != 6:
            raise ServeGenError(f"{where}:{lineno}: expected 6 fields, got {len(row)}")
        try:
            start, rate = float(row[0]), float(row[1])
            pattern = row[3].strip()
            shape = float(row[4]) if pattern else 0.0
        except ValueError as exc:
            raise ServeGenError(f"{where}:{lineno}: {exc}") from exc
        if not math.isfinite(start):
            raise ServeGenError(f"{where}:{lineno}: window start must be a finite number, "
                                f"got {row[0]}")
        if not (rate >= 0 and math.isfinite(rate)):      # an infinite rate never ends
            raise ServeGenError(f"{where}:{lineno}: rate must be a finite number >= 0, "
                                f"got {row[1]}")
        if pattern not in ("", "Gamma", "Weibull"):
            raise ServeGenError(f"{where}:{lineno}: unknown pattern {pattern!r}")
        if pattern and rate > 0 and not (shape > 0 and math.isfinite(shape)):
            raise ServeGenError(f"{where}:{lineno}: shape must be > 0, got {row[4]}")
        windows.append(RateWindow(start, rate, pattern, shape))
    windows.sort(key=lambda w: w.start_s)
    return tuple(windows)


def _length_laws(text: str, where: str) -> tuple[dict[int, LengthLaw], dict[int, LengthLaw]]:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ServeGenError(f"{where}: not JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise ServeGenError(f"{where}: expected an object of windows")
    inputs: dict[int, LengthLaw] = {}
    outputs: dict[int, LengthLaw] = {}
    for window, fields in data.items():
        if not isinstance(fields, dict):
            raise ServeGenError(f"{where}: window {window}: expected an object of fields")
        try:
            start = int(float(window))
        except (ValueError, OverflowError) as exc:      # NaN, inf or not a number
            raise ServeGenError(f"{where}: window {window!r}: not a start in seconds") from exc
        for name, target in (("input_tokens", inputs), ("output_tokens", outputs)):
            law = _law(fields.get(name), f"{where}: window {window}: {name}")
            if law is not None:
                target[start] = law
    return inputs, outputs


def _law(literal: object, where: str) -> LengthLaw | None:
    if literal is None:
        return None
    try:
        table = ast.literal_eval(literal) if isinstance(literal, str) else literal
    except (ValueError, SyntaxError) as exc:
        raise ServeGenError(f"{where}: not a {{value: probability}} literal") from exc
    if not isinstance(table, dict):
        raise ServeGenError(f"{where}: not a {{value: probability}} literal")
    try:
        items = sorted(table.items())
    except TypeError as exc:
        raise ServeGenError(f"{where}: token counts of mixed types") from exc
    values: list[int] = []
    cumulative: list[float] = []
    total = 0.0
    for value, probability in items:
        if (not isinstance(probability, int | float)
                or not (probability >= 0 and math.isfinite(probability))):
            raise ServeGenError(f"{where}: probability of {value!r} must be a finite "
                                "number >= 0")
        if probability == 0:
            continue
        try:
            count = int(value)        # a JSON object's keys are strings: "10" is fine
        except (TypeError, ValueError, OverflowError) as exc:
            raise ServeGenError(f"{where}: {value!r} is not a token count") from exc
        total += float(probability)
        values.append(count)
        cumulative.append(total)
    return LengthLaw(tuple(values), tuple(cumulative)) if values else None
