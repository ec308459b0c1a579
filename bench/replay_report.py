"""Write a replay run: ``replay.json``, ``replay.md`` (a table) and ``replay.png`` (TTFT, SLO
attainment and the workers' prefix-cache hit rate per router). With several rounds the
table has a row per run, followed by each router's spread and the hit-rate ratios
(``bench.replay_rounds``), and the plot shows each router's mean with its range."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from statistics import fmean

import orjson

from bench.replay import ReplayConfig, ReplayResult
from bench.replay_rounds import Spread, hit_ratios, markdown_rounds, rounds, spreads


def _f(value: float | None, digits: int = 3) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def markdown_table(results: Sequence[ReplayResult]) -> str:
    """A row per run (with its round when there are several), then the rounds' summary."""
    repeated = rounds(results) > 1
    head = "| Round " if repeated else ""
    rows = [f"{head}| Router | OK / sent | TTFT p50 / p90 / p99 s | TPOT p50 / p99 ms "
            "| E2E p50 / p99 s | SLO attainment | Worker prefix-cache hit rate "
            "| Router-known cached prefix, chosen / best | Max prompt-token share |",
            "|" + "---|" * (10 if repeated else 9)]
    for r in results:
        lead = f"| {r.round} " if repeated else ""
        if r.skipped is not None:
            rows.append(f"{lead}| {r.name} | skipped: {r.skipped} |" + " |" * 7)
            continue
        tpot = (f"{_f(r.tpot_p50_s and r.tpot_p50_s * 1000, 1)} / "
                f"{_f(r.tpot_p99_s and r.tpot_p99_s * 1000, 1)}")
        share = max(r.prompt_token_share.values()) if r.prompt_token_share else None
        rows.append(
            f"{lead}| {r.name} | {r.completed} / {r.requests} "
            f"| {_f(r.ttft_p50_s)} / {_f(r.ttft_p90_s)} / {_f(r.ttft_p99_s)} | {tpot} "
            f"| {_f(r.e2e_p50_s, 2)} / {_f(r.e2e_p99_s, 2)} | {_f(r.slo_attainment)} "
            f"| {_f(r.prefix_hit_rate)} "
            f"| {_f(r.router_known_chosen_share)} / {_f(r.router_known_best_share)} "
            f"| {_f(share)} |")
    table = "\n".join(rows) + "\n"
    passed = _passed_over(results, repeated)
    if passed:
        table += "\n" + passed
    pauses = _gc_pauses(results, repeated)
    if pauses:
        table += "\n" + pauses
    summary = markdown_rounds(results)
    return f"{table}\n{summary}" if summary else table


def _per_run(results: Sequence[ReplayResult], repeated: bool, title: str,
             line: Callable[[ReplayResult], str | None]) -> str:
    """``title`` and one list item per run that ``line`` has something to say of."""
    lines = []
    for r in results:
        text = line(r)
        if text:
            lead = f"round {r.round}, " if repeated else ""
            lines.append(f"- {lead}{r.name}: {text}")
    return f"{title}:\n\n" + "\n".join(lines) + "\n" if lines else ""


def _passed_over(results: Sequence[ReplayResult], repeated: bool) -> str:
    """One line per run whose router counted known prefix it passed over, by deciding term."""
    return _per_run(results, repeated, "Router-known cached prefix passed over (best − chosen, "
                    "over the prompt tokens looked up), by deciding term",
                    lambda r: ", ".join(f"{term or '?'} {share:.3f}"
                                        for term, share in r.router_passed_over_by_term.items()))


def _gc_pauses(results: Sequence[ReplayResult], repeated: bool) -> str:
    """One line per run whose router reported its garbage collections, by generation."""
    return _per_run(results, repeated, "The router's garbage collections during the run (its "
                    "event loop stood still meanwhile)",
                    lambda r: ", ".join(
                        f"generation {g}: {p['collections']:.0f} taking "
                        f"{p['seconds'] * 1000:.0f} ms ({p['over_10ms']:.0f} over 10 ms)"
                        for g, p in sorted(r.router_gc.items())))


def write_replay(out_dir: Path, config: ReplayConfig, results: Sequence[ReplayResult],
                 command: str, prefix_ceiling: float | None = None) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    document: dict[str, object] = {"command": command,
        "config": {"trace": str(config.trace), "targets": list(config.targets),
                   "fleet": str(config.fleet), "limit": config.limit,
                   "rate_scale": config.rate_scale, "time_scale": config.time_scale,
                   "max_output_tokens": config.max_output_tokens,
                   "routing": None if config.routing is None else str(config.routing),
                   "launch": config.launch, "emulator_processes": config.emulator_processes,
                   "repeat": config.repeat,
                   "client_max_tokens": config.client_max_tokens.label()},
        "trace_prefix_ceiling": prefix_ceiling,
        "results": [r.to_json() for r in results]}
    if rounds(results) > 1:
        document["rounds"] = {
            "spreads": [{"name": t.name, "runs": t.runs, "hit_rate": _spread_json(t.hit_rate),
                         "slo_attainment": _spread_json(t.slo_attainment)}
                        for t in spreads(results)],
            "hit_ratios": [{"baseline": h.baseline, "other": h.other,
                            "per_round": list(h.per_round), "ratio": _spread_json(h.spread)}
                           for h in hit_ratios(results)]}
    json_path = out_dir / "replay.json"
    json_path.write_bytes(orjson.dumps(document, option=orjson.OPT_INDENT_2))
    md_path = out_dir / "replay.md"
    ceiling = ("" if prefix_ceiling is None else
               f"Infinite-cache prefix ceiling of the slice (16-token blocks): "
               f"{prefix_ceiling:.3f}\n\n")
    md_path.write_text(f"Command: `{command}`\n\n{ceiling}{markdown_table(results)}")
    return [json_path, md_path, _plot(out_dir / "replay.png", results)]


def _spread_json(spread: Spread | None) -> dict[str, float] | None:
    return None if spread is None else {"mean": spread.mean, "low": spread.low,
                                        "high": spread.high}


def _plot(path: Path, results: Sequence[ReplayResult]) -> Path:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    done = [r for r in results if r.skipped is None]
    by_name: dict[str, list[ReplayResult]] = {}
    for r in done:
        by_name.setdefault(r.name, []).append(r)
    names = list(by_name)

    def series(value: Callable[[ReplayResult], float | None]) -> list[list[float]]:
        return [[v for r in runs if (v := value(r)) is not None] or [0.0]
                for runs in by_name.values()]
    figure, axes = plt.subplots(1, 3, figsize=(13, 4))
    panels = (("TTFT (emulated s)", [("p50", series(lambda r: r.ttft_p50_s)),
                                     ("p99", series(lambda r: r.ttft_p99_s))]),
              ("SLO attainment", [("", series(lambda r: r.slo_attainment))]),
              ("worker prefix-cache hit rate", [("", series(lambda r: r.prefix_hit_rate))]))
    for axis, (title, bars) in zip(axes, panels, strict=True):
        width = 0.8 / len(bars)
        for i, (label, values) in enumerate(bars):
            means = [fmean(v) for v in values]    # one value per router unless repeated
            ranges = [[m - min(v) for m, v in zip(means, values, strict=True)],
                      [max(v) - m for m, v in zip(means, values, strict=True)]]
            axis.bar([p + i * width for p in range(len(names))], means, width,
                     label=label or None,
                     yerr=ranges if any(len(v) > 1 for v in values) else None, capsize=3)
        axis.set_xticks([p + width * (len(bars) - 1) / 2 for p in range(len(names))],
                        names, rotation=20)
        axis.set_title(title)
        if len(bars) > 1:
            axis.legend(fontsize=8)
        else:
            axis.set_ylim(0, 1.05)
    count = rounds(results)
    if count > 1:
        figure.suptitle(f"mean of {count} rounds; whiskers: lowest to highest", fontsize=10)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path
