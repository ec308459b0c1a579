"""What ``summary.md`` says under its table about each policy's goodput search.

For every policy with a goodput search: its goodput as an absolute rate (the slice's offered
rate at scale 1 times the goodput rate scale), and, where the search ended at 0.0, why:

* ``plateau``: attainment stopped rising as the load fell, so the misses do not come from
  load: the SLO is not met even near idle on this fleet (its ``idle_attainment`` is said).
  When attainment did not rise at all below the run's rate, the fleet may as well still be
  overloaded at the smallest scale probed, and the line says both;
* ``limit``: the halvings ran out while attainment was still rising: the goodput is below the
  smallest scale probed, not necessarily none.

Summaries written before these keys existed give no line for them. ``bar_label`` is the
same in a few words, for ``goodput.png``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sim.slo import GOODPUT_ATTAINMENT

RISE = 0.005          # the goodput search's plateau: a smaller gain is no rise


def _pct(share: float) -> str:
    return f"{100 * share:.0f} %"


def fraction_of_rate(entry: Mapping[str, Any]) -> str | None:
    """The smallest scale probed as a fraction of the run's scale (``1/64``), or None."""
    probes = entry.get("goodput_probes") or []
    start = entry.get("rate_scale")
    if not probes or not start:
        return None
    smallest = min(float(scale) for scale, _ in probes)
    return f"1/{round(float(start) / smallest):d}"


def _smallest_scale(entry: Mapping[str, Any]) -> float | None:
    probes = entry.get("goodput_probes") or []
    return min(float(scale) for scale, _ in probes) if probes else None


def floor_note(name: str, entry: Mapping[str, Any],
               target: float = GOODPUT_ATTAINMENT) -> str | None:
    """One line saying why ``name``'s goodput is 0.0 (None when it is not, or unknown)."""
    floor = entry.get("goodput_floor")
    idle = entry.get("idle_attainment")
    probes = [(float(s), float(a)) for s, a in entry.get("goodput_probes") or []]
    fraction, smallest = fraction_of_rate(entry), _smallest_scale(entry)
    if floor is None or idle is None or fraction is None or smallest is None:
        return None
    reached = f"attainment {_pct(idle)} at ×{smallest:.3g}, {_pct(target)} needed"
    if floor == "limit":
        return (f"{name}: the SLO is not met at {fraction} of the rate ({reached}), but "
                "attainment was still rising as the load fell: the goodput is below "
                f"×{smallest:.3g}, where the search stops, not necessarily none")
    best_scale, best = max(probes, key=lambda probe: probe[1])
    if best <= probes[0][1] + RISE:       # it never rose: perhaps still overloaded there
        return (f"{name}: the SLO is not met at {fraction} of the rate either ({reached}), "
                "and lowering the rate did not raise attainment at all, so the search "
                "stopped: either these requests miss the SLO even on an idle fleet, or the "
                f"fleet is still overloaded at {fraction} of the rate (rerun with a lower "
                "--rate-scale to tell)")
    peak = (f"; it peaked at {_pct(best)} at ×{best_scale:.3g} and fell at lower rates"
            if best > idle + RISE else "")
    note = (f"{name}: the SLO is not met even at {fraction} of the rate ({reached}{peak}): "
            "attainment no longer rises as the load falls, so the misses do not come from "
            "load: this fleet cannot serve these requests within the SLO")
    return note


def _rate(entry: Mapping[str, Any]) -> str | None:
    rps, tok_s = entry.get("goodput_rps"), entry.get("goodput_prompt_tok_s")
    if rps is None:
        return None
    bound = "≥ " if entry.get("goodput_capped") else ""
    tokens = "" if tok_s is None else f", {bound}{tok_s:,.0f} prompt tok/s"
    return (f"×{entry.get('goodput_rate_scale', 0.0):.2f} = {bound}{rps:.3g} req/s{tokens}"
            + (" (every doubling passed: a lower bound)" if bound else ""))


def goodput_lines(entries: Mapping[str, Mapping[str, Any]], offered_rps: float | None,
                  rate_scale: float | None, target: float = GOODPUT_ATTAINMENT) -> str:
    """The section under ``summary.md``'s table ("" without a goodput search).
    ``offered_rps``: the run's offered rate, at its ``rate_scale``."""
    lines = []
    for name, entry in entries.items():
        if entry.get("goodput_rate_scale") is None:
            continue
        note = floor_note(name, entry, target)
        rate = _rate(entry)
        if note is not None:
            lines.append(f"* {note}.")
        elif rate is not None:
            lines.append(f"* {name}: {rate}")
    if not lines:
        return ""
    base = ""
    if offered_rps is not None and rate_scale:
        base = f" ({offered_rps / rate_scale:.3g} req/s at scale 1)"
    return (f"\nGoodput (the largest rate scale at which ≥ {_pct(target)} of requests meet the "
            f"SLO) as an absolute rate: the slice's offered rate{base} times that scale.\n\n"
            + "\n".join(lines) + "\n")


def bar_label(entry: Mapping[str, Any], target: float = GOODPUT_ATTAINMENT) -> str | None:
    """A goodput bar's label in ``goodput.png`` when its search ended at 0.0 (else None)."""
    floor, idle = entry.get("goodput_floor"), entry.get("idle_attainment")
    fraction, smallest = fraction_of_rate(entry), _smallest_scale(entry)
    if floor is None or idle is None or fraction is None or smallest is None:
        return None
    if floor == "plateau":
        return (f"0: SLO not met\nat {fraction} of the rate\n({_pct(idle)} < {_pct(target)}),"
                "\nnot rising as\nthe load falls")
    return (f"< ×{smallest:.3g}\n({_pct(idle)} at {fraction}\nof the rate,\nstill rising)")
