"""The version kvroute reports: the installed distribution's (a checkout run from elsewhere,
its files on ``PYTHONPATH``, reports the installed one's)."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version


def installed_version() -> str:
    """The version of the installed kvroute distribution (``unknown`` when it runs from
    files no installation describes)."""
    try:
        return version("kvroute")
    except PackageNotFoundError:
        return "unknown"
