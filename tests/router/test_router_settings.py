"""Router settings: defaults and rejected values."""

from __future__ import annotations

from pathlib import Path

import pytest

from router.settings import Settings

PATHS = {"fleet_path": Path("fleet.yaml"), "routing_path": Path("routing.yaml")}


def test_defaults() -> None:
    s = Settings(**PATHS)
    assert (s.host, s.port, s.scrape_interval_s, s.fail_threshold, s.max_retries) == (
        "127.0.0.1", 8000, 0.2, 3, 2)
    assert s.max_body_bytes == 32 * 1024 * 1024 and s.redis_url is None
    assert s.response_ttl_s == 7 * 24 * 3600
    assert s.gc_interval_s == 0.01


@pytest.mark.parametrize(("field", "value", "message"), [
    ("scrape_interval_s", 0.0, "scrape_interval_s: must be positive"),
    ("max_retries", -1, "max_retries: must be >= 0"),
    ("max_body_bytes", 0, "max_body_bytes: must be positive"),
    ("decisions_ring_size", 0, "decisions_ring_size: must be positive"),
    ("response_ttl_s", 0.5, "response_ttl_s: must be at least 1 second"),
    ("gc_interval_s", -0.01, "gc_interval_s: must be >= 0"),
    ("send_timeout_s", 0.0, "send_timeout_s: must be positive"),
    ("send_timeout_s", float("inf"), "send_timeout_s: must be a finite number of seconds"),
    ("redis_url", "redis//127.0.0.1:6379/0",
     "redis_url: Redis URL must specify one of the following schemes"),
    ("redis_url", "redis://127.0.0.1:63a9/0",
     "redis_url: Port could not be cast to integer value as '63a9'"),
    # a password with a '#' is cut there, and redis-py's message quoted the piece as a port
    ("redis_url", "redis://:Zq8#hunter2@127.0.0.1:6379/0",
     r"^redis_url: cannot be parsed \(a password holding '/', '#', '\?' or '@' must be "
     r"percent-encoded\)$"),
    ("redis_url", "redis://:12/ss@127.0.0.1:6379/0",     # (no piece of the password shown)
     r"^redis_url: the database after the host must be a number \(redis://host:port/N\)$"),
    ("redis_url", "redis://127.0.0.1:6379/one",
     r"redis_url: the database after the host must be a number \(redis://host:port/N\), "
     "got 'one'"),
])
def test_invalid_values(field: str, value: float, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Settings(**PATHS, **{field: value})  # type: ignore[arg-type]


@pytest.mark.parametrize("url", ["redis://h/0/", "redis://h/%31", "redis://h:6379",
                                 "rediss://h/2?ssl_cert_reqs=none"])
def test_redis_urls_redis_py_reads_are_taken(url: str) -> None:
    assert Settings(**PATHS, redis_url=url).redis_url == url
