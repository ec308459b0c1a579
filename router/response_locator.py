"""Where a Responses API response lives: the state store's record, else the worker that has it.

Only the worker that made a response can continue, read or cancel it. The state store
remembers the owner of every response this router (or, with Redis, any replica) sent. A
response it has no record of (made before a restart without Redis, or through another
router) is looked for: every healthy generative worker is asked ``GET /v1/responses/{id}``
at once, on the scraper's short-timeout connections; the first that has it becomes its
recorded owner. No worker having it is vLLM's own answer, 404, given by the caller. A
holder that is down is a 503 naming it, counted in ``kvroute_requests_total`` (status 503,
the holder's worker, the caller's profile) where the 5xx alerts look.

A response made with a tenant's key is recorded with its tenant, and another tenant's key
is answered vLLM's 404 for it, as for an id nobody made (a response found by a search has no
tenant recorded).

A search costs a request to every worker, and any client can send ids nobody made: searches
are limited to ``SEARCHES_PER_S`` a second (a bucket of as many); past that, an unrecorded id
is left to the policy's choice, whose worker answers for it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from urllib.parse import quote

from yarl import URL

from router.errors import NoWorkerAvailable, ResponseNotFound
from router.metrics import RESPONSES_API, UNKNOWN_MODEL, RouterMetrics
from router.protocol import RESPONSES_PATH
from router.state.store import StateStore
from workers.models import WorkerView
from workers.registry import WorkerRegistry
from workers.upstream import UpstreamClient, UpstreamError

log = logging.getLogger(__name__)
SEARCHES_PER_S = 20.0


class SearchBudget:
    """A token bucket: ``rate`` searches a second on average, at most ``rate`` at once."""

    __slots__ = ("_at", "_clock", "_rate", "_tokens")

    def __init__(self, rate: float, clock: Callable[[], float]) -> None:
        self._rate = rate
        self._clock = clock
        self._tokens = rate
        self._at = clock()

    def take(self) -> bool:
        now = self._clock()
        self._tokens = min(self._rate, self._tokens + (now - self._at) * self._rate)
        self._at = now
        if self._tokens < 1.0:
            return False
        self._tokens -= 1.0
        return True


class ResponseLocator:
    """The owner of a response id: recorded, or found by asking the workers."""

    def __init__(self, store: StateStore, registry: WorkerRegistry, client: UpstreamClient,
                 metrics: RouterMetrics, clock: Callable[[], float] = time.monotonic,
                 searches_per_s: float = SEARCHES_PER_S) -> None:
        self._store = store
        self._registry = registry
        self._client = client
        self._metrics = metrics
        self._clock = clock
        self._searches_per_s = searches_per_s
        self._budget = SearchBudget(searches_per_s, clock)
        self._refused = 0      # searches refused by the budget so far
        self._found = 0        # owners found by a search so far

    async def holder(self, response_id: str, profile: str,
                     tenant: str | None = None) -> WorkerView | None:
        """The healthy worker holding ``response_id``, None when no worker holds it; a holder
        that is down raises ``NoWorkerAvailable``, counted under ``profile``. A request of
        the tenant key ``tenant`` gets vLLM's 404 (``ResponseNotFound``) for another
        tenant's response: as if it did not exist."""
        record = await self._store.response_record(response_id)
        if record is not None and record.refuses(tenant):
            raise ResponseNotFound(f"Response with id '{response_id}' not found.",
                                   param="response_id")
        owner = record.worker if record is not None else await self._search(response_id)
        if owner is None:
            return None
        views = self._registry.views(self._clock())
        view = next((v for v in views if v.id == owner), None)
        if view is None and record is not None:
            # its worker left the fleet (a reload removed or renamed it): looked for as a
            # response with no record, on the workers there are now
            owner = await self._search(response_id, record.tenant)
            if owner is None:
                return None
            view = next((v for v in views if v.id == owner), None)
        if view is None or not view.healthy:
            self._metrics.record_request(UNKNOWN_MODEL if view is None else view.info.models[0],
                                         owner, "" if view is None else view.gpu.name, profile,
                                         503, RESPONSES_API)
            raise NoWorkerAvailable(f"The worker `{owner}` holding response `{response_id}` "
                                    "is not available; only it holds that response.")
        return view

    async def _search(self, response_id: str, tenant: str | None = None) -> str | None:
        """The worker holding a response the store has no record of, asked of every worker
        (within the search budget); recorded when found (with the ``tenant`` its record
        had)."""
        if not self._budget.take():
            self._refused += 1
            if self._refused % 1000 == 1:
                log.warning("response ids without a record come faster than %g a second: "
                            "%d left to the policy so far", self._searches_per_s, self._refused)
            return None
        views = [view for view in self._registry.views(self._clock())
                 if view.healthy and view.info.model_spec.runner == "generate"]
        path = f"{RESPONSES_PATH}/{quote(response_id, safe='')}"
        found = await asyncio.gather(*(self._holds(view, path) for view in views))
        holders = [view.id for view, holds in zip(views, found, strict=True) if holds]
        if not holders:
            return None
        await self._store.remember_response(response_id, holders[0], tenant)
        self._found += 1
        if self._found % 1000 == 1:      # one line, not one per follow-up, in an outage
            log.info("response %s: no record of its worker; found on %s (%d found by "
                     "searching so far)", response_id, holders[0], self._found)
        return holders[0]

    async def _holds(self, view: WorkerView, path: str) -> bool:
        try:
            answer = await self._client.get(URL(view.info.url + path))
        except (UpstreamError, OSError, TimeoutError):
            return False
        try:
            await answer.read()        # the connection goes back to the pool whole
            return answer.status == 200
        except (UpstreamError, OSError, TimeoutError):
            return False
        finally:
            answer.close()
