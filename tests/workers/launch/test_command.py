"""The vLLM argv built per GPU profile (H100, A100, L40S) and its environment."""

from __future__ import annotations

import json
from typing import Any

import pytest

from workers.credentials import MissingApiKey
from workers.fleet import parse_fleet
from workers.launch.command import VLLM_MODULE, build_command, kv_events_config
from workers.launch.settings import LaunchConfigError, parse_launch

MODEL = "meta-llama/Llama-3.1-8B-Instruct"


def fleet_with(worker: dict[str, Any]) -> Any:
    return parse_fleet({"models": {MODEL: {"arch": "llama-3-8b", "max_model_len": 8192},
                                   "tiny": {"arch": "llama-3-8b", "max_model_len": 2048}},
                        "workers": [worker]})


def flag(argv: tuple[str, ...], name: str) -> str:
    return argv[argv.index(name) + 1]


@pytest.mark.parametrize(("gpu", "seqs", "batched"), [
    ("h100", "1024", "8192"), ("a100", "256", "2048"), ("l40s", "256", "2048")])
def test_gpu_profile_defaults(gpu: str, seqs: str, batched: str) -> None:
    fleet = fleet_with({"id": f"{gpu}-0", "gpu": gpu, "models": [MODEL],
                        "url": "http://127.0.0.1:8001", "launch": {"python": "/opt/py"}})
    cmd = build_command(fleet.workers[0])
    assert cmd.argv == (
        "/opt/py", "-m", VLLM_MODULE, "--model", MODEL, "--served-model-name", MODEL,
        "--host", "127.0.0.1", "--port", "8001", "--tensor-parallel-size", "1",
        "--max-num-seqs", seqs, "--max-num-batched-tokens", batched, "--max-model-len", "8192",
        "--gpu-memory-utilization", "0.9", "--enable-prefix-caching")
    assert dict(cmd.env) == {}
    assert cmd.url == "http://127.0.0.1:8001"


def test_h100_tensor_parallel_devices_and_kv_events_remote_host() -> None:
    fleet = fleet_with({
        "id": "h100-tp2", "gpu": "h100", "models": [MODEL, "llama-8b"], "tensor_parallel": 2,
        "url": "http://10.0.0.7:8000", "kv_events": "tcp://10.0.0.7:5557",
        "launch": {"model": "/models/llama", "devices": [2, 3], "gpu_memory_utilization": 0.85,
                   "max_num_seqs": 512, "extra_args": ["--enforce-eager"]}})
    cmd = build_command(fleet.workers[0])
    argv = cmd.argv
    assert flag(argv, "--model") == "/models/llama"
    assert argv[argv.index("--served-model-name") + 1:argv.index("--host")] == (MODEL, "llama-8b")
    assert flag(argv, "--host") == "0.0.0.0"
    assert flag(argv, "--tensor-parallel-size") == "2"
    assert flag(argv, "--gpu-memory-utilization") == "0.85"
    assert flag(argv, "--max-num-seqs") == "512"
    assert flag(argv, "--max-num-batched-tokens") == "8192"
    assert json.loads(flag(argv, "--kv-events-config")) == {
        "enable_kv_cache_events": True, "publisher": "zmq", "endpoint": "tcp://*:5557",
        "topic": "kv-events"}
    assert argv[-1] == "--enforce-eager"
    assert dict(cmd.env) == {"CUDA_VISIBLE_DEVICES": "2,3"}
    assert cmd.kv_events_endpoint == "tcp://10.0.0.7:5557"


@pytest.mark.parametrize(("tp", "devices", "message"), [
    (2, [0], "workers[h100-tp2].launch.devices: [0] is 1 GPU, but worker 'h100-tp2' has "
             "tensor_parallel: 2, which needs 2 (one per rank)"),
    (4, [0, 1], "workers[h100-tp2].launch.devices: [0, 1] is 2 GPUs, but worker 'h100-tp2' has "
                "tensor_parallel: 4, which needs 4 (one per rank)"),
])
def test_fewer_devices_than_tensor_parallel_ranks_is_refused(tp: int, devices: list[int],
                                                             message: str) -> None:
    worker = {"id": "h100-tp2", "gpu": "h100", "models": [MODEL], "tensor_parallel": tp,
              "url": "http://127.0.0.1:8001", "launch": {}}
    spec = fleet_with(worker).workers[0]
    with pytest.raises(LaunchConfigError) as err:
        build_command(spec, parse_launch({"devices": devices}, "w"))
    assert str(err.value) == message
    # enough devices, or none given (vLLM takes the first it sees), or a CPU worker: started
    for launch in ({"devices": list(range(tp))}, {}, {"device": "cpu", "devices": devices}):
        cmd = build_command(fleet_with({**worker, "launch": launch}).workers[0])
        assert flag(cmd.argv, "--tensor-parallel-size") == str(tp)


def test_cpu_worker_for_tests() -> None:
    fleet = fleet_with({
        "id": "cpu-0", "gpu": "l40s", "models": ["tiny"], "url": "http://127.0.0.1:9001",
        "kv_events": "tcp://127.0.0.1:5601",
        "launch": {"model": "/tmp/tiny", "device": "cpu", "max_model_len": 2048,
                   "num_gpu_blocks_override": 40, "dev_mode": True,
                   "env": {"HF_HUB_OFFLINE": "1"}}})
    cmd = build_command(fleet.workers[0])
    assert "--gpu-memory-utilization" not in cmd.argv
    assert flag(cmd.argv, "--num-gpu-blocks-override") == "40"
    assert flag(cmd.argv, "--max-model-len") == "2048"
    # vLLM binds its PUB socket only for "*" addresses; it would connect to 127.0.0.1
    assert json.loads(flag(cmd.argv, "--kv-events-config"))["endpoint"] == "tcp://*:5601"
    assert dict(cmd.env) == {"VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_CPU_OMP_THREADS_BIND": "nobind",
                             "VLLM_SERVER_DEV_MODE": "1", "HF_HUB_OFFLINE": "1"}
    assert cmd.shell().startswith("VLLM_CPU_KVCACHE_SPACE=1 VLLM_CPU_OMP_THREADS_BIND=nobind ")


def test_prefix_caching_off_and_kv_events_conflict() -> None:
    base = {"id": "a", "gpu": "a100", "models": [MODEL], "url": "http://127.0.0.1:8001",
            "launch": {"enable_prefix_caching": False}}
    assert "--no-enable-prefix-caching" in build_command(fleet_with(base).workers[0]).argv
    with pytest.raises(LaunchConfigError, match=r"workers\[a\]\.kv_events: needs prefix"):
        build_command(fleet_with({**base, "kv_events": "tcp://127.0.0.1:5557"}).workers[0])


def test_emulated_worker_is_refused() -> None:
    fleet = fleet_with({"id": "e", "gpu": "a100", "models": [MODEL], "emulate": {"port": 8101}})
    with pytest.raises(LaunchConfigError, match="emulated worker is not launched"):
        build_command(fleet.workers[0])


def test_a_replay_label_gives_vllm_a_replay_endpoint() -> None:
    """The exact index asks a worker for the batches it missed (a gap, a late join) on its
    ``kv_events_replay`` label's endpoint: a launched vLLM answered none, having no replay
    socket."""
    worker = {"id": "cpu-0", "gpu": "l40s", "models": [MODEL], "url": "http://127.0.0.1:9001",
              "kv_events": "tcp://127.0.0.1:5601",
              "labels": {"kv_events_replay": "tcp://127.0.0.1:5602"},
              "launch": {"device": "cpu"}}
    config = json.loads(flag(build_command(fleet_with(worker).workers[0]).argv,
                             "--kv-events-config"))
    assert (config["endpoint"], config["replay_endpoint"]) == ("tcp://*:5601", "tcp://*:5602")
    unlabelled = fleet_with({**worker, "labels": {}}).workers[0]
    assert "replay_endpoint" not in json.loads(flag(build_command(unlabelled).argv,
                                                    "--kv-events-config"))
    ipc = fleet_with({**worker, "labels": {"kv_events_replay": "ipc:///tmp/replay"}}).workers[0]
    with pytest.raises(LaunchConfigError, match=r"workers\[cpu-0\]\.labels\.kv_events_replay: "
                                                r"must look like tcp://HOST:PORT"):
        build_command(ipc)


def test_kv_events_endpoint_must_be_tcp() -> None:
    with pytest.raises(LaunchConfigError, match="must look like tcp://HOST:PORT"):
        kv_events_config("ipc:///tmp/x", "t", "w.kv_events")


def test_an_embedding_model_runs_on_the_pooling_runner() -> None:
    fleet = parse_fleet({"models": {"Qwen/Qwen3-Embedding-0.6B": {"arch": "qwen3-embedding-0.6b"},
                                    "minilm": {"arch": "all-minilm-l6-v2"}},
                         "workers": [{"id": "e", "gpu": "l40s",
                                      "models": ["Qwen/Qwen3-Embedding-0.6B"],
                                      "url": "http://127.0.0.1:8001"},
                                     {"id": "m", "gpu": "l40s", "models": ["minilm"],
                                      "url": "http://127.0.0.1:8002"}]})
    embed, minilm = (build_command(worker).argv for worker in fleet.workers)
    assert flag(embed, "--runner") == "pooling"
    assert flag(embed, "--max-model-len") == "32768"
    assert flag(minilm, "--max-model-len") == "256"      # what vLLM derives for it
    # prefix caching is left to vLLM for a pooling model (it refuses the flag for encoders)
    assert not {"--enable-prefix-caching", "--no-enable-prefix-caching"} & set(minilm)


def test_a_model_with_an_unknown_runner_or_a_matryoshka_not_boolean_is_refused() -> None:
    from workers.fleet import FleetConfigError

    for model, message in (({"arch": "llama-3-8b", "runner": "embed"},
                             "runner must be one of generate, pooling"),
                            ({"arch": "all-minilm-l6-v2", "matryoshka": "yes"},
                             "matryoshka must be true or false")):
        with pytest.raises(FleetConfigError, match=message):
            parse_fleet({"models": {"m": model},
                         "workers": [{"id": "w", "gpu": "h100", "models": ["m"],
                                      "url": "http://127.0.0.1:8001"}]})


def test_a_keyed_worker_gets_vllm_api_key_from_its_variable_never_in_print() -> None:
    fleet = fleet_with({"id": "real-0", "gpu": "l40s", "models": [MODEL],
                        "url": "http://127.0.0.1:8001", "api_key_env": "FLEET_KEY_0",
                        "launch": {"python": "/opt/py", "env": {"HF_HUB_OFFLINE": "1"}}})
    cmd = build_command(fleet.workers[0], environ={"FLEET_KEY_0": "sk-secret"})
    assert "--api-key" not in cmd.argv and "sk-secret" not in cmd.shell()
    assert cmd.shell().startswith('HF_HUB_OFFLINE=1 VLLM_API_KEY="$FLEET_KEY_0" /opt/py -m ')
    env = cmd.process_env({"PATH": "/bin", "FLEET_KEY_0": "sk-secret"})
    assert env["VLLM_API_KEY"] == "sk-secret"
    assert env["HF_HUB_OFFLINE"] == "1" and env["PATH"] == "/bin"
    plain = build_command(fleet_with({"id": "real-1", "gpu": "l40s", "models": [MODEL],
                                      "url": "http://127.0.0.1:8002"}).workers[0])
    assert "VLLM_API_KEY" not in plain.process_env({"PATH": "/bin"})


def test_a_keyed_worker_whose_variable_is_unset_is_not_launched() -> None:
    fleet = fleet_with({"id": "real-0", "gpu": "l40s", "models": [MODEL],
                        "url": "http://127.0.0.1:8001", "api_key_env": "FLEET_KEY_0"})
    with pytest.raises(MissingApiKey, match="FLEET_KEY_0"):
        build_command(fleet.workers[0], environ={})
