"""Read ``routing.yaml`` from disk: ``load_routing(path) -> RoutingConfig``.

File and YAML errors become ``RoutingConfigError`` too, so callers (the reloader,
``kvroute validate``, the router at start-up) handle one exception type; the YAML is read
strictly (a repeated key is refused) and its errors are one line (``workers.yaml_text``); an
error naming a field ends with the field's line in the file (``(line 13)``).
"""

from __future__ import annotations

from pathlib import Path

from policies.config import RoutingConfig
from policies.errors import RoutingConfigError
from policies.registry import PluginRegistry, default_registry
from policies.schema import parse_routing
from workers.yaml_text import YamlTextError, key_lines, load_config_yaml, with_line


def load_routing(path: str | Path, registry: PluginRegistry | None = None) -> RoutingConfig:
    """Read and validate a routing file against ``registry`` (default: all installed types);
    an error naming a field ends with the field's line in the file."""
    return parse_routing_file_text(read_routing_text(path), registry, source=str(path))


def parse_routing_file_text(text: str, registry: PluginRegistry | None = None,
                            source: str = "<memory>") -> RoutingConfig:
    """``parse_routing_text`` of a file's text: an error naming a field ends with the
    field's line in it (``(line 13)``)."""
    try:
        return parse_routing_text(text, registry, source=source)
    except RoutingConfigError as exc:     # the field it names, found in the text: its line
        raise RoutingConfigError(with_line(str(exc), key_lines(text))) from exc


MAX_ROUTING_FILE_BYTES = 4 * 1024 * 1024     # a routing file is a few KB; a semantic one ~100 KB


def read_routing_text(path: str | Path) -> str:
    """The file's text; ``RoutingConfigError`` when it cannot be read, is not UTF-8 or is
    larger than ``MAX_ROUTING_FILE_BYTES`` (parsing tens of MB would take a minute)."""
    try:
        with Path(path).open("rb") as fh:
            data = fh.read(MAX_ROUTING_FILE_BYTES + 1)
        if len(data) > MAX_ROUTING_FILE_BYTES:
            raise RoutingConfigError(f"{path}: larger than {MAX_ROUTING_FILE_BYTES >> 20} MiB: "
                                     "not a routing file (labelled examples go in the "
                                     "semantic section's examples_file)")
        return data.decode("utf-8")
    except OSError as exc:
        raise RoutingConfigError(f"{path}: cannot read routing file: {exc.strerror}") from exc
    except UnicodeDecodeError as exc:
        raise RoutingConfigError(f"{path}: not UTF-8 text ({exc.reason})") from exc


def parse_routing_text(text: str, registry: PluginRegistry | None = None,
                       source: str = "<memory>") -> RoutingConfig:
    try:
        data = load_config_yaml(text)
    except YamlTextError as exc:
        raise RoutingConfigError(f"{source}: invalid YAML: {exc}") from exc
    return parse_routing(data, registry if registry is not None else default_registry(), source)
