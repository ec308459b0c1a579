"""Routing policies: where each request goes, configured in ``routing.yaml``.

* ``base``: the plugin contracts (Producer, Filter, Scorer, Picker, RoutingObserver) and
  the values flowing through a decision.
* ``registry``: plugin types by name; ``default_registry()`` collects the installed ones.
* ``config`` / ``schema`` / ``params`` / ``producer_deps`` / ``loader``: the strict,
  immutable form of ``routing.yaml`` and how it is read (``load_routing``).
* ``engine`` (``PolicyEngine``), ``rules``, ``profile``, ``cycle_keys``: deciding.
* ``reloader``: hot reload with last-good fallback; ``cli``: ``kvroute validate``.
* ``filters/``, ``scorers/``, ``pickers/``, ``producers/``: the plugins; ``peers/``: other
  routers' algorithms; ``semantic/``: the prompt classifier.

Reference: ``docs/policies.md``.
"""
