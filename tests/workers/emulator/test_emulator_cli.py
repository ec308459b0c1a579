"""``kvroute emulate`` flags become ``emulate:`` keys; the command is registered."""

from __future__ import annotations

import argparse
import socket
from pathlib import Path

import pytest

from router.cli import build_parser
from workers.emulator.cli import add_arguments, build_configs, overrides_from_args, parse_output_len


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return parser.parse_args(argv)


def test_flags_map_to_emulate_keys() -> None:
    args = parse("--port", "9001", "--time-scale", "0.1", "--num-gpu-blocks", "64",
                 "--kv-events", "tcp://127.0.0.1:5557", "--kv-events-encoding", "array",
                 "--output-len", "fixed:12", "--lora", "sql", "--lora", "chat=/a/chat",
                 "--max-loras", "2", "--no-scheduler-reserve-full-isl", "--dev-mode",
                 "--error-rate", "0.5", "--metrics-broken", "garbage",
                 "--served-model-name", "m", "--emulate-json", '{"seed": 3}')
    assert overrides_from_args(args) == {
        "seed": 3, "port": 9001, "time_scale": 0.1, "num_gpu_blocks": 64,
        "kv_events": "tcp://127.0.0.1:5557", "kv_events_encoding": "array",
        "served_model_names": ["m"], "output_len": {"dist": "fixed", "value": 12},
        "lora_adapters": {"sql": "/adapters/sql", "chat": "/a/chat"}, "max_loras": 2,
        "scheduler_reserve_full_isl": False, "dev_mode": True,
        "faults": {"error_rate": 0.5, "metrics_broken": "garbage"}}


def test_single_worker_config() -> None:
    (cfg,) = build_configs(parse("--gpu", "a100", "--model", "llama-3.1-8b", "--port", "9002"))
    assert (cfg.gpu.name, cfg.model.name, cfg.port, cfg.served_model_names) == \
        ("A100-80GB", "llama-3.1-8b", 9002, ("llama-3.1-8b",))


def test_unknown_gpu_and_bad_output_spec_are_errors() -> None:
    with pytest.raises(ValueError, match="--gpu: unknown GPU class 'b300'"):
        build_configs(parse("--gpu", "b300"))
    with pytest.raises(ValueError, match="--output-len"):
        parse_output_len("poisson:3")


def test_bad_emulate_json_names_the_option() -> None:
    with pytest.raises(ValueError) as err:
        overrides_from_args(parse("--emulate-json", "{bad"))
    assert str(err.value) == ("--emulate-json: not valid JSON: Expecting property name "
                              "enclosed in double quotes: line 1 column 2 (char 1)")
    with pytest.raises(ValueError, match=r"^--emulate-json: must be a JSON object$"):
        overrides_from_args(parse("--emulate-json", "[1]"))


@pytest.mark.parametrize("size", ["0", "3", "16"])
def test_tensor_parallel_flag_is_a_size_the_engine_models(size: str) -> None:
    with pytest.raises(ValueError) as err:
        build_configs(parse("--tensor-parallel", size))
    assert str(err.value) == f"--tensor-parallel: must be 1, 2, 4 or 8, got {size}"
    (cfg,) = build_configs(parse("--tensor-parallel", "2"))
    assert cfg.tensor_parallel == 2


@pytest.mark.parametrize(("argv", "message"), [
    (["--time-scale", "-1"], "kvroute emulate: emulate.time_scale: must be >= 0 (got -1.0)"),
    (["--emulate-json", "{bad"], "kvroute emulate: --emulate-json: not valid JSON: Expecting "
                                 "property name enclosed in double quotes: line 1 column 2 "
                                 "(char 1)"),
    (["--tensor-parallel", "3"], "kvroute emulate: --tensor-parallel: must be 1, 2, 4 or 8, "
                                 "got 3"),
])
def test_bad_flags_exit_2_with_one_line(argv: list[str], message: str,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    from workers.emulator.cli import main

    assert main(argv) == 2
    assert capsys.readouterr().err == message + "\n"


def test_fleet_mode_rejects_port() -> None:
    with pytest.raises(ValueError, match="--port cannot be combined with --fleet"):
        build_configs(parse("--fleet", "config/fleet.yaml", "--port", "1"))


@pytest.mark.parametrize("flags", [["--gpu", "a100"], ["--model", "llama-3-70b"],
                                   ["--tensor-parallel", "2"], ["--gpu", "h100"]])
def test_fleet_mode_rejects_the_single_workers_gpu_model_and_tensor_parallel(
        flags: list[str]) -> None:
    """They were taken and ignored: each worker of the file ran its own GPU and model."""
    with pytest.raises(ValueError, match=f"{flags[0]} cannot be combined with --fleet"):
        build_configs(parse("--fleet", "config/fleet.yaml", *flags))


def test_worker_without_fleet_is_refused() -> None:
    """``--worker w1`` alone was ignored, and a default h100 worker started on port 8000."""
    with pytest.raises(ValueError, match="--worker picks workers of --fleet: give --fleet too"):
        build_configs(parse("--worker", "w1"))
    (cfg,) = build_configs(parse("--port", "9004"))        # the defaults, when not given
    assert cfg.gpu.name == "H100-80GB" and cfg.worker_id == "h100-9004"


def test_registered_in_kvroute() -> None:
    args = build_parser().parse_args(["emulate", "--gpu", "l40s", "--port", "9003"])
    assert args.command == "emulate" and callable(args.func) and args.gpu == "l40s"


def test_a_taken_kv_events_port_is_one_line_not_a_traceback(
        capsys: pytest.CaptureFixture[str]) -> None:
    """It exited with fifty lines ending in ``zmq.error.ZMQError``; a taken HTTP port was
    one line already."""
    from workers.emulator.cli import run
    from workers.ports import free_port

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        endpoint = f"tcp://127.0.0.1:{taken.getsockname()[1]}"
        parser = argparse.ArgumentParser()
        add_arguments(parser)
        code = run(parser.parse_args(["--port", str(free_port()), "--kv-events", endpoint]))
    assert code == 2
    assert capsys.readouterr().err == (
        f"kvroute emulate: cannot listen: KV events endpoint {endpoint}: Address already in "
        "use\n")


def test_a_taken_port_exits_2_naming_the_worker(tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    """It exited 1, where its other refusals exit 2, with ``[Errno 98] error while
    attempting to bind on address ...``: of a fleet's workers, not saying whose port."""
    from workers.emulator.cli import run
    from workers.ports import free_port

    fleet = tmp_path / "fleet.yaml"
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert run(parse("--port", str(port))) == 2
        assert capsys.readouterr().err == (
            f"kvroute emulate: cannot listen: worker 'h100-{port}' at 127.0.0.1:{port}: "
            "Address already in use\n")
        fleet.write_text(
            "models: {m: {arch: llama-3-8b}}\nworkers:\n"
            f"  - {{id: h100-0, gpu: h100, models: [m], emulate: {{port: {free_port()}}}}}\n"
            f"  - {{id: l40s-0, gpu: l40s, models: [m], emulate: {{port: {port}}}}}\n")
        assert run(parse("--fleet", str(fleet))) == 2
    assert capsys.readouterr().err == (
        f"kvroute emulate: cannot listen: worker 'l40s-0' at 127.0.0.1:{port}: Address "
        "already in use\n")
