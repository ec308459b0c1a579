"""``kvroute emulate``: run emulated vLLM workers (also ``python -m workers.emulator``).

One worker::

    kvroute emulate --gpu h100 --model llama-3-8b --port 8101 --time-scale 0.1

Every emulated worker of a fleet file, one process, one port each (flags given here override
the same keys of every worker's ``emulate:`` block)::

    kvroute emulate --fleet config/fleet.yaml [--worker h100-0] [--time-scale 0.1]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from typing import Any

DESCRIPTION = "Run emulated vLLM workers (OpenAI API, vLLM metrics, KV events) without GPUs."


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--fleet", help="host every emulated worker of this fleet file")
    p.add_argument("--worker", action="append", default=[],
                   help="with --fleet: only this worker id (repeatable)")
    p.add_argument("--gpu", help="GPU class: h100, a100, l40s (default h100)")
    p.add_argument("--model",
                   help="model architecture: llama-3-8b, llama-3.1-8b, llama-3-70b, ... "
                        "(default llama-3-8b)")
    p.add_argument("--served-model-name", action="append", dest="served_model_names",
                   help="name(s) the worker answers to (default: --model); repeatable")
    p.add_argument("--tensor-parallel", type=int,
                   help="tensor-parallel size: GPUs the model is split over, which sets "
                        "KV-cache room and step times (default 1; with --fleet: each worker's "
                        "tensor_parallel)")
    p.add_argument("--host", help="bind address (default 127.0.0.1)")
    p.add_argument("--port", type=int, help="listening port (default 8000)")
    p.add_argument("--time-scale", type=float,
                   help="1 real time, 0.1 ten times faster, 0 answer at once")
    p.add_argument("--block-size", type=int, help="tokens per KV-cache block (default 16)")
    p.add_argument("--num-gpu-blocks", type=int,
                   help="KV-cache blocks (default: derived from GPU memory as vLLM does)")
    p.add_argument("--max-num-seqs", type=int,
                   help="most requests running at once (default: the GPU class's, 1024 on "
                        "h100, 256 on a100 and l40s)")
    p.add_argument("--max-num-batched-tokens", type=int,
                   help="token budget of one engine step (default: the GPU class's, 8192 on "
                        "h100, 2048 on a100 and l40s)")
    p.add_argument("--max-num-queued-reqs", type=int, metavar="N",
                   help="answer a request 503 (engine busy) while N are waiting already, as "
                        "vLLM's flag does (default: no limit)")
    p.add_argument("--max-model-len", type=int,
                   help="context length in tokens, capped by the KV cache (default: the "
                        "model's)")
    p.add_argument("--seed", type=int,
                   help="seed of output lengths and tokens, fault draws and step jitter "
                        "(default 0)")
    p.add_argument("--gpu-memory-utilization", type=float,
                   help="share of GPU memory used when deriving --num-gpu-blocks "
                        "(default 0.92)")
    p.add_argument("--step-jitter", type=float,
                   help="sigma of a lognormal factor (mean 1) on each engine step's time "
                        "(default 0: none)")
    p.add_argument("--hash-seed", help="PYTHONHASHSEED-style seed of the block hash chain")
    p.add_argument("--enable-prompt-tokens-details", action="store_true", default=None,
                   help="report usage.prompt_tokens_details.cached_tokens")
    p.add_argument("--server-load-tracking", action="store_true", default=None,
                   help="count in-flight requests in /load")
    p.add_argument("--kv-events", metavar="ENDPOINT",
                   help="publish KV-cache events on this ZMQ endpoint (PUB, bound)")
    p.add_argument("--kv-events-replay", metavar="ENDPOINT", help="ZMQ ROUTER replay endpoint")
    p.add_argument("--kv-events-topic",
                   help="topic frame of every KV-event message (with --kv-events; default "
                        "empty)")
    p.add_argument("--kv-events-encoding", choices=("map", "array"),
                   help="KV events as maps (vLLM v0.33) or tagged arrays (earlier releases) "
                        "(with --kv-events; default map)")
    p.add_argument("--output-len", metavar="SPEC",
                   help="fixed:N, uniform:MIN:MAX or lognormal:MEAN:SIGMA")
    p.add_argument("--lora", action="append", default=[], metavar="NAME[=PATH]",
                   help="a LoRA adapter the worker serves (repeatable)")
    p.add_argument("--runtime-lora-updating", action="store_true", default=None,
                   help="serve POST /v1/load_lora_adapter and /v1/unload_lora_adapter (vLLM "
                        "with VLLM_ALLOW_RUNTIME_LORA_UPDATING=True)")
    p.add_argument("--max-loras", type=int, metavar="N",
                   help="distinct LoRA adapters per batch, as vLLM's --max-loras (default: 1); "
                        "requests for another adapter wait while N run")
    p.add_argument("--scheduler-reserve-full-isl", action=argparse.BooleanOptionalAction,
                   default=None,
                   help="as vLLM's: admit a waiting request only when its whole prompt fits "
                        "the free KV blocks, not only its first chunk (default: on)")
    p.add_argument("--dev-mode", action="store_true", default=None,
                   help="serve POST /reset_prefix_cache, as vLLM with VLLM_SERVER_DEV_MODE=1")
    p.add_argument("--error-rate", type=float, help="share of requests answered with a 500")
    p.add_argument("--refuse-connections", action="store_true", default=None,
                   help="refuse every connection: the worker never listens")
    p.add_argument("--stall-after-tokens", type=int,
                   help="streams go silent after N generated tokens, the connection left "
                        "open (non-streamed answers never come)")
    p.add_argument("--error-after-tokens", type=int,
                   help="chat and completion streams end after N generated tokens with "
                        "vLLM's in-stream error event (a 500) and [DONE]; 0: before any")
    p.add_argument("--metrics-delay", type=float, dest="metrics_delay_s",
                   help="/metrics answers after this many seconds (wall clock)")
    p.add_argument("--metrics-broken", choices=("error", "garbage"),
                   help="/metrics answers 500 (error) or malformed text (garbage)")
    p.add_argument("--api-key", metavar="KEY",
                   help="as vLLM's --api-key: /v1 requests without 'Authorization: Bearer "
                        "KEY' are answered 401 (with --fleet: each worker's api_key_env)")
    p.add_argument("--ssl-certfile", metavar="FILE",
                   help="as vLLM's: serve HTTPS with this certificate (PEM)")
    p.add_argument("--ssl-keyfile", metavar="FILE",
                   help="as vLLM's: the certificate's key, unless --ssl-certfile holds it")
    p.add_argument("--emulate-json", metavar="JSON",
                   help="further emulate: keys as a JSON object (same names as the fleet file)")


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("emulate", help=DESCRIPTION, description=DESCRIPTION)
    add_arguments(parser)
    parser.set_defaults(func=run)


def overrides_from_args(args: argparse.Namespace) -> dict[str, Any]:
    """The ``emulate:`` keys given on the command line."""
    out: dict[str, Any] = {}
    if args.emulate_json:
        try:
            extra = json.loads(args.emulate_json)
        except json.JSONDecodeError as exc:
            raise ValueError(f"--emulate-json: not valid JSON: {exc}") from None
        if not isinstance(extra, dict):
            raise ValueError("--emulate-json: must be a JSON object")
        out.update(extra)
    for key in ("host", "port", "time_scale", "block_size", "num_gpu_blocks", "max_num_seqs",
                "max_num_batched_tokens", "max_num_queued_reqs", "max_model_len", "seed",
                "gpu_memory_utilization", "step_jitter", "hash_seed",
                "enable_prompt_tokens_details",
                "server_load_tracking", "kv_events", "kv_events_replay", "kv_events_topic",
                "kv_events_encoding", "served_model_names", "ssl_certfile", "ssl_keyfile",
                "runtime_lora_updating", "max_loras", "scheduler_reserve_full_isl",
                "dev_mode"):
        value = getattr(args, key)
        if value is not None:
            out[key] = value
    if args.output_len:
        out["output_len"] = parse_output_len(args.output_len)
    if args.lora:
        out["lora_adapters"] = dict(
            item.split("=", 1) if "=" in item else (item, f"/adapters/{item}")
            for item in args.lora)
    faults = dict(out.get("faults") or {})
    for key in ("error_rate", "refuse_connections", "stall_after_tokens", "error_after_tokens",
                "metrics_delay_s", "metrics_broken"):
        value = getattr(args, key)
        if value is not None:
            faults[key] = value
    if faults:
        out["faults"] = faults
    return out


def parse_output_len(spec: str) -> dict[str, Any]:
    kind, *values = spec.split(":")
    try:
        if kind == "fixed" and len(values) == 1:
            return {"dist": "fixed", "value": int(values[0])}
        if kind == "uniform" and len(values) == 2:
            return {"dist": "uniform", "min": int(values[0]), "max": int(values[1])}
        if kind == "lognormal" and len(values) == 2:
            return {"dist": "lognormal", "mean": float(values[0]), "sigma": float(values[1])}
    except ValueError:
        pass
    raise ValueError(f"--output-len: {spec!r} is not fixed:N, uniform:MIN:MAX or "
                     "lognormal:MEAN:SIGMA")


def build_configs(args: argparse.Namespace) -> list[Any]:
    from workers.emulator.config import fleet_worker_configs, parse_emulate
    from workers.engine.profiles import BUILTIN_GPUS, BUILTIN_MODELS
    from workers.fleet import load_fleet

    overrides = overrides_from_args(args)
    if args.fleet:
        if "port" in overrides:
            raise ValueError("--port cannot be combined with --fleet (ports come from the file)")
        if args.api_key is not None:
            raise ValueError("--api-key cannot be combined with --fleet (each worker's key is "
                             "read from the variable its api_key_env names)")
        # each worker's GPU, model and tensor_parallel are the file's: taken, and ignored
        given = [option for option, value in (("--gpu", args.gpu), ("--model", args.model),
                                              ("--tensor-parallel", args.tensor_parallel))
                 if value is not None]
        if given:
            raise ValueError(f"{', '.join(given)} cannot be combined with --fleet (each "
                             "worker's gpu, model and tensor_parallel come from the file)")
        return fleet_worker_configs(load_fleet(args.fleet), overrides, only=args.worker)
    if args.worker:          # taken, and a default worker started in its place
        raise ValueError("--worker picks workers of --fleet: give --fleet too")
    gpu_name = "h100" if args.gpu is None else args.gpu
    model_name = "llama-3-8b" if args.model is None else args.model
    tensor_parallel = 1 if args.tensor_parallel is None else args.tensor_parallel
    gpu = BUILTIN_GPUS.get(gpu_name)
    if gpu is None:
        raise ValueError(f"--gpu: unknown GPU class {gpu_name!r} "
                         f"(known: {', '.join(sorted(BUILTIN_GPUS))})")
    model = BUILTIN_MODELS.get(model_name)
    if model is None:
        raise ValueError(f"--model: unknown architecture {model_name!r} "
                         f"(known: {', '.join(sorted(BUILTIN_MODELS))})")
    if tensor_parallel not in (1, 2, 4, 8):
        raise ValueError(f"--tensor-parallel: must be 1, 2, 4 or 8, got {tensor_parallel}")
    overrides.setdefault("port", 8000)
    if args.api_key is not None and not args.api_key:
        raise ValueError("--api-key: must not be empty")
    return [parse_emulate(overrides, gpu=gpu, model=model, models=[model_name],
                          worker_id=f"{gpu_name}-{overrides['port']}",
                          tensor_parallel=tensor_parallel, where="emulate",
                          api_key=args.api_key)]


def run(args: argparse.Namespace) -> int:
    import uvloop

    from workers.emulator.config import EmulatorConfigError
    from workers.emulator.server import parent_pid_from, serve
    from workers.fleet import FleetConfigError
    from workers.tls import TlsFilesError

    try:
        configs = build_configs(args)
    except (EmulatorConfigError, FleetConfigError, ValueError) as exc:
        print(f"kvroute emulate: {exc}", file=sys.stderr)
        return 2
    if not configs:
        print("kvroute emulate: the fleet has no emulated workers", file=sys.stderr)
        return 2
    try:
        uvloop.run(serve(configs, parent_pid_from(os.environ)))
    except TlsFilesError as exc:
        print(f"kvroute emulate: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:       # a port taken: refused as a bad flag is (it exited 1)
        print(f"kvroute emulate: cannot listen: {exc}", file=sys.stderr)
        return 2
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m workers.emulator", description=DESCRIPTION)
    add_arguments(parser)
    return run(parser.parse_args(argv))
