"""Requests the HTTP parser refuses, logged as one line instead of a traceback.

aiohttp answers a request its parser cannot take (a header line over 8,190 bytes, as nginx's
default refuses too; a broken request line; a bad chunked body) with a plain-text 400 before
any handler runs, and logs it on ``aiohttp.server`` at ERROR with the parser's traceback, so
any client could fill the router's log with tracebacks. ``OneLineBadHttp`` keeps such a
record as one WARNING line naming the client and the parser's reason (cut to 200
characters; never a header's value, which may be a key): the first, then one in every
``EVERY`` with the count so far, so that a client sending garbage cannot flood the log;
every other record of that logger (a failure of the server itself) passes as it is. It is
installed while the app runs (``router.app``).
"""

from __future__ import annotations

import logging
import re

from aiohttp.http_exceptions import HttpProcessingError, LineTooLong
from aiohttp.web_protocol import RequestPayloadError

SERVER_LOGGER = "aiohttp.server"
MAX_REASON_CHARS = 200
EVERY = 1000          # after the first, one line in this many client errors
# a refused header line is quoted in the parser's reason: nothing after the name of a header
# that may carry a key is shown (a key may hold quotes, the name a stray control character)
_SECRET_HEADER = re.compile(r"(authorization|x-api-key|api-key|cookie).*",
                            re.IGNORECASE | re.DOTALL)


class OneLineBadHttp(logging.Filter):
    """Turns the server logger's records of client HTTP errors (4xx) into one-line warnings,
    the first and then one in every ``EVERY``."""

    def __init__(self) -> None:
        super().__init__()
        self.client_errors = 0

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        if isinstance(error, RequestPayloadError) and isinstance(error.__cause__,
                                                                 HttpProcessingError):
            error = error.__cause__     # the rest of a body that could not be decoded
        if isinstance(error, HttpProcessingError) and 400 <= error.code < 500:
            self.client_errors += 1
            if self.client_errors > 1 and self.client_errors % EVERY:
                return False
            if isinstance(error, LineTooLong):   # it quotes the line's start: a value, a key
                reason = (f"a line of the request's head over {error.args[1]} bytes (not "
                          "shown: it may be a header's value, a key)")
            else:
                reason = _SECRET_HEADER.sub(r"\1 <not shown>",
                                            " ".join(str(error.message).split()))
            if len(reason) > MAX_REASON_CHARS:
                reason = reason[:MAX_REASON_CHARS] + "..."
            record.args = (record.getMessage(), error.code, reason, self.client_errors, EVERY)
            record.msg = ("%s (answered %d): %s [%d such request(s) so far; one line for "
                          "the first, then one in %d]")
            record.levelno, record.levelname = logging.WARNING, "WARNING"
            record.exc_info = record.exc_text = None
        return True

    def install(self) -> None:
        logging.getLogger(SERVER_LOGGER).addFilter(self)

    def remove(self) -> None:
        logging.getLogger(SERVER_LOGGER).removeFilter(self)
