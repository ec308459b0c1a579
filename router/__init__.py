"""The router (gateway): the HTTP app that parses, admits, routes and proxies each request.

``app`` builds the aiohttp application and ``handlers`` its routes; ``director`` runs one
request's path (parse, admit, produce, decide, proxy, complete) and ``proxy`` relays a
worker's answer; ``protocol`` and ``errors`` hold the OpenAI/Anthropic request and error
shapes; ``metrics`` the Prometheus series; ``state/`` the stores shared between replicas;
``commands`` the ``kvroute up`` / ``kvroute serve`` entry points. Reference:
``docs/architecture.md``.
"""
