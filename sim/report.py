"""Writes a simulation's results: ``summary.json``, ``summary.md`` and PNG plots.

Plots (matplotlib, Agg backend, no display needed):

* ``ttft_cdf.png``: the cumulative distribution of TTFT per policy (log-scaled seconds);
* ``goodput.png``: per policy, the goodput rate scale when ``--goodput`` ran (a search that
  ended at 0.0 labelled with why), else the SLO attainment at the simulated rate;
* ``cost.png``: per policy, dollars per million served tokens, whole fleet vs busy-only.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from sim.goodput_report import bar_label, goodput_lines
from sim.metrics import RequestRecord
from sim.slo import DEFAULT_SLO, GOODPUT_ATTAINMENT, Slo

_TABLE_COLUMNS: tuple[tuple[str, str, str], ...] = (
    # key, header, format
    ("requests", "requests", "{:d}"),
    ("rejected", "rejected", "{:d}"),
    ("ttft_p50", "TTFT p50 s", "{:.3f}"),
    ("ttft_p90", "TTFT p90 s", "{:.3f}"),
    ("ttft_p99", "TTFT p99 s", "{:.3f}"),
    ("tpot_p50", "TPOT p50 ms", "ms"),
    ("tpot_p99", "TPOT p99 ms", "ms"),
    ("e2e_p50", "e2e p50 s", "{:.2f}"),
    ("e2e_p99", "e2e p99 s", "{:.2f}"),
    ("slo_attainment", "SLO met", "{:.1%}"),
    ("goodput_rate_scale", "goodput ×rate", "{:.2f}"),
    ("prefix_hit_rate", "prefix hit", "{:.1%}"),
    ("prefix_cached_anywhere", "cached anywhere", "{:.1%}"),
    ("cost_per_mtok_fleet", "$/Mtok fleet", "{:.3f}"),
    ("cost_per_mtok_busy", "$/Mtok busy", "{:.3f}"),
    ("throughput_tok_s", "tok/s", "{:,.0f}"),
)
# shown only when a goodput search ran: $/Mtok busy at each policy's goodput rate scale,
# and (in summaries that have it) the whole fleet billed at that scale
_GOODPUT_COST = ("goodput_cost_per_mtok_busy", "$/Mtok busy at goodput", "{:.3f}")
_GOODPUT_FLEET_COST = ("goodput_cost_per_mtok_fleet", "$/Mtok fleet at goodput", "{:.3f}")


def _cell(value: Any, fmt: str, capped: bool = False) -> str:
    if value is None:
        return "–"
    if fmt == "ms":
        return f"{value * 1000:.1f}"
    return ("≥ " if capped else "") + fmt.format(value)


def markdown_table(entries: Mapping[str, Mapping[str, Any]]) -> str:
    columns = _TABLE_COLUMNS
    if any(_GOODPUT_COST[0] in entry for entry in entries.values()):
        columns = (*columns, _GOODPUT_COST)
    if any(_GOODPUT_FLEET_COST[0] in entry for entry in entries.values()):
        columns = (*columns, _GOODPUT_FLEET_COST)
    headers = ["policy", *(h for _, h, _ in columns)]
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    for name, entry in entries.items():
        cells = [name, *(_cell(entry.get(k), f, k == "goodput_rate_scale"
                               and bool(entry.get("goodput_capped"))) for k, _, f in columns)]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def prediction_table(entries: Mapping[str, Mapping[str, Any]]) -> str:
    """The output-length predictions of the policies that made any ("" when none did)."""
    rows = [(name, entry["output_prediction"]) for name, entry in entries.items()
            if entry.get("output_prediction")]
    if not rows:
        return ""
    lines = ["| policy | requests predicted | generated / predicted p10 | p50 | p90 "
             "| within 2 × |", "|---|---|---|---|---|---|"]
    for name, p in rows:
        lines.append(f"| {name} | {p['predicted']} ({p['share_of_completed']:.0%}) "
                     f"| {p['ratio_p10']:.2f} | {p['ratio_p50']:.2f} | {p['ratio_p90']:.2f} "
                     f"| {p['within_2x']:.0%} |")
    return ("\nOutput-length predictions (`output-length` producer), over the completed "
            "requests it predicted for:\n\n" + "\n".join(lines) + "\n")


def _pooled_note(pooled: float | None) -> str:
    """The ceiling of one LRU cache the size of the fleet's KV (absent in older summaries)."""
    if pooled is None:
        return ""
    return f" (one LRU cache of the whole fleet's KV: {pooled:.1%})"


def summary_slo(meta: Mapping[str, Any]) -> Slo:
    """The SLO a summary was judged by (its ``slo`` object; older summaries: the default)."""
    given = meta.get("slo")
    if not isinstance(given, Mapping):
        return DEFAULT_SLO
    return Slo(ttft_s=given.get("ttft_s"),
               tpot_s=given.get("tpot_s", DEFAULT_SLO.tpot_s),
               attainment=given.get("attainment", DEFAULT_SLO.attainment),
               ttft_floor_s=given.get("ttft_floor_s") or DEFAULT_SLO.ttft_floor_s,
               ttft_prefill_factor=(given.get("ttft_prefill_factor")
                                    or DEFAULT_SLO.ttft_prefill_factor))


def _offered_note(trace: Mapping[str, Any]) -> str:
    """The load the run offered (absent in older summaries, or when all arrive at once)."""
    rps, tok_s = trace.get("offered_rps"), trace.get("offered_prompt_tok_s")
    if rps is None or tok_s is None:
        return ""
    tokens = f"{tok_s:,.0f}" if tok_s < 1e15 else f"{tok_s:.3g}"   # not 300 digits
    return (f" Offered load: {rps:.3g} req/s and {tokens} prompt tok/s (requests / span "
            f"of the arrivals at rate scale {trace.get('rate_scale')}).")


# what a run writes in its --out folder: files, and the folder of per-request CSVs
OUTPUT_FILES = ("summary.json", "summary.json.partial", "summary.md", "ttft_cdf.png",
                "goodput.png", "cost.png")
REQUESTS_DIR = "requests"
# the columns of a per-request CSV (``write_requests_csv``): its first line
REQUESTS_CSV_FIELDS = ("index", "arrival_s", "worker_id", "prompt_tokens", "cached_tokens",
                       "output_tokens", "ttft_s", "tpot_s", "e2e_s", "queue_s", "preemptions",
                       "slo_ttft_s", "meets_slo", "cost_usd", "reject_reason", "reason",
                       "decided_by", "cached_here_tokens", "cached_anywhere_tokens",
                       "predicted_output_tokens")


def output_clash(out_dir: Path) -> str | None:
    """What in ``out_dir`` would stop the run's results being written (a folder where a file
    goes, or a file where the ``requests`` folder goes): found before the run, not after."""
    for name in OUTPUT_FILES:
        if (out_dir / name).is_dir():
            return f"--out: {out_dir / name} is a folder, where the run writes a file"
    requests = out_dir / REQUESTS_DIR
    if requests.exists() and not requests.is_dir():
        return f"--out: {requests} is a file, where the run writes a folder of CSVs"
    return None


def remove_stale_requests_csvs(out_dir: Path, policies: Iterable[str]) -> None:
    """Take out of a reused ``--out`` the per-request CSVs of policies this run did not run,
    so that the folder holds one run's results. Only files a run wrote go (a plain file
    whose first line is ``REQUESTS_CSV_FIELDS``): a CSV of the user's own, a folder or a link
    named ``*.csv`` stays, and one that cannot be removed is left (this runs after the
    simulation: an error here lost its results)."""
    keep = {f"{label}.csv" for label in policies}
    folder = out_dir / REQUESTS_DIR
    if not folder.is_dir():
        return
    header = ",".join(REQUESTS_CSV_FIELDS)
    for path in folder.glob("*.csv"):
        if path.name in keep or path.is_symlink() or not path.is_file():
            continue
        try:
            with path.open(newline="") as fh:
                if fh.readline(len(header) + 3).rstrip("\r\n") != header:
                    continue
            path.unlink()
        except (OSError, UnicodeDecodeError):
            continue


def write_summary(out_dir: Path, meta: Mapping[str, Any],
                  entries: Mapping[str, Mapping[str, Any]]) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / "summary.json"
    partial = out_dir / "summary.json.partial"     # renamed once whole: never half a summary
    partial.write_text(json.dumps({**meta, "policies": entries}, indent=2) + "\n")
    partial.replace(path)
    trace = meta.get("trace", {})
    ceiling = trace.get("prefix_hit_ceiling")
    skipped = trace.get("skip") or 0
    after = f" after its first {skipped}" if skipped else ""
    slo = summary_slo(meta)
    searched = any(e.get("goodput_rate_scale") is not None for e in entries.values())
    target = (f"; goodput at ≥ {100 * slo.attainment:g} % of requests meeting it"
              if searched and "slo" in meta else "")
    header = (f"Trace `{trace.get('name')}`: {trace.get('requests')} requests{after} at rate scale "
              f"{trace.get('rate_scale')}; fleet `{meta.get('fleet', {}).get('source')}`; "
              f"infinite-cache prefix ceiling "
              f"{'–' if ceiling is None else f'{ceiling:.1%}'}"
              f"{_pooled_note(trace.get('prefix_hit_ceiling_pooled'))}; "
              f"SLO: {slo.describe()}{target}.{_offered_note(trace)}\n\n")
    (out_dir / "summary.md").write_text(
        header + markdown_table(entries)
        + goodput_lines(entries, trace.get("offered_rps"), trace.get("rate_scale"),
                        slo.attainment)
        + prediction_table(entries) + skipped_lines(entries))
    return path


def skipped_lines(entries: Mapping[str, Mapping[str, Any]]) -> str:
    """Under the tables, each policy whose plugins failed: its results are those of the
    policy without them ("" when none failed)."""
    lines = []
    for name, entry in entries.items():
        skipped = entry.get("skipped_plugins") or {}
        if skipped:
            failed = ", ".join(f"{plugin} in {count} of {entry.get('requests')} decisions"
                               for plugin, count in skipped.items())
            lines.append(f"* {name}: plugins failed and were skipped ({failed}): its results "
                         "are those of the policy without them in those decisions; the "
                         "tracebacks are on stderr")
    return ("\n\nPlugins that failed:\n\n" + "\n".join(lines) + "\n") if lines else ""


def write_requests_csv(path: Path, records: Sequence[RequestRecord]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(REQUESTS_CSV_FIELDS)
        for r in records:
            writer.writerow([r.index, f"{r.arrival_s:.4f}", r.worker_id or "", r.prompt_tokens,
                             r.cached_tokens, r.output_tokens, _num(r.ttft_s), _num(r.tpot_s),
                             _num(r.e2e_s), _num(r.queue_s), r.preemptions,
                             f"{r.slo_ttft_s:.4f}", int(r.meets_slo), f"{r.cost_usd:.6f}",
                             r.reject_reason or "", r.reason, r.decided_by,
                             r.cached_here_tokens, r.cached_anywhere_tokens,
                             "" if r.predicted_output_tokens is None
                             else r.predicted_output_tokens])


def _num(value: float | None) -> str:
    return "" if value is None else f"{value:.5f}"


def write_plots(out_dir: Path, entries: Mapping[str, Mapping[str, Any]],
                ttfts: Mapping[str, Sequence[float]],
                target: float = GOODPUT_ATTAINMENT) -> list[Path]:
    """The three plots; ``target``: the goodput search's SLO attainment target."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    written: list[Path] = []
    names = list(entries)

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for name in names:
        values = np.sort(np.asarray(ttfts.get(name, ()), dtype=float))
        if values.size:
            ax.plot(values, np.arange(1, values.size + 1) / values.size, label=name)
    ax.set_xscale("log")
    ax.set_xlabel("time to first token (s, log scale)")
    ax.set_ylabel("share of completed requests")
    ax.set_title("TTFT CDF per policy")
    ax.grid(True, which="both", alpha=0.3)
    if ax.get_legend_handles_labels()[0]:     # no curve when every request was rejected
        ax.legend(fontsize=8)
    written.append(_save(fig, out_dir / "ttft_cdf.png"))

    goodput = [entries[n].get("goodput_rate_scale") for n in names]
    fig, ax = plt.subplots(figsize=(7, 4))
    if all(g is not None for g in goodput):
        heights = [float(g) for g in goodput if g is not None]
        ax.bar(names, heights, color="tab:green")
        ax.set_ylabel(f"largest rate scale with ≥ {100 * target:g} % SLO met")
        ax.set_title("Goodput per policy")
        _label_floors(ax, names, entries, heights, target)
    else:
        ax.bar(names, [100 * float(entries[n].get("slo_attainment") or 0) for n in names],
               color="tab:green")
        ax.set_ylabel("requests meeting the SLO (%)")
        ax.set_title("SLO attainment per policy (run with --goodput for goodput)")
    ax.tick_params(axis="x", rotation=30)
    for label in ax.get_xticklabels():
        label.set_horizontalalignment("right")
    written.append(_save(fig, out_dir / "goodput.png"))

    fig, ax = plt.subplots(figsize=(7, 4))
    x = np.arange(len(names))
    fleet = [float(entries[n].get("cost_per_mtok_fleet") or 0) for n in names]
    busy = [float(entries[n].get("cost_per_mtok_busy") or 0) for n in names]
    ax.bar(x - 0.2, fleet, 0.4, label="whole fleet billed")
    ax.bar(x + 0.2, busy, 0.4, label="billed while busy")
    ax.set_xticks(x, names, rotation=30, ha="right")
    ax.set_ylabel("$ per million served tokens")
    ax.set_title("Cost per policy")
    ax.set_ylim(0, 1.3 * max([*fleet, *busy, 1e-9]))
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=8, loc="upper right", ncol=2)
    written.append(_save(fig, out_dir / "cost.png"))
    return written


def _label_floors(ax: Any, names: Sequence[str], entries: Mapping[str, Mapping[str, Any]],
                  heights: Sequence[float], target: float) -> None:
    """Say on the plot why a policy's goodput is 0.0: an empty axis reads as a lost plot."""
    labels = [bar_label(entries[n], target) for n in names]
    if not any(labels):
        return
    top = max([*heights, 0.0])
    if top <= 0:
        ax.set_ylim(0, 1)          # every bar 0: a unit axis, not matplotlib's ±0.04
        top = 1.0
    for x, label in enumerate(labels):
        if label is not None:
            ax.text(x, 0.02 * top, label, ha="center", va="bottom", fontsize=7,
                    color="tab:red")


def _save(fig: Any, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    import matplotlib.pyplot as plt
    plt.close(fig)
    return path
