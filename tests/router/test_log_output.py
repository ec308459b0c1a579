"""``--log-format``: the text lines as before, and JSON lines a log pipeline reads whole
(levels, loggers, a replica's name, a traceback in one line); ``kvroute serve --processes 2
--log-format json`` writes every process's lines so."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import orjson
import pytest

from router.log_output import JsonLogFormatter, log_formatter, log_level
from tests.router.gateway_support import MODEL, REPO_ROOT, url_fleet_file, wait_healthy
from workers.emulator.process import EmulatorProcess
from workers.ports import free_port


def _record(message: str, *args: object, exc: bool = False) -> logging.LogRecord:
    exc_info = None
    if exc:
        try:
            raise ValueError("boom")
        except ValueError:
            exc_info = sys.exc_info()
    record = logging.LogRecord("router.proxy", logging.WARNING, __file__, 1, message, args,
                               exc_info)
    record.created = 1_765_000_000.25
    return record


def test_a_json_line_holds_the_record_and_its_traceback_whole() -> None:
    line = JsonLogFormatter("router-0-1").format(
        _record("request %s: %s failed\nsecond line", "r-1", "h100-0", exc=True))
    assert "\n" not in line
    entry = orjson.loads(line)
    assert entry["time"] == "2025-12-06T05:46:40.250Z"
    assert (entry["level"], entry["logger"], entry["replica"]) == (
        "WARNING", "router.proxy", "router-0-1")
    assert entry["message"] == "request r-1: h100-0 failed\nsecond line"
    assert entry["exception"].startswith("Traceback") and "ValueError: boom" in entry["exception"]


def test_a_message_of_any_text_is_valid_json() -> None:
    """Even with text UTF-8 cannot carry (a lone surrogate, as a decoding with
    ``surrogateescape`` leaves): it is escaped, not a logging error."""
    entry = orjson.loads(JsonLogFormatter().format(_record("client said %s", "\udcff \x00 \"é\"")))
    assert "replica" not in entry and "exception" not in entry
    assert entry["message"] == "client said \\udcff \x00 \"é\""


def test_a_record_whose_arguments_do_not_fit_or_formatted_before_stays_one_line() -> None:
    bad = JsonLogFormatter().format(_record("%d workers", "many"))
    assert orjson.loads(bad)["message"] == "'%d workers' % ('many',)"
    formatted = _record("failed", exc=True)
    formatted.exc_text = logging.Formatter().formatException(formatted.exc_info)  # type: ignore[arg-type]
    formatted.exc_info = None             # (as a record from another process comes)
    assert "ValueError: boom" in orjson.loads(JsonLogFormatter().format(formatted))["exception"]


def test_text_lines_are_as_before_and_name_the_replica() -> None:
    assert log_formatter("text")._fmt == "%(asctime)s %(levelname)s %(name)s: %(message)s"
    assert log_formatter("text", "r%1-0")._fmt == (
        "%(asctime)s %(levelname)s [r%%1-0] %(name)s: %(message)s")
    with pytest.raises(ValueError, match="one of text, json"):
        log_formatter("xml")


@pytest.mark.parametrize(("given", "level"), [
    ("debug", "DEBUG"), ("Info", "INFO"), ("WARNING", "WARNING"), ("error", "ERROR"),
    ("critical", "CRITICAL"), ("warn", "WARNING"), ("FATAL", "CRITICAL"),
    ("notset", "NOTSET")])
def test_a_log_level_is_taken_in_any_case(given: str, level: str) -> None:
    """``debug``, as vLLM and uvicorn take it, reached ``logging.basicConfig`` as it was
    given, which raised ``ValueError: Unknown level: 'debug'``; logging's other names of
    its levels are taken too."""
    assert log_level(given) == level


@pytest.mark.parametrize("given", ["verbose", "warn ing", "", "10"])
def test_a_log_level_logging_has_not_is_refused_naming_the_option(given: str) -> None:
    with pytest.raises(ValueError) as raised:
        log_level(given)
    assert str(raised.value) == ("--log-level: must be one of DEBUG, INFO, WARNING, ERROR, "
                                 f"CRITICAL (in any case), got {given!r}")


@pytest.mark.integration
def test_every_process_of_serve_writes_json_lines(tmp_path: Path) -> None:
    with EmulatorProcess(gpu="h100", time_scale=0.01, served_model_names=[MODEL]) as worker:
        fleet = url_fleet_file(tmp_path, {"w0": worker.url})
        port = free_port()
        log_path = tmp_path / "serve.log"
        with log_path.open("wb") as log:
            proc = subprocess.Popen(
                [sys.executable, "-m", "router.cli", "serve", "--fleet", str(fleet),
                 "--routing", str(REPO_ROOT / "config/routing.yaml"), "--port", str(port),
                 "--processes", "2", "--log-format", "json"],
                cwd=REPO_ROOT, stdout=subprocess.DEVNULL, stderr=log)
            try:
                wait_healthy(f"http://127.0.0.1:{port}", proc)
                deadline = time.monotonic() + 30
                while log_path.read_text().count("listening on") < 2:    # both processes
                    assert proc.poll() is None and time.monotonic() < deadline
                    time.sleep(0.1)
                os.kill(proc.pid, signal.SIGTERM)
                assert proc.wait(timeout=30) == 0
            finally:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
    lines = log_path.read_text().splitlines()
    entries = [orjson.loads(line) for line in lines]     # every line is JSON
    replicas = {entry.get("replica") for entry in entries}
    assert {e["level"] for e in entries} <= {"DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"}
    assert len(replicas - {None}) == 2, replicas
    assert sum("listening on" in e["message"] for e in entries) == 2
