"""The open-file limit of a kvroute process, raised to what the system allows.

Every proxied request holds two sockets, the client's and the worker's, and a stream holds
them for as long as it lasts, so a router serves at most about half its open-file limit of
requests at once. The usual soft limit, 1,024, is a few hundred streams; past it ``accept``
and ``connect`` fail with EMFILE, and not only for the requests past the limit: a connection
to a worker fails like a worker that is down, and is retried on the others, which fail too.
As Go's runtime does, the soft limit is raised to the hard one at start (at most
``MAX_OPEN_FILES``); the hard limit is the administrator's and is never changed. Processes
started afterwards (the emulated workers of ``kvroute up``) inherit it.
"""

from __future__ import annotations

import logging
import resource

log = logging.getLogger(__name__)

MAX_OPEN_FILES = 1 << 20


def raise_open_file_limit(cap: int = MAX_OPEN_FILES) -> int:
    """Raise the soft ``RLIMIT_NOFILE`` to the hard limit, at most ``cap``; the soft limit
    after. A failure is logged, never raised: the process runs with the limit it has."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return soft
    target = cap if hard == resource.RLIM_INFINITY else min(hard, cap)
    if soft >= target:
        return soft
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    except (ValueError, OSError) as exc:
        log.warning("open-file limit: could not raise %d to %d (%s); about %d requests can "
                    "be in flight at once", soft, target, exc, soft // 2)
        return soft
    log.info("open-file limit raised from %d to %d", soft, target)
    return target
