"""``kvroute up`` (emulated fleet + router, for laptops and demos) and ``kvroute serve``
(router only, in front of a real fleet)."""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import socket
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from router.body_values import MAX_BODY_VALUES
from router.label_values import DEFAULT_TENANT_LABELS
from router.log_output import LOG_FORMATS, LOG_LEVELS, configure_logging, log_level
from router.settings import (
    DEFAULT_REDIS_KEY_PREFIX,
    DEFAULT_RESPONSE_TTL_S,
    MAX_REDIS_KEY_PREFIX,
)
from workers.project_files import DEFAULT_FLEET, DEFAULT_ROUTING

if TYPE_CHECKING:      # (imported where used: a command loads only what it runs)
    from policies.config import RoutingConfig
    from router.app import FleetHook
    from router.fleet_reloader import PreparedFleet
    from workers.emulator.process import EmulatorFleet
    from workers.fleet import WorkerSpec

CLIENT_KEY_ENV = "KVROUTE_API_KEY"      # the key asked of clients when --api-key is not given
REDIS_URL_ENV = "KVROUTE_REDIS_URL"     # --redis-url when not given

CURL_EXAMPLE = """\
curl -s {scheme}://localhost:{port}/v1/chat/completions -H 'Content-Type: application/json' \\
  -d '{{"model": "{model}", "messages": [{{"role": "user", "content": "Hello!"}}], \
"max_tokens": 32}}' -i"""

OPENAI_EXAMPLE = """\
from openai import OpenAI

client = OpenAI(base_url="{scheme}://localhost:{port}/v1", api_key="unused")
reply = client.chat.completions.create(
    model="{model}", messages=[{{"role": "user", "content": "Hello!"}}], max_tokens=32)
print(reply.choices[0].message.content)"""


def register(subparsers: Any) -> None:
    up = subparsers.add_parser(
        "up", help="start the fleet's emulated workers and the router (Ctrl-C stops all)")
    _common_arguments(up)
    up.add_argument("--time-scale", type=float, default=None,
                    help="emulator speed: 1 real time, 0.1 ten times faster (default: the "
                         "fleet file's value)")
    up.add_argument("--emulator-processes", choices=("one", "each"), default="one",
                    help="one process hosting every emulated worker (default), or one "
                         "process each: on several cores, workers then step without waiting "
                         "for each other's event loop")
    up.set_defaults(func=_up)
    serve = subparsers.add_parser("serve", help="run the router in front of a real fleet")
    _common_arguments(serve)
    serve.add_argument("--redis-url", default=os.environ.get(REDIS_URL_ENV) or None,
                       help="share in-flight state between replicas through Redis "
                            "(redis://[:PASSWORD@]HOST:PORT/DB, rediss:// for TLS; default: "
                            f"${REDIS_URL_ENV}, which keeps a password off the command line)")
    serve.add_argument("--redis-key-prefix", default=None, metavar="P",
                       help="with --redis-url: what begins every key's name in Redis; "
                            "deployments sharing one Redis database each need their own "
                            "(else they share budgets, in-flight counts, routing history and "
                            "response owners; visible ASCII, no spaces, at most "
                            f"{MAX_REDIS_KEY_PREFIX} characters; default: "
                            f"{DEFAULT_REDIS_KEY_PREFIX})")
    # the host's name: each pod of a Deployment has its own (one default for all made
    # the replicas overwrite each other's counts in Redis)
    serve.add_argument("--replica-id", default=socket.gethostname() or "router-0",
                       help="this replica's name in the shared Redis state, suffixed -0, -1, "
                            "... with --processes > 1 (default: the host's name, "
                            "%(default)s; give each replica on one host its own)")
    serve.add_argument("--response-ttl", type=float, default=DEFAULT_RESPONSE_TTL_S, metavar="S",
                       help="with --redis-url: how long the owner of a Responses API response "
                            "is kept in Redis (about 180 bytes each; default a week, "
                            "%(default).0f s)")
    serve.add_argument("--processes", type=int, default=1,
                       help="router processes sharing the port (SO_REUSEPORT), one per core")
    serve.add_argument("--metrics-port", type=int, default=None, metavar="P",
                       help="each process also answers on a port of its own, P + its index "
                            "(P alone with one process): scrape /metrics there, once per "
                            "process; on the shared port /metrics is whichever process takes "
                            "the connection")
    serve.set_defaults(func=_serve)


def _common_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--fleet", type=Path, default=None,
                        help="fleet file listing the workers (GPU, models, url: or emulate:) "
                             f"(default: {DEFAULT_FLEET}, in this directory, else in the "
                             "kvroute checkout)")
    parser.add_argument("--routing", type=Path, default=None,
                        help="routing policy file, reloaded when it changes while running "
                             f"(default: {DEFAULT_ROUTING}, in this directory, else in the "
                             "kvroute checkout)")
    parser.add_argument("--host", default="127.0.0.1",
                        help="address the router listens on (default: %(default)s)")
    parser.add_argument("--port", type=int, default=8000,
                        help="port the router listens on (default: %(default)s)")
    parser.add_argument("--scrape-interval", type=float, default=0.2, metavar="SECONDS",
                        help="period of each worker's /metrics poll (default: %(default)s)")
    parser.add_argument("--upstream-timeout", type=float, default=300.0, metavar="SECONDS",
                        help="longest wait for a worker's response headers and between two "
                             "stream chunks before answering 504 (default: %(default)s)")
    parser.add_argument("--max-retries", type=int, default=2,
                        help="times a request is retried on another worker after a connect "
                             "error or a 5xx before the first byte (default: %(default)s)")
    parser.add_argument("--eject-after", type=int, default=5, metavar="N",
                        help="consecutive failed requests (connect error, 5xx before the "
                             "answer, timeout) that set a worker aside; 0: never "
                             "(default: %(default)s)")
    parser.add_argument("--eject-for", type=float, default=10.0, metavar="SECONDS",
                        help="how long an ejected worker is set aside at first; doubled each "
                             "time it fails again on coming back, up to 300 s "
                             "(default: %(default)s)")
    parser.add_argument("--stall-after", type=float, default=120.0, metavar="SECONDS",
                        help="a request still unanswered this long after it was sent (and 10x "
                             "past the estimate) sets its worker aside until it settles; 0: "
                             "never (default: %(default)s)")
    parser.add_argument("--tenant-labels", type=int, default=DEFAULT_TENANT_LABELS, metavar="N",
                        help="tenants with a series of their own in kvroute_cost_dollars_total, "
                             "the first seen first; later ones count as (other) "
                             "(default: %(default)s)")
    parser.add_argument("--api-key", action="append", default=None, metavar="KEY",
                        help="ask clients for this key (Authorization: Bearer KEY, or "
                             "x-api-key) on /v1, /v2, /score, /rerank, /pooling, /classify, "
                             "/tokenize, /detokenize and /debug; repeat for several. "
                             "Default: $KVROUTE_API_KEY if set, else no key is asked "
                             "(an option is visible to other local users: prefer the variable)")
    parser.add_argument("--api-keys-file", type=Path, default=None, metavar="FILE",
                        help="more keys asked of clients, named by tenant (YAML: tenant: key or "
                             "[keys]); a request with one is that tenant's, whatever x-tenant "
                             "it sends")
    parser.add_argument("--drain-timeout", type=float, default=60.0, metavar="SECONDS",
                        help="on SIGTERM/SIGINT/SIGHUP: stop listening, then give the requests in "
                             "flight this long to finish before cutting them "
                             "(default: %(default)s)")
    parser.add_argument("--drain-delay", type=float, default=0.0, metavar="SECONDS",
                        help="on SIGTERM/SIGINT/SIGHUP: first go on listening and serving this "
                             "long while /health answers 503 (stopping), for a load balancer "
                             "to take the router out, then drain (default: %(default)s)")
    parser.add_argument("--client-idle-timeout", type=float, default=75.0, metavar="SECONDS",
                        help="close a client connection idle this long between requests; "
                             "behind a load balancer, longer than its own idle timeout for "
                             "backend connections (default: %(default)s)")
    parser.add_argument("--max-body-bytes", type=int, default=32 * 1024 * 1024, metavar="N",
                        help="request bodies larger than this get 413 (default: %(default)s, "
                             "32 MiB)")
    parser.add_argument("--max-body-values", type=int, default=MAX_BODY_VALUES, metavar="N",
                        help="request bodies of 1 MiB or more holding more JSON values "
                             "(items of their arrays and objects) get 413 before they are "
                             "parsed: each is an object in the router's memory (default: "
                             "%(default)s)")
    parser.add_argument("--gc-interval", type=float, default=0.01, metavar="SECONDS",
                        help="run the garbage collector's due collections from the event loop "
                             "this often, between requests, not inside one; 0: where CPython "
                             "runs them (default: %(default)s)")
    parser.add_argument("--allowed-origins", default="*", metavar="ORIGINS",
                        help="origins whose web pages may call the router (CORS), "
                             "comma-separated, as vLLM's --allowed-origins, each "
                             "scheme://host[:port] as a browser sends it "
                             "(https://chat.example.com); '*': any; '': none "
                             "(default: %(default)s)")
    parser.add_argument("--ssl-certfile", type=Path, default=None, metavar="FILE",
                        help="serve HTTPS with this certificate (PEM; its chain too)")
    parser.add_argument("--ssl-keyfile", type=Path, default=None, metavar="FILE",
                        help="the certificate's private key, unless --ssl-certfile holds it")
    parser.add_argument("--log-level", default="INFO",
                        help=f"Python logging level: {', '.join(LOG_LEVELS)}, in any case "
                             "(default: %(default)s)")
    parser.add_argument("--log-format", choices=LOG_FORMATS, default="text",
                        help="the router's log lines as text, or as one JSON object a line "
                             "(time, level, logger, message, replica, exception) for a log "
                             "pipeline (default: %(default)s)")


def _client_keys(args: argparse.Namespace) -> tuple[str, ...]:
    """``--api-key`` values, else ``$KVROUTE_API_KEY`` (one key), else none. The variable
    set but empty (a secret that rendered to nothing) is refused (``ValueError``): taken as
    unset, it would start the router open to anyone."""
    if args.api_key is not None:
        return tuple(args.api_key)
    key = os.environ.get(CLIENT_KEY_ENV)
    if key is not None and not key.strip():
        raise ValueError(f"{CLIENT_KEY_ENV} is set but empty: give the key, or unset the "
                         "variable to ask clients for none")
    return (key,) if key else ()


def _settings(args: argparse.Namespace, **extra: Any) -> Any:
    """The process settings, or None after a one-line error (an option out of range)."""
    from router.settings import Settings
    try:
        return Settings(fleet_path=args.fleet, routing_path=args.routing, host=args.host,
                        port=args.port, scrape_interval_s=args.scrape_interval,
                        upstream_timeout_s=args.upstream_timeout,
                        max_retries=args.max_retries, tenant_labels=args.tenant_labels,
                        eject_after=args.eject_after, eject_for_s=args.eject_for,
                        stall_after_s=args.stall_after, api_keys=_client_keys(args),
                        api_keys_file=args.api_keys_file,
                        drain_timeout_s=args.drain_timeout, drain_delay_s=args.drain_delay,
                        client_idle_timeout_s=args.client_idle_timeout,
                        max_body_bytes=args.max_body_bytes,
                        max_body_values=args.max_body_values, gc_interval_s=args.gc_interval,
                        ssl_certfile=args.ssl_certfile,
                        ssl_keyfile=args.ssl_keyfile,
                        allowed_origins=tuple(origin.strip() for origin in
                                              args.allowed_origins.split(",") if origin.strip()),
                        **extra)
    except ValueError as exc:
        print(f"kvroute: {exc}", file=sys.stderr)
        return None


def _default_files(args: argparse.Namespace) -> bool:
    """Fill in ``--fleet`` and ``--routing`` where not given (``workers.project_files``);
    False after a one-line error when a default file is nowhere."""
    from workers.project_files import MissingDefaultFile, default_file
    defaults = []
    try:
        if args.fleet is None:
            args.fleet = default_file(DEFAULT_FLEET, "--fleet")
            defaults.append("fleet")
        if args.routing is None:
            args.routing = default_file(DEFAULT_ROUTING, "--routing")
            defaults.append("routing")
    except MissingDefaultFile as exc:
        print(f"kvroute: {exc}", file=sys.stderr)
        return False
    args.defaulted = tuple(defaults)
    return True


def _log_files(args: argparse.Namespace) -> None:
    """Each default file is found on its own (this directory, else the checkout): once the
    start is checked, say which files are in use."""
    defaulted = getattr(args, "defaulted", ())
    logging.getLogger(__name__).info(
        "fleet file %s%s; routing file %s%s", args.fleet,
        " (default)" if "fleet" in defaulted else "", args.routing,
        " (default)" if "routing" in defaulted else "")


def _load(args: argparse.Namespace, checked: list[RoutingConfig]) -> Any:
    """Load the fleet and check the routing file up front, with a one-line error. The
    routing checked is appended to ``checked``: held until the router has built its own,
    its plugin files' modules are taken as they are (``policies.plugin_file_modules``), not
    run a second time."""
    from policies.errors import RoutingConfigError
    from policies.loader import load_routing
    from router.client_auth import TenantKeysError, load_tenant_keys
    from router.decision_sinks import decision_log_problem
    from workers.credentials import worker_authorizations
    from workers.fleet import FleetConfigError, load_fleet
    from workers.tls import TlsFilesError, server_tls_context, worker_tls_contexts
    try:
        fleet = load_fleet(args.fleet)
        worker_authorizations((w.info for w in fleet.workers), os.environ)
        worker_tls_contexts(w.info for w in fleet.workers)
        if args.ssl_certfile is not None:
            server_tls_context(args.ssl_certfile, args.ssl_keyfile)
        if args.api_keys_file is not None:
            load_tenant_keys(args.api_keys_file)
        try:
            checked.append(load_routing(args.routing))
        except RoutingConfigError as exc:     # named as kvroute validate names it
            reason = str(exc).removeprefix(f"{args.routing}: ")
            print(f"kvroute: {args.routing}: invalid: {reason}", file=sys.stderr)
            return None
    except (FleetConfigError, TlsFilesError, TenantKeysError) as exc:
        print(f"kvroute: {exc}", file=sys.stderr)
        return None
    problem = decision_log_problem(os.environ)
    if problem is not None:
        print(f"kvroute: {problem}", file=sys.stderr)
        return None
    return fleet


def _start_process(args: argparse.Namespace) -> bool:
    """Logging at ``--log-level``, and the open-file limit raised before anything starts
    (the emulated workers of ``up`` and the replicas of ``serve`` inherit it); False after
    a one-line error when the level is none of logging's (it ended in a traceback)."""
    from router.fd_limit import raise_open_file_limit
    try:
        args.log_level = log_level(args.log_level)      # (``debug`` too: as vLLM takes it)
    except ValueError as exc:
        print(f"kvroute: {exc}", file=sys.stderr)
        return False
    configure_logging(args.log_level, args.log_format)
    raise_open_file_limit()
    return True


def _serve(args: argparse.Namespace) -> int:
    from policies.errors import RoutingConfigError
    from router.app import ListenError, run_router
    from router.client_auth import TenantKeysError
    if not _start_process(args) or not _default_files(args):
        return 2
    checked: list[RoutingConfig] = []       # the routing checked, held until the router has its own
    fleet = _load(args, checked)
    if fleet is None:
        return 2
    if args.processes < 1:
        print(f"kvroute: --processes: must be at least 1, got {args.processes}",
              file=sys.stderr)
        return 2
    if args.metrics_port is not None and args.metrics_port + args.processes - 1 > 65535:
        print(f"kvroute: --metrics-port: {args.processes} processes need ports "
              f"{args.metrics_port}..{args.metrics_port + args.processes - 1}, past 65535",
              file=sys.stderr)
        return 2
    if args.redis_key_prefix is not None and args.redis_url is None:
        print("kvroute: --redis-key-prefix: names keys in Redis, and no --redis-url (or "
              f"${REDIS_URL_ENV}) is given", file=sys.stderr)
        return 2
    settings = _settings(args, redis_url=args.redis_url,
                         redis_key_prefix=args.redis_key_prefix or DEFAULT_REDIS_KEY_PREFIX,
                         replica_id=args.replica_id,
                         response_ttl_s=args.response_ttl, process_port=args.metrics_port)
    if settings is None:
        return 2
    _log_files(args)
    if args.processes > 1:
        from router.replicas import run_replicas
        if settings.redis_url is None:
            logging.getLogger(__name__).warning(
                "%d processes without --redis-url: each counts only its own in-flight "
                "requests and its own spending of the tenants' budgets (each process allows "
                "a tenant its whole budget), and a Responses API follow-up "
                "(previous_response_id) reaching another process than the one that routed "
                "the response is looked for on every worker (at most 20 such searches a "
                "second; past that it goes by the policy, to a worker that may not hold it)",
                args.processes)
    try:
        if args.processes > 1:
            checked.clear()            # (the processes build theirs)
            return run_replicas(settings, args.processes, args.log_level, args.log_format)
        else:
            run_router(settings, fleet, on_ready=lambda _port: checked.clear())
    except (ListenError, TenantKeysError) as exc:   # a keys file read again, now bad
        print(f"kvroute: {exc}", file=sys.stderr)
        return 2
    except RoutingConfigError as exc:     # read, but its plugins could not be built
        print(_unbuildable(args.routing, exc), file=sys.stderr)
        return 2
    return 0


def _unbuildable(path: Path, exc: Exception) -> str:
    """The line that says a routing file's plugins could not be built (a tokenizer file
    unreadable, no temporary directory for a cache): as ``kvroute validate`` says."""
    reason = str(exc).removeprefix(f"{path}: ")
    return f"kvroute: {path}: cannot be served: {reason}"


def worker_on_router_port(fleet: Any, host: str, port: int) -> str | None:
    """Which emulated worker of ``fleet`` (started by ``up`` before the router) would take
    the router's ``host:port``, said in words; ``None`` when none would. Emulated workers
    listen on 127.0.0.1 unless their ``emulate.host`` says otherwise; a router on a wildcard
    address needs the port on every address."""
    from urllib.parse import urlsplit
    wildcard = host in ("0.0.0.0", "::", "")
    local = {"127.0.0.1", "localhost"}
    for spec in fleet.workers:
        if not spec.emulated:
            continue
        parts = urlsplit(spec.info.url)
        worker_host = parts.hostname or "127.0.0.1"
        same_host = (wildcard or worker_host in ("0.0.0.0", "::") or worker_host == host
                     or (worker_host in local and host in local))
        if parts.port == port and same_host:
            return (f"emulated worker {spec.info.id!r} of {fleet.source} listens on "
                    f"{worker_host}:{port} (its emulate.port)")
    return None


def emulated_worker_port_taken(fleet: Any) -> str | None:
    """Which emulated worker of ``fleet`` cannot listen on its ``emulate`` address because
    another process listens there already (an ``up`` left running, another server), said in
    words; ``None`` when each one's port is free. ``up`` asks before starting them: the
    emulator's own failure named only the address, in a status of 1. A worker that refuses
    connections from the start (``faults.refuse_connections``) does not listen, and is not
    asked about."""
    from router.app import ListenError, check_port_free
    for spec in fleet.workers:
        if not spec.emulated or (spec.emulate.get("faults") or {}).get("refuse_connections"):
            continue
        try:
            check_port_free(spec.emulate.get("host", "127.0.0.1"), spec.emulate["port"])
        except ListenError as exc:
            return f"emulated worker {spec.info.id!r} of {fleet.source}: {exc} (its emulate.port)"
    return None


def _starting_added(emulators: EmulatorFleet) -> FleetHook:
    """The hook ``kvroute up`` gives the router's fleet reload: the emulated workers the
    fleet file gained are started (each in a process of its own) before the router takes
    them; one that does not come up is logged, and the router sees it down."""
    import asyncio

    from workers.emulator.process import EmulatorStartError

    log = logging.getLogger("kvroute.up")

    async def start(spec: WorkerSpec) -> None:
        try:
            if await asyncio.to_thread(emulators.add, spec):
                log.info("emulated worker %s started (%s)", spec.info.id, spec.info.url)
            else:
                log.info("emulated worker %s: the emulator at %s runs as it started",
                         spec.info.id, spec.info.url)
        except EmulatorStartError as exc:
            log.error("emulated worker %s did not start: %s", spec.info.id, exc)
        except Exception:      # never the fleet's refusal: the router sees the worker down
            log.exception("emulated worker %s did not start", spec.info.id)

    async def start_added(prepared: PreparedFleet) -> None:
        added = [prepared.fleet.worker(w) for w in prepared.change.added]
        await asyncio.gather(*(start(spec) for spec in added if spec.emulated))
    return start_added


@contextlib.contextmanager
def _watching(emulators: EmulatorFleet, fleet_source: str,
              interval_s: float = 1.0) -> Iterator[Callable[[], None]]:
    """While ``kvroute up`` runs, an emulator process that ends on its own (killed, crashed)
    is reaped and logged with its workers and how to bring them back; it went unnoticed,
    its workers merely down, the process a zombie until ``up`` exited. Yields the call that
    stops the watch: ``up`` makes it when its stop begins (a Ctrl-C reaches the emulators
    too, which end before the router has drained: not a crash)."""
    import signal
    import threading

    log = logging.getLogger("kvroute.up")
    done = threading.Event()

    def report() -> None:
        for ended in emulators.exited():
            if done.is_set() or ended.returncode in (-signal.SIGINT, 128 + signal.SIGINT):
                continue       # the stop began, or a Ctrl-C reached it before the router
            again = f"kvroute emulate --fleet {fleet_source}" + (
                f" --worker {ended.workers[0]}" if len(ended.workers) == 1 else "")
            log.error("%s: its workers are down until it runs again (restart kvroute up, or "
                      "start it alone: %s)%s", ended.describe(), again,
                      f"; its last words: {ended.stderr_tail[-500:]}"
                      if ended.stderr_tail else "")

    def watch() -> None:
        while not done.wait(interval_s):
            try:
                report()
            except Exception:        # the watch goes on
                log.exception("watching the emulator processes failed")

    watcher = threading.Thread(target=watch, name="kvroute-up-emulators", daemon=True)
    watcher.start()
    try:
        yield done.set
    finally:
        done.set()
        watcher.join()


def _up(args: argparse.Namespace) -> int:
    from policies.errors import RoutingConfigError
    from router.app import ListenError, run_router
    from router.client_auth import TenantKeysError
    from workers.emulator.process import EmulatorFleet, EmulatorStartError
    if not _start_process(args) or not _default_files(args):
        return 2
    checked: list[RoutingConfig] = []       # the routing checked, held until the router has its own
    fleet = _load(args, checked)
    settings = _settings(args)
    if fleet is None or settings is None:
        return 2
    clash = worker_on_router_port(fleet, args.host, args.port)
    if clash is not None:
        print(f"kvroute: --port {args.port}: {clash}; give the router another port",
              file=sys.stderr)
        return 2
    taken = emulated_worker_port_taken(fleet)
    if taken is not None:
        print(f"kvroute: {taken}; stop what listens there, or give the worker another port",
              file=sys.stderr)
        return 2
    _log_files(args)
    emulated = sum(1 for w in fleet.workers if w.emulated)
    options: dict[str, Any] = {"one_process": args.emulator_processes == "one"}
    if args.time_scale is not None:
        options["time_scale"] = args.time_scale
    model = fleet.workers[0].info.models[0]

    def ready(port: int) -> None:
        checked.clear()
        scheme = settings.scheme
        print(f"\nkvroute: {emulated} emulated worker(s) and the router are up: "
              f"{scheme}://{args.host}:{port}/v1  (Ctrl-C stops everything)\n")
        print("Try it:\n\n" + CURL_EXAMPLE.format(scheme=scheme, port=port, model=model)
              + "\n")
        print("Or with the openai client:\n\n"
              + OPENAI_EXAMPLE.format(scheme=scheme, port=port, model=model) + "\n",
              flush=True)
        if settings.api_keys or settings.api_keys_file is not None:
            print("Clients must send one of the router's API keys: add -H 'Authorization: "
                  "Bearer <key>' to curl, api_key=<key> to the client.\n", flush=True)

    try:
        with EmulatorFleet(fleet, **options) as emulators, \
                _watching(emulators, fleet.source) as stop_watching:
            run_router(settings, fleet, on_ready=ready, on_stop=stop_watching,
                       before_fleet_change=_starting_added(emulators))
    except EmulatorStartError as exc:
        print(f"kvroute: the emulated workers did not start: {exc}", file=sys.stderr)
        return 1
    except (ListenError, TenantKeysError) as exc:   # a keys file read again, now bad
        print(f"kvroute: {exc}", file=sys.stderr)
        return 2
    except RoutingConfigError as exc:     # read, but its plugins could not be built
        print(_unbuildable(args.routing, exc), file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    return 0
