"""The fleet file (``config/fleet.yaml``): GPU classes, model architectures and workers.

```yaml
gpu_classes:            # optional: override built-ins (h100, a100, l40s) or add new ones
  h200: {memory_gb: 141, tflops_bf16: 989.4, bandwidth_gbps: 4800, price_per_hour: 4.5}
models:                 # served model name -> architecture (built-in name or fields)
  meta-llama/Llama-3.1-8B-Instruct: {arch: llama-3-8b, max_model_len: 8192}
workers:
  - id: h100-0
    gpu: h100
    models: [meta-llama/Llama-3.1-8B-Instruct]
    labels: {pool: premium}
    emulate: {port: 8101}            # an emulated worker on 127.0.0.1:8101 ...
  - id: real-0
    gpu: a100
    models: [meta-llama/Llama-3.1-8B-Instruct]
    url: http://10.0.0.7:8000        # ... or a real vLLM server (https:// for one behind TLS,
                                     # tls_ca_file: CA bundle to verify it, else the system's)
    kv_events: tcp://10.0.0.7:5557   # optional KV-event stream
    api_key_env: VLLM_API_KEY        # optional: the worker was started with --api-key; the
                                     # router sends it the key held by this variable
    launch: {model: /models/llama-3.1-8b}   # optional: how `kvroute launch-vllm` starts it
    max_num_seqs: 128                # optional: the engine's --max-num-seqs and
    max_num_batched_tokens: 4096     # --max-num-batched-tokens, when not the GPU's defaults
```

``emulate:`` keys belong to the emulator (``workers.emulator.config``); this module keeps them
as a mapping and only reads ``port`` and ``host`` to derive the worker URL. ``launch:`` keys
belong to the vLLM launcher (``workers.launch.settings``) and are kept as a mapping too. Both
blocks are checked here with their owners' parsers, so that a fleet that loads (``kvroute
validate --fleet``) is one that ``kvroute up`` and ``kvroute launch-vllm`` accept. The
engine's batch limits (``max_num_seqs``, ``max_num_batched_tokens``), which the router's time
estimates and the simulator need, are the entry's own keys, else those of its ``emulate:`` or
``launch:`` block, else the GPU class's vLLM defaults. Ids and URLs are each a worker's own:
two entries with the same ``url:`` (or emulated on the same port) are refused, URLs compared
as the router reaches them (``http://h`` and ``http://H:80/`` are one). A ``url:`` is a base
URL (a path prefix is kept, for workers behind a reverse proxy): one with a user or password
(never sent: a key goes in ``api_key_env``), a query, a fragment or whitespace is refused.

Every numeric field of a GPU class, a model and a worker is read through ``check_number``: a
finite number, positive (a price may be 0), an integer where vLLM takes one (never a bool), a
port within 1..65535; a bad one is a ``FleetConfigError`` naming the file, the key path and
what the value must be.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any
from urllib.parse import SplitResult, urlsplit

from workers.engine.profiles import BUILTIN_GPUS, BUILTIN_MODELS, GpuProfile, ModelSpec
from workers.models import WorkerInfo
from workers.upstream import base_url
from workers.yaml_text import YamlTextError, key_lines, load_config_yaml, with_line, yaml_words


class FleetConfigError(ValueError):
    """A fleet file is invalid; the message names the offending field."""


@dataclass(frozen=True, slots=True)
class NumberRule:
    """What a numeric fleet value must be: finite, an ``int`` when ``integer`` (never a bool),
    above ``lo`` (or at it when ``lo_closed``), at most ``hi``, one of ``choices`` if any.
    ``what`` is how error messages say it."""

    what: str
    integer: bool = False
    lo: float = 0.0
    lo_closed: bool = False
    hi: float = math.inf
    choices: tuple[int, ...] = ()


POSITIVE = NumberRule("a positive number")
NON_NEGATIVE = NumberRule("a number >= 0", lo_closed=True)
FRACTION = NumberRule("a number in (0, 1]", hi=1.0)
POSITIVE_INT = NumberRule("a positive integer", integer=True)
PORT = NumberRule("an integer within [1, 65535]", integer=True, lo=1, lo_closed=True, hi=65535)
TENSOR_PARALLEL = NumberRule("1, 2, 4 or 8", integer=True, choices=(1, 2, 4, 8))


def check_number(value: Any, path: str, rule: NumberRule) -> int | float:
    """``value`` if it keeps ``rule``, else ``FleetConfigError`` naming ``path`` and the rule:
    every numeric field of a fleet file (GPU classes, models, workers) is read through here."""
    ok = (not isinstance(value, bool)
          and isinstance(value, int if rule.integer else int | float)
          and math.isfinite(value)
          and (value >= rule.lo if rule.lo_closed else value > rule.lo)
          and value <= rule.hi
          and (not rule.choices or value in rule.choices))
    if not ok:
        raise FleetConfigError(f"{path}: must be {rule.what}, got {value!r}")
    number: int | float = value
    return number


# every numeric field of a GPU class and of a model architecture (``workers.engine.profiles``)
GPU_FIELD_RULES: Mapping[str, NumberRule] = MappingProxyType({
    "memory_gb": POSITIVE, "tflops_bf16": POSITIVE, "bandwidth_gbps": POSITIVE,
    "price_per_hour": NON_NEGATIVE,          # 0: a GPU that costs nothing (owned, donated)
    "eta_gemm": FRACTION, "eta_mem": FRACTION, "roofline_k": POSITIVE,
    "eta_attn_prefill": FRACTION, "eta_attn_decode": FRACTION,
    "allreduce_latency_s": NON_NEGATIVE, "step_overhead_s": NON_NEGATIVE,
    "visible_memory_gb": POSITIVE,           # or null: all of memory_gb
    "default_max_num_batched_tokens": POSITIVE_INT, "default_max_num_seqs": POSITIVE_INT,
})
_GPU_REQUIRED = ("memory_gb", "tflops_bf16", "bandwidth_gbps", "price_per_hour")
MODEL_FIELD_RULES: Mapping[str, NumberRule] = MappingProxyType({
    key: POSITIVE_INT for key in ("layers", "hidden", "heads", "kv_heads", "head_dim", "ffn",
                                  "vocab", "max_model_len", "dtype_bytes")})
_MODEL_REQUIRED = ("layers", "hidden", "heads", "kv_heads", "head_dim", "ffn", "vocab")


_BATCH_LIMITS = ("max_num_seqs", "max_num_batched_tokens")
_WORKER_KEYS = {"id", "gpu", "models", "model", "labels", "emulate", "url", "kv_events",
                "tensor_parallel", "price_per_hour", "launch", "api_key_env",
                "tls_ca_file", *_BATCH_LIMITS}
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_MODEL_KEYS = {"arch"}
# how a GPU class or a model the fleet lacks is declared, as the errors naming one say it
_DECLARE_GPU = f"declared under gpu_classes: with {', '.join(_GPU_REQUIRED)}"
_DECLARE_MODEL = (f"give it an arch: one of {', '.join(sorted(BUILTIN_MODELS))}; or its shape: "
                  f"{', '.join(_MODEL_REQUIRED)}")


@dataclass(frozen=True, slots=True)
class WorkerSpec:
    """One worker entry: its info plus, for emulated workers, the raw ``emulate`` block, and
    for real workers that ``kvroute launch-vllm`` starts, the raw ``launch`` block."""

    info: WorkerInfo
    emulate: Mapping[str, Any] | None = None
    launch: Mapping[str, Any] | None = None

    @property
    def emulated(self) -> bool:
        return self.emulate is not None

    @property
    def emulated_adapters(self) -> tuple[str, ...]:
        """The LoRA adapters an emulated worker loads (``emulate.lora_adapters``: a list of
        names or a name -> path mapping); none for a real worker, whose are known only from
        its ``/v1/models`` while running."""
        adapters = (self.emulate or {}).get("lora_adapters") or ()
        return tuple(name for name in adapters if isinstance(name, str))

    @property
    def emulated_adapter_paths(self) -> tuple[tuple[str, str], ...]:
        """(adapter, its path) of ``emulated_adapters``, as the emulator serves them: the
        mapping's paths, ``/adapters/<name>`` for a list's names."""
        adapters = (self.emulate or {}).get("lora_adapters") or ()
        if isinstance(adapters, Mapping):
            return tuple((name, path) for name, path in adapters.items()
                         if isinstance(name, str) and isinstance(path, str))
        return tuple((name, f"/adapters/{name}") for name in adapters if isinstance(name, str))


@dataclass(frozen=True, slots=True)
class FleetConfig:
    gpu_classes: Mapping[str, GpuProfile]
    models: Mapping[str, ModelSpec]
    workers: tuple[WorkerSpec, ...]
    source: str = "<memory>"
    extra: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    # SHA-256 of the bytes ``load_fleet`` read (None: built in memory): the fleet reloader
    # takes it as the content in force, so an edit made after the read (while ``kvroute up``
    # starts its emulators, or a routing file's classifier trains) is new to its first poll
    digest: bytes | None = field(default=None, compare=False)

    def worker(self, worker_id: str) -> WorkerSpec:
        for spec in self.workers:
            if spec.info.id == worker_id:
                return spec
        raise KeyError(worker_id)


def load_fleet(path: str | Path, content: bytes | None = None) -> FleetConfig:
    """Read and validate a fleet file (``content``: its bytes, already read); an error
    naming a field ends with its line."""
    p = Path(path)
    try:
        raw = content if content is not None else p.read_bytes()
        text = raw.decode("utf-8")
        data = load_config_yaml(text)
    except OSError as exc:
        raise FleetConfigError(f"{p}: cannot read fleet file: {exc.strerror}") from exc
    except UnicodeDecodeError as exc:  # (a traceback at start, and in the reload's log)
        raise FleetConfigError(f"{p}: not UTF-8 text ({exc.reason})") from exc
    except YamlTextError as exc:       # one line; a key written twice is refused
        raise FleetConfigError(f"{p}: invalid YAML: {exc}") from exc
    try:
        return dataclasses.replace(parse_fleet(data, source=str(p)),
                                   digest=hashlib.sha256(raw).digest())
    except FleetConfigError as exc:    # the field it names, found in the text: its line
        named = str(exc).removeprefix(f"{p}: ")
        if named == str(exc):
            raise
        raise FleetConfigError(f"{p}: {with_line(named, key_lines(text))}") from exc


def parse_fleet(data: Any, source: str = "<memory>") -> FleetConfig:
    if data is None:
        raise FleetConfigError(f"{source}: the file is empty (a fleet file has workers: and "
                               "models:)")
    if not isinstance(data, Mapping):
        raise FleetConfigError(f"{source}: top level must be a mapping")
    unknown = sorted(set(data) - {"gpu_classes", "models", "workers"})
    if unknown:
        hint = (": this is a routing file, not a fleet file" if "profiles" in unknown
                and "workers" not in data else "")
        raise FleetConfigError(f"{source}: unknown top-level key(s): {', '.join(unknown)}"
                               f"{hint}")
    gpus = _parse_gpu_classes(data.get("gpu_classes") or {}, source)
    models = _parse_models(data.get("models") or {}, source)
    raw_workers = data.get("workers")
    if not isinstance(raw_workers, list) or not raw_workers:
        raise FleetConfigError(f"{source}: workers: must be a non-empty list")
    workers: list[WorkerSpec] = []
    seen: set[str] = set()
    url_owner: dict[str, str] = {}
    for i, raw in enumerate(raw_workers):
        spec = _parse_worker(raw, f"{source}: workers[{i}]", gpus, models)
        if spec.info.id in seen:
            raise FleetConfigError(f"{source}: workers[{i}].id: duplicate id {spec.info.id!r}")
        seen.add(spec.info.id)
        # compared as the router reaches them: http://h and http://H:80/ are one server
        owner = url_owner.setdefault(base_url(spec.info.url), spec.info.id)
        if owner != spec.info.id:
            where = "emulate.port" if spec.emulated else "url"
            raise FleetConfigError(f"{source}: workers[{i}].{where}: {spec.info.url} is "
                                   f"already the URL of worker {owner!r}; each worker needs "
                                   "its own")
        workers.append(spec)
    return FleetConfig(gpu_classes=MappingProxyType(gpus), models=MappingProxyType(models),
                       workers=tuple(workers), source=source)


def _checked_url(url: object, where: str) -> SplitResult:
    """``url`` split, if it is a worker's base URL the router can use: http:// or https://, a
    host, perhaps a port and a path prefix (a reverse proxy's); nothing the router would
    drop or append paths after (a query, a fragment) and no whitespace. A user and password
    in it are refused without echoing them: the router never sends them."""
    try:        # (an IPv6 host without its "]", a bracketed name: ValueError)
        parts = urlsplit(url) if isinstance(url, str) else None
        hostname = parts.hostname if parts is not None else None
    except ValueError:
        parts = hostname = None
    if parts is None or parts.scheme not in ("http", "https") or not hostname:
        raise FleetConfigError(f"{where}: must look like http://HOST:PORT or "
                               f"https://HOST:PORT, got {url!r}")
    assert isinstance(url, str)
    if "@" in parts.netloc:
        shown = parts._replace(netloc=parts.netloc.rsplit("@", 1)[1]).geturl()
        raise FleetConfigError(
            f"{where}: a user or password in the URL ({parts.scheme}://USER:PASSWORD@"
            f"{shown.split('://', 1)[1]}) is never sent to the worker; remove it, and give "
            "a worker started with --api-key its key with api_key_env: VARIABLE")
    if any(char.isspace() for char in url):
        raise FleetConfigError(f"{where}: must not contain whitespace, got {url!r}")
    if parts.query or parts.fragment or "?" in url or "#" in url:
        raise FleetConfigError(
            f"{where}: must not carry a query (?...) or a fragment (#...): the router appends "
            f"its paths (/metrics, /v1/...) to the URL, got {url!r}")
    return parts


def _parse_gpu_classes(raw: Any, source: str) -> dict[str, GpuProfile]:
    if not isinstance(raw, Mapping):
        raise FleetConfigError(f"{source}: gpu_classes: must be a mapping")
    gpus = dict(BUILTIN_GPUS)
    for name, fields_ in raw.items():
        where = f"{source}: gpu_classes.{name}"
        if not isinstance(fields_, Mapping):
            raise FleetConfigError(f"{where}: must be a mapping")
        base = BUILTIN_GPUS.get(name)
        _check_fields(fields_, GPU_FIELD_RULES, where, optional=("visible_memory_gb",),
                      required=() if base is not None else _GPU_REQUIRED,
                      missing="required for a GPU class that is not built in")
        if "allreduce_bw_gbps" in fields_:
            _check_allreduce_bw(fields_["allreduce_bw_gbps"], f"{where}.allreduce_bw_gbps")
        if base is not None and "memory_gb" in fields_ and "visible_memory_gb" not in fields_:
            # a built-in class's visible memory belongs to its datasheet size: a new size
            # given alone is the memory there is (it was silently outweighed)
            fields_ = {**fields_, "visible_memory_gb": None}
        try:
            gpus[str(name)] = GpuProfile.from_mapping(str(name), fields_, base)
        except (TypeError, ValueError) as exc:
            raise FleetConfigError(f"{source}: gpu_classes.{name}: {exc}") from exc
    return gpus


def _parse_models(raw: Any, source: str) -> dict[str, ModelSpec]:
    if not isinstance(raw, Mapping):
        raise FleetConfigError(f"{source}: models: must be a mapping")
    models: dict[str, ModelSpec] = {}
    for name, fields_ in raw.items():
        where = f"{source}: models.{name}"
        if fields_ is not None and not isinstance(fields_, Mapping):
            raise FleetConfigError(f"{where}: must be a mapping such as {{arch: llama-3-8b}}")
        fields_ = dict(fields_ or {})
        arch = fields_.pop("arch", None)
        base = BUILTIN_MODELS.get(str(arch)) if arch is not None else None
        if arch is not None and base is None:
            raise FleetConfigError(
                f"{source}: models.{name}.arch: unknown architecture {arch!r} "
                f"(known: {', '.join(sorted(BUILTIN_MODELS))})")
        _check_fields(fields_, MODEL_FIELD_RULES, where,
                      required=() if base is not None else _MODEL_REQUIRED,
                      missing="required without arch:")
        try:
            models[str(name)] = ModelSpec.from_mapping(str(name), fields_, base)
        except (TypeError, ValueError) as exc:
            raise FleetConfigError(f"{source}: models.{name}: {exc}") from exc
    return models


def _parse_worker(raw: Any, where: str, gpus: Mapping[str, GpuProfile],
                  models: Mapping[str, ModelSpec]) -> WorkerSpec:
    if not isinstance(raw, Mapping):
        raise FleetConfigError(f"{where}: must be a mapping")
    unknown = sorted(set(raw) - _WORKER_KEYS)
    if unknown:
        raise FleetConfigError(f"{where}: unknown key(s): {', '.join(unknown)}")
    wid = raw.get("id")
    if not isinstance(wid, str) or not wid:
        raise FleetConfigError(f"{where}.id: required, a non-empty string")
    gpu_name = raw.get("gpu")
    if gpu_name is None:
        raise FleetConfigError(f"{where}.gpu: required, one of {', '.join(sorted(gpus))} "
                               f"(or a class {_DECLARE_GPU})")
    if not isinstance(gpu_name, str):
        raise FleetConfigError(f"{where}.gpu: must be a GPU class name, one of "
                               f"{', '.join(sorted(gpus))}, got {gpu_name!r}")
    if gpu_name not in gpus:
        raise FleetConfigError(f"{where}.gpu: unknown GPU class {gpu_name!r} "
                               f"(known: {', '.join(sorted(gpus))}; or one {_DECLARE_GPU})")
    gpu = gpus[str(gpu_name)]
    if "models" in raw and "model" in raw:
        raise FleetConfigError(f"{where}: give models: or model:, not both")
    served = raw.get("models", raw.get("model"))
    if isinstance(served, str):
        served = [served]
    if not isinstance(served, list) or not served or not all(isinstance(m, str) for m in served):
        raise FleetConfigError(f"{where}.models: required, a list of model names")
    spec = models.get(served[0]) or BUILTIN_MODELS.get(served[0])
    if spec is None:
        raise FleetConfigError(f"{where}.models: {served[0]!r} is not declared under models: "
                               f"({_DECLARE_MODEL})")
    tp = int(check_number(raw.get("tensor_parallel", 1), f"{where}.tensor_parallel",
                          TENSOR_PARALLEL))
    if tp > 1 and tp not in (gpu.allreduce_bw_gbps or {}):
        raise FleetConfigError(
            f"{where}.tensor_parallel: GPU class {gpu_name!r} has no all-reduce bandwidth for "
            f"{tp} GPUs (give gpu_classes.{gpu_name}.allreduce_bw_gbps: {{{tp}: GB/s}})")
    price = float(check_number(raw.get("price_per_hour", gpu.price_per_hour * tp),
                               f"{where}.price_per_hour", NON_NEGATIVE))
    labels = raw.get("labels") or {}
    if not isinstance(labels, Mapping):
        raise FleetConfigError(f"{where}.labels: must be a mapping")
    for key, value in labels.items():
        # a list, a mapping or null became a text no rule can match ("['a', 'b']", "None"),
        # and yes/no became "True"/"False"
        if isinstance(value, bool):
            raise FleetConfigError(
                f"{where}.labels.{key}: must be a string, got the boolean "
                f"{str(value).lower()} (YAML reads no, yes, on, off, true and false unquoted "
                "as booleans: quote it)")
        if not isinstance(value, (str, int, float)):
            raise FleetConfigError(f"{where}.labels.{key}: must be a string, got "
                                   f"{yaml_words(value)}")
    emulate = raw.get("emulate")
    url = raw.get("url")
    if (emulate is None) == (url is None):
        raise FleetConfigError(f"{where}: exactly one of url: or emulate: is required")
    if emulate is not None:
        if not isinstance(emulate, Mapping) or emulate.get("port") is None:
            raise FleetConfigError(f"{where}.emulate.port: required, {PORT.what}")
        check_number(emulate["port"], f"{where}.emulate.port", PORT)
        host = emulate.get("host", "127.0.0.1")
        if not isinstance(host, str) or not host:
            raise FleetConfigError(f"{where}.emulate.host: must be an address or a host "
                                   f"name, got {yaml_words(host)}")
        if ":" in host and not host.startswith("["):    # an IPv6 address, in a URL
            host = f"[{host}]"
        scheme = "https" if emulate.get("ssl_certfile") else "http"
        url = f"{scheme}://{host}:{emulate['port']}"
    parts = _checked_url(url, f"{where}.url")
    assert isinstance(url, str)
    try:
        port = parts.port
    except ValueError:          # not a number, or past 65535
        port = -1
    if port is not None and not 1 <= port <= 65535:
        raise FleetConfigError(f"{where}.url: its port must be {PORT.what}, got {url!r}")
    tls_ca_file = raw.get("tls_ca_file")
    if tls_ca_file is not None and (not isinstance(tls_ca_file, str) or not tls_ca_file
                                    or parts.scheme != "https"):
        raise FleetConfigError(f"{where}.tls_ca_file: a CA bundle's path, for a worker "
                               "served over https://")
    launch = raw.get("launch")
    if launch is not None and (emulate is not None or not isinstance(launch, Mapping)):
        raise FleetConfigError(f"{where}.launch: must be a mapping, on a worker with url:")
    labels = {str(k): str(v) for k, v in labels.items()}
    kv_events = raw.get("kv_events")
    if kv_events is None and emulate is not None:
        kv_events = _emulated_kv_events(emulate, labels)
    if kv_events is not None:
        _check_zmq_endpoint(kv_events, f"{where}.kv_events")
    if "kv_events_replay" in labels:
        _check_zmq_endpoint(labels["kv_events_replay"], f"{where}.labels.kv_events_replay")
    api_key_env = raw.get("api_key_env")
    if api_key_env is not None and (not isinstance(api_key_env, str)
                                    or not _ENV_NAME.fullmatch(api_key_env)):
        raise FleetConfigError(f"{where}.api_key_env: must be the name of an environment "
                               f"variable (letters, digits, _), got {api_key_env!r}")
    limits = _batch_limits(raw, emulate if emulate is not None else launch, where)
    if emulate is not None:
        _check_emulate(emulate, where, gpu, spec, served, wid, tp)
    if launch is not None:
        _check_launch(launch, where, wid, tp)
    info = WorkerInfo(
        id=wid, url=url.rstrip("/"), gpu=gpu, models=tuple(served), model_spec=spec,
        price_per_hour=price, tensor_parallel=tp, labels=MappingProxyType(labels),
        kv_events_endpoint=kv_events, api_key_env=api_key_env, tls_ca_file=tls_ca_file,
        max_num_seqs=limits["max_num_seqs"],
        max_num_batched_tokens=limits["max_num_batched_tokens"],
    )
    return WorkerSpec(info=info, emulate=MappingProxyType(dict(emulate)) if emulate else None,
                      launch=MappingProxyType(dict(launch)) if launch is not None else None)


def _batch_limits(raw: Mapping[str, Any], block: Mapping[str, Any] | None,
                  where: str) -> dict[str, int | None]:
    """The engine's batch limits: the entry's own keys, else its emulate/launch block's."""
    limits: dict[str, int | None] = {}
    for key in _BATCH_LIMITS:
        value, path = raw.get(key), f"{where}.{key}"
        if value is None and block is not None:
            value = block.get(key)
            path = f"{where}.{'emulate' if 'port' in block else 'launch'}.{key}"
        limits[key] = None if value is None else int(check_number(value, path, POSITIVE_INT))
    return limits


def _check_emulate(emulate: Mapping[str, Any], where: str, gpu: GpuProfile, model: ModelSpec,
                   served: list[str], wid: str, tp: int) -> None:
    """The whole ``emulate:`` block, as ``kvroute up`` / ``kvroute emulate`` will read it, so
    that a fleet that loads is one they start."""
    from workers.emulator.config import EmulatorConfigError, parse_emulate

    try:
        parse_emulate(emulate, gpu=gpu, model=model, models=served, worker_id=wid,
                      tensor_parallel=tp, where=f"{where}.emulate")
    except EmulatorConfigError as exc:
        raise FleetConfigError(str(exc)) from exc


def _check_launch(launch: Mapping[str, Any], where: str, wid: str, tp: int) -> None:
    """The whole ``launch:`` block, as ``kvroute launch-vllm`` will read it, and its
    ``devices`` against the worker's ``tensor_parallel``."""
    from workers.launch.settings import LaunchConfigError, check_devices, parse_launch

    try:
        check_devices(parse_launch(launch, f"{where}.launch"), tp, f"{where}.launch", wid)
    except LaunchConfigError as exc:
        raise FleetConfigError(str(exc)) from exc


def _check_fields(fields_: Mapping[str, Any], rules: Mapping[str, NumberRule], where: str, *,
                  required: tuple[str, ...], missing: str, optional: tuple[str, ...] = ()) -> None:
    """The numeric fields of a GPU class or model entry, by ``rules``; ``required`` ones must be
    given (``missing`` says why), ``optional`` ones may also be null."""
    for key in required:
        if key not in fields_:
            raise FleetConfigError(f"{where}.{key}: {missing} ({rules[key].what})")
    for key, rule in rules.items():
        if key in fields_ and not (key in optional and fields_[key] is None):
            check_number(fields_[key], f"{where}.{key}", rule)


def _check_allreduce_bw(value: Any, where: str) -> None:
    """``allreduce_bw_gbps``: tensor-parallel size -> all-reduce bandwidth (GB/s)."""
    if value is None:
        return
    if not isinstance(value, Mapping):
        raise FleetConfigError(f"{where}: must map tensor-parallel sizes to GB/s, such as "
                               f"{{2: 300, 4: 230, 8: 210}}, got {value!r}")
    for tp, bandwidth in value.items():
        if isinstance(tp, bool) or tp not in TENSOR_PARALLEL.choices:
            raise FleetConfigError(f"{where}: {tp!r} is not a tensor-parallel size "
                                   f"({TENSOR_PARALLEL.what})")
        check_number(bandwidth, f"{where}.{tp}", POSITIVE)


# what a ZMQ socket connects to: tcp://HOST:PORT (a name, an IPv4 or a bracketed IPv6), or
# ipc://PATH
_ZMQ_ENDPOINT = re.compile(r"tcp://(\[[0-9A-Fa-f:.]+\]|[^\s:/\[\]*]+):(\d{1,5})|ipc://\S+")


def _check_zmq_endpoint(value: Any, where: str) -> None:
    """A KV-event endpoint the router can connect to (one it could not made the connect
    raise in its stream's task, and a reload wait for it for ever)."""
    match = _ZMQ_ENDPOINT.fullmatch(value) if isinstance(value, str) else None
    if match is None or (match.group(2) is not None and not 1 <= int(match.group(2)) <= 65535):
        raise FleetConfigError(f"{where}: must look like tcp://HOST:PORT or ipc://PATH, got "
                               f"{value!r}")


def _emulated_kv_events(emulate: Mapping[str, Any], labels: dict[str, str]) -> str | None:
    """An emulated worker that publishes KV events is followed at its own endpoints.

    The emulator binds ``emulate.kv_events`` (a wildcard host such as ``tcp://*:5557`` is
    reached on the worker's host); its replay endpoint and topic become the
    ``kv_events_replay`` / ``kv_events_topic`` labels unless the entry sets them."""
    host = str(emulate.get("host", "127.0.0.1"))
    endpoint = emulate.get("kv_events")
    if not isinstance(endpoint, str) or "://" not in endpoint:
        return None
    replay = emulate.get("kv_events_replay")
    if isinstance(replay, str) and "://" in replay:
        labels.setdefault("kv_events_replay", replay.replace("://*:", f"://{host}:"))
    topic = emulate.get("kv_events_topic")
    if isinstance(topic, str) and topic:
        labels.setdefault("kv_events_topic", topic)
    return endpoint.replace("://*:", f"://{host}:")
