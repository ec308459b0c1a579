"""Where the files kvroute reads by default (``config/fleet.yaml``, ``config/routing.yaml``, …)
are found.

A default names a path relative to the project. It is read from the working directory when
it is there, else from the checkout kvroute runs from (``make install`` installs the checkout
itself, so ``kvroute up`` run from another directory still finds the demo fleet). A wheel
carries the code, not ``config/``: there the default is nowhere, and ``MissingDefaultFile``
says which option to pass instead.
"""

from __future__ import annotations

from pathlib import Path

CHECKOUT = Path(__file__).resolve().parents[1]   # the folder holding workers/, router/, config/
DEFAULT_FLEET = "config/fleet.yaml"
DEFAULT_ROUTING = "config/routing.yaml"


class MissingDefaultFile(Exception):
    """A default file is neither in the working directory nor in the checkout."""


def find_default(relative: str) -> Path | None:
    """``relative`` in the working directory when there, else in the checkout when there,
    else None."""
    here = Path(relative)
    if here.is_file():
        return here
    checkout = CHECKOUT / relative
    return checkout if checkout.is_file() else None


def project_path(relative: str) -> Path:
    """``relative`` where ``find_default`` finds it, else in the checkout (a path that says
    where it was looked for when it is read): the defaults of the benchmarks, which run from
    a checkout or a directory holding a copy of ``config/``."""
    found = find_default(relative)
    return found if found is not None else CHECKOUT / relative


def default_dir(relative: str) -> Path:
    """The folder ``relative`` in the working directory when there, else in the checkout
    when there, else ``relative`` itself (the working directory's, to be created)."""
    here = Path(relative)
    if here.is_dir():
        return here
    checkout = CHECKOUT / relative
    return checkout if checkout.is_dir() else here


def default_file(relative: str, option: str) -> Path:
    """The file ``find_default`` finds for ``relative``; else ``MissingDefaultFile`` naming
    ``option``, the command-line option that gives another file."""
    found = find_default(relative)
    if found is None:
        raise MissingDefaultFile(f"{relative}: no such file {_where_looked()}; it is the "
                                 f"default of {option}: pass {option} FILE")
    return found


def _where_looked() -> str:
    if (CHECKOUT / "pyproject.toml").is_file():
        return f"in this directory or in the kvroute checkout ({CHECKOUT})"
    return "in this directory (an installed kvroute carries no config/ folder)"
