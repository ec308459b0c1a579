"""How the router's log lines are written (``--log-format``): text for a terminal, or one
JSON object a line for a log pipeline (Loki, Elasticsearch, Cloud Logging) that would
otherwise split a traceback into lines of their own and parse levels out of text.

A JSON line holds ``time`` (UTC, ISO 8601 to the millisecond), ``level``, ``logger``,
``message``, ``replica`` for a process of ``serve --processes`` (as the text lines name it
in brackets), and ``exception`` with the whole traceback when there is one.
"""

from __future__ import annotations

import datetime
import logging

import orjson

LOG_FORMATS = ("text", "json")
# the levels ``--log-level`` takes, in any case (``debug``, as vLLM and uvicorn take it)
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
REPLICA_TEXT_FORMAT = "%(asctime)s %(levelname)s [{replica}] %(name)s: %(message)s"


class JsonLogFormatter(logging.Formatter):
    """A record as one line of JSON."""

    def __init__(self, replica: str | None = None) -> None:
        super().__init__()
        self._replica = replica

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, object] = {
            "time": datetime.datetime.fromtimestamp(record.created, datetime.UTC)
            .isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            "level": record.levelname, "logger": record.name,
            "message": _message(record)}
        if self._replica is not None:
            entry["replica"] = self._replica
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        elif record.exc_text:        # (a record formatted before, another process's)
            entry["exception"] = record.exc_text
        if record.stack_info:
            entry["stack"] = self.formatStack(record.stack_info)
        try:
            return orjson.dumps(entry).decode()
        except orjson.JSONEncodeError:     # text that is no UTF-8 (a lone surrogate): escaped
            return orjson.dumps({key: _escaped(value) for key, value in entry.items()}).decode()


def _message(record: logging.LogRecord) -> str:
    """The record's message; one whose arguments do not fit its format is written as both
    (the text handler would print a multi-line logging error into the stream instead)."""
    try:
        return record.getMessage()
    except Exception:  # (any error a bad format raises)
        return f"{record.msg!r} % {record.args!r}"


def _escaped(value: object) -> object:
    """``value`` with what UTF-8 cannot carry written as backslash escapes."""
    if isinstance(value, str):
        return value.encode("utf-8", "backslashreplace").decode("utf-8")
    return value


def log_formatter(log_format: str, replica: str | None = None) -> logging.Formatter:
    """The formatter of ``log_format`` (one of ``LOG_FORMATS``), naming ``replica`` when
    given (``ValueError`` for another format)."""
    if log_format == "json":
        return JsonLogFormatter(replica)
    if log_format == "text":
        if replica is None:
            return logging.Formatter(TEXT_FORMAT)
        # (a ``%`` in the replica's name escaped for logging's format)
        return logging.Formatter(REPLICA_TEXT_FORMAT.format(replica=replica.replace("%", "%%")))
    raise ValueError(f"log format {log_format!r}: one of {', '.join(LOG_FORMATS)}")


# logging's other names of its levels, taken too
LEVEL_ALIASES = {"WARN": "WARNING", "FATAL": "CRITICAL", "NOTSET": "NOTSET"}


def log_level(name: str) -> str:
    """``name`` as one of ``LOG_LEVELS``, given in any case (``debug``: ``DEBUG``), or one
    of logging's other names (``WARN``, ``FATAL``, ``NOTSET``); ``ValueError`` naming
    ``--log-level`` for another (logging's own error was a traceback)."""
    level = name.strip().upper()
    level = LEVEL_ALIASES.get(level, level)
    if level not in LOG_LEVELS and level != "NOTSET":
        raise ValueError(f"--log-level: must be one of {', '.join(LOG_LEVELS)} (in any case), "
                         f"got {name!r}")
    return level


def configure_logging(level: str, log_format: str = "text", replica: str | None = None) -> None:
    """The root logger at ``level`` (one of ``LOG_LEVELS``, in any case), writing to standard
    error in ``log_format``."""
    handler = logging.StreamHandler()
    handler.setFormatter(log_formatter(log_format, replica))
    logging.basicConfig(level=log_level(level), handlers=[handler])


def set_log_format(log_format: str, replica: str | None = None) -> None:
    """The root logger's handlers write ``log_format`` from now on, naming ``replica``."""
    for handler in logging.getLogger().handlers:
        handler.setFormatter(log_formatter(log_format, replica))
