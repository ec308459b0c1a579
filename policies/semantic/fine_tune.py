"""Contrastive fine-tuning of the encoder on a section's examples, cached on disk.

With a few examples per class, a linear classifier on frozen all-MiniLM-L6-v2 embeddings
separates the classes only as far as the pretrained space already does. SetFit (Tunstall et
al., 2022, "Efficient Few-Shot Learning Without Prompts") first fine-tunes the sentence
encoder itself on pairs of the examples: two examples of one class should embed with cosine
similarity 1, two of different classes with 0 (mean squared error on the cosine). The
classifier is then trained, as without fine-tuning, on the tuned encoder's embeddings.

``fine_tuned_weights(texts, labels, params, max_tokens)`` returns a ``safetensors`` file of
the tuned encoder's weights. Training runs once per distinct input: the file is named by a
digest of the base model files, the library versions, ``TRAINING_FORMAT``, the parameters,
``max_tokens`` and every (text, label) pair, written atomically under the semantic cache
directory (``policies.semantic.onnx_encoder.cache_directory``), and a lock file makes a
second process wait for the first instead of training the same thing again. Training is
seeded (pairs, dropout and batch order), so the same input gives the same weights. Each
example set's files take about 290 MB (tuned and mixed weights, their ONNX exports): the
cache keeps the ``KEEP_TUNED_SETS`` sets used last and deletes older ones after training.

Pairs are drawn like SetFit's: for each of ``pairs_per_example`` rounds, every
example gets one partner of its own class (another example when the class has one) and one
of another class, so a round has twice as many pairs as there are examples. The defaults
are SetFit's (20 rounds, batch 16, learning rate 2e-5, one epoch).

The encoder the router embeds with is then ``mix`` of the way from the base model to the
tuned one, weight by weight: ``(1 - mix) * base + mix * tuned`` (Wortsman et al., 2022,
"Robust fine-tuning of zero-shot models", WiSE-FT, whose default is an even mix, 0.5). Tuned
on 80 examples, the encoder forgets some of what the base model knew about prompts unlike
them; the average keeps it and still separates the examples. ``mix: 1.0`` is the tuned
encoder itself. The mixed weights are a file of their own next to the tuned ones (named by
the same digest and the mix), so changing ``mix`` trains nothing again.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
import random
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from policies.errors import ParamError, RoutingConfigError

log = logging.getLogger(__name__)

TRAINING_FORMAT = "setfit-cosine-mse-v1"
KEEP_TUNED_SETS = 4          # example sets kept in the cache (the ones used last)
Progress = Callable[[int, int], None]   # (batches done, batches in all)


@dataclass(frozen=True, slots=True)
class FineTuneParams:
    """The ``semantic.fine_tune`` mapping of routing.yaml."""

    # rounds: each gives every example one partner of its class and one of another
    pairs_per_example: int = 20
    epochs: int = 1
    learning_rate: float = 2e-5
    batch_size: int = 16            # pairs per optimiser step
    seed: int = 0
    threads: int = 0                # torch threads while training; 0: every usable core
    mix: float = 0.5                # share of the tuned weights in the encoder used (WiSE-FT)

    def __post_init__(self) -> None:
        if not 1 <= self.pairs_per_example <= 200:
            raise ParamError("pairs_per_example", "must be within 1..200")
        if not 1 <= self.epochs <= 20:
            raise ParamError("epochs", "must be within 1..20")
        if not 0.0 < self.learning_rate <= 1e-2:
            raise ParamError("learning_rate", "must be within (0, 0.01]")
        if not 1 <= self.batch_size <= 256:
            raise ParamError("batch_size", "must be within 1..256")
        if not 0 <= self.threads <= 256:
            raise ParamError("threads", "must be within 0..256 (0: every usable core)")
        if not 0.0 < self.mix <= 1.0:
            raise ParamError("mix", "must be within (0, 1] (1: the tuned encoder itself)")

    def torch_threads(self) -> int:
        return self.threads or len(os.sched_getaffinity(0))


def training_pairs(labels: Sequence[str], rounds: int,
                   rng: random.Random) -> list[tuple[int, int, float]]:
    """(i, j, target cosine) pairs over example indices: per round, per example, one partner
    of its own class (target 1.0) and, when another class exists, one of another (0.0)."""
    by_label: dict[str, list[int]] = {}
    for index, label in enumerate(labels):
        by_label.setdefault(label, []).append(index)
    others = {label: [i for i in range(len(labels)) if labels[i] != label]
              for label in by_label}
    pairs: list[tuple[int, int, float]] = []
    for _ in range(rounds):
        for index, label in enumerate(labels):
            same = [i for i in by_label[label] if i != index] or [index]
            pairs.append((index, rng.choice(same), 1.0))
            if others[label]:
                pairs.append((index, rng.choice(others[label]), 0.0))
    return pairs


def weights_digest(texts: Sequence[str], labels: Sequence[str], params: FineTuneParams,
                   max_tokens: int, base_digest: str) -> str:
    """Names the tuned weights: everything that changes what training produces."""
    digest = hashlib.blake2b(digest_size=12)
    # threads change only the speed, mix only what is made of the result
    learning = {k: v for k, v in asdict(params).items() if k not in ("threads", "mix")}
    header = {"format": TRAINING_FORMAT, "base": base_digest, "max_tokens": max_tokens,
              "params": learning}
    digest.update(json.dumps(header, sort_keys=True).encode())
    for text, label in zip(texts, labels, strict=True):
        digest.update(json.dumps([text, label]).encode())
        digest.update(b"\n")
    return digest.hexdigest()


def fine_tuned_weights(texts: Sequence[str], labels: Sequence[str], params: FineTuneParams,
                       max_tokens: int, *, cache_dir: Path | None = None,
                       progress: Progress | None = None) -> Path:
    """The encoder's weights for these examples, ``params.mix`` of the way from the base
    model to the one tuned on them: from the cache, else trained (and mixed) now."""
    from policies.semantic.embedder import model_directory
    from policies.semantic.onnx_encoder import CACHE_ENV, cache_directory, model_digest

    directory = cache_dir or cache_directory()
    name = weights_digest(texts, labels, params, max_tokens, model_digest(model_directory()))
    path = directory / f"minilm-tuned-{name}.safetensors"
    mixed = (path if params.mix == 1.0
             else directory / f"minilm-tuned-{name}-mix{params.mix:g}.safetensors")
    if mixed.is_file():
        _mark_used(directory, name)
        return mixed
    try:
        directory.mkdir(parents=True, exist_ok=True)
        lock = (directory / f"{path.name}.lock").open("w")
    except OSError as exc:
        raise RoutingConfigError(
            f"semantic.fine_tune: cannot write the cache directory {directory} "
            f"({exc.strerror}); point {CACHE_ENV} at a writable one") from exc
    with lock:
        fcntl.flock(lock, fcntl.LOCK_EX)      # another process may be training the same
        if not path.is_file():
            log.info("fine-tuning the encoder on %d examples (%d pair rounds); the result is "
                     "kept in %s", len(texts), params.pairs_per_example, path)
            _train_and_save(texts, labels, params, max_tokens, path,
                            progress if progress is not None else LoggedProgress())
            log.info("fine-tuned encoder saved to %s", path)
        if not mixed.is_file():
            _mix_and_save(path, params.mix, mixed)
    _mark_used(directory, name)
    prune_tuned_sets(directory, KEEP_TUNED_SETS)
    return mixed


def _mark_used(directory: Path, name: str) -> None:
    """Touch the files of one example set (its weights, mixes and ONNX exports): the sets
    used last are those ``prune_tuned_sets`` keeps."""
    for file in directory.glob(f"minilm-tuned-{name}*"):
        with contextlib.suppress(OSError):
            os.utime(file)


def prune_tuned_sets(directory: Path, keep: int) -> list[str]:
    """Delete the files of all but the ``keep`` example sets used last (about 290 MB each:
    every edit of the examples trains a new set) and return the digests deleted. A set
    whose lock another process holds (training it now) is left alone."""
    sets: dict[str, float] = {}
    for file in directory.glob("minilm-tuned-*"):
        if file.suffix in (".lock", ".tmp"):   # a lock alone is no set (see below), nor a
            continue                          # temporary file of a write under way
        digest = file.name.removeprefix("minilm-tuned-").split("-")[0].split(".")[0]
        with contextlib.suppress(OSError):
            sets[digest] = max(sets.get(digest, 0.0), file.stat().st_mtime)
    stale = sorted(sets, key=sets.__getitem__, reverse=True)[keep:]
    deleted: list[str] = []
    for digest in stale:
        lock_path = directory / f"minilm-tuned-{digest}.safetensors.lock"
        try:
            with lock_path.open("a") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)   # not while one trains it
                for file in directory.glob(f"minilm-tuned-{digest}*"):
                    if file != lock_path:      # (kept: a process may be about to lock it)
                        file.unlink(missing_ok=True)
        except OSError:             # held (BlockingIOError), or not ours to delete
            continue
        deleted.append(digest)
    if deleted:
        log.info("semantic cache %s: deleted %d example set(s) not used lately (the %d used "
                 "last are kept)", directory, len(deleted), keep)
    return deleted


class LoggedProgress:
    """A ``Progress`` that logs every tenth of the way (for a router building its policy)."""

    def __init__(self) -> None:
        self._logged = 0

    def __call__(self, done: int, total: int) -> None:
        tenth = 10 * done // total if total else 10
        if tenth > self._logged:
            self._logged = tenth
            log.info("fine-tuning the encoder: %d%% (%d of %d steps)", 10 * tenth, done, total)


def _train_and_save(texts: Sequence[str], labels: Sequence[str], params: FineTuneParams,
                    max_tokens: int, path: Path, progress: Progress | None) -> None:
    from safetensors.torch import save_file

    from policies.semantic.onnx_encoder import write_atomically

    encoder = train_encoder(texts, labels, params, max_tokens, progress)
    state = {key: value.detach().contiguous() for key, value in encoder.state_dict().items()}
    write_atomically(path, lambda tmp: save_file(state, str(tmp)))


def mixed_state(base: dict[str, Any], tuned: dict[str, Any], mix: float) -> dict[str, Any]:
    """``(1 - mix) * base + mix * tuned`` for every floating-point tensor of ``tuned`` (the
    others, e.g. position ids, as tuned)."""
    return {key: ((1.0 - mix) * base[key].float() + mix * value.float()).contiguous()
            if value.is_floating_point() else value for key, value in tuned.items()}


def _mix_and_save(tuned_path: Path, mix: float, path: Path) -> None:
    from safetensors.torch import load_file, save_file
    from transformers import AutoModel

    from policies.semantic.embedder import model_directory, quiet_weight_loading
    from policies.semantic.onnx_encoder import write_atomically

    with quiet_weight_loading():
        base = AutoModel.from_pretrained(str(model_directory()),
                                         local_files_only=True).state_dict()
    state = mixed_state(base, load_file(str(tuned_path)), mix)
    write_atomically(path, lambda tmp: save_file(state, str(tmp)))
    log.info("encoder %g of the way to the tuned one saved to %s", mix, path)


def train_encoder(texts: Sequence[str], labels: Sequence[str], params: FineTuneParams,
                  max_tokens: int, progress: Progress | None = None) -> Any:
    """The base encoder (a ``BertModel``) after contrastive training on the examples, on
    ``params.torch_threads()`` torch threads (the process's setting is restored after)."""
    import torch

    previous_threads = torch.get_num_threads()    # process-wide: an embedder may have set it
    torch.set_num_threads(params.torch_threads())
    try:
        return _train(torch, texts, labels, params, max_tokens, progress)
    finally:
        torch.set_num_threads(previous_threads)


def _train(torch: Any, texts: Sequence[str], labels: Sequence[str], params: FineTuneParams,
           max_tokens: int, progress: Progress | None) -> Any:
    from sentence_transformers import SentenceTransformer

    from policies.semantic.embedder import model_directory, quiet_weight_loading

    rng = random.Random(params.seed)
    torch.manual_seed(params.seed)
    with quiet_weight_loading():
        st_model = SentenceTransformer(str(model_directory()), device="cpu",
                                       local_files_only=True,
                                       model_kwargs={"dtype": torch.float32})
    tokenizer: Any = st_model.tokenizer
    encoder: Any = st_model[0].auto_model
    encoder.train()                                   # dropout on, as in SetFit
    optimiser = torch.optim.AdamW(encoder.parameters(), lr=params.learning_rate)
    pairs = training_pairs(labels, params.pairs_per_example, rng)
    size = params.batch_size
    total = params.epochs * ((len(pairs) + size - 1) // size)
    done = 0

    def embed(indices: list[int]) -> Any:
        batch = tokenizer([texts[i] for i in indices], padding=True, truncation=True,
                          max_length=max_tokens, return_tensors="pt")
        hidden = encoder(input_ids=batch["input_ids"],
                         attention_mask=batch["attention_mask"]).last_hidden_state
        mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
        return (hidden * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1e-9)

    for _ in range(params.epochs):
        rng.shuffle(pairs)
        for start in range(0, len(pairs), size):
            chunk = pairs[start:start + size]
            left = embed([i for i, _, _ in chunk])
            right = embed([j for _, j, _ in chunk])
            target = torch.tensor([t for _, _, t in chunk], dtype=torch.float32)
            cosine = torch.nn.functional.cosine_similarity(left, right)
            loss: Any = torch.nn.functional.mse_loss(cosine, target)
            optimiser.zero_grad()
            loss.backward()
            optimiser.step()
            done += 1
            if progress is not None:
                progress(done, total)
    encoder.eval()
    return encoder
