"""A router whose routing file has no semantic rule never imports torch."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[3]

CHECK = textwrap.dedent("""
    import sys
    from policies.engine import PolicyEngine
    from policies.loader import load_routing
    from policies.base import RoutingRequest
    from policies.producers.runner import run_producers_sync
    from router.cli import build_parser
    from workers.fleet import load_fleet
    import policies.semantic, policies.semantic.cli, bench.semantic

    build_parser()
    engine = PolicyEngine.build(load_routing("config/routing.yaml"),
                                load_fleet("config/fleet.yaml"))
    request = RoutingRequest(request_id="1", model="meta-llama/Llama-3.1-8B-Instruct",
                             messages=[{"role": "user", "content": "write a python function"}])
    run_producers_sync(engine.producers, request, [])
    assert request.semantic_class is None
    heavy = sorted(m for m in ("torch", "sentence_transformers", "transformers")
                   if m in sys.modules)
    print("heavy:", heavy)
    sys.exit(1 if heavy else 0)
""")


def test_no_semantic_rule_means_no_torch() -> None:
    result = subprocess.run([sys.executable, "-c", CHECK], cwd=REPO_ROOT, capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "heavy: []" in result.stdout
