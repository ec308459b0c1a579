"""policies/reloader.py: good file swaps, bad file keeps the last good engine."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from policies.engine import PolicyEngine
from policies.errors import RoutingConfigError
from policies.reloader import PolicyReloader, ReloadResult
from workers.fleet import FleetConfig

FLEET = FleetConfig({}, {}, ())
GOOD = "profiles: {default: {scorers: [{type: kv-usage}]}}\n"
OTHER = "profiles: {fast: {scorers: [{type: queue-depth}]}}\ndefault_profile: fast\n"
BAD = "profiles: {default: {scorers: [{type: kv-usage, weight: lots}]}}\n"


def write(path: Path, text: str, bump_ns: int) -> None:
    """Write and move the mtime forward, so a change is seen whatever the clock resolution."""
    path.write_text(text)
    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + bump_ns))


async def settled(reloader: PolicyReloader) -> ReloadResult | None:
    """One poll sees the change and waits for the file to hold still; the next reads it."""
    assert await reloader.check() is None
    return await reloader.check()


@pytest.fixture
def routing_file(tmp_path: Path) -> Path:
    path = tmp_path / "routing.yaml"
    path.write_text(GOOD)
    return path


async def test_good_bad_and_back(routing_file: Path) -> None:
    results: list[ReloadResult] = []
    swaps: list[PolicyEngine] = []
    reloader = PolicyReloader.load(routing_file, FLEET, on_result=results.append,
                                   on_swap=swaps.append)
    first = reloader.engine
    assert first.default_profile == "default"
    assert await reloader.check() is None                       # nothing changed

    write(routing_file, OTHER, 1_000_000)
    result = await settled(reloader)
    assert result is not None and result.result == "success"
    assert reloader.engine is not first and reloader.engine.default_profile == "fast"
    assert swaps == [reloader.engine]

    good = reloader.engine
    write(routing_file, BAD, 2_000_000)
    result = await settled(reloader)
    assert result == ReloadResult("failure", str(routing_file),
                                  "profiles.default.scorers[0].weight: must be a number, "
                                  "got 'lots' (line 1)")
    assert reloader.engine is good                              # last good keeps serving
    assert await reloader.check() is None                       # reported once per change

    routing_file.unlink()
    result = await settled(reloader)
    assert result is not None and result.result == "failure"
    assert result.message.endswith("cannot read routing file: No such file or directory")
    assert reloader.engine is good

    write(routing_file, GOOD, 3_000_000)
    result = await settled(reloader)
    assert result is not None and result.result == "success"
    assert reloader.engine.default_profile == "default"
    assert [r.result for r in results] == ["success", "failure", "failure", "success"]


async def test_the_file_restored_unchanged_after_it_was_missing_is_a_success(
        routing_file: Path) -> None:
    """Moved away and back (an editor's or a deploy's rename): the refusal it caused ends
    with a success, so ``kvroute_config_last_reload_successful`` is 1 again; no rebuild."""
    results: list[ReloadResult] = []
    reloader = PolicyReloader.load(routing_file, FLEET, on_result=results.append)
    engine = reloader.engine
    routing_file.rename(routing_file.with_suffix(".tmp"))
    result = await settled(reloader)
    assert result is not None and result.result == "failure"
    routing_file.with_suffix(".tmp").rename(routing_file)
    os.utime(routing_file)              # the same content, a new mtime
    result = await settled(reloader)
    assert result is not None and result.result == "success"
    assert result.message.startswith("the file is the config in force again: ")
    assert not result.rebuilt
    assert reloader.engine is engine
    assert await reloader.check() is None
    assert [r.result for r in results] == ["failure", "success"]


async def test_back_to_the_config_in_force_after_a_refused_edit(routing_file: Path) -> None:
    results: list[ReloadResult] = []
    reloader = PolicyReloader.load(routing_file, FLEET, on_result=results.append)
    engine = reloader.engine
    write(routing_file, BAD, 1_000_000)
    assert (await settled(reloader) or ReloadResult("success", "", "")).result == "failure"
    write(routing_file, GOOD, 2_000_000)
    result = await settled(reloader)
    assert result is not None and result.result == "success"
    assert reloader.engine is engine          # what serves is what the file says: no rebuild
    write(routing_file, OTHER, 3_000_000)
    result = await settled(reloader)
    assert result is not None and result.result == "success"
    assert reloader.engine.default_profile == "fast"
    write(routing_file, GOOD, 4_000_000)      # the first content, no longer in force: built
    result = await settled(reloader)
    assert result is not None and not result.message.startswith("the file is the config")
    assert reloader.engine.default_profile == "default" and reloader.engine is not engine
    assert [r.result for r in results] == ["failure", "success", "success", "success"]


async def test_touch_without_content_change_does_not_rebuild(routing_file: Path) -> None:
    reloader = PolicyReloader.load(routing_file, FLEET)
    engine = reloader.engine
    write(routing_file, GOOD, 5_000_000)
    assert await settled(reloader) is None
    assert reloader.engine is engine


async def test_background_task_picks_up_a_change(routing_file: Path) -> None:
    results: list[ReloadResult] = []
    reloader = PolicyReloader.load(routing_file, FLEET, interval_s=0.01,
                                   on_result=results.append)
    reloader.start()
    try:
        write(routing_file, OTHER, 1_000_000)
        for _ in range(500):                                   # bounded: at most ~5 s
            if results:
                break
            await asyncio.sleep(0.01)
    finally:
        await reloader.stop()
    assert [r.result for r in results] == ["success"]
    assert reloader.engine.default_profile == "fast"


def test_initial_bad_file_raises(tmp_path: Path) -> None:
    path = tmp_path / "routing.yaml"
    path.write_text(BAD)
    with pytest.raises(RoutingConfigError,
                       match=r"weight: must be a number, got 'lots' \(line 1\)$"):
        PolicyReloader.load(path, FLEET)


async def test_reload_hands_state_to_the_new_engine(tmp_path: Path) -> None:
    from policies.base import RoutingRequest
    from workers.engine.profiles import H100_80GB, LLAMA_3_8B
    from workers.models import WorkerInfo, WorkerView

    def view(worker_id: str) -> WorkerView:
        info = WorkerInfo(worker_id, "http://127.0.0.1:1", H100_80GB, ("m",), LLAMA_3_8B, 1.0)
        return WorkerView(info, 0, 0, 0.0, 16, 100, 8192, 0, 0, True, 0.0, ("m",))

    path = tmp_path / "routing.yaml"
    path.write_text("profiles: {default: {picker: {type: round-robin}}}\n")
    reloader = PolicyReloader.load(path, FLEET)
    views = [view("a"), view("b"), view("c")]
    assert reloader.engine.decide(RoutingRequest("r", "m"), views).worker_id == "a"
    write(path, "profiles: {default: {picker: round-robin, scorers: [kv-usage]}}\n", 1_000_000)
    result = await settled(reloader)
    assert result is not None and result.result == "success"
    assert reloader.engine.decide(RoutingRequest("r", "m"), views).worker_id == "b"


async def test_a_copy_with_the_same_size_and_modification_time_is_reloaded(
        tmp_path: Path) -> None:
    """``cp -p``, ``rsync -a`` or an archive keep the modification time; a copy of the same
    size was never read again, and the old policy served on, silently."""
    other = "profiles: {default: {scorers: [{type: queue-depth}]}}\n"
    path = tmp_path / "routing.yaml"
    path.write_text(GOOD + "#" * (len(other) - len(GOOD) - 1) + "\n")     # the same size
    reloader = PolicyReloader.load(path, FLEET)
    staged = tmp_path / "staged.yaml"
    staged.write_text(other)
    before = path.stat()
    os.utime(staged, ns=(before.st_atime_ns, before.st_mtime_ns))
    os.replace(staged, path)
    after = path.stat()
    assert (after.st_size, after.st_mtime_ns) == (before.st_size, before.st_mtime_ns)
    result = await settled(reloader)
    assert result is not None and result.result == "success"
    [scorer] = reloader.engine.routing.profiles["default"].scorers
    assert scorer.type == "queue-depth"


async def test_a_file_written_in_steps_is_read_once_it_holds_still(routing_file: Path) -> None:
    """A file written in place in two steps, each valid YAML: the first half was applied
    (without the rule the second half adds) until the next poll."""
    reloader = PolicyReloader.load(routing_file, FLEET)
    first = "profiles: {default: {scorers: [{type: kv-usage}]}, fast: {}}\n"
    write(routing_file, first, 1_000_000)
    assert await reloader.check() is None           # changed since the last poll: wait
    with routing_file.open("a") as fh:
        fh.write("rules: [{name: gold, when: {header: {x-tier: gold}}, then: {profile: fast}}]\n")
    assert await reloader.check() is None           # changed again: wait again
    result = await reloader.check()
    assert result is not None and result.result == "success"
    assert [rule.name for rule in reloader.engine.routing.rules] == ["gold"]


async def test_a_refusal_is_logged_with_the_files_path(routing_file: Path,
                                                       caplog: pytest.LogCaptureFixture) -> None:
    reloader = PolicyReloader.load(routing_file, FLEET)
    write(routing_file, BAD, 1_000_000)
    with caplog.at_level("ERROR", logger="policies.reloader"):
        await settled(reloader)
    assert [r.getMessage() for r in caplog.records if r.levelname == "ERROR"] == [
        "routing reload refused, keeping the last good config: "
        f"{routing_file}: profiles.default.scorers[0].weight: must be a number, got 'lots' "
        "(line 1)"]


async def test_the_config_in_force_is_warned_of_as_validate_does(
        routing_file: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A file cut short after ``default:`` is a valid profile without filters: it was loaded
    with one INFO line, and requests could go to workers that were down. The router logs
    what ``kvroute validate`` warns of, at start and at each reload."""
    write(routing_file, "profiles:\n  default:\n", 1_000_000)
    with caplog.at_level("WARNING", logger="policies.reloader"):
        reloader = PolicyReloader.load(routing_file, FLEET)
        write(routing_file, "profiles:\n  default: {filters: [{type: model}]}\n", 2_000_000)
        await settled(reloader)
    warned = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    no_healthy = (f"routing file {routing_file}: profiles.default.filters: no healthy filter: "
                  "requests may go to workers whose last scrape failed or that keep failing "
                  "requests")
    no_scorer = (f"routing file {routing_file}: profiles.default.picker: max-score compares "
                 "the scorers' totals and the profile has no scorer: it picks at random (no "
                 "load is compared; add a scorer, e.g. inflight or queue-depth, or pick at "
                 "random on purpose with picker: random)")
    assert warned == [
        f"routing file {routing_file}: profiles.default.filters: no model filter: requests "
        "may go to workers that do not serve their model", no_healthy, no_scorer,
        no_healthy, no_scorer]


async def test_a_file_of_several_megabytes_is_refused_unread(routing_file: Path) -> None:
    from policies.loader import MAX_ROUTING_FILE_BYTES

    reloader = PolicyReloader.load(routing_file, FLEET)
    write(routing_file, GOOD + "#" * MAX_ROUTING_FILE_BYTES, 1_000_000)
    result = await settled(reloader)
    assert result == ReloadResult(
        "failure", str(routing_file),
        f"{routing_file}: larger than 4 MiB: not a routing file (labelled examples go in the "
        "semantic section's examples_file)")


async def test_a_config_built_while_the_file_changed_again_is_dropped(
        routing_file: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An edit undone while its classifier trained (minutes) was applied once the training
    ended, eight minutes after the undo, and logged as loaded from the file."""
    results: list[ReloadResult] = []
    reloader = PolicyReloader.load(routing_file, FLEET, on_result=results.append)
    engine = reloader.engine
    build = reloader._build

    def build_while_undone(text: str, digest: bytes) -> PolicyEngine:
        built = build(text, digest)
        write(routing_file, GOOD, 9_000_000)     # the operator undoes the edit meanwhile
        return built

    monkeypatch.setattr(reloader, "_build", build_while_undone)
    write(routing_file, OTHER, 1_000_000)
    assert await settled(reloader) is None       # built, then dropped: the file moved on
    assert reloader.engine is engine and results == []
    monkeypatch.setattr(reloader, "_build", build)
    result = await settled(reloader)
    assert result is not None and result.result == "success" and not result.rebuilt
    assert reloader.engine is engine


async def test_a_file_rewritten_at_every_poll_with_the_same_content_is_applied(
        routing_file: Path) -> None:
    """A sidecar writing the file again every poll: its stamp never held still, so a change
    waiting for a still stamp was never applied. New content read the same twice is."""
    reloader = PolicyReloader.load(routing_file, FLEET)
    results = []
    for n in range(4):
        write(routing_file, OTHER, 1_000_000 * (n + 1))     # the same content, a new stamp
        results.append(await reloader.check())
    assert [r.result if r else None for r in results] == [None, "success", None, None]
    assert reloader.engine.default_profile == "fast"


async def test_a_touch_while_a_config_is_built_drops_nothing(
        routing_file: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    reloader = PolicyReloader.load(routing_file, FLEET)
    build = reloader._build

    def build_while_touched(text: str, digest: bytes) -> PolicyEngine:
        built = build(text, digest)
        stat = routing_file.stat()
        os.utime(routing_file, ns=(stat.st_atime_ns, stat.st_mtime_ns + 7_000_000))
        return built

    monkeypatch.setattr(reloader, "_build", build_while_touched)
    write(routing_file, OTHER, 1_000_000)
    result = await settled(reloader)
    assert result is not None and result.result == "success"
    assert reloader.engine.default_profile == "fast"


async def test_a_file_missing_for_one_poll_is_not_refused(routing_file: Path) -> None:
    """A deploy that deletes the file and writes it again: the moment it was missing is
    not reported (the refusal alert would fire for nothing)."""
    results: list[ReloadResult] = []
    reloader = PolicyReloader.load(routing_file, FLEET, on_result=results.append)
    routing_file.unlink()
    assert await reloader.check() is None
    write(routing_file, OTHER, 1_000_000)
    assert await settled(reloader) is not None
    assert [r.result for r in results] == ["success"]


async def test_the_fingerprint_names_the_content_in_force(routing_file: Path) -> None:
    """kvroute_config_info's sha256 label: the content in force, not the file on disk, so
    that replicas serving different policies show it (alert RoutingFilesDiffer)."""
    import hashlib

    def fingerprint(text: str) -> str:
        return hashlib.sha256(text.encode()).hexdigest()[:12]

    reloader = PolicyReloader.load(routing_file, FLEET)
    assert reloader.in_force_fingerprint == fingerprint(GOOD)
    write(routing_file, OTHER, 1_000_000)
    await settled(reloader)
    assert reloader.in_force_fingerprint == fingerprint(OTHER)
    write(routing_file, BAD, 2_000_000)
    await settled(reloader)
    assert reloader.in_force_fingerprint == fingerprint(OTHER)     # refused: OTHER serves


async def test_the_warnings_counted_are_those_of_the_config_and_fleet_in_force(
        routing_file: Path) -> None:
    """kvroute_config_warnings (alert RoutingConfigWarnings) reads this count: a file cut
    short as it was saved, down to a profile that checks no health, loaded with a warning
    in the log alone."""
    from policies.summary import fleet_warnings

    reloader = PolicyReloader.load(routing_file, FLEET)
    listed = fleet_warnings(reloader.engine.routing, FLEET)
    assert listed and reloader.warning_count() == len(listed)     # no model or health check
    clean = "profiles: {default: {filters: [model, healthy], scorers: [{type: kv-usage}]}}\n"
    write(routing_file, clean, 1_000_000)
    await settled(reloader)
    assert reloader.warning_count() == 0 == len(reloader.status()["warnings"])
    write(routing_file, GOOD, 2_000_000)
    await settled(reloader)
    assert reloader.warning_count() == len(listed)


async def test_each_engine_names_the_content_it_was_built_from(routing_file: Path) -> None:
    """The decisions name the routing file that took them by their engine's fingerprint: a
    request still routed by the engine a reload replaced names the file it came from, not
    the one in force when it was recorded."""
    import hashlib

    def fingerprint(text: str) -> str:
        return hashlib.sha256(text.encode()).hexdigest()[:12]

    reloader = PolicyReloader.load(routing_file, FLEET)
    first = reloader.engine
    assert first.fingerprint == fingerprint(GOOD)
    write(routing_file, OTHER, 1_000_000)
    await settled(reloader)
    assert reloader.engine.fingerprint == fingerprint(OTHER) == reloader.in_force_fingerprint
    assert first.fingerprint == fingerprint(GOOD)


SEMANTIC = ("semantic:\n  default_class: chat\n  examples_file: examples.jsonl\n  classes:\n"
            "    chat: {examples: [hello there, how are you]}\n"
            "    code: {examples: [write a function, fix this bug]}\n" + GOOD)


async def test_an_edit_of_the_examples_file_alone_is_reloaded(tmp_path: Path) -> None:
    """The file the semantic section names was not watched: its edits were never applied,
    and ``file_is_in_force`` said the config on disk was in force."""
    routing, examples = tmp_path / "routing.yaml", tmp_path / "examples.jsonl"
    routing.write_text(SEMANTIC)
    write(examples, '{"text": "hi", "label": "chat"}\n', 0)
    reloader = PolicyReloader.load(routing, FLEET)
    engine = reloader.engine
    assert await reloader.check() is None
    write(examples, '{"text": "hi", "label": "code"}\n', 1_000_000)
    assert reloader.status()["file_is_in_force"]          # not yet seen: no poll since
    result = await settled(reloader)
    assert result is not None and result.result == "success" and result.rebuilt
    assert reloader.engine is not engine and reloader.status()["file_is_in_force"]
    engine = reloader.engine
    os.utime(examples)                                    # touched only: nothing to do
    assert await reloader.check() is None and reloader.engine is engine
    # back to what it was: the first content is no longer in force, so it is built again
    write(examples, '{"text": "hi", "label": "chat"}\n', 2_000_000)
    result = await settled(reloader)
    assert result is not None and result.rebuilt and reloader.engine is not engine


async def test_an_examples_file_named_anew_is_watched_from_then_on(tmp_path: Path) -> None:
    routing, examples = tmp_path / "routing.yaml", tmp_path / "examples.jsonl"
    routing.write_text(GOOD)
    reloader = PolicyReloader.load(routing, FLEET)
    write(examples, '{"text": "hi", "label": "chat"}\n', 0)
    write(routing, SEMANTIC, 1_000_000)
    assert (await settled(reloader) or ReloadResult("failure", "", "")).result == "success"
    engine = reloader.engine
    write(examples, '{"text": "hi", "label": "code"}\n', 2_000_000)
    assert (await settled(reloader) or ReloadResult("failure", "", "")).rebuilt
    assert reloader.engine is not engine


async def test_the_status_says_a_new_config_is_being_built(
        routing_file: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """During a long build /debug/routing showed the file not in force and no refusal, with
    nothing saying why."""
    import time

    reloader = PolicyReloader.load(routing_file, FLEET)
    build = reloader._build
    during: list[object] = []

    def watched_build(text: str, digest: bytes) -> PolicyEngine:
        during.append(reloader.status()["building_since"])
        return build(text, digest)

    monkeypatch.setattr(reloader, "_build", watched_build)
    assert reloader.status()["building_since"] is None
    write(routing_file, OTHER, 1_000_000)
    assert (await settled(reloader) or ReloadResult("failure", "", "")).result == "success"
    assert during == [pytest.approx(time.time(), abs=30)]
    assert reloader.status()["building_since"] is None


async def test_files_edited_during_the_first_build_are_new_to_the_first_poll(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Read after the first build (minutes, when an encoder trains), the files were taken as
    the config in force: an edit made meanwhile was never applied."""
    routing, examples = tmp_path / "routing.yaml", tmp_path / "examples.jsonl"
    routing.write_text(SEMANTIC)
    write(examples, '{"text": "hi", "label": "chat"}\n', 0)
    build = PolicyEngine.build

    def build_while_edited(*args: object, **kwargs: object) -> PolicyEngine:
        built = build(*args, **kwargs)              # type: ignore[arg-type]
        write(examples, '{"text": "hi", "label": "code"}\n', 1_000_000)
        return built

    monkeypatch.setattr(PolicyEngine, "build", build_while_edited)
    reloader = PolicyReloader.load(routing, FLEET)
    monkeypatch.setattr(PolicyEngine, "build", build)
    engine = reloader.engine
    result = await settled(reloader)
    assert result is not None and result.rebuilt and reloader.engine is not engine


async def test_a_config_built_while_the_fleet_changed_is_checked_against_the_new_fleet(
        routing_file: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A routing file whose rule needs pool gold, built (for minutes, with a classifier)
    while a reloaded fleet dropped gold's last worker: it was swapped in unchecked."""
    from workers.fleet import parse_fleet

    def fleet(labels: dict[str, str]) -> FleetConfig:
        return parse_fleet({"models": {"m": {"arch": "llama-3-8b"}}, "workers": [
            {"id": "w", "gpu": "h100", "models": ["m"], "url": "http://127.0.0.1:1",
             "labels": labels}]})

    reloader = PolicyReloader.load(routing_file, fleet({"pool": "gold"}))
    first = reloader.engine
    build = reloader._build

    def build_then_fleet_reloads(text: str, digest: bytes) -> PolicyEngine:
        engine = build(text, digest)
        reloader.fleet = fleet({})              # the fleet reload lands meanwhile
        return engine

    monkeypatch.setattr(reloader, "_build", build_then_fleet_reloads)
    write(routing_file, GOOD + "rules:\n  - when: {tenant: acme}\n    then: "
          "{pool: {pool: gold}}\n", 1_000_000)
    result = await settled(reloader)
    assert result is not None and result.result == "failure"
    assert "rules[0].then.pool" in result.message
    assert reloader.engine is first


async def test_a_reload_names_the_file_it_replaced_and_the_one_in_force(
        routing_file: Path) -> None:
    """An edit and its revert were logged alike: which file replaced which is told by their
    digests (as /debug/routing's ``sha256`` gives the one in force)."""
    import hashlib

    def short(text: str) -> str:
        return hashlib.sha256(text.encode()).hexdigest()[:12]

    reloader = PolicyReloader.load(routing_file, FLEET)
    write(routing_file, OTHER, 1_000_000)
    edit = await settled(reloader)
    write(routing_file, GOOD, 2_000_000)
    revert = await settled(reloader)
    assert edit is not None and f"(sha256 {short(GOOD)} -> {short(OTHER)})" in edit.message
    assert revert is not None and f"(sha256 {short(OTHER)} -> {short(GOOD)})" in revert.message
    assert reloader.status()["sha256"].startswith(short(GOOD))


async def test_a_build_in_its_own_thread_gives_its_result_or_its_error() -> None:
    from policies.reloader import _in_daemon_thread

    assert await _in_daemon_thread(lambda a, b: a + b, 2, 3) == 5

    def refuse() -> None:
        raise RoutingConfigError("no")
    with pytest.raises(RoutingConfigError, match="no"):
        await _in_daemon_thread(refuse)


def test_a_process_stopping_does_not_wait_for_a_build_still_running() -> None:
    """A reload that fine-tunes an encoder builds for minutes: run in the loop's default
    executor, ``asyncio.run`` waited for it on exit, and a router told to stop stopped
    listening but did not exit until the training ended."""
    root = str(Path(__file__).resolve().parents[2])
    script = (
        "import asyncio, time\n"
        "from policies.reloader import _in_daemon_thread\n"
        "async def main():\n"
        "    asyncio.get_running_loop().create_task(_in_daemon_thread(time.sleep, 60))\n"
        "    await asyncio.sleep(0.2)\n"
        "asyncio.run(main())\n")
    started = time.monotonic()
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                            timeout=50, cwd=root, env={**os.environ, "PYTHONPATH": root})
    assert result.returncode == 0, result.stderr
    assert time.monotonic() - started < 30


async def test_a_build_raising_stop_iteration_is_an_error_not_a_wait_forever() -> None:
    """``next()`` on an empty iterator in a build (a plugin's, say): a Future refuses a
    StopIteration, the loop logged a TypeError and the reload never ended."""
    from policies.reloader import _in_daemon_thread

    def build() -> None:
        next(iter(()))
    with pytest.raises(RuntimeError, match="StopIteration"):
        await asyncio.wait_for(_in_daemon_thread(build), 5)
