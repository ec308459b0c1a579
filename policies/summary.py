"""A one-line description of a routing configuration, for ``kvroute validate`` and logs."""

from __future__ import annotations

from policies.config import RoutingConfig


def summarize(routing: RoutingConfig) -> str:
    profiles = ", ".join(
        f"{name} ({len(p.filters)} filters, {len(p.scorers)} scorers, {p.picker.type})"
        for name, p in routing.profiles.items())
    producers = ", ".join(spec.type for spec in routing.producers) or "none"
    return (f"{len(routing.profiles)} profile(s): {profiles}; {len(routing.rules)} rule(s); "
            f"default profile {routing.default_profile}; producers: {producers}")
