from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.cli import OPTIONAL_MODULES, _targets
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
     "tokenize: {tmp}/bad.jsonl:1: not JSON: Expecting value (column 1)"),
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


def _bench_args(tmp_path: Path, args: list[str]) -> list[str]:
    """``args`` with {tmp} and {root} filled in, and the fixture files they may name."""
    (tmp_path / "file").write_text("")
    (tmp_path / "list.yaml").write_text("- 1\n")
    (tmp_path / "real.yaml").write_text(
        (ROOT / "config" / "fleet.yaml").read_text().replace(
            "emulate: {port: 8101, responses_store: true}", "url: http://127.0.0.1:9"))
    _trace(tmp_path)
    import gzip
    with gzip.open(tmp_path / "generic.jsonl.gz", "wt") as f:
        f.write('{"arrival_s": 0, "prompt_tokens": 10, "output_tokens": 2}\n')
    with gzip.open(tmp_path / "mooncake2.jsonl.gz", "wt") as f:
        f.write('{"timestamp": 0, "input_length": 10, "output_length": 2, "hash_ids": [1]}\n'
                * 2)
    return [a.replace("{tmp}", str(tmp_path)).replace("{root}", str(ROOT)) for a in args]


def _never_run(monkeypatch: pytest.MonkeyPatch, command: str) -> None:
    """Make the sub-command's benchmark fail the test if it starts."""
    import importlib

    import bench.cli

    def never(*a: object, **k: object) -> int:
        raise AssertionError("the benchmark started")

    if command in ("overhead", "replay"):
        import bench.overhead
        import bench.replay

        monkeypatch.setattr(bench.replay, "run_replay", never)
        monkeypatch.setattr(bench.overhead, "run_overhead", never)
    else:
        module = importlib.import_module(dict(bench.cli.OPTIONAL_MODULES)[command])
        monkeypatch.setattr(module, "run", never)


# the options each sub-command needs besides --out (semantic's defaults are relative paths)
NEEDED = {
    "replay": ["--trace", "{tmp}/t.jsonl", "--fleet", "{root}/config/fleet.yaml"],
    "block-hashes": ["--trace", "{tmp}/t.jsonl"], "tokenize": ["--trace", "{tmp}/t.jsonl"],
    "semantic": ["--routing", "{root}/config/examples/semantic.yaml",
                 "--data", "{root}/config/examples/semantic-eval/heldout.jsonl"],
}
COMMANDS = ("overhead", "replay", *(name for name, _ in OPTIONAL_MODULES))


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize(("out", "reason"), [
    ("{tmp}/file", "{tmp}/file is a file, not a folder"),      # (it said "File exists")
    ("{tmp}/file/sub", "Not a directory")])
def test_an_out_folder_that_cannot_be_written_is_refused_before_the_run(
        tmp_path: Path, command: str, out: str, reason: str, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    _never_run(monkeypatch, command)
    if command in ("redis-sync", "replica-affinity"):   # (checked before --out; may be absent)
        monkeypatch.setattr("shutil.which", lambda name: f"/usr/bin/{name}")
    args = _bench_args(tmp_path, [*NEEDED.get(command, []), "--out", out])
    assert kvroute(["bench", command, *args]) == 2
    where = out.replace("{tmp}", str(tmp_path))
    assert capsys.readouterr().err == (
        f"kvroute bench {command}: --out: cannot write {where}: "
        f"{reason.replace('{tmp}', str(tmp_path))}\n")


@pytest.mark.parametrize(("args", "message"), [
    # bad options of every sub-command: refused before its benchmark starts
    (["decision", "--workers", "a"], "--workers: expected comma-separated integers, got 'a'"),
    (["decision", "--workers", "8,0"], "--workers: must be >= 1, got 0"),
    (["decision", "--workers", " , "], "--workers: give at least one number"),
    (["decision", "--decisions", "0"], "--decisions: must be >= 1, got 0"),
    (["decision", "--warmup", "-1"], "--warmup: must be >= 0, got -1"),
    (["decision", "--prefixes", "0"], "--prefixes: must be >= 1, got 0"),
    (["decision", "--prompt-tokens", "1"], "--prompt-tokens: must be >= 2, got 1"),
    (["decision", "--index-blocks", "0"], "--index-blocks: must be >= 8, got 0"),
    (["decision", "--index-blocks", "-5"], "--index-blocks: must be >= 8, got -5"),
    (["decision", "--observed-spread", "-1"],
     "--observed-spread: must be a finite number >= 0, got -1"),
    (["semantic", "--rate", "0"], "--rate: must be a finite number > 0, got 0"),
    (["semantic", "--duration", "-1"], "--duration: must be a finite number > 0, got -1"),
    (["semantic", "--rate", "0.1", "--duration", "1"],
     "--rate x --duration: must send one request at least, got 0.1/s for 1 s"),
    (["semantic", "--max-prompt-tokens", "0"], "--max-prompt-tokens: must be >= 1, got 0"),
    (["semantic", "--max-tokens", "0"], "--max-tokens: must be >= 1, got 0"),
    (["semantic", "--data", "{tmp}/missing.jsonl"], "--data: {tmp}/missing.jsonl: no such file"),
    (["block-hashes", "--block-size", "0"], "--block-size: must be >= 1, got 0"),
    (["block-hashes", "--algo", "bogus"],
     "--algo: must be one of sha256, sha256_cbor, builtin, got 'bogus'"),
    (["block-hashes", "--limit", "0"], "--limit: must be > 0, got 0"),
    (["tokenize", "--limit", "0"], "--limit: must be > 0, got 0"),
    (["tokenize", "--chunk-chars", "abc"],
     "--chunk-chars: expected comma-separated integers, got 'abc'"),
    (["tokenize", "--chunk-chars", "0,-1"], "--chunk-chars: must be >= 0, got -1"),
    (["tokenize", "--cache-max-tokens", "-1"], "--cache-max-tokens: must be >= 0, got -1"),
    (["upstream", "--concurrency", "0"], "--concurrency: must be >= 1, got 0"),
    (["upstream", "--rounds", "0"], "--rounds: must be >= 1, got 0"),
    (["upstream", "--requests", "0"], "--requests: must be >= --concurrency (32), got 0"),
    (["upstream", "--server-cpu", "x"], "--server-cpu: expected a CPU list such as 0,2-4, got 'x'"),
    (["prefix-match", "--requests", "0"], "--requests: must be >= 1, got 0"),
    (["prefix-match", "--capacity-blocks", "0"], "--capacity-blocks: must be >= 1, got 0"),
    (["prefix-match", "--prefixes", "0"], "--prefixes: must be >= 1, got 0"),
    (["prefix-match", "--prefix-blocks", "0", "--tail-blocks", "0"],
     "--prefix-blocks + --tail-blocks: must be >= 1 (blocks per chain), got 0"),
    (["admission", "--seconds", "0"], "--seconds: must be a finite number > 0, got 0"),
    (["admission", "--workers", "0"], "--workers: must be >= 1, got 0"),
    (["admission", "--flood-tokens", "0"], "--flood-tokens: must be >= 1, got 0"),
    (["admission", "--probe-interval", "0"],
     "--probe-interval: must be a finite number > 0, got 0"),
    (["admission", "--settings", "none,lifo"],
     "--settings: unknown setting(s) lifo (known: none, limit-fifo, limit-priority)"),
    (["engine", "--steps", "0"], "--steps: must be >= 1, got 0"),
    (["engine", "--prefill-steps", "0"], "--prefill-steps: must be >= 1, got 0"),
    (["engine", "--replay-requests", "0"], "--replay-requests: must be >= 1, got 0"),
    (["engine", "--hash-algo", "md5"],
     "--hash-algo: must be one of sha256, sha256_cbor, builtin, got 'md5'"),
    (["engine", "--mooncake", "5", "--trace", "{tmp}/missing.jsonl.gz"],
     "--trace: {tmp}/missing.jsonl.gz: no such file"),
    (["engine", "--mooncake", "5", "--trace", "{tmp}/t.jsonl"],
     "--trace: cannot read {tmp}/t.jsonl as gzipped JSONL: Not a gzipped file (b'{\"')"),
    # read after every other scenario: a KeyError then, or numbers divided by 5 for 2 rows
    (["engine", "--mooncake", "5", "--trace", "{tmp}/generic.jsonl.gz"],
     "--trace: {tmp}/generic.jsonl.gz:1: not a Mooncake row (no timestamp, input_length, "
     "output_length, hash_ids)"),
    (["engine", "--mooncake", "5", "--trace", "{tmp}/mooncake2.jsonl.gz"],
     "--mooncake 5: {tmp}/mooncake2.jsonl.gz has only 2 rows"),
    (["redis-sync", "--keys", "x"], "--keys: expected comma-separated integers, got 'x'"),
    (["redis-sync", "--replicas", "0"], "--replicas: must be >= 1, got 0"),
    (["redis-sync", "--syncs", "0"], "--syncs: must be >= 1, got 0"),
    (["emulator", "--duration", "0", "--workers", "1"],
     "--duration: must be a finite number > 0, got 0"),
    (["emulator", "--workers", "0"], "--workers: must be >= 1, got 0"),
    (["emulator", "--concurrency", "0"], "--concurrency: must be >= 1, got 0"),
    (["decode-guard", "--incumbents", "8,x"],
     "--incumbents: expected comma-separated integers, got '8,x'"),
    (["gc-walk", "--ceiling-blocks", "0"], "--ceiling-blocks: must be >= 1, got 0"),
    (["loop-stall", "--cases", "nope"],
     "--cases: unknown case(s) nope; choose from chat, token-ids, "),
    (["endpoints", "--warmup", "-1"], "--warmup: must be >= 0, got -1"),
    (["ejection", "--time-scale", "-1"], "--time-scale: must be a finite number >= 0, got -1"),
    (["soak", "--concurrency", "0"], "--concurrency: must be >= 1, got 0"),
])
def test_component_benchmarks_refuse_options_out_of_range_in_one_line(
        tmp_path: Path, args: list[str], message: str, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    _never_run(monkeypatch, args[0])
    args = _bench_args(tmp_path, [args[0], *NEEDED.get(args[0], []), *args[1:]])
    assert kvroute(["bench", *args, "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    expected = message.replace("{tmp}", str(tmp_path))
    assert err.startswith(f"kvroute bench {args[0]}: {expected}") and err.count("\n") == 1
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize(("args", "message"), [
    (["overhead", "--router-cpus", "1-"],
     "--router-cpus: expected a CPU list such as 0,2-4, got '1-'"),
    (["overhead", "--backend-cpus", "3-1"],
     "--backend-cpus: expected a CPU list such as 0,2-4, got '3-1'"),
])
def test_overhead_refuses_a_bad_cpu_list(
        tmp_path: Path, args: list[str], message: str, no_run: None,
        capsys: pytest.CaptureFixture[str]) -> None:
    assert kvroute(["bench", *args, "--out", str(tmp_path / "o")]) == 2
    assert capsys.readouterr().err == f"kvroute bench overhead: {message}\n"
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize(("args", "message"), [
    # a fleet the harness reads itself before kvroute up starts: one line, exit code 2
    (["loop-stall", "--fleet", "{tmp}/real.yaml"],
     "{tmp}/real.yaml: every worker needs an emulate: block"),
    (["endpoints", "--fleet", "{tmp}/list.yaml"], "{tmp}/list.yaml: top level must be a mapping"),
    (["soak", "--fleet", "{tmp}/list.yaml"], "{tmp}/list.yaml: top level must be a mapping"),
    (["soak", "--fleet", "{tmp}/t.jsonl"], "{tmp}/t.jsonl: invalid YAML: "),
])
def test_a_fleet_without_emulated_workers_is_refused_before_kvroute_up(
        tmp_path: Path, args: list[str], message: str, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    import importlib

    import bench.cli

    module = importlib.import_module(dict(bench.cli.OPTIONAL_MODULES)[args[0]])

    def never(*a: object, **k: object) -> None:
        raise AssertionError("kvroute up started")

    monkeypatch.setattr(module, "KvrouteUp", never)
    args = _bench_args(tmp_path, args)
    assert kvroute(["bench", *args, "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    expected = message.replace("{tmp}", str(tmp_path))
    assert err.startswith(f"kvroute bench {args[0]}: {expected}") and err.count("\n") == 1
    assert not (tmp_path / "o").exists()


def test_a_routing_file_without_a_semantic_section_is_refused_before_the_model_loads(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    import policies.semantic.model

    def never(*a: object, **k: object) -> None:
        raise AssertionError("the model loaded")

    monkeypatch.setattr(policies.semantic.model, "build_semantic_model", never)
    routing = ROOT / "config" / "routing.yaml"
    args = _bench_args(tmp_path, [*NEEDED["semantic"], "--routing", str(routing)])
    assert kvroute(["bench", "semantic", *args, "--out", str(tmp_path / "o")]) == 2
    assert capsys.readouterr().err == (
        f"kvroute bench semantic: {routing}: no semantic: section\n")


@pytest.mark.parametrize(("module_name", "argv", "message"), [
    # python -m bench.<module>: the module's run refuses the same way
    ("bench.decision", ["--workers", "a"], "--workers: expected comma-separated integers"),
    ("bench.engine", ["--steps", "0"], "--steps: must be >= 1, got 0"),
    ("bench.redis_sync", ["--syncs", "0"], "--syncs: must be >= 1, got 0"),
    ("bench.prefix_match", ["--capacity-blocks", "0"], "--capacity-blocks: must be >= 1, got 0"),
])
def test_each_modules_own_entry_point_refuses_too(
        tmp_path: Path, module_name: str, argv: list[str], message: str,
        capsys: pytest.CaptureFixture[str]) -> None:
    import importlib

    module = importlib.import_module(module_name)
    assert module.main([*argv, "--out", str(tmp_path / "o")]) == 2
    assert message in capsys.readouterr().err


def test_the_overhead_progress_line_shows_a_dash_where_no_router_cpu_was_measured(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import bench.overhead
    from bench.loadgen import LoadResult
    from bench.overhead import OverheadConfig, PhaseResult, measure_target
    from bench.targets import TargetPlan

    monkeypatch.setattr(bench.overhead, "plan_target", lambda name, context: TargetPlan(
        name, None, "http://127.0.0.1:9", "http://127.0.0.1:9/health"))
    monkeypatch.setattr(bench.overhead, "_phase", lambda *a, **k: (PhaseResult(
        LoadResult(10, 0, 1.0, 526.2, 1.0, 2.0), None, None, None), 0))
    lines: list[str] = []
    result = measure_target("direct", [], OverheadConfig(targets=("direct",)), tmp_path,
                            lines.append)
    assert result.skipped is None
    assert lines[-1] == "direct: 526.2 req/s, – µs/req; stream 526.2 req/s, – µs/req"


@pytest.mark.integration
def test_sigterm_stops_a_benchmark_and_the_servers_it_started(tmp_path: Path) -> None:
    """SIGTERM ended the command at once and left its emulators (and routers) listening:
    only Ctrl-C ran the cleanup. Now both do, in one line and exit 130."""
    import os
    import signal
    import subprocess
    import sys
    import time

    root = Path(__file__).resolve().parents[2]
    proc = subprocess.Popen(
        [sys.executable, "-m", "router.cli", "bench", "emulator", "--workers", "1",
         "--concurrency", "1", "--duration", "60", "--out", str(tmp_path / "out")],
        cwd=root, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    children: list[int] = []
    try:
        deadline = time.monotonic() + 60
        while not children:          # the emulator: not any process an import may start
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "no emulator started"
            time.sleep(0.1)
            children = [int(c) for c in Path(f"/proc/{proc.pid}/task/{proc.pid}/children")
                        .read_text().split() if b"workers.emulator" in _cmdline(int(c))]
        time.sleep(1.0)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        left = [pid for pid in children if Path(f"/proc/{pid}").exists()
                and Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"]
        for pid in left:                    # the emulator it started
            os.kill(pid, signal.SIGKILL)
    assert proc.returncode == 130, err
    assert err.strip().endswith("kvroute bench: interrupted")
    assert left == []


def _one_request_trace(tmp_path: Path) -> Path:
    trace = tmp_path / "t.jsonl"
    trace.write_text(json.dumps({"timestamp": 0, "input_length": 600, "output_length": 2,
                                 "hash_ids": [1, 2]}) + "\n")
    return trace


def test_an_interrupted_replay_keeps_the_targets_already_measured(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import bench.replay

    def measured_then_interrupted(name: str, *args: object) -> bench.replay.ReplayResult:
        if name == "kvroute-rr":
            raise KeyboardInterrupt          # Ctrl-C (or SIGTERM) during the second target
        return bench.replay.ReplayResult(name, requests=1, completed=1)

    monkeypatch.setattr(bench.replay, "replay_target", measured_then_interrupted)
    out = tmp_path / "out"
    code = kvroute(["bench", "replay", "--trace", str(_one_request_trace(tmp_path)),
                    "--fleet", str(ROOT / "config" / "fleet.yaml"), "--targets",
                    "direct,kvroute-rr", "--limit", "1", "--out", str(out)])
    assert code == 130
    written = json.loads((out / "replay.json").read_text())
    assert [(r["name"], r["completed"]) for r in written["results"]] == [("direct", 1)]
    assert "| direct |" in (out / "replay.md").read_text()


def test_an_interrupted_overhead_race_keeps_the_targets_already_measured(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import contextlib

    import bench.overhead

    @contextlib.contextmanager
    def no_backends(*args: object, **kwargs: object) -> object:
        class Backends:
            urls = ("http://127.0.0.1:9",)
        yield Backends()

    def measured_then_interrupted(name: str, *args: object) -> bench.overhead.TargetResult:
        if name == "kvroute":
            raise KeyboardInterrupt
        return bench.overhead.TargetResult(name, skipped="not installed")

    monkeypatch.setattr(bench.overhead, "make_backends", no_backends)
    monkeypatch.setattr(bench.overhead, "measure_target", measured_then_interrupted)
    out = tmp_path / "out"
    code = kvroute(["bench", "overhead", "--targets", "direct,kvroute", "--out", str(out)])
    assert code == 130
    written = json.loads((out / "overhead.json").read_text())
    assert [r["name"] for r in written["results"]] == ["direct"]


def test_a_replay_whose_emulated_workers_cannot_start_reports_the_target_failed(
        tmp_path: Path) -> None:
    """A fleet port already taken ended the replay in a traceback; now the target is
    reported failed, with the emulator's reason, and the next target still runs."""
    import socket

    from bench.replay import ReplayConfig, run_replay

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        fleet = tmp_path / "fleet.yaml"
        fleet.write_text("models:\n  m: {arch: llama-3-8b, max_model_len: 8192}\n"
                         "workers:\n  - id: w0\n    gpu: h100\n    models: [m]\n"
                         f"    emulate: {{port: {port}}}\n")
        config = ReplayConfig(trace=_one_request_trace(tmp_path), targets=("direct", "direct"),
                              fleet=fleet, limit=1, time_scale=0.0)
        messages: list[str] = []
        so_far: list[int] = []
        results = run_replay(config, messages.append, lambda done: so_far.append(len(done)))
    assert so_far == [1, 2]
    for result in results:
        assert result.skipped is not None and result.skipped.startswith(
            "failed: the emulated workers did not start: emulator exited with status 2: ")
        assert f"worker 'w0' at 127.0.0.1:{port}: Address already in use" in result.skipped
    assert sum(m.startswith("direct: failed (the emulated workers did not start: ")
               for m in messages) == 2


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def test_overhead_backend_option_reaches_the_race_and_its_files(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    import bench.overhead
    from bench.overhead import OverheadConfig

    parser = build_parser()
    assert parser.parse_args(["bench", "overhead", "--out", "x"]).backend == "emulator"
    assert parser.parse_args(["bench", "overhead", "--out", "x", "--backend", "mock"]
                             ).backend == "mock"
    with pytest.raises(SystemExit):
        parser.parse_args(["bench", "overhead", "--out", "x", "--backend", "vllm"])
    seen: list[OverheadConfig] = []
    monkeypatch.setattr(bench.overhead, "run_overhead",
                        lambda config, progress, measured=None: seen.append(config) or [])
    out = tmp_path / "o"
    assert kvroute(["bench", "overhead", "--backend", "mock", "--targets", "direct",
                    "--out", str(out)]) == 0
    assert [config.backend for config in seen] == ["mock"]
    assert json.loads((out / "overhead.json").read_text())["config"]["backend"] == "mock"
    assert "Backend: `mock`: 2 × fast mock workers" in (out / "overhead.md").read_text()
    assert "Backend: `mock`" in capsys.readouterr().out


def test_each_benchmark_is_listed_by_its_whole_first_sentence(
        capsys: pytest.CaptureFixture[str]) -> None:
    """Its docstring's first line was shown, cut mid-sentence ("... aiohttp's ClientSession
    against")."""
    from bench.cli import first_sentence

    assert first_sentence("One line.\nAnother.") == "One line."
    assert first_sentence("A sentence that\nwraps. Then more.\n\nDetails.") == (
        "A sentence that wraps.")
    assert first_sentence("No full stop\nat all\n\nDetails.") == "No full stop at all"
    with pytest.raises(SystemExit) as done:
        kvroute(["bench", "--help"])
    assert done.value.code == 0
    listed = " ".join(capsys.readouterr().out.split())
    assert ("CPU per request of the proxy's hop to a worker: aiohttp's ClientSession against "
            "``workers.upstream.UpstreamClient``, the client the proxy uses.") in listed
