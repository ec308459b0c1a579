"""``FleetReloader``: the fleet file, kept current while the router runs.

Workers are added, removed, relabelled or declared as another server under their id by
editing the fleet file, without a restart. The file is polled every ``interval_s`` (its stamp, as
the routing file's), and new content is taken once it reads the same at two polls running,
so a file written in several steps is not taken half-written. Before anything changes the
new fleet must pass what ``kvroute serve`` checks at start: the file itself, every
``api_key_env`` set in this process's environment, every ``tls_ca_file`` usable, and the
routing file in force valid against it (``check``: a rule sending requests to a pool or model
the new fleet no longer has refuses the fleet, so remove the rule first). A refused file is
logged with the field that is wrong, and the fleet in force keeps serving; it is tried again
when it is saved again (even unchanged) and when the routing file in force changes (a fleet
and a routing file deployed together may be read in either order). A taken one is handed
to ``apply`` (the router's registry, scraper, upstream
clients, policy engine and KV-event feed) with what changed, and logged. Each outcome goes
to ``on_result`` (``kvroute_fleet_reloads_total``, ``kvroute_fleet_last_reload_successful``).

Requests in flight on a removed worker finish there; no new one goes to it. A worker
declared as another server under its id (another URL, GPU, model, parallelism or batch
limits) is a new server to the router: what it knew of the old one's cache and health is
dropped, and it is scraped at once; one relabelled (labels, price, key, CA bundle, stream)
keeps it all. ``before_apply`` runs before a new fleet is taken: ``kvroute up`` starts the
emulated workers it adds there; elsewhere an ``emulate:`` worker added is scraped at its port
like any other, and stays down until something listens there (logged).
"""

from __future__ import annotations

import logging
import ssl
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from policies.errors import RoutingConfigError
from workers.credentials import worker_authorizations
from workers.file_watch import (
    FileStamp,
    PeriodicCheck,
    SettledContent,
    file_content,
    file_digest,
    file_stamp,
)
from workers.fleet import FleetConfig, FleetConfigError, load_fleet
from workers.models import WorkerInfo
from workers.registry import FleetChange, fleet_change, same_server
from workers.tls import worker_tls_contexts
from workers.upstream import BaseUrl, base_url

log = logging.getLogger(__name__)

_UNREAD: FileStamp = (-1, -1, -1, -1, -1)     # a stamp no file has: the next poll reads it


@dataclass(frozen=True, slots=True)
class PreparedFleet:
    """A new fleet that passed every check, with what the upstream clients need for it and
    for the fleet in force (``before_*``): while the new servers are probed, requests still
    go to the workers in force, and need their keys and contexts."""

    fleet: FleetConfig
    change: FleetChange
    authorizations: dict[BaseUrl, str]
    tls: dict[BaseUrl, ssl.SSLContext]
    before_authorizations: dict[BaseUrl, str]
    before_tls: dict[BaseUrl, ssl.SSLContext]

    @property
    def infos(self) -> list[WorkerInfo]:
        return [spec.info for spec in self.fleet.workers]

    def meanwhile(self) -> tuple[dict[BaseUrl, str], dict[BaseUrl, ssl.SSLContext]]:
        """The keys and contexts of both fleets (the new one's where they share a base URL):
        what the upstream clients use while the new fleet is being taken."""
        return ({**self.before_authorizations, **self.authorizations},
                {**self.before_tls, **self.tls})


class FleetReloader:
    """Owns the fleet in force for one fleet file."""

    def __init__(self, path: Path, fleet: FleetConfig, tls: Mapping[BaseUrl, ssl.SSLContext],
                 *, check: Callable[[FleetConfig], None], environ: Mapping[str, str],
                 authorizations: Mapping[BaseUrl, str] | None = None,
                 interval_s: float = 1.0,
                 on_result: Callable[[bool], None] | None = None,
                 before_apply: Callable[[PreparedFleet], Awaitable[None]] | None = None
                 ) -> None:
        """``fleet``: the one in force (read from ``path`` just before: the file is stamped
        now, so an edit from here on is new), ``tls`` its contexts; ``check(fleet)`` raises
        ``RoutingConfigError`` when the routing file in force cannot serve ``fleet``."""
        self.path = path
        self.fleet = fleet
        self._tls = dict(tls)
        self._authorizations = dict(authorizations or {})
        self._before_apply = before_apply       # (kvroute up: starts added emulated workers)
        self._check_routing = check
        self._apply: Callable[[PreparedFleet], Awaitable[None]] | None = None
        self._environ = environ
        self._on_result = on_result
        if fleet.digest is not None:
            # the content ``fleet`` was read from: an edit since that read (seconds while
            # kvroute up starts its emulators, minutes while a classifier trains) was taken
            # for the fleet in force, and never applied; the first poll reads the file
            self._stamp: FileStamp | None = _UNREAD
            self._content = SettledContent(fleet.digest)
        else:
            self._stamp = file_stamp(path)
            self._content = SettledContent(file_digest(path))
        # worker id -> the declaration its emulator was started as (the fleet read at start,
        # then each worker kvroute up starts as a reload adds it): a reload changes none
        self._emulated_as = {spec.info.id: spec.info for spec in fleet.workers
                             if spec.emulated}
        self._refused = False      # the file as it is was refused: tried again on a save or
        self._retry = False        # ... when the routing file in force changed (``retry``)
        self._periodic = PeriodicCheck(self.check, interval_s, f"fleet-reloader:{path}",
                                       "fleet reload")

    def retry(self) -> None:
        """The routing file in force changed: a fleet refused for it is tried again at the
        next poll (a fleet dropping a pool is refused until the rule naming it goes)."""
        self._retry = self._refused

    async def check(self) -> bool:
        """Read the file again if it changed; whether a new fleet took over."""
        stamp = file_stamp(self.path)
        moved = stamp != self._stamp
        if not moved and not self._content.waiting and not self._retry:
            return False
        self._stamp = stamp
        retry, self._retry = self._retry, False
        content, digest = file_content(self.path)
        if not self._content.offer(digest) and not (
                self._refused and (moved or retry) and not self._content.waiting):
            return False    # unchanged (not refused, or refused and left alone), or settling
        try:
            prepared = self.prepare(load_fleet(self.path, content))
        except (FleetConfigError, RoutingConfigError) as exc:
            return self._refuse(exc)
        except Exception:       # a value the parser did not foresee: refused all the same
            log.exception("fleet file %s refused, the fleet in force stays: reading it "
                          "failed", self.path)       # (counted, for the alert to see it)
            return self._refuse(None)
        self._refused = False
        if not prepared.change:
            self.fleet = prepared.fleet
            log.info("fleet file %s read again: no worker changed", self.path)
            self._report(True)
            return False
        try:
            if self._before_apply is not None:
                await self._before_apply(prepared)
            if self._apply is not None:
                await self._apply(prepared)
        except RoutingConfigError as exc:     # a routing file taken while it was applied
            return self._refuse(exc)
        except Exception:       # a bug half-way must not stop the watcher: tried again on a
            log.exception("fleet file %s: applying %s failed", self.path,   # save, or edit
                          prepared.change.describe())
            return self._refuse(None)
        self.fleet, self._tls = prepared.fleet, prepared.tls
        self._authorizations = prepared.authorizations
        log.info("fleet file %s reloaded: %s (%d worker(s))", self.path,
                 prepared.change.describe(), len(prepared.fleet.workers))
        started_here = () if self._before_apply is None else prepared.change.added
        for worker_id in started_here:
            spec = prepared.fleet.worker(worker_id)
            started = self._emulated_as.get(worker_id)
            # kvroute up starts it unless its emulator still serves at that URL (added back)
            if spec.emulated and (started is None
                                  or base_url(started.url) != base_url(spec.info.url)):
                self._emulated_as[worker_id] = spec.info
        for worker_id in (*prepared.change.added, *prepared.change.changed):
            if not prepared.fleet.worker(worker_id).emulated or worker_id in started_here:
                continue
            how = ("kvroute up starts the emulated workers a reload adds, not those it "
                   "changes: restart it" if self._before_apply is not None else
                   "an emulated worker is started by kvroute up (or kvroute emulate), not by "
                   "a reload")
            info = prepared.fleet.worker(worker_id).info
            before = self._emulated_as.get(worker_id)
            if before is not None and base_url(before.url) == base_url(info.url):
                if same_server(before, info):
                    continue        # declared back as its emulator was started
                log.warning("worker %s is declared anew in %s (%s %s); %s. Until then the "
                            "emulator started as %s %s still serves at %s, estimated as the "
                            "new one", worker_id, self.path, info.gpu.name, info.models[0],
                            how, before.gpu.name, before.models[0], info.url)
                continue
            log.warning("worker %s is declared emulate: in %s; %s. Until something listens "
                        "at %s it is down", worker_id, self.path, how, info.url)
        self._report(True)
        return True

    def prepare(self, fleet: FleetConfig) -> PreparedFleet:
        """Check ``fleet`` as ``kvroute serve`` would at start (raises ``FleetConfigError``
        or ``RoutingConfigError``) and make its credentials."""
        infos = [spec.info for spec in fleet.workers]
        authorizations = worker_authorizations(infos, self._environ)
        tls = self._tls_contexts(infos)
        self._check_routing(fleet)
        return PreparedFleet(fleet, fleet_change([s.info for s in self.fleet.workers], infos),
                             authorizations, tls, self._authorizations, self._tls)

    def _tls_contexts(self, infos: list[WorkerInfo]) -> dict[BaseUrl, ssl.SSLContext]:
        """The new fleet's TLS contexts; a worker at the same base URL with the same CA bundle
        keeps its context (and so its pooled connections)."""
        before = {base_url(spec.info.url): spec.info.tls_ca_file for spec in self.fleet.workers}
        kept = {base_url(info.url) for info in infos
                if base_url(info.url) in self._tls
                and before.get(base_url(info.url), "") == info.tls_ca_file}
        made = worker_tls_contexts(info for info in infos if base_url(info.url) not in kept)
        return {**{base: self._tls[base] for base in kept}, **made}

    def _refuse(self, reason: Exception | None) -> bool:
        """The file as it is was refused (logged with ``reason`` unless already logged): the
        fleet in force stays; tried again on a save or a routing change."""
        if reason is not None:
            log.error("fleet file %s refused, the fleet in force stays: %s", self.path, reason)
        self._refused = True
        self._report(False)
        return False

    def _report(self, succeeded: bool) -> None:
        if self._on_result is not None:
            self._on_result(succeeded)

    def start(self, apply: Callable[[PreparedFleet], Awaitable[None]]) -> None:
        """Watch the file; ``apply`` serves each new fleet taken."""
        self._apply = apply
        self._periodic.start()

    async def stop(self) -> None:
        await self._periodic.stop()
