"""CPU of the header work added to each request, alone: the client's fields a worker gets
(``router.forwarded_headers``) and the worker's fields an answer keeps (``relayed_headers``),
with the headers of the overhead race's load generator and mock worker."""

from __future__ import annotations

import timeit

from multidict import CIMultiDict, CIMultiDictProxy

from router.forwarded_headers import forwarded_headers
from router.proxy import relayed_headers

CLIENT = CIMultiDictProxy(CIMultiDict([
    ("Host", "127.0.0.1:8000"), ("Accept", "*/*"), ("Accept-Encoding", "gzip, deflate"),
    ("User-Agent", "Python/3.11 aiohttp/3.14.5"), ("Content-Length", "1069"),
    ("Content-Type", "application/json")]))
WORKER = {"content-type": "application/json", "content-length": "512"}
OWN = {"x-kvroute-worker": "w", "x-kvroute-profile": "default",
       "x-kvroute-reason": "w: round robin over 2 healthy worker(s)", "x-request-id": "abc"}


def main() -> None:
    n = 200_000
    for name, call in (("forwarded_headers", lambda: forwarded_headers(CLIENT, "x-request-id")),
                       ("relayed_headers", lambda: relayed_headers(WORKER, OWN))):
        best = min(timeit.repeat(call, number=n, repeat=5)) / n * 1e6
        print(f"{name}: {best:.2f} µs per call (best of 5 × {n})")


if __name__ == "__main__":
    main()
