"""``kvroute dashboard snapshot`` renders every dashboard from the live Prometheus to PNGs
that have every panel filled. Set ``KVROUTE_OBS_SNAPSHOT_DIR`` to keep the PNGs (docs/img)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.observability.obs_stack import REPO_ROOT, Stack

pytestmark = [pytest.mark.observability, pytest.mark.integration]


def test_snapshot_renders_every_dashboard(live_stack: Stack, tmp_path: Path) -> None:
    out = Path(os.environ.get("KVROUTE_OBS_SNAPSHOT_DIR") or tmp_path)
    span = live_stack.traffic_done_at - live_stack.started_at
    result = subprocess.run(
        [sys.executable, "-m", "router.cli", "dashboard", "snapshot",
         "--prometheus", live_stack.prometheus.base_url, "--out", str(out),
         "--end", f"{live_stack.traffic_done_at:.3f}", "--range", f"{span:.0f}s",
         "--step", "1s", "--rate-interval", "5s"],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "no data" not in result.stderr      # every panel drawn with data
    import matplotlib.image

    for name, panels in (("routing", 15), ("fleet", 14), ("cost", 10)):
        png = out / f"{name}.png"
        assert f"{png}: {panels} panels" in result.stdout
        assert png.stat().st_size > 50_000
        pixels = matplotlib.image.imread(str(png))
        assert pixels.shape[1] == 1280 and pixels.shape[0] > 600
        assert float(pixels[..., :3].std()) > 0.05       # not a blank canvas


def test_snapshot_reports_an_unreachable_prometheus(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "router.cli", "dashboard", "snapshot",
         "--prometheus", "http://127.0.0.1:9", "--out", str(tmp_path)],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=60)
    assert result.returncode == 1
    assert "kvroute dashboard snapshot: GET http://127.0.0.1:9/api/v1/label/" in result.stderr
    assert list(tmp_path.iterdir()) == []
