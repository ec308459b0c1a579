"""The API keys of workers started with ``--api-key``, read from the environment.

vLLM started with ``--api-key`` (or ``VLLM_API_KEY``) refuses every ``/v1`` request without
``Authorization: Bearer <key>``, the router's own ``/v1/models`` polls and Responses lookups
included. A fleet file names, per worker, the environment variable that holds its key
(``api_key_env``), never the key itself.

* ``worker_api_key(info, environ)``: the key of one worker, or None when it declares none;
  ``MissingApiKey`` (a ``FleetConfigError``) names the worker and the variable when that
  variable is unset or empty.
* ``worker_authorizations(infos, environ)``: each such worker's base URL
  (``workers.upstream.base_url``) mapped to the ``Authorization`` value the router's HTTP
  client sends to every URL under it (``workers.upstream``) in place of whatever a client
  sent. Keyed by base URL, not origin: two workers behind one reverse proxy on path prefixes
  have one origin and two keys. Every missing variable is named in one error.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from workers.fleet import FleetConfigError
from workers.models import WorkerInfo
from workers.upstream import BaseUrl, base_url


class MissingApiKey(FleetConfigError):
    """A worker's ``api_key_env`` names a variable that is unset or empty."""


def worker_api_key(info: WorkerInfo, environ: Mapping[str, str]) -> str | None:
    keys = _keys_of([info], environ)
    return keys[0][1] if keys else None


def worker_authorizations(infos: Iterable[WorkerInfo],
                          environ: Mapping[str, str]) -> dict[BaseUrl, str]:
    return {base_url(info.url): f"Bearer {key}" for info, key in _keys_of(infos, environ)}


def _keys_of(infos: Iterable[WorkerInfo],
             environ: Mapping[str, str]) -> list[tuple[WorkerInfo, str]]:
    """Each keyed worker with its key; every variable unset or empty named in one error."""
    keyed = [(info, environ.get(info.api_key_env, "")) for info in infos
             if info.api_key_env is not None]
    missing = [info for info, key in keyed if not key]
    if missing:
        raise MissingApiKey(_missing(missing, environ))
    return keyed


def _missing(infos: list[WorkerInfo], environ: Mapping[str, str]) -> str:
    names = sorted({info.api_key_env or "" for info in infos})
    workers = ", ".join(info.id for info in infos)
    empty = all(name in environ for name in names)      # set, but to nothing
    state = "set but empty" if empty else "not set in the environment"
    return (f"worker(s) {workers}: api_key_env names {', '.join(names)}, which "
            f"{'is' if len(names) == 1 else 'are'} {state} (set it to the "
            "key the worker was started with, --api-key or VLLM_API_KEY)")
