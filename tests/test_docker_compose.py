"""docker-compose.yml: it parses, every kvroute command exists, every mounted file exists."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from router.cli import build_parser
from workers.fleet import load_fleet

ROOT = Path(__file__).resolve().parent.parent
COMPOSE: dict[str, Any] = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
SERVICES: dict[str, Any] = COMPOSE["services"]


def test_expected_services() -> None:
    assert set(SERVICES) == {"router", "h100-0", "a100-0", "l40s-0", "redis", "prometheus",
                             "grafana"}


@pytest.mark.parametrize("name", sorted(n for n, s in SERVICES.items()
                                        if s.get("command", [""])[0] == "kvroute"))
def test_kvroute_commands_parse(name: str) -> None:
    command = SERVICES[name]["command"]
    args = build_parser().parse_args(command[1:])     # SystemExit on an unknown flag
    assert callable(args.func)


def test_emulated_worker_gpus_cover_the_three_profiles() -> None:
    gpus = {SERVICES[n]["command"][SERVICES[n]["command"].index("--gpu") + 1]
            for n in ("h100-0", "a100-0", "l40s-0")}
    assert gpus == {"h100", "a100", "l40s"}


@pytest.mark.parametrize("name", sorted(n for n, s in SERVICES.items() if s.get("volumes")))
def test_mounted_paths_exist(name: str) -> None:
    for volume in SERVICES[name]["volumes"]:
        host = volume.split(":")[0]
        assert (ROOT / host).exists(), f"{name}: {host} does not exist"


def test_the_routing_file_is_seen_through_its_folder() -> None:
    """A file bind mount keeps the inode it was given: a file saved by rename (vim, sed -i)
    would never reach the router's hot reload. Its folder is mounted instead."""
    command = SERVICES["router"]["command"]
    routing = Path(command[command.index("--routing") + 1])
    mounts = [volume.split(":") for volume in SERVICES["router"]["volumes"]]
    assert not [m for m in mounts if Path(m[0]).name == routing.name]
    assert any(Path("/app") / routing.parent == Path(target) and (ROOT / host).is_dir()
               for host, target, *_ in mounts)


def test_router_fleet_points_at_worker_services() -> None:
    command = SERVICES["router"]["command"]
    fleet = load_fleet(ROOT / command[command.index("--fleet") + 1])
    for spec in fleet.workers:
        host_port = spec.info.url.removeprefix("http://")
        host, port = host_port.split(":")
        assert host in SERVICES
        assert SERVICES[host]["command"][SERVICES[host]["command"].index("--port") + 1] == port


def test_prometheus_scrapes_router_and_workers() -> None:
    config = yaml.safe_load((ROOT / "config/prometheus/prometheus.yml").read_text())
    targets = {t for job in config["scrape_configs"] for sc in job["static_configs"]
               for t in sc["targets"]}
    assert targets == {"router:8000", "h100-0:8101", "a100-0:8102", "l40s-0:8103"}


def test_grafana_provisioning_files_parse() -> None:
    base = ROOT / "config/grafana/provisioning"
    datasource = yaml.safe_load((base / "datasources/prometheus.yml").read_text())
    assert datasource["datasources"][0]["url"] == "http://prometheus:9090"
    provider = yaml.safe_load((base / "dashboards/kvroute.yml").read_text())
    assert provider["providers"][0]["options"]["path"] == "/var/lib/grafana/dashboards"


def test_the_router_is_given_time_to_drain_before_it_is_killed() -> None:
    command = SERVICES["router"]["command"]
    drain_s = build_parser().parse_args(command[1:]).drain_timeout
    grace = SERVICES["router"]["stop_grace_period"]
    assert grace.endswith("s") and float(grace[:-1]) > drain_s


def test_worker_targets_carry_the_routers_worker_and_gpu_labels() -> None:
    """The targets said gpu: h100 where the router's series say H100-80GB: a worker's alerts
    (KvCacheUsageHigh, PreemptionStorm) did not group with the router's of its class."""
    command = SERVICES["router"]["command"]
    fleet = load_fleet(ROOT / command[command.index("--fleet") + 1])
    gpus = {spec.info.id: spec.info.gpu.name for spec in fleet.workers}
    config = yaml.safe_load((ROOT / "config/prometheus/prometheus.yml").read_text())
    [workers] = [job for job in config["scrape_configs"] if job["job_name"] == "vllm-workers"]
    labelled = {sc["labels"]["worker"]: sc["labels"]["gpu"] for sc in workers["static_configs"]}
    assert labelled == gpus


def test_the_routers_healthcheck_asks_its_liveness_on_its_port() -> None:
    check = " ".join(SERVICES["router"]["healthcheck"]["test"])
    command = SERVICES["router"]["command"]
    assert f"http://127.0.0.1:{command[command.index('--port') + 1]}/liveness" in check


def test_the_images_own_command_parses_and_runs_unprivileged() -> None:
    """The image ran as root, and ``ENTRYPOINT []`` left it no command of its own."""
    lines = (ROOT / "Dockerfile").read_text().splitlines()
    command = json.loads(next(line for line in lines if line.startswith("CMD "))[4:])
    assert command[0] == "kvroute" and callable(build_parser().parse_args(command[1:]).func)
    assert next(line for line in lines if line.startswith("USER ")).split()[1] not in (
        "root", "0")
    assert "EXPOSE 8000" in lines and command[command.index("--port") + 1] == "8000"
