"""The session's expensive images, built in the background while the engine-free tests run.

The 300T-A2 test image and the MindSpore image take minutes to build, most of it waiting on pip, the proxy and
the engine, while the engine-free tests (trainer, resolver, audit, ...) keep the CPUs busy. So this plugin:

* runs every module that holds a `docker`-marked test after the modules that hold none (each module stays in
  one piece and keeps its order, so module fixtures are set up once);
* starts, once collection is done, one background thread that builds what the selected tests will ask for:
  the test image (`provision_build_result`), its session-only tag (`session_image`) and the MindSpore image
  (`mindspore_build`), in that order, each only if a selected test uses it; a second thread downloads the
  MindSpore wheel meanwhile;
* calls `background(items)` of each test module that defines one, with its selected tests: slow waiting work
  of its own (the online lock checks ask pip over the network) starts then too.

The fixtures ask `result(name, build)`: the background result when it was started (waiting for it if it is
still running), else `build()` in the foreground, as before. A failed background build fails the tests that
need it, with the build's own message, exactly as a foreground build would. `PROVISION_TEST_PREBUILD=0` turns
the background off (every build then runs in its fixture, in collection order).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

import pytest

# Build name -> the fixture whose use in a selected test asks for it.
FIXTURES = {"provision": "provision_build_result", "session": "session_image", "mindspore": "mindspore_build"}


class BuildFailed(Exception):
    """A build run outside a test: its message becomes the failure of every test that needs the image."""


_futures: dict[str, Future] = {}
_consumed: set[str] = set()


def result(name: str, build: Callable[[], Any]) -> Any:
    """The image `name`: the background build's result if one was started, else `build()` now."""
    future = _futures.get(name)
    try:
        return future.result() if future is not None else build()
    except BuildFailed as exc:
        pytest.fail(str(exc), pytrace=False)


def _uses_docker(item: pytest.Item) -> bool:
    return item.get_closest_marker("docker") is not None


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    # trylast: after `-m`/`-k` deselection, so only the tests that will run count.
    engine_modules = {item.module for item in items if _uses_docker(item)}
    items.sort(key=lambda item: item.module in engine_modules)  # stable: modules keep their order inside
    if config.option.collectonly or os.environ.get("PROVISION_TEST_PREBUILD", "1") == "0":
        return
    engine = bool(engine_modules) and not os.environ.get("PROVISION_SKIP_DOCKER")
    wanted = [name for name, fixture in FIXTURES.items() if any(fixture in item.fixturenames for item in items)]
    if engine and wanted:
        _start(wanted)
    # A test module may define background(items): slow waiting work of its own (pip on the network) started now,
    # with its selected tests.
    by_module: dict[Any, list[pytest.Item]] = {}
    for item in items:
        by_module.setdefault(item.module, []).append(item)
    for module, selected in by_module.items():
        start = getattr(module, "background", None)
        if callable(start):
            start(selected)


def _start(wanted: list[str]) -> None:
    # Imported here: the engine helpers import this module's BuildFailed.
    from tests.helpers import engine, fwimages

    wheel: Future = Future()
    for name in wanted:
        _futures[name] = Future()
    steps: dict[str, Callable[[], Any]] = {
        "provision": lambda: engine.build_test_image(engine.prepared_base(), engine.prepared_wheelhouse()),
        "session": lambda: engine.build_session_image(engine.prepared_base(), engine.prepared_wheelhouse()),
        "mindspore": lambda: fwimages.build_mindspore_image(engine.prepared_base(), wheel.result()),
    }

    def run(future: Future, step: Callable[[], Any]) -> None:
        if not future.set_running_or_notify_cancel():
            return
        try:
            future.set_result(step())
        except BaseException as exc:  # pytest.fail's exception included: it reaches the test that waits
            future.set_exception(exc if isinstance(exc, BuildFailed) else BuildFailed(f"{type(exc).__name__}: {exc}"))

    def builds() -> None:
        for name in wanted:
            run(_futures[name], steps[name])

    if "mindspore" in wanted:
        threading.Thread(target=run, args=(wheel, fwimages.mindspore_wheelhouse), name="prebuild-wheel",
                         daemon=True).start()
    threading.Thread(target=builds, name="prebuild", daemon=True).start()


def consumed(name: str) -> None:
    """A fixture took the image `name` over: its teardown removes it."""
    _consumed.add(name)


def pytest_sessionfinish(session: pytest.Session) -> None:
    # A build still running when the session ends early (-x, an interrupt) is waited for, so no `provision
    # build` goes on writing to the engine after pytest returns; an image no fixture took over is removed as
    # its fixture would have (the test image's shared tag stays, like the build cache).
    for name, future in _futures.items():
        try:
            value = future.result()
        except BaseException:
            continue
        if name in _consumed:
            continue
        if name == "session":
            from tests.helpers import engine

            engine.remove_tags(value)
        elif name == "mindspore":
            from tests.helpers import fwimages

            fwimages.remove_mindspore_image(value)
