"""policies/plugin_modules.py: plugin types from the routing file's ``plugin_modules:``."""

from __future__ import annotations

import asyncio
import gc
import os
import sys
import textwrap
import threading
import time
import types
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from policies.base import RoutingRequest
from policies.engine import PolicyEngine
from policies.errors import RoutingConfigError
from policies.loader import load_routing, parse_routing_text
from policies.reloader import PolicyReloader, files_named
from workers.fleet import FleetConfig
from workers.models import WorkerView

FLEET = FleetConfig({}, {}, ())
MODEL = "meta-llama/Llama-3.1-8B-Instruct"
ViewFactory = Callable[..., WorkerView]

# a scorer that prefers the worker whose label ``lane`` is its ``lane`` parameter
LANE_PLUGIN = '''
from dataclasses import dataclass

from policies.errors import ParamError


@dataclass(frozen=True, slots=True)
class LaneParams:
    lane: str = "{lane}"

    def __post_init__(self) -> None:
        if not self.lane:
            raise ParamError("lane", "must not be empty")


class LaneScorer:
    def __init__(self, name, params):
        self.name = name
        self.lane = params.lane

    def score(self, request, workers, cycle):
        return {{w.id: 1.0 if w.info.labels.get("lane") == self.lane else 0.0 for w in workers}}


def register(registry):
    registry.register("{type_name}", "scorer", LaneParams,
                      lambda params, ctx: LaneScorer(ctx.name, params))
'''

ROUTING = """
plugin_modules: [{entry}]
profiles:
  default:
    filters: [{{type: model}}]
    scorers: [{{type: {type_name}}}]
"""


def plugin_source(lane: str = "fast", type_name: str = "lane") -> str:
    return textwrap.dedent(LANE_PLUGIN).format(lane=lane, type_name=type_name)


def routing_text(entry: str, type_name: str = "lane") -> str:
    return textwrap.dedent(ROUTING).format(entry=entry, type_name=type_name)


@pytest.fixture
def lanes(view: ViewFactory) -> list[WorkerView]:
    return [view("w-slow", labels={"lane": "slow"}), view("w-fast", labels={"lane": "fast"})]


@pytest.fixture
def plugin_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "plugins"
    folder.mkdir()
    return folder


@pytest.fixture
def clean_modules() -> Iterator[None]:
    """The plugin modules a test loads leave ``sys.modules`` with it."""
    before = set(sys.modules)
    yield
    for name in set(sys.modules) - before:
        if name.startswith(("kvroute_plugin_", "acme_kvroute_plugins")):
            del sys.modules[name]


def chosen(engine: PolicyEngine, views: list[WorkerView]) -> str | None:
    return engine.decide(RoutingRequest(request_id="r1", model=MODEL), views).worker_id


@pytest.mark.usefixtures("clean_modules")
def test_a_file_beside_the_routing_file_adds_a_scorer(tmp_path: Path, plugin_dir: Path,
                                                      lanes: list[WorkerView]) -> None:
    (plugin_dir / "lane.py").write_text(plugin_source("fast"))
    routing_file = tmp_path / "routing.yaml"
    routing_file.write_text(routing_text("plugins/lane.py"))
    routing = load_routing(routing_file)
    assert [m.entry for m in routing.plugin_modules] == ["plugins/lane.py"]
    assert routing.plugin_modules[0].path == str(plugin_dir / "lane.py")
    engine = PolicyEngine.build(routing, FLEET, seed=0)
    assert chosen(engine, lanes) == "w-fast"
    assert files_named(routing_file.read_text(), routing_file) == [
        ("plugins/lane.py", plugin_dir / "lane.py")]


@pytest.mark.usefixtures("clean_modules")
def test_an_importable_module_adds_a_scorer_with_its_parameters(
        tmp_path: Path, lanes: list[WorkerView], monkeypatch: pytest.MonkeyPatch) -> None:
    package = tmp_path / "acme_kvroute_plugins"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "lanes.py").write_text(plugin_source("fast"))
    monkeypatch.syspath_prepend(str(tmp_path))
    text = routing_text("acme_kvroute_plugins.lanes").replace(
        "{type: lane}", "{type: lane, params: {lane: slow}}")
    engine = PolicyEngine.build(parse_routing_text(text), FLEET, seed=0)
    assert chosen(engine, lanes) == "w-slow"
    with pytest.raises(RoutingConfigError,
                       match=r"profiles\.default\.scorers\[0\]\.params\.lane: must not be empty"):
        parse_routing_text(text.replace("lane: slow", "lane: ''"))


@pytest.mark.usefixtures("clean_modules")
def test_a_document_from_memory_reads_files_from_the_working_directory(
        tmp_path: Path, plugin_dir: Path, lanes: list[WorkerView],
        monkeypatch: pytest.MonkeyPatch) -> None:
    (plugin_dir / "lane.py").write_text(plugin_source("slow"))
    monkeypatch.chdir(tmp_path)
    engine = PolicyEngine.build(parse_routing_text(routing_text("plugins/lane.py")), FLEET,
                                seed=0)
    assert chosen(engine, lanes) == "w-slow"


@pytest.mark.usefixtures("clean_modules")
def test_a_file_is_loaded_once_per_content(tmp_path: Path, plugin_dir: Path,
                                            lanes: list[WorkerView]) -> None:
    plugin = plugin_dir / "lane.py"
    plugin.write_text(plugin_source("fast") + "\nLOADS = []\nLOADS.append(1)\n")
    routing_file = tmp_path / "routing.yaml"
    routing_file.write_text(routing_text("plugins/lane.py"))
    first = load_routing(routing_file).plugin_modules[0]
    again = load_routing(routing_file).plugin_modules[0]
    assert first.module_name == again.module_name
    assert sys.modules[first.module_name].LOADS == [1]    # not run again
    # compiled with its own future imports only (not with the loader's postponed annotations)
    assert sys.modules[first.module_name].LaneParams.__annotations__ == {"lane": str}

    plugin.write_text(plugin_source("slow"))                # edited: a new module
    edited = load_routing(routing_file)
    assert edited.plugin_modules[0].module_name != first.module_name
    assert chosen(PolicyEngine.build(edited, FLEET, seed=0), lanes) == "w-slow"


@pytest.mark.usefixtures("clean_modules")
async def test_an_edited_plugin_file_is_reloaded_like_the_routing_file(
        tmp_path: Path, plugin_dir: Path, lanes: list[WorkerView]) -> None:
    plugin = plugin_dir / "lane.py"
    plugin.write_text(plugin_source("fast"))
    routing_file = tmp_path / "routing.yaml"
    routing_file.write_text(routing_text("plugins/lane.py"))
    reloader = PolicyReloader.load(routing_file, FLEET, seed=0)
    assert chosen(reloader.engine, lanes) == "w-fast"

    plugin.write_text(plugin_source("slow"))
    stat = plugin.stat()
    os.utime(plugin, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))
    assert await reloader.check() is None          # seen; waits for the file to hold still
    result = await reloader.check()
    assert result is not None and result.result == "success"
    assert chosen(reloader.engine, lanes) == "w-slow"

    plugin.write_text("def register(registry):\n    raise RuntimeError('half written')\n")
    os.utime(plugin, ns=(stat.st_atime_ns, stat.st_mtime_ns + 2_000_000))
    assert await reloader.check() is None
    result = await reloader.check()
    assert result is not None and result.result == "failure"
    assert result.message == ("plugin_modules[0] (plugins/lane.py): register(registry) failed: "
                              "RuntimeError: half written (line 2)")
    assert chosen(reloader.engine, lanes) == "w-slow"    # the last good engine serves on

    # the plugin file mended alone (the routing file untouched) is seen and applied
    plugin.write_text(plugin_source("fast"))
    os.utime(plugin, ns=(stat.st_atime_ns, stat.st_mtime_ns + 3_000_000))
    assert await reloader.check() is None
    result = await reloader.check()
    assert result is not None and result.result == "success"
    assert chosen(reloader.engine, lanes) == "w-fast"


@pytest.mark.usefixtures("clean_modules")
@pytest.mark.parametrize(("entries", "files", "message"), [
    ("plugins/lane.py", {}, r"plugin_modules: must be a list of module names or \.py files, "
                            r"got str"),
    ("[3]", {}, r"plugin_modules\[0\]: must be a module name or a \.py file"),
    ("['  ']", {}, r"plugin_modules\[0\]: must be a module name or a \.py file"),
    ("[plugins/lane.py, plugins/lane.py]", {"lane.py": plugin_source()},
     r"plugin_modules\[1\]: 'plugins/lane.py' is listed twice"),
    ("[plugins/missing.py]", {}, r"plugin_modules\[0\]: cannot read '.*/plugins/missing\.py': "
                                 r"No such file or directory"),
    ("[plugins/lane]", {}, r"plugin_modules\[0\]: 'plugins/lane': a plugin file is a \.py file"),
    ("[kvroute_no_such_package.plugins]", {},
     r"plugin_modules\[0\]: cannot import 'kvroute_no_such_package\.plugins': no module named "
     r"'kvroute_no_such_package' \(a file is named with its \.py suffix\)"),
    ("[plugins/syntax.py]", {"syntax.py": "x = (\n"},
     r"plugin_modules\[0\]: loading 'plugins/syntax\.py' failed: SyntaxError: .*\(line 1\)"),
    ("[plugins/needs.py]", {"needs.py": "import kvroute_no_such_dependency\n"},
     r"plugin_modules\[0\]: loading 'plugins/needs\.py' failed: ModuleNotFoundError: "
     r"No module named 'kvroute_no_such_dependency'"),
    ("[plugins/exits.py]", {"exits.py": "raise SystemExit(3)\n"},
     r"plugin_modules\[0\]: loading 'plugins/exits\.py' failed: SystemExit: 3"),
    ("[plugins/empty.py]", {"empty.py": "X = 1\n"},
     r"plugin_modules\[0\] \(plugins/empty\.py\): has no register\(registry\) function"),
    ("[plugins/needs.py]", {"needs.py": plugin_source().replace(
        "LaneScorer(ctx.name, params))", "LaneScorer(ctx.name, params), needs=('lane'))")},
     r"plugin_modules\[0\] \(plugins/needs\.py\): register\(registry\) failed: ValueError: "
     r"plugin type 'lane': needs must be a tuple of field names, not the string 'lane' "
     r"\(write \('lane',\)\)"),
    ("[plugins/untyped.py]", {"untyped.py": plugin_source().replace(
        '"scorer", LaneParams,', '"scorer", None,')},
     r"plugin_modules\[0\] \(plugins/untyped\.py\): register\(registry\) failed: "
     r"ValueError: plugin type 'lane': its parameters must be a dataclass type, not None"),
    ("[plugins/clash.py]", {"clash.py": plugin_source(type_name="queue-depth")},
     r"plugin_modules\[0\] \(plugins/clash\.py\): register\(registry\) failed: ValueError: "
     r"plugin type 'queue-depth' is already registered"),
])
def test_what_cannot_be_loaded_is_refused_naming_the_entry(
        tmp_path: Path, plugin_dir: Path, entries: str, files: dict[str, str],
        message: str) -> None:
    for name, text in files.items():
        (plugin_dir / name).write_text(text)
    routing_file = tmp_path / "routing.yaml"
    routing_file.write_text(f"plugin_modules: {entries}\n"
                            "profiles: {default: {scorers: [{type: kv-usage}]}}\n")
    with pytest.raises(RoutingConfigError, match=message):
        load_routing(routing_file)
    assert not [name for name in sys.modules if name.startswith("kvroute_plugin_syntax")]


def test_an_unknown_type_points_at_plugin_modules() -> None:
    with pytest.raises(RoutingConfigError,
                       match=r"profiles\.default\.scorers\[0\]\.type: unknown scorer type "
                             r"'lane' \(known: .*; a module listed in plugin_modules: adds "
                             r"types\)"):
        parse_routing_text("profiles: {default: {scorers: [{type: lane}]}}\n")


@pytest.mark.usefixtures("clean_modules")
def test_two_modules_register_apart_and_the_base_registry_is_left_alone(
        tmp_path: Path, plugin_dir: Path, lanes: list[WorkerView]) -> None:
    (plugin_dir / "one.py").write_text(plugin_source("fast", "lane-one"))
    (plugin_dir / "two.py").write_text(plugin_source("slow", "lane-two"))
    routing_file = tmp_path / "routing.yaml"
    routing_file.write_text(textwrap.dedent("""
        plugin_modules: [plugins/one.py, plugins/two.py]
        profiles:
          default:
            scorers: [{type: lane-one, weight: 1}, {type: lane-two, weight: 3}]
    """))
    engine = PolicyEngine.build(load_routing(routing_file), FLEET, seed=0)
    assert chosen(engine, lanes) == "w-slow"
    # another file, without the list, does not see their types
    with pytest.raises(RoutingConfigError, match="unknown scorer type 'lane-one'"):
        parse_routing_text("profiles: {default: {scorers: [{type: lane-one}]}}\n")


@pytest.mark.usefixtures("clean_modules")
def test_the_same_code_in_two_folders_is_two_modules(tmp_path: Path) -> None:
    """Each file's module has its own ``__file__`` and globals, whatever the content."""
    code = (plugin_source()
            + "\nfrom pathlib import Path\nHOME = Path(__file__).parent.parent.name\n")
    homes = []
    for folder in ("x", "y"):
        (tmp_path / folder / "plugins").mkdir(parents=True)
        (tmp_path / folder / "plugins" / "lane.py").write_text(code)
        (tmp_path / folder / "routing.yaml").write_text(routing_text("plugins/lane.py"))
        module = load_routing(tmp_path / folder / "routing.yaml").plugin_modules[0]
        homes.append(sys.modules[module.module_name].HOME)
    assert homes == ["x", "y"]


@pytest.mark.usefixtures("clean_modules")
def test_one_file_listed_under_two_spellings_is_named_twice(tmp_path: Path,
                                                            plugin_dir: Path) -> None:
    (plugin_dir / "lane.py").write_text(plugin_source())
    (tmp_path / "routing.yaml").write_text(
        "plugin_modules: [plugins/lane.py, ./plugins/../plugins/lane.py]\n"
        "profiles: {default: {scorers: [{type: lane}]}}\n")
    with pytest.raises(RoutingConfigError,
                       match=r"^plugin_modules\[1\]: './plugins/\.\./plugins/lane\.py' is listed "
                             r"twice \(as 'plugins/lane\.py'\) \(line 1\)$"):
        load_routing(tmp_path / "routing.yaml")
    (tmp_path / "routing.yaml").write_text(
        "plugin_modules: [plugins/]\nprofiles: {default: {scorers: [{type: lane}]}}\n")
    with pytest.raises(RoutingConfigError,
                       match=r"^plugin_modules\[0\]: 'plugins/' is a folder: name each \.py file "
                             r"of it \(line 1\)$"):
        load_routing(tmp_path / "routing.yaml")


@pytest.mark.usefixtures("clean_modules")
async def test_a_plugin_link_moved_to_another_file_is_reloaded(
        tmp_path: Path, plugin_dir: Path, lanes: list[WorkerView]) -> None:
    versions = tmp_path / "versions"
    versions.mkdir()
    (versions / "fast.py").write_text(plugin_source("fast"))
    (versions / "slow.py").write_text(plugin_source("slow"))
    link = plugin_dir / "lane.py"
    link.symlink_to(versions / "fast.py")
    routing_file = tmp_path / "routing.yaml"
    routing_file.write_text(routing_text("plugins/lane.py"))
    reloader = PolicyReloader.load(routing_file, FLEET, seed=0)
    assert chosen(reloader.engine, lanes) == "w-fast"
    swapped = plugin_dir / "lane.tmp"             # ln -sfn: a new link renamed over the old
    swapped.symlink_to(versions / "slow.py")
    swapped.replace(link)
    assert await reloader.check() is None
    result = await reloader.check()
    assert result is not None and result.result == "success"
    assert chosen(reloader.engine, lanes) == "w-slow"


@pytest.mark.usefixtures("clean_modules")
def test_the_same_files_in_another_folder_are_the_same_config(tmp_path: Path) -> None:
    """Replicas installed under different paths agree on the fingerprint of one config."""
    fingerprints = []
    for folder in ("replica-a/deep", "replica-b"):
        (tmp_path / folder / "plugins").mkdir(parents=True)
        (tmp_path / folder / "plugins" / "lane.py").write_text(plugin_source())
        (tmp_path / folder / "routing.yaml").write_text(routing_text("plugins/lane.py"))
        reloader = PolicyReloader.load(tmp_path / folder / "routing.yaml", FLEET, seed=0)
        fingerprints.append(reloader.in_force_fingerprint)
    assert fingerprints[0] is not None and fingerprints[0] == fingerprints[1]
    (tmp_path / "replica-b" / "plugins" / "lane.py").write_text(plugin_source("slow"))
    reloader = PolicyReloader.load(tmp_path / "replica-b" / "routing.yaml", FLEET, seed=0)
    assert reloader.in_force_fingerprint != fingerprints[0]


@pytest.mark.usefixtures("clean_modules")
@pytest.mark.parametrize(("field", "message"), [
    ("lanes: frozenset[str] = frozenset()",
     r"TypeError: unsupported parameter type frozenset\[str\]"),
    ("limit: Decimal | None = None", r"NameError: name 'Decimal' is not defined"),
])
def test_parameters_kvroute_cannot_read_are_refused_naming_the_plugin(
        tmp_path: Path, plugin_dir: Path, field: str, message: str) -> None:
    """A traceback from ``kvroute validate``, and a reload that crashed unreported."""
    (plugin_dir / "lane.py").write_text("from __future__ import annotations\n" + plugin_source(
        ).replace('    lane: str = "fast"\n', f'    lane: str = "fast"\n    {field}\n'))
    key = field.split(":")[0]
    (tmp_path / "routing.yaml").write_text(
        routing_text("plugins/lane.py").replace("{type: lane}", f"{{type: lane, params: "
                                                                 f"{{{key}: [a]}}}}"))
    with pytest.raises(RoutingConfigError,
                       match=r"^profiles\.default\.scorers\[0\]\.params: the parameters of "
                             r"plugin type 'lane' cannot be read: " + message):
        load_routing(tmp_path / "routing.yaml")


@pytest.mark.usefixtures("clean_modules")
async def test_a_plugin_exiting_in_register_refuses_the_reload_and_the_router_serves_on(
        tmp_path: Path, plugin_dir: Path, lanes: list[WorkerView]) -> None:
    """``sys.exit`` in ``register`` or a factory ran out of the reload thread and ended the
    event loop."""
    plugin = plugin_dir / "lane.py"
    plugin.write_text(plugin_source("fast"))
    routing_file = tmp_path / "routing.yaml"
    routing_file.write_text(routing_text("plugins/lane.py"))
    reloader = PolicyReloader.load(routing_file, FLEET, seed=0)
    stat = plugin.stat()
    for step, (old, new) in enumerate([
            ("def register(registry):\n", "def register(registry):\n    raise SystemExit(4)\n"),
            ("lambda params, ctx: LaneScorer(ctx.name, params)", "lambda params, ctx: exit(5)"),
    ], start=1):
        plugin.write_text(plugin_source("slow").replace(old, new))
        os.utime(plugin, ns=(stat.st_atime_ns, stat.st_mtime_ns + step * 1_000_000))
        assert await reloader.check() is None
        result = await reloader.check()
        assert result is not None and result.result == "failure"
        assert "SystemExit" in result.message
        assert chosen(reloader.engine, lanes) == "w-fast"


@pytest.mark.usefixtures("clean_modules")
async def test_a_path_with_a_nul_byte_is_refused_and_the_watch_goes_on(
        tmp_path: Path, plugin_dir: Path, lanes: list[WorkerView]) -> None:
    """Such a path stopped every later reload, unreported."""
    (plugin_dir / "lane.py").write_text(plugin_source("slow"))
    routing_file = tmp_path / "routing.yaml"
    routing_file.write_text(routing_text('"plugins/la\\0ne.py"'))
    with pytest.raises(RoutingConfigError, match=r"plugin_modules\[0\]: 'plugins/la\\x00ne\.py': "
                                                 r"not a usable path \(.*null byte\)"):
        load_routing(routing_file)
    routing_file.write_text("profiles: {default: {scorers: [{type: kv-usage}]}}\n")
    reloader = PolicyReloader.load(routing_file, FLEET, seed=0)
    routing_file.write_text(routing_text('"plugins/la\\0ne.py"'))
    assert await reloader.check() is None
    result = await reloader.check()
    assert result is not None and result.result == "failure"
    routing_file.write_text(routing_text("plugins/lane.py") + "\n")
    assert await reloader.check() is None
    result = await reloader.check()
    assert result is not None and result.result == "success"
    assert chosen(reloader.engine, lanes) == "w-slow"


@pytest.mark.usefixtures("clean_modules")
def test_whatever_a_parameter_check_raises_is_refused_naming_the_plugin(
        tmp_path: Path, plugin_dir: Path) -> None:
    (plugin_dir / "lane.py").write_text(plugin_source().replace(
        'raise ParamError("lane", "must not be empty")', 'raise KeyError("missing")'))
    (tmp_path / "routing.yaml").write_text(routing_text("plugins/lane.py").replace(
        "{type: lane}", "{type: lane, params: {lane: ''}}"))
    with pytest.raises(RoutingConfigError,
                       match=r"^profiles\.default\.scorers\[0\]\.params: the parameters of "
                             r"plugin type 'lane' cannot be read: KeyError: 'missing' "
                             r"\(line \d+\)$"):
        load_routing(tmp_path / "routing.yaml")


@pytest.mark.usefixtures("clean_modules")
async def test_a_plugin_edited_while_the_first_config_loads_is_new_to_the_first_poll(
        tmp_path: Path, plugin_dir: Path, lanes: list[WorkerView]) -> None:
    """The stamps and digest were taken after the parse had run the file: the edit was
    never applied, and the fingerprint named it as in force."""
    plugin = plugin_dir / "lane.py"
    rewrite = ("\nfrom pathlib import Path as _Path\n"
               "_self = _Path(__file__)\n"
               "_self.write_text(_self.read_text().replace('\"fast\"', '\"slow\"'))\n")
    plugin.write_text(plugin_source("fast") + rewrite)
    routing_file = tmp_path / "routing.yaml"
    routing_file.write_text(routing_text("plugins/lane.py"))
    reloader = PolicyReloader.load(routing_file, FLEET, seed=0)
    assert chosen(reloader.engine, lanes) == "w-fast"      # the code that ran
    assert await reloader.check() is None                   # the edit seen, settling
    result = await reloader.check()
    assert result is not None and result.result == "success"
    assert chosen(reloader.engine, lanes) == "w-slow"


@pytest.mark.usefixtures("clean_modules")
def test_a_module_the_file_uses_nothing_of_is_warned_of(tmp_path: Path,
                                                        plugin_dir: Path) -> None:
    from policies.summary import warnings

    (plugin_dir / "lane.py").write_text(plugin_source())
    (plugin_dir / "other.py").write_text(plugin_source(type_name="lane-other"))
    (tmp_path / "routing.yaml").write_text(
        "plugin_modules: [plugins/lane.py, plugins/other.py]\n"
        "profiles: {default: {filters: [model, healthy], scorers: [{type: lane}]}}\n")
    routing = load_routing(tmp_path / "routing.yaml")
    assert [(m.types, m.sections) for m in routing.plugin_modules] == [
        (("lane",), ()), (("lane-other",), ())]
    assert warnings(routing) == ["plugin_modules[1] (plugins/other.py): the file uses none of "
                                 "what it registers (lane-other)"]


def loaded_versions(plugin: Path) -> list[str]:
    """The names in ``sys.modules`` of the modules loaded from ``plugin`` (one per
    version)."""
    return sorted(name for name, module in list(sys.modules.items())
                  if name.startswith("kvroute_plugin_")
                  and getattr(module, "__file__", None) == str(plugin))


async def settle(reloader: PolicyReloader, edited: Path, step: int) -> str:
    """The reload of ``edited``'s new content (its modification time moved by ``step`` ms
    past the start, as a write within one clock tick may not move it)."""
    stat = edited.stat()
    os.utime(edited, ns=(stat.st_atime_ns, stat.st_mtime_ns + step * 1_000_000))
    assert await reloader.check() is None
    result = await reloader.check()
    assert result is not None
    return result.result


async def released_by_collection() -> None:
    """What a refused reload loaded is held by its exception's traceback, in a cycle with
    asyncio's future (the router's next garbage collection frees it): the loop step that
    got the refusal ended, then a collection."""
    await asyncio.sleep(0)
    gc.collect()


@pytest.mark.usefixtures("clean_modules")
async def test_edits_reloaded_leave_only_the_versions_in_use_in_sys_modules(
        tmp_path: Path, plugin_dir: Path, lanes: list[WorkerView]) -> None:
    """Each edit of a plugin file left one more module in ``sys.modules`` for the life of the
    process (a ConfigMap updated for weeks, or flipped between two versions)."""
    plugin = plugin_dir / "lane.py"
    plugin.write_text(plugin_source("fast"))
    routing_file = tmp_path / "routing.yaml"
    routing_file.write_text(routing_text("plugins/lane.py"))
    reloader = PolicyReloader.load(routing_file, FLEET, seed=0)
    assert len(loaded_versions(plugin)) == 1
    for step in range(1, 13):
        lane = ("fast", "slow")[step % 2]
        # flipped between two versions, and every third edit a version never seen before
        plugin.write_text(plugin_source(lane) + ("" if step % 3 else f"\nEDIT = {step}\n"))
        assert await settle(reloader, plugin, step) == "success"
        assert chosen(reloader.engine, lanes) == f"w-{lane}"
        in_force = reloader.engine.routing.plugin_modules[0].module_name
        assert loaded_versions(plugin) == [in_force]

    # a refused edit keeps the version in force, and leaves nothing of its own behind
    plugin.write_text("def register(registry):\n    raise RuntimeError('half written')\n")
    assert await settle(reloader, plugin, 13) == "failure"
    await released_by_collection()
    assert loaded_versions(plugin) == [in_force]
    assert chosen(reloader.engine, lanes) == "w-fast"
    # so does a version that loads but no longer registers the type the routing file uses
    plugin.write_text("def register(registry):\n    pass\n")
    assert await settle(reloader, plugin, 14) == "failure"
    await released_by_collection()
    assert loaded_versions(plugin) == [in_force]
    assert chosen(reloader.engine, lanes) == "w-fast"


@pytest.mark.usefixtures("clean_modules")
async def test_a_reload_that_keeps_the_plugin_file_takes_its_module_as_it_is(
        tmp_path: Path, plugin_dir: Path, lanes: list[WorkerView]) -> None:
    """Its code is not run again: the module of the config in force is the new one's."""
    plugin = plugin_dir / "lane.py"
    plugin.write_text(plugin_source("fast") + "\nRUNS = []\nRUNS.append(1)\n")
    routing_file = tmp_path / "routing.yaml"
    routing_file.write_text(routing_text("plugins/lane.py"))
    reloader = PolicyReloader.load(routing_file, FLEET, seed=0)
    [name] = loaded_versions(plugin)
    module = sys.modules[name]
    routing_file.write_text(routing_text("plugins/lane.py").replace(
        "{type: lane}", "{type: lane, params: {lane: slow}}"))
    assert await settle(reloader, routing_file, 1) == "success"
    assert chosen(reloader.engine, lanes) == "w-slow"
    assert loaded_versions(plugin) == [name]
    assert sys.modules[name] is module and module.RUNS == [1]


@pytest.mark.usefixtures("clean_modules")
def test_a_one_shot_load_leaves_no_module_behind(tmp_path: Path, plugin_dir: Path,
                                                 lanes: list[WorkerView]) -> None:
    """``kvroute validate`` or a scorecard's check in a process that lives on: once the
    routing it loaded is dropped, so is the module of its plugin file."""
    plugin = plugin_dir / "lane.py"
    routing_file = tmp_path / "routing.yaml"
    routing_file.write_text(routing_text("plugins/lane.py"))
    for lane in ("fast", "slow", "fast"):
        plugin.write_text(plugin_source(lane))
        routing = load_routing(routing_file)
        assert chosen(PolicyEngine.build(routing, FLEET, seed=0), lanes) == f"w-{lane}"
        assert len(loaded_versions(plugin)) == 1
        del routing
        assert loaded_versions(plugin) == []


@pytest.mark.usefixtures("clean_modules")
async def test_an_old_version_still_in_use_runs_on_once_replaced(
        tmp_path: Path, plugin_dir: Path, lanes: list[WorkerView]) -> None:
    """An engine still deciding (a request in flight over the swap) keeps its version in
    ``sys.modules``; a plugin of it held after that (a request reporting ``on_completed`` to
    the plugin that routed it) runs on with its module's globals once the name is gone."""
    helper = "\n\ndef wanted(lane):\n    return lane\n"
    plugin = plugin_dir / "lane.py"
    plugin.write_text(plugin_source("fast").replace(
        "== self.lane", "== wanted(self.lane)") + helper)
    routing_file = tmp_path / "routing.yaml"
    routing_file.write_text(routing_text("plugins/lane.py"))
    reloader = PolicyReloader.load(routing_file, FLEET, seed=0)
    [old_name] = loaded_versions(plugin)
    old_engine = reloader.engine
    old_scorer = old_engine.profiles["default"].scorers[0].scorer
    plugin.write_text(plugin_source("slow"))
    assert await settle(reloader, plugin, 1) == "success"
    assert chosen(reloader.engine, lanes) == "w-slow"
    assert old_name in loaded_versions(plugin)             # the old engine is still held
    assert chosen(old_engine, lanes) == "w-fast"
    del old_engine
    assert loaded_versions(plugin) == [reloader.engine.routing.plugin_modules[0].module_name]
    assert old_name not in sys.modules
    scores = old_scorer.score(RoutingRequest(request_id="r2", model=MODEL), lanes, None)
    assert scores == {"w-slow": 0.0, "w-fast": 1.0}


@pytest.mark.usefixtures("clean_modules")
def test_a_version_dropped_while_another_file_loads_leaves_at_once(
        tmp_path: Path, plugin_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The event loop dropping an old engine must not wait for a plugin file whose code runs
    in a build thread (a slow import), which holds the loading lock meanwhile."""
    started, finish = threading.Event(), threading.Event()
    monkeypatch.setitem(sys.modules, "kvroute_test_gate",
                        types.SimpleNamespace(started=started, finish=finish))
    (plugin_dir / "slow_import.py").write_text(
        "import kvroute_test_gate as gate\n\ngate.started.set()\ngate.finish.wait(10)\n\n\n"
        "def register(registry):\n    pass\n")
    (tmp_path / "slow.yaml").write_text(
        "plugin_modules: [plugins/slow_import.py]\n"
        "profiles: {default: {scorers: [{type: kv-usage}]}}\n")
    plugin = plugin_dir / "lane.py"
    plugin.write_text(plugin_source())
    (tmp_path / "routing.yaml").write_text(routing_text("plugins/lane.py"))
    routing = load_routing(tmp_path / "routing.yaml")
    loading = threading.Thread(target=load_routing, args=(tmp_path / "slow.yaml",))
    loading.start()
    try:
        assert started.wait(10)
        dropped = time.monotonic()
        del routing
        assert loaded_versions(plugin) == []
        assert time.monotonic() - dropped < 1.0
    finally:
        finish.set()
        loading.join(10)


def test_a_plugin_named_otherwise_or_lacking_its_method_is_refused_saying_so(
        tmp_path: Path) -> None:
    """A scorer that set its own ``name = "queue-depth"`` added its scores under the built-in
    scorer's name (the total held two, the decision showed one); a class without ``score``
    was refused as "did not build a scorer", which said nothing of what it lacked."""
    hardcoded = plugin_source().replace("self.name = name", "self.name = 'queue-depth'")
    (tmp_path / "lane.py").write_text(hardcoded)
    (tmp_path / "routing.yaml").write_text(routing_text("lane.py"))
    with pytest.raises(RoutingConfigError) as info:
        PolicyEngine.build(load_routing(tmp_path / "routing.yaml"), FLEET)
    assert str(info.value).endswith(
        "profiles.default.scorers[0]: plugin 'lane' built an instance named 'queue-depth', "
        "not 'lane' as declared: its scores and failures would go under another name (set "
        "its name from the factory's context.name)")
    (tmp_path / "lane2.py").write_text(plugin_source().replace("def score(", "def scores("))
    (tmp_path / "routing.yaml").write_text(routing_text("lane2.py"))
    with pytest.raises(RoutingConfigError) as info:
        PolicyEngine.build(load_routing(tmp_path / "routing.yaml"), FLEET)
    assert str(info.value).endswith(
        "profiles.default.scorers[0].type: 'lane' did not build a scorer: its factory "
        "returned LaneScorer, which has no score attribute")
