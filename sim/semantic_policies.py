"""What ``kvroute sim`` says about, and readies for, routing files with semantic classes.

A simulated request is classified from its text, which only a generic trace's ``prompt``
rows carry (Mooncake and Azure rows are lengths and block ids): without it every request
takes the default class, and rules on the other classes never match. The operator is told so
before the run. An encoder to fine-tune on the examples is trained here, with a progress bar,
before any run builds the policy (otherwise the first run trained it for minutes behind a
progress bar standing at zero); the runs then load it from the cache.
"""

from __future__ import annotations

from collections.abc import Sequence

from policies.config import RoutingConfig
from policies.errors import RoutingConfigError
from policies.semantic.section import SECTION_NAME, SemanticSection, relative_to
from sim.policy_names import resolve_policy
from sim.traces import Trace


def semantic_sections(policies: Sequence[str]) -> list[tuple[str, RoutingConfig,
                                                              SemanticSection]]:
    """(policy name, its routing, its semantic section) of each policy that has one."""
    found = []
    for name in policies:
        routing = resolve_policy(name)
        section = routing.section(SECTION_NAME)
        if isinstance(section, SemanticSection):
            found.append((name, routing, section))
    return found


def text_notes(policies: Sequence[str], trace: Trace) -> list[str]:
    """A note for each semantic policy whose requests (some or all) carry no text."""
    total = len(trace.requests)
    without = sum(1 for request in trace.requests if request.text is None)
    if not without:
        return []
    notes = []
    for name, _, section in semantic_sections(policies):
        default = section.default_class
        if without == total:
            notes.append(f"{name}: the trace's requests carry no text (only a generic trace's "
                         f"\"prompt\" rows do): each is classified as the default class "
                         f"{default!r}, and rules on other classes never match")
        else:
            notes.append(f"{name}: {without:,} of the trace's {total:,} requests carry no text "
                         f"(a \"prompt\"): they are classified as the default class {default!r}")
    return notes


def train_ahead(policies: Sequence[str]) -> None:
    """Fine-tune each semantic policy's encoder where its result is not cached, with a
    progress bar; ``RoutingConfigError`` when the ``semantic`` extra is missing or the
    examples cannot be read."""
    from policies.semantic.extras import extra_missing_message

    for name, routing, section in semantic_sections(policies):
        message = extra_missing_message()
        if message is not None:
            raise RoutingConfigError(f"{name}: {message}")
        if section.fine_tune is None:
            continue
        from policies.semantic.cli import progress_bar
        from policies.semantic.fine_tune import fine_tuned_weights
        from policies.semantic.model import load_examples

        texts, labels = load_examples(section, relative_to(routing.source))
        with progress_bar(f"fine-tuning the encoder of {name}") as progress:
            fine_tuned_weights(texts, labels, section.fine_tune, section.max_tokens,
                               progress=progress)
