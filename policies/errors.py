"""The one error the policy configuration raises.

``RoutingConfigError`` is raised while reading, validating or building a routing
configuration; its message always starts with the path of the offending field, e.g.
``profiles.default.scorers[1].weight: must be a number``. Deciding never raises: see
``policies.engine``.

``ParamError`` is what a plugin's parameter dataclass raises from ``__post_init__`` when a
value is out of range; the parameter builder prefixes it with the field's full path.
"""

from __future__ import annotations


class RoutingConfigError(ValueError):
    """A routing configuration is invalid; the message names the field."""


class ParamError(ValueError):
    """One parameter of a plugin is invalid. ``field`` is its name inside the params block."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message
