"""Validation of a worker's ``launch:`` block: each bad field is named."""

from __future__ import annotations

from typing import Any

import pytest

from workers.fleet import FleetConfigError, parse_fleet
from workers.launch.settings import LaunchConfigError, LaunchSettings, parse_launch


def test_defaults_when_absent() -> None:
    assert parse_launch(None, "w") == LaunchSettings()


def test_values_are_kept() -> None:
    settings = parse_launch({"model": "/m", "device": "cpu", "devices": [0, 1],
                             "gpu_memory_utilization": 1, "max_num_seqs": 8,
                             "env": {"A": 1}, "extra_args": ["--x", 3]}, "w")
    assert settings.model == "/m" and settings.device == "cpu"
    assert settings.devices == (0, 1) and settings.gpu_memory_utilization == 1.0
    assert settings.max_num_seqs == 8 and dict(settings.env) == {"A": "1"}
    assert settings.extra_args == ("--x", "3")


@pytest.mark.parametrize(("raw", "message"), [
    ({"bogus": 1}, r"w: unknown key\(s\): bogus"),
    ({"device": "tpu"}, r"w\.device: must be one of: cuda, cpu"),
    ({"devices": [0, -1]}, r"w\.devices: must be a list of GPU indexes"),
    ({"devices": [1, 1]}, r"^w\.devices: lists a GPU twice: \[1, 1\]$"),
    ({"gpu_memory_utilization": 1.5}, r"w\.gpu_memory_utilization: must be in \(0, 1\]"),
    ({"max_num_seqs": 0}, r"w\.max_num_seqs: must be a positive integer"),
    ({"num_gpu_blocks_override": "40"}, r"w\.num_gpu_blocks_override: must be a positive"),
    ({"dev_mode": "yes"}, r"w\.dev_mode: must be true or false"),
    ({"model": ""}, r"w\.model: must be a non-empty string"),
    ({"env": ["A=1"]}, r"w\.env: must be a mapping"),
    ({"extra_args": "--x"}, r"w\.extra_args: must be a list"),
])
def test_errors_name_the_field(raw: dict[str, Any], message: str) -> None:
    with pytest.raises(LaunchConfigError, match=message):
        parse_launch(raw, "w")


def test_fleet_keeps_launch_block_and_refuses_it_on_emulated_workers() -> None:
    worker = {"id": "r", "gpu": "h100", "models": ["m"], "url": "http://h:1",
              "launch": {"model": "/m"}}
    fleet = parse_fleet({"models": {"m": {"arch": "llama-3-8b"}}, "workers": [worker]})
    assert fleet.workers[0].launch == {"model": "/m"}
    emulated = {"id": "e", "gpu": "h100", "models": ["m"], "emulate": {"port": 1},
                "launch": {}}
    with pytest.raises(FleetConfigError, match=r"workers\[0\]\.launch: must be a mapping"):
        parse_fleet({"models": {"m": {"arch": "llama-3-8b"}}, "workers": [emulated]})


@pytest.mark.parametrize(("launch", "message"), [
    ({"devices": [0]}, "<memory>: workers[0].launch.devices: [0] is 1 GPU, but worker 'r' has "
                       "tensor_parallel: 2, which needs 2 (one per rank)"),
    ({"max_model_len": -5}, "<memory>: workers[0].launch.max_model_len: must be a positive "
                            "integer"),
    ({"gpu_memory_utilization": float("nan")},
     "<memory>: workers[0].launch.gpu_memory_utilization: must be in (0, 1]"),
])
def test_the_fleet_loader_checks_the_launch_block(launch: dict[str, Any], message: str) -> None:
    worker = {"id": "r", "gpu": "h100", "models": ["m"], "url": "http://h:1",
              "tensor_parallel": 2, "launch": launch}
    with pytest.raises(FleetConfigError) as err:
        parse_fleet({"models": {"m": {"arch": "llama-3-8b"}}, "workers": [worker]})
    assert str(err.value) == message
    fleet = parse_fleet({"models": {"m": {"arch": "llama-3-8b"}},
                         "workers": [{**worker, "launch": {"devices": [0, 1]}}]})
    assert fleet.workers[0].launch == {"devices": [0, 1]}
