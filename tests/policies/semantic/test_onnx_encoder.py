"""The ONNX Runtime encoder: exported once into its cache dir, reused, same vectors as torch."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from policies.semantic.embedder import MiniLmEmbedder
from policies.semantic.onnx_encoder import CACHE_ENV, cache_directory

pytestmark = pytest.mark.semantic

TEXTS = ["How do I reverse a linked list in C?", "hi",
         "Proof that the square root of two is irrational, step by step, please."]


def test_cache_directory_follows_the_environment(monkeypatch: pytest.MonkeyPatch,
                                                 tmp_path: Path) -> None:
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "k"))
    assert cache_directory() == tmp_path / "k" / "semantic"
    monkeypatch.delenv(CACHE_ENV)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "x"))
    assert cache_directory() == tmp_path / "x" / "kvroute" / "semantic"


def test_exports_once_and_matches_the_torch_encoder(monkeypatch: pytest.MonkeyPatch,
                                                    tmp_path: Path) -> None:
    monkeypatch.setenv(CACHE_ENV, str(tmp_path))
    onnx_fp32 = MiniLmEmbedder(max_tokens=64, quantize=False, runtime="onnx")
    files = sorted(p.name for p in (tmp_path / "semantic").iterdir())
    assert len(files) == 1 and files[0].endswith("-fp32.onnx")
    exported = tmp_path / "semantic" / files[0]
    stamp = exported.stat().st_mtime_ns
    together = onnx_fp32.embed(TEXTS)
    alone = np.concatenate([onnx_fp32.embed([text]) for text in TEXTS])
    torch_fp32 = MiniLmEmbedder(max_tokens=64, quantize=False).embed(TEXTS)
    assert together.shape == (3, 384)
    assert np.all((together * torch_fp32).sum(axis=1) > 0.9999)
    assert np.allclose(together, alone, atol=1e-5)     # fp32: padding does not matter

    int8 = MiniLmEmbedder(max_tokens=64, quantize=True, runtime="onnx")
    names = sorted(p.name for p in (tmp_path / "semantic").iterdir())
    assert [n.rsplit("-", 1)[1] for n in names] == ["fp32.onnx", "int8.onnx"]
    assert exported.stat().st_mtime_ns == stamp         # the fp32 export was reused
    quantized = int8.embed(TEXTS)
    assert np.all((quantized * torch_fp32).sum(axis=1) > 0.85)
    assert np.array_equal(quantized, int8.embed(TEXTS))  # deterministic text by text
    assert np.array_equal(quantized[1:2], int8.embed([TEXTS[1]]))


def test_a_cached_file_is_readable_by_other_users(tmp_path: Path) -> None:
    """The encoder cache's files kept a temporary file's mode (0600): built into an image
    as root, they were unreadable to a router running as another user ("No such file")."""
    import os

    from policies.semantic.onnx_encoder import write_atomically

    path = tmp_path / "cache" / "encoder.onnx"
    previous = os.umask(0o022)
    try:
        write_atomically(path, lambda tmp: tmp.write_bytes(b"weights"))
    finally:
        os.umask(previous)
    assert path.read_bytes() == b"weights"
    assert path.stat().st_mode & 0o777 == 0o644
    assert [p.name for p in path.parent.iterdir()] == ["encoder.onnx"]     # no leftovers
