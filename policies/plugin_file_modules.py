"""A plugin file's module in ``sys.modules`` for as long as a loaded routing holds it.

A ``.py`` file of ``plugin_modules:`` is loaded under a name made of its path's and content's
digest (``policies.plugin_modules``), so each edit of the file is a new module. Each module
is kept in ``sys.modules`` by a ``FileModuleHold``: the ``PluginModule`` entries of every
routing loaded from the file share the one hold of its module, and once the last of them is
gone (the reload that replaced it has taken effect and the engine it built is dropped, a
reload refused, a one-shot ``kvroute validate``'s routing discarded) the module's
``sys.modules`` entry is removed. Edits therefore cost one module per version in use, not
one per version ever loaded. Objects of the module that something still holds (an old
plugin a request in flight reports to) keep the module itself alive and working: only its
name in ``sys.modules`` goes. The same file unchanged is loaded once while a hold of it
lives: a routing reloaded while the one in force names it takes the same module.

The hold is found from the module (its spec's ``loader_state``, the place a loader keeps
what it knows of a module it loaded), so no table of our own shadows ``sys.modules``.
"""

from __future__ import annotations

import sys
import threading
import weakref
from collections.abc import Callable
from importlib.machinery import ModuleSpec
from types import ModuleType

# one load at a time: no parse takes a module whose code still runs
_LOADING = threading.RLock()
# a hold made and its module named, or a module's name taken out once its last hold is gone,
# at once: held for a few lines, never while a file's code runs, so a hold dropped on the
# event loop never waits for a plugin file that another thread is loading (reentrant: a
# hold may die, and its release run, in the garbage collection an allocation here starts)
_NAMING = threading.RLock()


class FileModuleHold:
    """Keeps one plugin file's module in ``sys.modules`` while it is alive."""

    __slots__ = ("__weakref__", "module")

    def __init__(self, module: ModuleType) -> None:
        self.module = module


def hold_file_module(name: str, load: Callable[[], ModuleType]) -> FileModuleHold:
    """The hold of ``sys.modules[name]``, after ``load()`` (which runs the file and puts its
    module there, raising if it fails) when no module of that name is loaded."""
    with _LOADING:
        module = sys.modules.get(name)
        if module is None:
            module = load()
        with _NAMING:
            hold = current_hold(module)
            if hold is None:
                hold = FileModuleHold(module)
                _spec_of(module).loader_state = weakref.ref(hold)
                release = weakref.finalize(hold, _release, name, module)
                release.atexit = False          # nothing to tidy as the process ends
            # again: the last hold before this one may have died since the module was
            # found, and taken its name out
            sys.modules[name] = module
        return hold


def current_hold(module: ModuleType) -> FileModuleHold | None:
    """The live hold of a module ``hold_file_module`` loaded (None: none lives)."""
    spec = getattr(module, "__spec__", None)
    state = getattr(spec, "loader_state", None)
    hold = state() if isinstance(state, weakref.ref) else None
    return hold if isinstance(hold, FileModuleHold) else None


def _spec_of(module: ModuleType) -> ModuleSpec:
    spec = module.__spec__
    if spec is None:
        raise ValueError(f"module {module.__name__!r} has no spec to keep its hold in")
    return spec


def _release(name: str, module: ModuleType) -> None:
    """The last hold of ``module`` is gone: its name leaves ``sys.modules``, unless a new
    hold was made for it meanwhile or the name is another module's now."""
    with _NAMING:
        if sys.modules.get(name) is module and current_hold(module) is None:
            del sys.modules[name]
