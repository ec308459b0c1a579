"""Which TTFT/TPOT estimator predicts best: the online-corrected model or scikit-learn?

Runs ``kvroute sim`` machinery on a trace slice with a token-aware routing file, records
for every routed request the estimator's inputs, its raw and online-corrected predictions
and the observed TTFT/TPOT (``EstimatingPlugin.samples``), then splits the requests in time:
the first ``--train`` share trains the scikit-learn models, the rest is held back and every
estimator is scored on it. The online estimator's held-back predictions are the ones it
made live, having learnt only from requests that had finished by then.

The online correction is also replayed on the same requests, as the router would have
learnt it from them (each prediction made at the request's arrival from the outcomes of the
requests finished by then), in three forms: one TTFT factor per worker (``ttft_regimes``
off), TTFT's per regime (on, the default), and per regime following its own judgement
(``follow_judgement``: each metric's correction applied only while it predicted the finished
requests better than the raw model). The live row and the replays see the same
requests, so the two forms compare on equal terms whichever one routed them.

Error measures, on the held-back requests: mean |ln(predicted/observed)| (0.10 ≈ 10 % off)
and median absolute percentage error; for the scikit-learn models also the median time of
one ``predict`` on ten held-back rows (``predict_10_rows_us``: a decision among ten workers).

    python -m policies.latency.evaluate --trace ../shared/traces/azure_llm_2023_code.csv.gz \\
        --fleet config/fleets/bench-mixed.yaml --routing config/routing.yaml \\
        --limit 2000 --rate-scale 1.0 --out out/latency-eval
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from policies.latency.observer import EstimatingPlugin, LatencySample

GPU_CLASSES = ("H100-80GB", "A100-80GB", "L40S-48GB")


def collect(trace_path: str, fleet_path: str, routing_path: str, limit: int | None,
            rate_scale: float, seed: int) -> list[LatencySample]:
    """Simulate and return the finished requests' samples, in arrival order."""
    from policies.engine import PolicyEngine
    from policies.loader import load_routing
    from sim.prefill_clock import PrefillClock
    from sim.simulator import Simulation, SimulationSettings
    from sim.traces import load_trace, rescale
    from workers.fleet import load_fleet

    fleet = load_fleet(fleet_path)
    policy = PolicyEngine.build(load_routing(routing_path), fleet, seed=seed)
    recorders = [p for _, _, p in policy.plugins() if isinstance(p, EstimatingPlugin) and p.learns]
    if not recorders:
        raise SystemExit(f"{routing_path}: no estimated-time / cost plugin to evaluate")
    recorder = recorders[0]
    recorder.samples = {}
    trace = rescale(load_trace(trace_path, limit=limit, seed=seed), rate_scale)
    clock = PrefillClock(fleet.workers[0].info.model_spec)
    Simulation(trace, fleet, policy, SimulationSettings(seed=seed), None, clock).run()
    finished = [s for s in recorder.samples.values()
                if s.observed_ttft_s and s.observed_ttft_s > 0]
    return sorted(finished, key=lambda s: s.arrival_s)


def features(sample: LatencySample) -> list[float]:
    uncached = sample.prompt_tokens - sample.cached_tokens
    return [math.log(sample.raw_ttft_s), math.log(sample.raw_tpot_s),
            float(sample.prompt_tokens), float(sample.cached_tokens), float(uncached),
            float(sample.inflight_prefill_tokens), float(sample.running),
            float(sample.waiting), float(sample.inflight_requests), sample.kv_usage,
            float(sample.output_tokens),
            *(1.0 if sample.gpu_class == g else 0.0 for g in GPU_CLASSES)]


def errors(predicted: Sequence[float], observed: Sequence[float]) -> dict[str, float]:
    pairs = [(p, o) for p, o in zip(predicted, observed, strict=True) if p > 0 and o > 0]
    if not pairs:
        return {"n": 0.0, "mean_abs_log": float("nan"), "median_ape": float("nan")}
    return {"n": float(len(pairs)),
            "mean_abs_log": statistics.fmean(abs(math.log(p / o)) for p, o in pairs),
            "median_ape": statistics.median(abs(p - o) / o for p, o in pairs)}


def replay(samples: Sequence[LatencySample], ttft_regimes: bool,
           follow_judgement: bool = False) -> list[tuple[float, float]]:
    """(TTFT, TPOT) each sample would have been predicted by an ``OnlineCorrection`` learning
    from the samples before it, in order of arrival and of completion (arrival + observed
    TTFT + observed TPOT × its output tokens); in the order of ``samples``.
    ``follow_judgement``: the correction's own (each metric's correction applied only while
    it predicted the finished requests better than the raw model)."""
    from policies.latency.online import OnlineCorrection, Prediction, ttft_regime

    correction = OnlineCorrection(ttft_regimes=ttft_regimes, follow_judgement=follow_judgement)
    events: list[tuple[float, int, int]] = []        # (time, 0 arrival / 1 completion, index)
    for index, s in enumerate(samples):
        events.append((s.arrival_s, 0, index))
        if s.observed_ttft_s:
            events.append((s.arrival_s + s.observed_ttft_s
                           + (s.observed_tpot_s or 0.0) * s.output_tokens, 1, index))
    predicted: list[tuple[float, float]] = [(0.0, 0.0)] * len(samples)
    for _, kind, index in sorted(events):
        s = samples[index]
        key = str(index)
        if kind == 0:
            regime = ttft_regime(s.prompt_tokens - s.cached_tokens, s.inflight_prefill_tokens)
            ttft_factor, tpot_factor, _, _ = correction.factors(s.worker_id, s.gpu_class, regime)
            predicted[index] = (s.raw_ttft_s * ttft_factor, s.raw_tpot_s * tpot_factor)
            correction.remember(key, Prediction(s.worker_id, s.gpu_class, s.raw_ttft_s,
                                                s.raw_tpot_s, regime))
        else:
            correction.observe(key, s.observed_ttft_s, s.observed_tpot_s)
    return predicted


def predict_time_us(model: Any, rows: list[list[float]], calls: int = 200) -> float:
    """Median wall time of ``model.predict(rows)`` in µs: what using the model would add to a
    decision estimating ``len(rows)`` workers."""
    timings = []
    for _ in range(calls):
        started = time.perf_counter_ns()
        model.predict(rows)
        timings.append((time.perf_counter_ns() - started) / 1e3)
    return statistics.median(timings)


def evaluate(samples: list[LatencySample], train_share: float, seed: int) -> dict[str, Any]:
    from sklearn.ensemble import GradientBoostingRegressor
    from sklearn.linear_model import LinearRegression

    cut = int(len(samples) * train_share)
    train, test = samples[:cut], samples[cut:]
    report: dict[str, Any] = {"train": len(train), "test": len(test)}
    replays = {name: dict(zip(map(id, samples), replay(samples, regimes, judged), strict=True))
               for name, regimes, judged in (("online_per_worker", False, False),
                                             ("online_per_regime", True, False),
                                             ("online_judged", True, True))}
    for metric in ("ttft", "tpot"):
        def observed(s: LatencySample, m: str = metric) -> float | None:
            return s.observed_ttft_s if m == "ttft" else s.observed_tpot_s

        fit = [s for s in train if (observed(s) or 0) > 0]
        held = [s for s in test if (observed(s) or 0) > 0]
        truth = [float(observed(s) or 0.0) for s in held]
        x_train = [features(s) for s in fit]
        y_train = [math.log(float(observed(s) or 1.0)) for s in fit]
        x_test = [features(s) for s in held]
        results: dict[str, Any] = {
            "raw_model": errors([getattr(s, f"raw_{metric}_s") for s in held], truth),
            "online_corrected": errors([getattr(s, f"{metric}_s") for s in held], truth)}
        column = 0 if metric == "ttft" else 1
        for name, predictions in replays.items():
            results[name] = errors([predictions[id(s)][column] for s in held], truth)
        if len(fit) >= 20 and held:
            for name, model in (
                    ("sklearn_linear", LinearRegression()),
                    ("sklearn_gbr", GradientBoostingRegressor(random_state=seed))):
                model.fit(x_train, y_train)
                predicted = [math.exp(v) for v in model.predict(x_test)]
                results[name] = errors(predicted, truth)
                results[name]["predict_10_rows_us"] = predict_time_us(model, x_test[:10])
        report[metric] = results
    return report


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m policies.latency.evaluate",
                                     description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trace", required=True)
    parser.add_argument("--fleet", default="config/fleets/bench-mixed.yaml")
    parser.add_argument("--routing", default="config/routing.yaml")
    parser.add_argument("--limit", type=int, default=2000)
    parser.add_argument("--rate-scale", type=float, default=1.0)
    parser.add_argument("--train", type=float, default=0.7, help="share used for training")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    if not 0.0 < args.train < 1.0:
        parser.error("--train must be between 0 and 1")
    print(f"[latency] simulating {args.trace} (limit {args.limit}, x{args.rate_scale})",
          file=sys.stderr, flush=True)
    samples = collect(args.trace, args.fleet, args.routing, args.limit, args.rate_scale,
                      args.seed)
    report = {"trace": args.trace, "routing": args.routing, "limit": args.limit,
              "rate_scale": args.rate_scale, **evaluate(samples, args.train, args.seed)}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "latency_eval.json").write_text(json.dumps(report, indent=2) + "\n")
    for metric in ("ttft", "tpot"):
        for name, value in report[metric].items():
            print(f"{metric} {name:18s} n={value['n']:.0f} mean|ln ratio|="
                  f"{value['mean_abs_log']:.3f} median APE={value['median_ape']:.1%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
