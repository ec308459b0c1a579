"""The ``emulate:`` block: defaults, validation errors naming the key, fleet expansion."""

from __future__ import annotations

from pathlib import Path

import pytest

from workers.emulator.config import (
    EmulatorConfigError,
    FaultConfig,
    KvEventsConfig,
    OutputLengthConfig,
    fleet_worker_configs,
    parse_emulate,
    parse_faults,
)
from workers.engine.profiles import A100_80GB, H100_80GB, LLAMA_3_8B
from workers.fleet import load_fleet

REPO_ROOT = Path(__file__).resolve().parents[3]


def parse(raw: dict[str, object]):  # type: ignore[no-untyped-def]
    return parse_emulate(raw, gpu=H100_80GB, model=LLAMA_3_8B, models=["m", "alias"])


def test_defaults_follow_vllm() -> None:
    cfg = parse({"port": 8101})
    assert (cfg.host, cfg.port, cfg.served_model_names, cfg.model_name) == \
        ("127.0.0.1", 8101, ("m", "alias"), "m")
    assert (cfg.time_scale, cfg.block_size, cfg.num_gpu_blocks, cfg.max_num_seqs) == \
        (1.0, 16, None, None)
    assert cfg.kv_events is None and cfg.faults == FaultConfig()
    assert cfg.output_len == OutputLengthConfig()
    engine = cfg.engine_config()
    assert engine.gpu is H100_80GB and engine.enable_kv_events is False
    assert engine.gpu_memory_utilization == 0.92
    assert cfg.max_loras == 1 and engine.max_loras == 0      # LoRA off: no limit to keep
    assert parse({"port": 1, "lora_adapters": ["sql"]}).engine_config().max_loras == 1
    assert cfg.scheduler_reserve_full_isl and engine.scheduler_reserve_full_isl   # vLLM's


def test_every_key_is_read() -> None:
    cfg = parse({
        "port": 9000, "host": "0.0.0.0", "served_model_names": ["x"], "time_scale": 0,
        "block_size": 32, "num_gpu_blocks": 100, "max_num_seqs": 4,
        "max_num_batched_tokens": 512, "max_model_len": 1024, "seed": 7,
        "kv_events": "tcp://127.0.0.1:5557", "kv_events_encoding": "array",
        "kv_events_replay": "tcp://127.0.0.1:5558", "kv_events_topic": "kv",
        "output_len": {"dist": "uniform", "min": 2, "max": 9},
        "lora_adapters": ["sql"], "max_loras": 2, "enable_prompt_tokens_details": True,
        "scheduler_reserve_full_isl": False, "dev_mode": True,
        "faults": {"error_rate": 0.5, "stall_after_tokens": 3, "metrics_broken": True}})
    assert cfg.time_scale == 0.0 and cfg.served_model_names == ("x",)
    assert cfg.kv_events == KvEventsConfig("tcp://127.0.0.1:5557", "tcp://127.0.0.1:5558", "kv",
                                           "array")
    assert cfg.output_len == OutputLengthConfig(dist="uniform", min=2, max=9)
    assert dict(cfg.lora_adapters) == {"sql": "/adapters/sql"}
    assert cfg.faults == FaultConfig(error_rate=0.5, stall_after_tokens=3, metrics_broken="error")
    engine = cfg.engine_config()
    assert (engine.block_size, engine.num_gpu_blocks, engine.max_num_seqs,
            engine.max_num_batched_tokens, engine.max_model_len, engine.enable_kv_events,
            engine.seed, engine.max_loras) == (32, 100, 4, 512, 1024, True, 7, 2)
    assert engine.scheduler_reserve_full_isl is False and cfg.dev_mode


@pytest.mark.parametrize(("raw", "message"), [
    ({"port": 1, "bogus": 1}, "emulate: unknown key(s): bogus"),
    ({}, "emulate.port: required"),
    ({"port": 1, "time_scale": "fast"}, "emulate.time_scale: must be a number"),
    ({"port": 1, "time_scale": -1}, "emulate.time_scale: must be >= 0 (got -1)"),
    ({"port": 1, "gpu_memory_utilization": 0},
     "emulate.gpu_memory_utilization: must be within [0.01, 1] (got 0)"),
    ({"port": 70000}, "emulate.port: must be within [0, 65535] (got 70000)"),
    ({"port": 1, "block_size": 0}, "emulate.block_size: must be >= 1 (got 0)"),
    ({"port": 1, "block_size": 1.5}, "emulate.block_size: must be an integer"),
    ({"port": 1, "faults": {"eror_rate": 1}}, "emulate.faults: unknown key(s): eror_rate"),
    ({"port": 1, "faults": {"error_rate": 2}},
     "emulate.faults.error_rate: must be within [0, 1] (got 2)"),
    ({"port": 1, "kv_events": "yes"}, "emulate.kv_events: must be off or a ZMQ endpoint"),
    ({"port": 1, "kv_events_encoding": "map"}, "emulate.kv_events_encoding: needs kv_events"),
    ({"port": 1, "kv_events": "tcp://127.0.0.1:1", "kv_events_encoding": "json"},
     "emulate.kv_events_encoding: must be map or array"),
    ({"port": 1, "output_len": {"dist": "zipf"}}, "emulate.output_len.dist: must be"),
    ({"port": 1, "output_len": {"dist": "fixed", "size": 3}},
     "emulate.output_len: unknown key(s): size"),
    ({"port": 1, "output_len": {"dist": "uniform", "min": 9, "max": 2}},
     "emulate.output_len.min: must not exceed max"),
    ({"port": 1, "lora_adapters": 3}, "emulate.lora_adapters: must be a list"),
    ({"port": 1, "max_loras": 0}, "emulate.max_loras: must be >= 1 (got 0)"),
    ({"port": 1, "served_model_names": []}, "emulate.served_model_names: must be a list"),
    ({"port": 1, "faults": {"metrics_broken": "sometimes"}},
     "emulate.faults.metrics_broken: must be false, error or garbage"),
    # 10**11 blocks: the engine's list of free blocks ran the machine out of memory
    ({"port": 1, "num_gpu_blocks": 10**11}, "emulate: num_gpu_blocks: 100,000,000,000 blocks "
     "of 2,097,152 bytes (llama-3-8b, block_size 16, TP1) are more KV cache than "
     "H100-80GB's memory holds: at most 40,755"),
])
def test_invalid_blocks_name_the_key(raw: dict[str, object], message: str) -> None:
    with pytest.raises(EmulatorConfigError) as err:
        parse(raw)
    assert message in str(err.value)


def test_fault_updates_keep_other_knobs() -> None:
    base = FaultConfig(error_rate=0.25, metrics_delay_s=1.0)
    updated = parse_faults({"metrics_broken": "garbage"}, base=base)
    assert updated == FaultConfig(error_rate=0.25, metrics_delay_s=1.0, metrics_broken="garbage")
    assert parse_faults({"metrics_broken": False}, base=updated).metrics_broken == "off"


def test_fleet_file_expands_to_one_config_per_emulated_worker() -> None:
    fleet = load_fleet(REPO_ROOT / "config" / "fleet.yaml")
    configs = fleet_worker_configs(fleet, {"time_scale": 0.5})
    assert [(c.worker_id, c.port, c.gpu.name, c.time_scale) for c in configs] == [
        ("h100-0", 8101, "H100-80GB", 0.5), ("a100-0", 8102, "A100-80GB", 0.5),
        ("l40s-0", 8103, "L40S-48GB", 0.5)]
    assert all(c.served_model_names == ("meta-llama/Llama-3.1-8B-Instruct",) for c in configs)
    assert configs[1].gpu is A100_80GB
    assert all(c.model.max_model_len == 8192 for c in configs)
    only = fleet_worker_configs(fleet, only=["a100-0"])
    assert [c.worker_id for c in only] == ["a100-0"]
    with pytest.raises(EmulatorConfigError, match="no emulated worker with id"):
        fleet_worker_configs(fleet, only=["b200-9"])
    with pytest.raises(EmulatorConfigError, match=r"workers\[0\]\.emulate: unknown key\(s\): x"):
        fleet_worker_configs(fleet, {"x": 1})
