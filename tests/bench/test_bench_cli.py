from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.cli import _targets
from router.cli import build_parser
from router.cli import main as kvroute

ROOT = Path(__file__).resolve().parents[2]


def test_bench_commands_parse() -> None:
    parser = build_parser()
    args = parser.parse_args(["bench", "overhead", "--out", "x", "--targets", "direct,nginx",
                              "--duration", "2"])
    assert (args.bench_command, args.targets, args.duration) == ("overhead", "direct,nginx", 2.0)
    args = parser.parse_args(["bench", "replay", "--trace", "t.jsonl", "--out", "y",
                              "--limit", "5"])
    assert (args.bench_command, args.limit, args.targets) == (
        "replay", 5, "kvroute,sglang-router,vllm-router")


def test_unknown_targets_are_refused_with_the_known_ones() -> None:
    assert _targets(" direct , kvroute-rr ") == ("direct", "kvroute-rr")
    with pytest.raises(ValueError, match=r"^--targets: unknown target.*envoy.*known: direct"):
        _targets("direct,envoy")
    with pytest.raises(ValueError, match=r"^--targets: give at least one target$"):
        _targets(" , ")


@pytest.fixture
def no_run(monkeypatch: pytest.MonkeyPatch) -> None:
    """Bad input must be refused before any router or fleet starts."""
    import bench.overhead
    import bench.replay

    def never(*args: object, **kwargs: object) -> None:
        raise AssertionError("the benchmark started")

    monkeypatch.setattr(bench.replay, "run_replay", never)
    monkeypatch.setattr(bench.overhead, "run_overhead", never)


@pytest.mark.parametrize(("args", "message"), [
    (["--duration", "0"], "--duration: must be a finite number > 0, got 0"),
    (["--duration", "nan"], "--duration: must be a finite number > 0, got nan"),
    (["--duration", "inf"], "--duration: must be a finite number > 0, got inf"),
    (["--concurrency", "0"], "--concurrency: must be >= 1, got 0"),
    (["--backends", "-1"], "--backends: must be >= 1, got -1"),
    (["--targets", "direct,envoy"], "--targets: unknown target(s) envoy (known: direct, "),
])
def test_overhead_bad_input_is_one_line_and_exit_2(
        tmp_path: Path, args: list[str], message: str, no_run: None,
        capsys: pytest.CaptureFixture[str]) -> None:
    assert kvroute(["bench", "overhead", "--out", str(tmp_path / "o"), *args]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"kvroute bench overhead: {message}") and err.count("\n") == 1


def _trace(tmp_path: Path) -> Path:
    path = tmp_path / "t.jsonl"
    path.write_text("".join(json.dumps({"arrival_s": 0.1 * i, "prompt_tokens": 20,
                                        "output_tokens": 2}) + "\n" for i in range(3)))
    return path


@pytest.mark.parametrize(("args", "message"), [
    (["--limit", "0"], "--limit: must be > 0, got 0"),
    (["--rate-scale", "nan"], "--rate-scale: must be a finite number > 0, got nan"),
    (["--rate-scale", "inf"], "--rate-scale: must be a finite number > 0, got inf"),
    (["--rate-scale", "0"], "--rate-scale: must be a finite number > 0, got 0"),
    (["--time-scale", "nan"], "--time-scale: must be a finite number >= 0, got nan"),
    (["--time-scale", "inf"], "--time-scale: must be a finite number >= 0, got inf"),
    (["--time-scale", "-1"], "--time-scale: must be a finite number >= 0, got -1"),
    (["--max-output-tokens", "0"], "--max-output-tokens: must be >= 1, got 0"),
    (["--repeat", "0"], "--repeat: must be >= 1, got 0"),
    (["--client-max-tokens", "lots"],
     "--client-max-tokens: 'lots': give exact, none or a number of tokens"),
    (["--targets", "kvroute,envoy"], "--targets: unknown target(s) envoy (known: direct, "),
    (["--trace", "{tmp}/missing.jsonl"],
     "{tmp}/missing.jsonl: cannot read trace: No such file or directory"),
    (["--trace", "{tmp}/bad.jsonl"], "{tmp}/bad.jsonl:1: not JSON: Expecting value"),
    (["--trace", "{tmp}/nan.jsonl"],
     "{tmp}/nan.jsonl:1: arrival_s: must be a finite number of seconds, got NaN"),
    (["--fleet", "{tmp}/missing.yaml"],
     "{tmp}/missing.yaml: cannot read fleet file: No such file or directory"),
    (["--fleet", "{tmp}/real.yaml"], "{tmp}/real.yaml: every worker needs an emulate: block"),
    (["--routing", "{tmp}/missing.yaml"],
     "{tmp}/missing.yaml: cannot read routing file: No such file or directory"),
])
def test_replay_bad_input_is_one_line_and_exit_2(
        tmp_path: Path, args: list[str], message: str, no_run: None,
        capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "bad.jsonl").write_text("not json\n")
    (tmp_path / "nan.jsonl").write_text(
        '{"arrival_s": NaN, "prompt_tokens": 5, "output_tokens": 1}\n')
    (tmp_path / "real.yaml").write_text(
        (ROOT / "config" / "fleet.yaml").read_text().replace(
            "emulate: {port: 8101, responses_store: true}", "url: http://127.0.0.1:9"))
    args = [a.replace("{tmp}", str(tmp_path)) for a in args]
    assert kvroute(["bench", "replay", "--trace", str(_trace(tmp_path)),
                    "--fleet", str(ROOT / "config" / "fleet.yaml"),
                    "--out", str(tmp_path / "o"), *args]) == 2
    err = capsys.readouterr().err
    expected = message.replace("{tmp}", str(tmp_path))
    assert err.startswith(f"kvroute bench replay: {expected}") and err.count("\n") == 1
    assert not (tmp_path / "o").exists()


def test_cpu_lists() -> None:
    from bench.overhead import OverheadConfig

    assert OverheadConfig.cpu_set("0,2-4") == (0, 2, 3, 4)
    assert OverheadConfig.cpu_set("7") == (7,)


@pytest.mark.parametrize(("args", "message"), [
    (["block-hashes", "--trace", "{tmp}/missing.jsonl"],
     "block-hashes: {tmp}/missing.jsonl: cannot read trace: No such file or directory"),
    (["tokenize", "--trace", "{tmp}/bad.jsonl"],
     "tokenize: {tmp}/bad.jsonl:1: not JSON: Expecting value"),
    (["emulator", "--duration", "nan"], "emulator: --duration: must be a finite number, got nan"),
    (["decision", "--observed-spread", "inf"],
     "decision: --observed-spread: must be a finite number, got inf"),
    (["loop-stall", "--fleet", "{tmp}/missing.yaml"],
     "loop-stall: --fleet: {tmp}/missing.yaml: no such file"),
    (["soak", "--routing", "{tmp}/missing.yaml"],
     "soak: --routing: {tmp}/missing.yaml: no such file"),
])
def test_component_benchmarks_refuse_bad_files_and_non_finite_numbers_in_one_line(
        tmp_path: Path, args: list[str], message: str, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    import importlib

    import bench.cli

    module = importlib.import_module(dict(bench.cli.OPTIONAL_MODULES)[args[0]])
    if args[0] not in ("block-hashes", "tokenize"):     # those fail reading the trace first
        def never(*a: object) -> int:
            raise AssertionError("the benchmark started")
        monkeypatch.setattr(module, "run", never)
    (tmp_path / "bad.jsonl").write_text("not json\n")
    args = [a.replace("{tmp}", str(tmp_path)) for a in args]
    assert kvroute(["bench", *args, "--out", str(tmp_path / "o")]) == 2
    expected = message.replace("{tmp}", str(tmp_path))
    assert capsys.readouterr().err == f"kvroute bench {expected}\n"
