"""Fine-tuning the encoder on the examples: pairs, the cache key, training once, the lock,
the mix with the base model's weights, and the encoder used by the embedder (ONNX files named
after it)."""

from __future__ import annotations

import random
import threading
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from policies.errors import RoutingConfigError
from policies.semantic.fine_tune import (
    FineTuneParams,
    LoggedProgress,
    training_pairs,
    weights_digest,
)
from policies.semantic.section import parse_semantic_section

LABELS = ["code", "code", "code", "math", "math", "chat"]
TEXTS = ["write a python function that sorts a list", "fix this javascript null error",
         "how do I reverse a linked list in C", "solve 3x + 10 = 5(x - 2)",
         "integrate x squared from 0 to 1", "tell me a joke about penguins"]
TINY = FineTuneParams(pairs_per_example=2, batch_size=8)


def test_each_round_gives_every_example_a_partner_of_its_class_and_one_of_another() -> None:
    pairs = training_pairs(LABELS, rounds=3, rng=random.Random(0))
    assert len(pairs) == 2 * 3 * len(LABELS)
    positives = [(i, j) for i, j, target in pairs if target == 1.0]
    negatives = [(i, j) for i, j, target in pairs if target == 0.0]
    assert Counter(i for i, _ in positives) == Counter({i: 3 for i in range(len(LABELS))})
    assert Counter(i for i, _ in negatives) == Counter({i: 3 for i in range(len(LABELS))})
    assert all(LABELS[i] == LABELS[j] for i, j in positives)
    assert all(LABELS[i] != LABELS[j] for i, j in negatives)
    # another example of the class where there is one; the lone chat example pairs with itself
    assert all(i != j for i, j in positives if LABELS[i] != "chat")
    assert all(i == j for i, j in positives if LABELS[i] == "chat")
    assert pairs == training_pairs(LABELS, rounds=3, rng=random.Random(0))


def test_one_class_only_has_no_negative_pairs() -> None:
    pairs = training_pairs(["a", "a"], rounds=2, rng=random.Random(1))
    assert pairs == [(0, 1, 1.0), (1, 0, 1.0), (0, 1, 1.0), (1, 0, 1.0)]


def test_the_weights_are_named_by_everything_training_depends_on() -> None:
    base = weights_digest(TEXTS, LABELS, TINY, 32, "base")
    assert base == weights_digest(list(TEXTS), list(LABELS), FineTuneParams(2, batch_size=8),
                                  32, "base")
    changed = [
        weights_digest([*TEXTS[:-1], "tell me a joke about cats"], LABELS, TINY, 32, "base"),
        weights_digest(TEXTS, [*LABELS[:-1], "math"], TINY, 32, "base"),
        weights_digest(TEXTS, LABELS, FineTuneParams(pairs_per_example=3, batch_size=8), 32,
                       "base"),
        weights_digest(TEXTS, LABELS, FineTuneParams(2, batch_size=8, seed=1), 32, "base"),
        weights_digest(TEXTS, LABELS, TINY, 64, "base"),
        weights_digest(TEXTS, LABELS, TINY, 32, "another base model or library version"),
        weights_digest(TEXTS[::-1], LABELS[::-1], TINY, 32, "base"),
    ]
    assert base not in changed and len(set(changed)) == len(changed)
    # the number of threads changes how fast it trains, not what (up to float rounding);
    # the mix, only what is made of the trained weights
    assert weights_digest(TEXTS, LABELS, FineTuneParams(2, batch_size=8, threads=1), 32,
                          "base") == base
    assert weights_digest(TEXTS, LABELS, FineTuneParams(2, batch_size=8, mix=1.0), 32,
                          "base") == base


def test_the_section_takes_fine_tune_as_a_mapping() -> None:
    classes = {"code": {"examples": ["write a function"]}, "chat": {"examples": ["hello"]}}
    plain = parse_semantic_section({"default_class": "chat", "classes": classes}, "semantic")
    assert plain.fine_tune is None
    defaults = parse_semantic_section(
        {"default_class": "chat", "classes": classes, "fine_tune": {}}, "semantic")
    assert defaults.fine_tune == FineTuneParams()
    assert defaults.fine_tune.pairs_per_example == 20 and defaults.fine_tune.batch_size == 16
    assert defaults.fine_tune.mix == 0.5        # WiSE-FT's even mix
    for raw, message in [
        ({"pairs_per_example": 0}, "semantic.fine_tune.pairs_per_example: must be within"),
        ({"learning_rate": 0.5}, "semantic.fine_tune.learning_rate: must be within"),
        ({"rounds": 3}, "semantic.fine_tune.rounds: unknown key"),
        ({"threads": -1}, "semantic.fine_tune.threads: must be within 0..256"),
        ({"mix": 0}, "semantic.fine_tune.mix: must be within (0, 1]"),
        ({"mix": 1.5}, "semantic.fine_tune.mix: must be within (0, 1]"),
        (True, "semantic.fine_tune: must be a mapping or null"),
    ]:
        with pytest.raises(RoutingConfigError) as info:
            parse_semantic_section({"default_class": "chat", "classes": classes,
                                    "fine_tune": raw}, "semantic")
        assert str(info.value).startswith(message), str(info.value)


@pytest.mark.semantic
def test_the_mixed_state_is_the_weighted_mean_of_every_float_tensor() -> None:
    import torch

    from policies.semantic.fine_tune import mixed_state

    base = {"w": torch.tensor([0.0, 2.0]), "ids": torch.tensor([0, 1])}
    tuned = {"w": torch.tensor([4.0, 6.0]), "ids": torch.tensor([0, 1])}
    mixed = mixed_state(base, tuned, 0.25)
    assert torch.equal(mixed["w"], torch.tensor([1.0, 3.0]))
    assert mixed["ids"] is tuned["ids"]
    assert torch.equal(mixed_state(base, tuned, 1.0)["w"], tuned["w"])


@pytest.mark.semantic
def test_a_mix_is_made_from_the_trained_weights_without_training_again(
        tmp_path: Path) -> None:
    import torch
    from safetensors.torch import load_file
    from transformers import AutoModel

    from policies.semantic.embedder import model_directory
    from policies.semantic.fine_tune import fine_tuned_weights

    steps: list[int] = []
    tuned = fine_tuned_weights(TEXTS, LABELS, FineTuneParams(2, batch_size=8, mix=1.0), 32,
                               cache_dir=tmp_path, progress=lambda done, _: steps.append(done))
    half = fine_tuned_weights(TEXTS, LABELS, TINY, 32, cache_dir=tmp_path,
                              progress=lambda done, _: steps.append(done))
    quarter = fine_tuned_weights(TEXTS, LABELS, FineTuneParams(2, batch_size=8, mix=0.25), 32,
                                 cache_dir=tmp_path)
    assert steps == [1, 2, 3]                       # trained once, for the first call
    assert half.name == tuned.name.replace(".safetensors", "-mix0.5.safetensors")
    assert quarter.name.endswith("-mix0.25.safetensors")
    base = AutoModel.from_pretrained(str(model_directory()), local_files_only=True).state_dict()
    t, h = load_file(str(tuned)), load_file(str(half))
    key = "encoder.layer.0.attention.self.query.weight"
    assert not torch.equal(t[key], base[key])       # training moved it
    assert torch.allclose(h[key], (base[key] + t[key]) / 2)
    assert h.keys() == t.keys()


def test_logged_progress_logs_each_tenth_once(caplog: pytest.LogCaptureFixture) -> None:
    progress = LoggedProgress()
    with caplog.at_level("INFO", logger="policies.semantic.fine_tune"):
        for done in range(1, 41):
            progress(done, 40)
    percents = [r.getMessage().split(": ")[1].split("%")[0] for r in caplog.records]
    assert percents == [str(p) for p in range(10, 101, 10)]


@pytest.mark.semantic
def test_trains_once_then_reuses_and_the_tuned_encoder_groups_the_classes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from policies.semantic.embedder import MiniLmEmbedder
    from policies.semantic.fine_tune import fine_tuned_weights
    from policies.semantic.onnx_encoder import CACHE_ENV

    monkeypatch.setenv(CACHE_ENV, str(tmp_path))
    steps: list[tuple[int, int]] = []
    results: list[Path] = []

    def train() -> None:    # two callers at once: the lock lets one train, the other waits
        results.append(fine_tuned_weights(TEXTS, LABELS, TINY, 32,
                                          progress=lambda done, total: steps.append(
                                              (done, total))))

    threads = [threading.Thread(target=train) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=240)
    # 2 rounds x 6 examples x 2 partners = 24 pairs, batches of 8: 3 steps, trained once
    assert steps == [(1, 3), (2, 3), (3, 3)]
    assert len(results) == 2 and results[0] == results[1]
    weights = results[0]
    assert weights.parent == tmp_path / "semantic" and weights.suffix == ".safetensors"
    inode = weights.stat().st_ino        # (a use touches the file: the cache keeps sets used last)
    assert fine_tuned_weights(TEXTS, LABELS, TINY, 32, progress=lambda *_: steps.append(
        (0, 0))) == weights
    assert len(steps) == 3 and weights.stat().st_ino == inode   # from the cache, not rewritten

    base = MiniLmEmbedder(max_tokens=32, quantize=True, runtime="onnx").embed(TEXTS)
    tuned_embedder = MiniLmEmbedder(max_tokens=32, quantize=True, runtime="onnx",
                                    weights=weights)
    tuned = tuned_embedder.embed(TEXTS)
    names = sorted(p.name for p in (tmp_path / "semantic").glob("*.onnx"))
    assert f"{weights.stem}-int8.onnx" in names and f"{weights.stem}-fp32.onnx" in names
    assert len(names) == 4          # the base model's exports are separate files

    def same_minus_other(vectors: np.ndarray) -> float:
        similarity = vectors @ vectors.T
        labels = np.array(LABELS)
        same = labels[:, None] == labels[None, :]
        off_diagonal = ~np.eye(len(LABELS), dtype=bool)
        return float(similarity[same & off_diagonal].mean() - similarity[~same].mean())

    # the training pulls same-class examples together and pushes the others apart
    assert same_minus_other(tuned) > same_minus_other(base) + 0.05


@pytest.mark.semantic
def test_the_same_examples_train_the_same_weights_on_the_threads_asked(
        tmp_path: Path) -> None:
    import torch
    from safetensors.numpy import load_file

    from policies.semantic.fine_tune import fine_tuned_weights

    before = torch.get_num_threads()
    torch.set_num_threads(1)        # as an int8 embedder leaves it
    threads_seen: list[int] = []
    try:
        first = fine_tuned_weights(
            TEXTS, LABELS, TINY, 32, cache_dir=tmp_path / "a",
            progress=lambda *_: threads_seen.append(torch.get_num_threads()))
        assert threads_seen == [TINY.torch_threads()] * 3    # every usable core
        assert torch.get_num_threads() == 1                   # and the setting restored
    finally:
        torch.set_num_threads(before)
    second = fine_tuned_weights(TEXTS, LABELS, TINY, 32, cache_dir=tmp_path / "b")
    assert first.name == second.name
    a, b = load_file(str(first)), load_file(str(second))
    assert a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)


@pytest.mark.semantic
def test_an_unwritable_cache_is_a_config_error_that_says_what_to_do(tmp_path: Path) -> None:
    from policies.semantic.fine_tune import fine_tuned_weights

    blocker = tmp_path / "a-file"
    blocker.write_text("")
    with pytest.raises(RoutingConfigError) as info:
        fine_tuned_weights(TEXTS, LABELS, TINY, 32, cache_dir=blocker / "semantic")
    assert str(info.value).startswith(f"semantic.fine_tune: cannot write the cache directory "
                                      f"{blocker / 'semantic'}")
    assert "KVROUTE_CACHE_DIR" in str(info.value)


def test_the_cache_keeps_the_example_sets_used_last(tmp_path: Path) -> None:
    """Each edit of the examples left ~290 MB in the cache, never deleted."""
    import fcntl
    import os

    from policies.semantic.fine_tune import prune_tuned_sets

    suffixes = (".safetensors", "-mix0.5.safetensors", "-mix0.5-fp32.onnx",
                "-mix0.5-int8.onnx", ".safetensors.lock")
    for age, digest in enumerate(("aa01", "bb02", "cc03", "dd04", "ee05")):
        for suffix in suffixes:
            file = tmp_path / f"minilm-tuned-{digest}{suffix}"
            file.write_text("x")
            os.utime(file, (1_000_000 - age * 1000, 1_000_000 - age * 1000))
    (tmp_path / "minilm-0123-fp32.onnx").write_text("the base model's export")
    (tmp_path / "minilm-tuned-aa01q8r2x9z1.tmp").write_text("a write under way")  # no set
    with (tmp_path / "minilm-tuned-dd04.safetensors.lock").open("a") as training:
        fcntl.flock(training, fcntl.LOCK_EX)          # another process trains dd04 now
        deleted = prune_tuned_sets(tmp_path, keep=2)
    assert sorted(deleted) == ["cc03", "ee05"]
    left = sorted(p.name for p in tmp_path.iterdir())
    assert left == sorted(["minilm-0123-fp32.onnx", "minilm-tuned-aa01q8r2x9z1.tmp",
                           *(f"minilm-tuned-{d}{s}" for d in ("aa01", "bb02", "dd04")
                             for s in suffixes),
                           # a deleted set's lock stays: a process may be about to take it
                           "minilm-tuned-cc03.safetensors.lock",
                           "minilm-tuned-ee05.safetensors.lock"])
    assert prune_tuned_sets(tmp_path, keep=2) == ["dd04"]     # a lock alone counts for none
