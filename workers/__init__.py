"""The fleet: the workers the router sends to and what it knows of them.

``fleet`` reads the fleet file, ``scraper`` polls each worker's metrics, ``registry`` and
``views`` hold the per-worker state a decision reads, ``inflight`` the router's own
accounting, ``upstream`` the HTTP client to the workers; ``engine/`` models one vLLM engine,
``emulator/`` serves that model behind vLLM's HTTP API, ``kv_events/`` reads vLLM's KV-cache
events and ``launch/`` starts real vLLM servers.
"""
