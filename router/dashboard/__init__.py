"""Grafana dashboards of kvroute: their definitions, and PNG snapshots rendered from Prometheus."""
