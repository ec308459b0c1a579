"""A plugin module whose scorer raises on every request, for the tests of what the tools
that run a routing file (``kvroute validate``, ``kvroute sim``) say of a failing plugin."""

from __future__ import annotations

from pathlib import Path

# registers the scorer ``broken``, whose every score divides by zero
BROKEN_SCORER_MODULE = (
    "from dataclasses import dataclass\n\n\n"
    "@dataclass(frozen=True)\nclass P:\n    pass\n\n\n"
    "class Broken:\n    name = 'broken'\n\n"
    "    def score(self, request, workers, cycle):\n        return 1 / 0\n\n\n"
    "def register(registry):\n"
    "    registry.register('broken', 'scorer', P, lambda p, c: Broken())\n")


def write_broken_scorer(folder: Path) -> Path:
    """``folder/broken.py``, the module registering the scorer ``broken`` (for a routing
    file's ``plugin_modules: [broken.py]`` in ``folder``)."""
    path = folder / "broken.py"
    path.write_text(BROKEN_SCORER_MODULE)
    return path
