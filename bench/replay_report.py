"""Write a replay run: ``replay.json``, ``replay.md`` (a table) and ``replay.png`` (TTFT, SLO
attainment and the workers' prefix-cache hit rate per router)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import orjson

from bench.replay import ReplayConfig, ReplayResult


def _f(value: float | None, digits: int = 3) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def markdown_table(results: Sequence[ReplayResult]) -> str:
    rows = ["| Router | OK / sent | TTFT p50 / p90 / p99 s | TPOT p50 / p99 ms | E2E p50 / p99 s "
            "| SLO attainment | Worker prefix-cache hit rate | Max prompt-token share |",
            "|" + "---|" * 8]
    for r in results:
        if r.skipped is not None:
            rows.append(f"| {r.name} | skipped: {r.skipped} |" + " |" * 6)
            continue
        tpot = (f"{_f(r.tpot_p50_s and r.tpot_p50_s * 1000, 1)} / "
                f"{_f(r.tpot_p99_s and r.tpot_p99_s * 1000, 1)}")
        share = max(r.prompt_token_share.values()) if r.prompt_token_share else None
        rows.append(
            f"| {r.name} | {r.completed} / {r.requests} "
            f"| {_f(r.ttft_p50_s)} / {_f(r.ttft_p90_s)} / {_f(r.ttft_p99_s)} | {tpot} "
            f"| {_f(r.e2e_p50_s, 2)} / {_f(r.e2e_p99_s, 2)} | {_f(r.slo_attainment)} "
            f"| {_f(r.prefix_hit_rate)} | {_f(share)} |")
    return "\n".join(rows) + "\n"


def write_replay(out_dir: Path, config: ReplayConfig, results: Sequence[ReplayResult],
                 command: str, prefix_ceiling: float | None = None) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    document = {"command": command,
                "config": {"trace": str(config.trace), "targets": list(config.targets),
                           "fleet": str(config.fleet), "limit": config.limit,
                           "rate_scale": config.rate_scale, "time_scale": config.time_scale,
                           "max_output_tokens": config.max_output_tokens,
                           "routing": None if config.routing is None else str(config.routing),
                           "launch": config.launch},
                "trace_prefix_ceiling": prefix_ceiling,
                "results": [r.to_json() for r in results]}
    json_path = out_dir / "replay.json"
    json_path.write_bytes(orjson.dumps(document, option=orjson.OPT_INDENT_2))
    md_path = out_dir / "replay.md"
    ceiling = ("" if prefix_ceiling is None else
               f"Infinite-cache prefix ceiling of the slice (16-token blocks): "
               f"{prefix_ceiling:.3f}\n\n")
    md_path.write_text(f"Command: `{command}`\n\n{ceiling}{markdown_table(results)}")
    return [json_path, md_path, _plot(out_dir / "replay.png", results)]


def _plot(path: Path, results: Sequence[ReplayResult]) -> Path:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    done = [r for r in results if r.skipped is None]
    names = [r.name for r in done]
    figure, axes = plt.subplots(1, 3, figsize=(13, 4))
    panels = (("TTFT (emulated s)", [("p50", [r.ttft_p50_s or 0 for r in done]),
                                     ("p99", [r.ttft_p99_s or 0 for r in done])]),
              ("SLO attainment", [("", [r.slo_attainment or 0 for r in done])]),
              ("worker prefix-cache hit rate",
               [("", [r.prefix_hit_rate or 0 for r in done])]))
    for axis, (title, series) in zip(axes, panels, strict=True):
        width = 0.8 / len(series)
        for i, (label, values) in enumerate(series):
            axis.bar([p + i * width for p in range(len(names))], values, width,
                     label=label or None)
        axis.set_xticks([p + width * (len(series) - 1) / 2 for p in range(len(names))],
                        names, rotation=20)
        axis.set_title(title)
        if len(series) > 1:
            axis.legend(fontsize=8)
        else:
            axis.set_ylim(0, 1.05)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path
