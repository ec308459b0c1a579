"""Every typed ``web.AppKey`` of the router application (its whole state lives in these)."""

from __future__ import annotations

import ssl
from collections.abc import Mapping

from aiohttp import web

from policies.reloader import PolicyReloader
from router.client_keys_reloader import ClientKeysReloader
from router.decisions import DecisionLog
from router.director import Director
from router.drain import RequestTasks, StopNotice
from router.ejection import WorkerEjection
from router.fleet_reloader import FleetReloader
from router.kv_event_feed import KvEventFeed
from router.loop_lag import LoopStalls
from router.metrics import RouterMetrics
from router.model_retirement import ModelRetirement
from router.settings import Settings
from router.state.store import StateStore
from router.utility_requests import UtilityRequests
from workers.fleet import FleetConfig
from workers.registry import WorkerRegistry
from workers.scraper import WorkerScraper
from workers.upstream import BaseUrl

SETTINGS = web.AppKey("settings", Settings)
CLIENT_KEYS = web.AppKey("client_keys", ClientKeysReloader)
FLEET = web.AppKey("fleet", FleetConfig)       # as read at start; FLEET_RELOADER has the one now
FLEET_RELOADER = web.AppKey("fleet_reloader", FleetReloader)
METRICS = web.AppKey("metrics", RouterMetrics)
REGISTRY = web.AppKey("registry", WorkerRegistry)
STORE = web.AppKey("store", StateStore)
DECISIONS = web.AppKey("decisions", DecisionLog)
SCRAPER = web.AppKey("scraper", WorkerScraper)
DIRECTOR = web.AppKey("director", Director)
UTILITY = web.AppKey("utility", UtilityRequests)
POLICY = web.AppKey("policy", PolicyReloader)
KV_EVENTS = web.AppKey("kv_events", KvEventFeed)
EJECTION = web.AppKey("ejection", WorkerEjection)
REQUEST_TASKS = web.AppKey("request_tasks", RequestTasks)
STOP_NOTICE = web.AppKey("stop_notice", StopNotice)
# the listener of this process alone (--metrics-port), kept open through the drain
PROCESS_SITES: web.AppKey[list[web.BaseSite]] = web.AppKey("process_sites")
MODEL_RETIREMENT = web.AppKey("model_retirement", ModelRetirement)
LOOP_STALLS = web.AppKey("loop_stalls", LoopStalls)
# the Authorization header sent to each worker started with --api-key (workers.credentials)
WORKER_AUTHORIZATIONS: web.AppKey[Mapping[BaseUrl, str]] = web.AppKey("worker_authorizations")
# the TLS context verifying each https:// worker (workers.tls)
WORKER_TLS: web.AppKey[Mapping[BaseUrl, ssl.SSLContext]] = web.AppKey("worker_tls")
