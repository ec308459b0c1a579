"""``PolicyReloader``: rebuild the policy engine when the routing file changes.

An asyncio task polls the file's stamp (``workers.file_watch.file_stamp``: identity, times,
size) every ``interval_s``; when it moves, the file is read and hashed. New content is taken
once it is read the same at two polls running, so a file written in place in several steps
is not applied half-written (a reload takes one to two intervals), while a file rewritten
with the same content at every poll, or only touched, changes nothing. It then parses the
file and builds a new ``PolicyEngine`` off the event loop (plugins such as a classifier may
take a while to build), then swaps ``reloader.engine`` in one assignment, unless the file
changed again while it was built: the file is read again after the build, and a build whose
content is no longer the file's is dropped (an edit undone during a classifier's minutes of
training is not applied after the undo; a touch meanwhile drops nothing). A bad file is
refused: the last good engine keeps serving and the failure is reported once per change of
the file; a file that comes back to the content in force (after an edit was refused, or
after it was missing) is reported as a success without a rebuild (``ReloadResult.rebuilt``
False). Every attempt is reported through ``on_result(ReloadResult)`` (the router counts
``kvroute_config_reloads_total{result}``); a successful swap also calls ``on_swap(engine)``.
The new engine takes over stateful plugins' state from the old one (``inherit_state``).

Files the routing file names and the build reads (``semantic.examples_file``, the ``.py``
files of ``plugin_modules``) are watched with it: their content is part of the config's
(digest and settling alike), so an edit of the examples or of a plugin's code alone is
applied, a missing one refuses the config as the routing file's own fault would, and
``file_is_in_force`` speaks for both. They are named from the YAML alone (``files_named``),
so a plugin file that fails to load stays watched and its fix is seen.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from policies.engine import PolicyEngine, check_against_fleet
from policies.errors import RoutingConfigError
from policies.loader import parse_routing_file_text, read_routing_text
from policies.plugin_modules import PLUGIN_MODULES_KEY, entry_path, is_file_entry
from policies.registry import PluginRegistry, default_registry
from policies.schema import source_folder
from policies.summary import fleet_warnings, summarize
from workers.file_watch import (
    FileStamp,
    PeriodicCheck,
    SettledContent,
    file_digest,
    file_stamp,
)
from workers.fleet import FleetConfig
from workers.yaml_text import YamlTextError, load_config_yaml

log = logging.getLogger(__name__)

ReloadOutcome = Literal["success", "failure"]


@dataclass(frozen=True, slots=True)
class _Read:
    """The files a config was read from (the routing file first), their stamps when read,
    and the digest of their content."""

    watched: tuple[Path, ...]
    stamps: tuple[FileStamp | None, ...]
    digest: bytes | None


@dataclass(frozen=True, slots=True)
class ReloadResult:
    result: ReloadOutcome
    path: str
    message: str           # the summary of the new config, or the error naming the field
    rebuilt: bool = True   # False: the file came back to the config already in force


def _short(digest: bytes | None) -> str:
    """A file's digest as the log writes it (the first 12 hex digits of its sha256)."""
    return fingerprint_of(digest) or "none"


def fingerprint_of(digest: bytes | None) -> str | None:
    """The first 12 hex digits of a content digest: how the reload log, the decisions,
    ``kvroute_config_info`` and the engine name a routing file's content (None: unknown)."""
    return digest.hex()[:12] if digest is not None else None


class PolicyReloader:
    """Owns the current engine for one routing file."""

    def __init__(self, path: str | Path, fleet: FleetConfig, engine: PolicyEngine, *,
                 registry: PluginRegistry | None = None, interval_s: float = 1.0,
                 seed: int | None = None,
                 on_result: Callable[[ReloadResult], None] | None = None,
                 on_swap: Callable[[PolicyEngine], None] | None = None,
                 built_from: _Read | None = None) -> None:
        """``built_from``: what ``engine`` was built from, read before its build (``load``):
        files changed during a long first build are then new to the first poll; without
        it, the files as they are now."""
        self.path = Path(path)
        self.fleet = fleet
        self.engine = engine
        self.interval_s = interval_s
        self._registry = registry if registry is not None else default_registry()
        self._seed = seed
        self._on_result = on_result
        self._swap_listeners: list[Callable[[PolicyEngine], None]] = (
            [on_swap] if on_swap is not None else [])
        # the routing file and the files its config in force reads, as last read
        if built_from is None:
            built_from = _read_now(self.path)
        self._watched = built_from.watched
        self._stamp = built_from.stamps
        # the content last read (settled: None when unread) and new content waiting
        self._content = SettledContent(built_from.digest)
        self._in_force = self._content.settled    # of the content the engine was built from
        self.in_force_since = time.time()         # when the engine in force was swapped in
        # the last refusal (wall time, the reason naming the field), kept until a success
        self.last_refusal: tuple[float, str] | None = None
        self.building_since: float | None = None  # wall time a new config began to be built
        self._retry = False       # a refused file is to be built again (``retry``)
        self._warnings_counted: tuple[PolicyEngine, FleetConfig, int] | None = None
        self._periodic = PeriodicCheck(self.check, interval_s, f"policy-reloader:{self.path}",
                                       "routing reload")

    @classmethod
    def load(cls, path: str | Path, fleet: FleetConfig, *,
             registry: PluginRegistry | None = None, interval_s: float = 1.0,
             seed: int | None = None,
             on_result: Callable[[ReloadResult], None] | None = None,
             on_swap: Callable[[PolicyEngine], None] | None = None) -> PolicyReloader:
        """Build the first engine from ``path`` (raises ``RoutingConfigError``) and watch it."""
        registry = registry if registry is not None else default_registry()
        stamp = _stamps((Path(path),))   # before the read: a write meanwhile moves it
        text = read_routing_text(path)
        # the named files stamped and digested before the parse runs a plugin file's code or
        # the build reads the examples: an edit meanwhile is new to the first poll
        named = files_named(text, Path(path))
        watched = (Path(path), *(file for _, file in named))
        read = _Read(watched, (*stamp, *_stamps(watched[1:])),
                     _content_digest(text.encode(), named))
        routing = parse_routing_file_text(text, registry, str(path))
        engine = PolicyEngine.build(routing, fleet, registry, seed=seed,
                                    fingerprint=fingerprint_of(read.digest))
        _log_warnings(Path(path), engine, fleet)
        return cls(path, fleet, engine, registry=registry, interval_s=interval_s, seed=seed,
                   on_result=on_result, on_swap=on_swap, built_from=read)

    @property
    def in_force_fingerprint(self) -> str | None:
        """The first 12 hex digits of the SHA-256 of the content in force (None: unknown)."""
        return fingerprint_of(self._in_force)

    def retry(self) -> None:
        """The fleet changed: a file refused for it (a rule naming a pool no worker had) is
        built again at the next poll."""
        self._retry = self.last_refusal is not None

    async def check(self) -> ReloadResult | None:
        """Reload if the file changed (or, refused, was saved again or asked to ``retry``);
        None when there was nothing new to load."""
        stamp = _stamps(self._watched)
        moved = stamp != self._stamp
        self._stamp = stamp
        retry, self._retry = self._retry, False
        if not (moved or self._content.waiting or retry):
            return None
        try:     # off the loop: a file of a few MB takes a while to read and hash
            text, digest = await asyncio.to_thread(self._read_and_digest)
        except RoutingConfigError as exc:
            # an unreadable file is settled like content (a file deleted and written again
            # by a deploy is not refused for the moment it was missing)
            if not self._content.offer(hashlib.sha256(str(exc).encode()).digest()):
                return None
            self._content.settled = None   # whatever is read next is new, even the same
            return self._report(ReloadResult("failure", str(self.path), str(exc)))
        if not self._content.offer(digest) and not (
                self.last_refusal is not None and (moved or retry)
                and not self._content.waiting):
            return None    # unchanged (a touch of a file in force), or new and waiting
        if digest == self._in_force:  # back to the config in force (after a refused edit)
            return self._report(ReloadResult(
                "success", str(self.path),
                f"the file is the config in force again: {summarize(self.engine.routing)}",
                rebuilt=False))
        self.building_since = time.time()
        try:
            engine = await _in_daemon_thread(self._build, text, digest)
        except RoutingConfigError as exc:
            return self._report(ReloadResult("failure", str(self.path), str(exc)))
        except (Exception, SystemExit) as exc:  # a bug while building must not stop the watcher
            log.exception("building the routing config from %s failed", self.path)
            return self._report(ReloadResult("failure", str(self.path),
                                             f"{type(exc).__name__}: {exc}"))
        finally:
            self.building_since = None
        try:
            _, now = await asyncio.to_thread(self._read_and_digest)
        except RoutingConfigError:
            now = None
        if now != digest:
            # edited (or undone) while this config was built (a classifier trains for
            # minutes): what was built is no longer the file; the next polls read the file
            log.info("routing file %s changed while its previous version was built (%s): "
                     "that version is dropped, the file is read again", self.path,
                     summarize(engine.routing))
            self._content.settled = None
            return None
        try:        # the fleet may have been reloaded while this config was built
            check_against_fleet(engine.routing, self.fleet)
        except RoutingConfigError as exc:
            return self._report(ReloadResult("failure", str(self.path), str(exc)))
        engine.take_state_from(self.engine)     # on the loop, with no await before the swap
        self.engine = engine
        previous, self._in_force = self._in_force, digest
        self.in_force_since = time.time()
        for listener in self._swap_listeners:
            listener(engine)
        # which file replaced which ("what changed at 14:02": an edit and its revert read
        # alike otherwise), as /debug/routing's sha256 and the decisions' ``routing_sha256``
        # say it
        result = self._report(ReloadResult("success", str(self.path), (
            f"{summarize(engine.routing)} (sha256 {_short(previous)} -> {_short(digest)})")))
        _log_warnings(self.path, engine, self.fleet)
        return result

    def add_swap_listener(self, listener: Callable[[PolicyEngine], None]) -> None:
        """Also call ``listener(engine)`` after each successful swap."""
        self._swap_listeners.append(listener)

    def _read_and_digest(self) -> tuple[str, bytes]:
        """The routing file's text and the digest of it and of the files it names (whose
        list is read from the text, and watched from now on: a plugin file that fails to
        load too, so that its fix is seen)."""
        text = read_routing_text(self.path)
        named = files_named(text, self.path)
        self._watched = (self.path, *(file for _, file in named))
        return text, _content_digest(text.encode(), named)

    def _build(self, text: str, digest: bytes) -> PolicyEngine:
        """The engine of ``text``, whose content (with the files it names) has ``digest``."""
        routing = parse_routing_file_text(text, self._registry, str(self.path))
        return PolicyEngine.build(routing, self.fleet, self._registry, seed=self._seed,
                                  fingerprint=fingerprint_of(digest))

    def warning_count(self) -> int:
        """How many warnings the config in force gives against the fleet in force (what
        ``/debug/routing`` lists): counted again only when either was replaced."""
        engine, fleet, counted = self.engine, self.fleet, self._warnings_counted
        if counted is None or counted[0] is not engine or counted[1] is not fleet:
            counted = self._warnings_counted = (
                engine, fleet, len(fleet_warnings(engine.routing, fleet)))
        return counted[2]

    def status(self) -> dict[str, Any]:
        """What ``/debug/routing`` shows: the file, the config in force (its content's
        SHA-256, since when, its summary and warnings), since when a new one is being built
        (None: none is), and the last refusal, if the file has not been good since."""
        refusal = self.last_refusal
        return {
            "path": str(self.path),
            "sha256": self._in_force.hex() if self._in_force is not None else None,
            "in_force_since": self.in_force_since,
            # as of the watcher's last settled read (no file is read for this answer)
            "file_is_in_force": (self._content.settled is not None
                                 and self._content.settled == self._in_force),
            # a new config being built (a classifier's encoder may train for minutes)
            "building_since": self.building_since,
            "summary": summarize(self.engine.routing),
            "warnings": fleet_warnings(self.engine.routing, self.fleet),
            "last_refusal": None if refusal is None else {"at": refusal[0],
                                                          "reason": refusal[1]},
        }

    def _report(self, result: ReloadResult) -> ReloadResult:
        if result.result == "success":
            self.last_refusal = None
            log.info("routing reloaded from %s: %s", result.path, result.message)
        else:
            named = (result.message if result.message.startswith(f"{result.path}: ")
                     else f"{result.path}: {result.message}")
            self.last_refusal = (time.time(), named)
            log.error("routing reload refused, keeping the last good config: %s", named)
        if self._on_result is not None:
            try:
                self._on_result(result)
            except Exception:
                log.exception("reload result callback failed")
        return result

    def start(self) -> None:
        """Poll the file every ``interval_s`` on the running loop, until ``stop()``."""
        self._periodic.start()

    async def stop(self) -> None:
        await self._periodic.stop()


def _log_warnings(path: Path, engine: PolicyEngine, fleet: FleetConfig) -> None:
    """What ``kvroute validate`` warns of in the config now in force (a profile without a
    healthy filter, say, left by a file cut short), in the log."""
    for warning in fleet_warnings(engine.routing, fleet):
        log.warning("routing file %s: %s", path, warning)


def files_named(text: str, path: Path) -> list[tuple[str, Path]]:
    """The files besides the routing file (at ``path``) that building the config of
    ``text`` reads, each as written and where it is: its semantic section's
    ``examples_file`` and the ``.py`` files of its ``plugin_modules``, relative to the
    routing file's folder. Read from the YAML alone: no plugin code runs, and a file that
    fails to load is named (and watched) all the same."""
    try:
        doc = load_config_yaml(text)
    except YamlTextError:
        return []
    if not isinstance(doc, dict):
        return []
    folder = source_folder(str(path))
    named: list[tuple[str, Path]] = []
    semantic = doc.get("semantic")
    examples = semantic.get("examples_file") if isinstance(semantic, dict) else None
    if isinstance(examples, str) and examples:
        named.append((examples, folder / examples))
    entries = doc.get(PLUGIN_MODULES_KEY)
    for entry in entries if isinstance(entries, list) else ():
        if isinstance(entry, str) and is_file_entry(entry.strip()):
            named.append((entry.strip(), entry_path(entry.strip(), folder)))
    return named


def _read_now(path: Path) -> _Read:
    """The routing file and the files it names as they are now (digest None when the
    routing file cannot be read)."""
    stamps = _stamps((path,))
    try:
        content = path.read_bytes()
        named = files_named(content.decode("utf-8"), path)
    except (OSError, UnicodeDecodeError):
        return _Read((path,), stamps, None)
    watched = (path, *(file for _, file in named))
    return _Read(watched, (stamps[0], *_stamps(watched[1:])), _content_digest(content, named))


def _stamps(paths: tuple[Path, ...]) -> tuple[FileStamp | None, ...]:
    return tuple(file_stamp(p) for p in paths)


def _content_digest(content: bytes, named: Sequence[tuple[str, Path]]) -> bytes:
    """SHA-256 of the routing file's ``content`` and of the files it names (``named``:
    ``files_named``), each by its name as written (the same files in another folder are
    the same config) and its bytes or the reason it cannot be read."""
    digest = hashlib.sha256(content)
    for name, file in named:
        digest.update(b"\0" + name.encode() + b"\0" + file_digest(file))
    return digest.digest()


async def _in_daemon_thread(fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)`` in a daemon thread of its own. A build may take minutes (fine-tuning a
    semantic encoder on edited examples): in the loop's default executor it held a pool
    thread all along, and ``asyncio.run`` waits for that pool on exit, so a router told to
    stop while it trained stopped listening but did not exit until the training ended. A
    daemon thread is not waited for; a build cut short is dropped with the process."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[Any] = loop.create_future()

    def settle(result: Any, error: BaseException | None) -> None:
        if future.done():
            return
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(result)

    def run() -> None:
        result: Any = None
        error: BaseException | None = None
        try:
            result = fn(*args)
        except StopIteration as exc:
            # a Future refuses a StopIteration (TypeError in ``settle``, on the loop): the
            # reload then waited forever, ``building_since`` set
            error = RuntimeError(f"the build raised StopIteration: {exc!r}")
            error.__cause__ = exc
        except BaseException as exc:        # SystemExit too: the caller reports it
            error = exc
        with contextlib.suppress(RuntimeError):     # the loop closed while it built
            loop.call_soon_threadsafe(settle, result, error)

    threading.Thread(target=run, name="kvroute-routing-build", daemon=True).start()
    return await future
