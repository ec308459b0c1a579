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
    assert s.redis_key_prefix == "kvroute:"
    assert Settings(**PATHS, redis_key_prefix="team-a:").redis_key_prefix == "team-a:"
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
    ("redis_key_prefix", "",
     r"^redis_key_prefix: must not be empty \(the default is 'kvroute:'\)$"),
    ("redis_key_prefix", "team a:",
     r"^redis_key_prefix: must be visible ASCII characters without spaces, got 'team a:'$"),
    ("redis_key_prefix", "a:\n", r"^redis_key_prefix: must be visible ASCII characters"),
    ("redis_key_prefix", "k" * 65, r"^redis_key_prefix: must be at most 64 characters, got 65$"),
    ("redis_key_prefix", "team*:", r"^redis_key_prefix: must not hold any of \* \? \[ \] \\ "
                                   r"\(the glob characters of Redis's key patterns"),
    ("redis_key_prefix", "t[1]:", r"^redis_key_prefix: must not hold any of"),
    ("redis_key_prefix", 7, r"^redis_key_prefix: must be a string, got int$"),
    ("redis_url", "redis://127.0.0.1:63a9/0",
     "redis_url: Port could not be cast to integer value as '63a9'"),
    # a password with a '#' is cut there, and redis-py's message quoted the piece as a port
    ("redis_url", "redis://:Zq8#hunter2@127.0.0.1:6379/0",
     r"^redis_url: cannot be parsed as redis://\[\[USER\]:PASSWORD@\]HOST\[:PORT\]\[/DB\] "
     r"\(a password holding '/', '#', '\?' or '@' must be percent-encoded: %2F, %23, %3F, "
     r"%40\)$"),
    # (no piece of the password shown; a '/' in it is what to fix, not the database)
    ("redis_url", "redis://:12/ss@127.0.0.1:6379/0", r"^redis_url: cannot be parsed as .*"
     r"must be percent-encoded: %2F, %23, %3F, %40\)$"),
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


@pytest.mark.parametrize("url", [
    # the '#' ended the host part: redis-py connected to localhost:42200, without a password
    "redis://:42200#Secret@10.9.9.9:6379",
    "redis://:42200#Secret@10.9.9.9:6379/0",
    "redis://:6379?Secret@10.9.9.9:6379/0",          # a '?' likewise
    "rediss://admin:6379#Secret@10.9.9.9:6379",
    "redis://:6379/Secret@10.9.9.9:6379/0",          # a '/': the rest read as the database
    "redis://:Secret@:6379/0",                       # no host after the '@'
    "unix://:Secret#x@/run/redis.sock",
])
def test_a_password_a_parser_cuts_short_is_refused(url: str) -> None:
    with pytest.raises(ValueError) as raised:
        Settings(**PATHS, redis_url=url)
    message = str(raised.value)
    assert message.startswith("redis_url: ") and "percent-encoded" in message, message
    assert "Secret" not in message


@pytest.mark.parametrize("url", ["redis://:p%23w%3F%2F%40@10.9.9.9:6379/0",
                                 "redis://user:pw@h/1",
                                 "redis://h:6379/0?password=a@b",   # an '@' in a value
                                 "unix:///tmp/r.sock?password=a@b&db=0"])
def test_redis_urls_with_an_at_where_a_parser_reads_it_are_taken(url: str) -> None:
    assert Settings(**PATHS, redis_url=url).redis_url == url


@pytest.mark.parametrize(("origin", "message"), [
    # no scheme: a browser sends "https://a.example", never this
    ("a.example", r"^allowed_origins: 'a\.example' is not an origin: give '\*' or "
                  r"scheme://host\[:port\] as a browser sends it in its Origin header, with no "
                  r"path \(https://chat\.example\.com, http://localhost:3000\)$"),
    ("foo", r"^allowed_origins: 'foo' is not an origin: give '\*' or scheme://host\[:port\]"),
    ("https://a.example/app", r"^allowed_origins: 'https://a\.example/app' is not an origin"),
    ("https://a.example/", r"^allowed_origins: 'https://a\.example/' never matches: a browser "
                           r"sends this origin as 'https://a\.example' \(in lower case, without "
                           r"a trailing slash, its scheme's default port or a port's leading "
                           r"zeros\)$"),
    ("http://a.example:08080", r"never matches: a browser sends this origin as "
                               r"'http://a\.example:8080'"),
    ("HTTPS://A.example", r"^allowed_origins: 'HTTPS://A\.example' never matches: a browser "
                          r"sends this origin as 'https://a\.example'"),
    ("https://a.example:443", r"never matches: a browser sends this origin as "
                              r"'https://a\.example'"),
    ("http://a.example:70000", r"^allowed_origins: 'http://a\.example:70000': the port must be "
                               r"within 1\.\.65535$"),
])
def test_an_allowed_origin_no_browser_sends_is_refused_naming_it(origin: str,
                                                                 message: str) -> None:
    """It was taken, and allowed nothing: a preflight from the page it meant got a 400."""
    with pytest.raises(ValueError, match=message):
        Settings(**PATHS, allowed_origins=("https://ok.example", origin))


@pytest.mark.parametrize("origins", [
    ("*",), (), ("https://chat.example.com", "http://localhost:3000"), ("http://[::1]:8080",),
    ("http://a.example:8443",), ("chrome-extension://abcdefghij",), ("null",)])
def test_origins_as_browsers_send_them_are_taken(origins: tuple[str, ...]) -> None:
    assert Settings(**PATHS, allowed_origins=origins).allowed_origins == origins
