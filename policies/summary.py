"""A one-line description of a routing configuration, and the warnings worth printing about
it, for ``kvroute validate`` and logs."""

from __future__ import annotations

from policies.config import RoutingConfig


def summarize(routing: RoutingConfig) -> str:
    profiles = ", ".join(
        f"{name} ({len(p.filters)} filters, {len(p.scorers)} scorers, {p.picker.type})"
        for name, p in routing.profiles.items())
    producers = ", ".join(spec.type for spec in routing.producers) or "none"
    return (f"{len(routing.profiles)} profile(s): {profiles}; {len(routing.rules)} rule(s); "
            f"default profile {routing.default_profile}; producers: {producers}")


def warnings(routing: RoutingConfig) -> list[str]:
    """Valid but probably unintended: a profile that never checks the model or health."""
    found: list[str] = []
    for name, profile in routing.profiles.items():
        types = {spec.type for spec in profile.filters}
        if "model" not in types:
            found.append(f"profiles.{name}.filters: no model filter: requests may go to "
                         "workers that do not serve their model")
        if "healthy" not in types:
            found.append(f"profiles.{name}.filters: no healthy filter: requests may go to "
                         "workers whose last scrape failed")
    return found
