"""Plugin types from outside kvroute: the routing file's ``plugin_modules:`` list.

Each entry names a Python module that exposes ``register(registry)``, as kvroute's own plugin
modules do (``policies.registry.BUILTIN_PLUGIN_MODULES``):

* an importable module (``my_company.kvroute_plugins``), imported once per process: a new
  version of its code needs a restart;
* a ``.py`` file, its path relative to the routing file's folder (``plugins/freshness.py``).
  A file is loaded under a name made of its path's and content's digest
  (``kvroute_plugin_<stem>_<hex>``), so an edited file is a new module, taken by the live
  reload like the routing file itself; the same file unchanged is loaded once. Its
  ``PluginModule`` holds the module, which stays in ``sys.modules`` only while some loaded
  routing holds it (``policies.plugin_file_modules``): the versions an edited file leaves
  behind do not pile up there.

``load_plugin_modules`` imports the entries of one routing file (every failure a
``RoutingConfigError`` naming the entry); ``with_plugin_modules`` gives a copy of a registry
holding their types too (registering a type name that is taken is refused, naming the
module). The routing file is trusted as the router's own code is: listing a module runs it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib
import importlib.util
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

from policies.config import PluginModule
from policies.errors import RoutingConfigError
from policies.plugin_file_modules import hold_file_module
from policies.registry import PluginRegistry

PLUGIN_MODULES_KEY = "plugin_modules"
MAX_PLUGIN_FILE_BYTES = 4 * 1024 * 1024     # as a routing file: a plugin is a few KB
FILE_SUFFIX = ".py"
FILE_MODULE_PREFIX = "kvroute_plugin_"


def load_plugin_modules(raw: Any, base_dir: Path) -> tuple[PluginModule, ...]:
    """Import each entry of ``raw`` (the ``plugin_modules:`` value; None: none), files
    relative to ``base_dir``."""
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise RoutingConfigError(f"{PLUGIN_MODULES_KEY}: must be a list of module names or "
                                 f".py files, got {type(raw).__name__}")
    loaded: list[PluginModule] = []
    for i, entry in enumerate(raw):
        where = f"{PLUGIN_MODULES_KEY}[{i}]"
        if not isinstance(entry, str) or not entry.strip():
            raise RoutingConfigError(f"{where}: must be a module name or a .py file")
        entry = entry.strip()
        if is_file_entry(entry):
            module = _load_file(entry, base_dir, where)
        else:
            module = PluginModule(entry, _import_module(entry, where).__name__)
        for known in loaded:
            if known.module_name == module.module_name and known.path == module.path:
                again = f" (as {known.entry!r})" if known.entry != entry else ""
                raise RoutingConfigError(f"{where}: {entry!r} is listed twice{again}")
        loaded.append(module)
    return tuple(loaded)


def is_file_entry(entry: str) -> bool:
    """Whether a ``plugin_modules`` entry names a file (else an importable module)."""
    return entry.endswith(FILE_SUFFIX) or "/" in entry


def entry_path(entry: str, base_dir: Path) -> Path:
    """The file a file entry names: absolute and normalised, its symbolic links kept (a
    link moved to another file is that file's edit)."""
    return Path(os.path.abspath(base_dir / entry))


def with_plugin_modules(registry: PluginRegistry,
                        modules: Sequence[PluginModule]) -> PluginRegistry:
    """``registry`` itself when ``modules`` is empty, else a copy with each module's types."""
    return registered(registry, modules)[0]


def registered(registry: PluginRegistry, modules: Sequence[PluginModule]
               ) -> tuple[PluginRegistry, tuple[PluginModule, ...]]:
    """``with_plugin_modules``, and the modules with what each registered (``types``,
    ``sections``)."""
    if not modules:
        return registry, tuple(modules)
    extended = registry.copy()
    done: list[PluginModule] = []
    for i, module in enumerate(modules):
        where = f"{PLUGIN_MODULES_KEY}[{i}] ({module.entry})"
        if module.hold is None and module.path is not None:  # a file's, made without it
            loaded = _load_file(module.path, Path("/"), where)
            module = dataclasses.replace(module, module_name=loaded.module_name,
                                         hold=loaded.hold)
        if module.hold is not None:
            found = module.hold.module
        else:
            found = sys.modules.get(module.module_name) or _import_module(module.module_name,
                                                                          where)
        register = getattr(found, "register", None)
        if not callable(register):
            raise RoutingConfigError(f"{where}: has no register(registry) function")
        types, sections = set(extended.type_names()), set(extended.sections)
        try:
            register(extended)
        except (Exception, SystemExit) as exc:
            raise RoutingConfigError(f"{where}: register(registry) failed: "
                                     f"{_one_line(exc)}") from exc
        done.append(dataclasses.replace(
            module, types=tuple(t for t in extended.type_names() if t not in types),
            sections=tuple(s for s in extended.sections if s not in sections)))
    return extended, tuple(done)


def _import_module(name: str, where: str) -> ModuleType:
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        missing = exc.name or name
        detail = (f"no module named {missing!r}"
                  if missing == name or name.startswith(f"{missing}.")
                  else f"importing it needs {missing!r}, which is not installed")
        raise RoutingConfigError(f"{where}: cannot import {name!r}: {detail} (a file is "
                                 f"named with its {FILE_SUFFIX} suffix)") from exc
    except (Exception, SystemExit) as exc:
        raise RoutingConfigError(f"{where}: cannot import {name!r}: {_one_line(exc)}") from exc


def _load_file(entry: str, base_dir: Path, where: str) -> PluginModule:
    path = entry_path(entry, base_dir)
    try:
        if path.is_dir():
            raise RoutingConfigError(f"{where}: {entry!r} is a folder: name each "
                                     f"{FILE_SUFFIX} file of it")
        if path.suffix != FILE_SUFFIX:
            raise RoutingConfigError(f"{where}: {entry!r}: a plugin file is a {FILE_SUFFIX} "
                                     "file")
        with path.open("rb") as fh:
            source = fh.read(MAX_PLUGIN_FILE_BYTES + 1)
    except RoutingConfigError:
        raise
    except OSError as exc:
        raise RoutingConfigError(f"{where}: cannot read {str(path)!r}: "
                                 f"{exc.strerror or exc}") from exc
    except ValueError as exc:              # a NUL byte in the path
        raise RoutingConfigError(f"{where}: {entry!r}: not a usable path ({exc})") from exc
    if len(source) > MAX_PLUGIN_FILE_BYTES:
        raise RoutingConfigError(f"{where}: {entry!r} is larger than "
                                 f"{MAX_PLUGIN_FILE_BYTES >> 20} MiB: not a plugin file")
    # one module per file and content: two files of the same code are two modules (each
    # its own __file__ and globals); the same file unchanged is loaded once
    stem = "".join(c if c.isalnum() else "_" for c in path.stem)
    digest = hashlib.sha256(str(path).encode() + b"\0" + source).hexdigest()[:16]
    name = f"{FILE_MODULE_PREFIX}{stem}_{digest}"
    hold = hold_file_module(name, lambda: _run_file(name, path, source, entry, where))
    return PluginModule(entry, name, str(path), hold=hold)


def _run_file(name: str, path: Path, source: bytes, entry: str, where: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise RoutingConfigError(f"{where}: cannot load {str(path)!r} as a module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module        # as an import does: the module may import itself
    try:
        # the bytes digested, not the file again: a write meanwhile is the next load's;
        # compiled with the file's own future imports, not this module's
        exec(compile(source, str(path), "exec", dont_inherit=True), module.__dict__)
    except (Exception, SystemExit) as exc:
        del sys.modules[name]
        raise RoutingConfigError(f"{where}: loading {entry!r} failed: "
                                 f"{_one_line(exc)}") from exc
    except BaseException:          # KeyboardInterrupt: no half-run module left behind
        del sys.modules[name]
        raise
    return module


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    if isinstance(exc, SyntaxError) and exc.lineno is not None:
        text = f"{exc.msg} (line {exc.lineno})"
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
