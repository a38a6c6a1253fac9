"""Property-based fuzzing of every command and option of `provision`, through the real entry point.

The commands and their options come from the click tree (harness.walk), so a command or option added later
is fuzzed without touching this file; values are drawn per option kind (tests/fuzz/strategies.py): hostile
strings, valid values with injected lines, hostile files and host trees (tests/fuzz/pool.py). Every
invocation passes harness.check_basic (exit 0/1/2, one error line, no traceback, time and memory bound,
no injected line in what is printed), writes nothing but what it was told to write, and what it writes or
prints carries nothing injected: a Dockerfile and pip.conf line by line, a printed `docker run` read back
with shlex equal to the --json argv.

CI runs a fixed, reproducible set (PROVISION_FUZZ_EXAMPLES examples per command, default 40);
PROVISION_FUZZ_EXAMPLES=5000 runs thousands (fresh random ones with PROVISION_FUZZ_RANDOM=1).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from tests.fuzz import harness
from tests.fuzz import pool as pools
from tests.fuzz.strategies import argv_for

EXAMPLES = int(os.environ.get("PROVISION_FUZZ_EXAMPLES", "40"))
RANDOM = bool(os.environ.get("PROVISION_FUZZ_RANDOM"))
COMMANDS = harness.walk()
# Commands that report warnings with exit 1.
WARNS = {("audit",), ("doctor",), ("matrix", "verify"), ("preflight",)}
# A few commands are costly per call (a torch probe, a whole build context): fewer examples.
WEIGHT = {("doctor",): 0.2, ("render",): 0.5, ("build",): 0.5}
COUNTS: dict[str, int] = {}
# Shrinking a failure can take minutes on this CLI: report the first failing example as found unless asked.
PHASES = tuple(Phase) if os.environ.get("PROVISION_FUZZ_SHRINK") else (Phase.explicit, Phase.reuse, Phase.generate)


@pytest.fixture(scope="module")
def pool(tmp_path_factory):
    return pools.build(tmp_path_factory.mktemp("fuzz"))


@pytest.fixture
def sandboxed(pool, monkeypatch, tmp_path):
    monkeypatch.chdir(pool.sandbox.work)
    # No engine (nothing is built or run), a cache of our own, nothing from the user's environment.
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-engine.sock")
    monkeypatch.setenv("PROVISION_CACHE", str(pool.sandbox.base / "cache"))
    monkeypatch.delenv("PROVISION_MATRIX", raising=False)
    monkeypatch.setenv("PIP_INDEX_URL", "http://127.0.0.1:9/simple")
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    return pool


def _examples(path: tuple[str, ...]) -> int:
    return max(1, int(EXAMPLES * WEIGHT.get(path, 1.0)))


@pytest.mark.parametrize("path", [p for p, _ in COMMANDS], ids=[" ".join(p) for p, _ in COMMANDS])
def test_command(path, sandboxed):
    cmd = dict(COMMANDS)[path]
    pool = sandboxed

    @settings(max_examples=_examples(path), derandomize=not RANDOM, deadline=None, database=None,
              suppress_health_check=list(HealthCheck), phases=PHASES)
    @given(st.data())
    def run(data):
        argv, outputs = argv_for(data, path, cmd, pool)
        exercise(pool, path, argv, outputs)

    run()


def exercise(pool, path: tuple[str, ...], argv: list[str], outputs: list[str]) -> harness.Result:
    box = pool.sandbox
    before = box.snapshot()
    res = harness.invoke(argv)
    after = box.snapshot()
    COUNTS[" ".join(path)] = COUNTS.get(" ".join(path), 0) + 1
    harness.check_basic(res, (0, 1, 2) if path in WARNS else (0, 2), reports=path in WARNS)
    diff = harness.changed(before, after)
    allowed = _allowed(outputs, box.work) if res.rc in (0, 1) else []
    stray = [p for p in diff if not any(p == a or p.startswith(a.rstrip("/") + "/") for a in allowed)]
    assert not stray, f"{argv!r} (exit {res.rc}) left files outside its output: {stray[:5]}"
    if res.rc in (0, 1):
        for out in outputs:
            for f in harness.files_under(Path(out)):
                if f.suffix in (".whl", ".pem") or "/project/" in str(f):
                    continue
                text = f.read_bytes().decode("utf-8", "replace")
                assert not harness.injected(text), f"{argv!r}: injected line in {f}"
        if path == ("run-cmd",) and "--json" not in argv:
            _same_as_json(argv, res)
    _cleanup(outputs, box)
    return res


def _allowed(outputs: list[str], work: Path) -> list[str]:
    """An output path and, when it is reached through work/link, the same path under outside/."""
    out = []
    for o in outputs:
        p = Path(o) if os.path.isabs(o) else work / o
        out.append(str(p))
        out.append(os.path.realpath(p))
        # A parent directory the command created for it is part of the output too.
        for parent in p.parents:
            if parent == work or work not in parent.parents:
                break
            out.append(str(parent))
            out.append(os.path.realpath(parent))
    return out


def _cleanup(outputs: list[str], box) -> None:
    """Empty work/ (but its link) and outside/ for the next example; outputs only ever land there."""
    import shutil

    for top, keep in ((box.work, {"link"}), (box.outside, set())):
        if not top.is_dir():
            top.mkdir(parents=True)
        for d in top.iterdir():
            if d.name in keep:
                continue
            if d.is_dir() and not d.is_symlink():
                shutil.rmtree(d, ignore_errors=True)
            else:
                d.unlink()
    if not (box.work / "link").is_symlink():
        (box.work / "link").symlink_to(box.outside)


def _same_as_json(argv: list[str], res: harness.Result) -> None:
    """The printed docker run line, read back as sh reads it, is exactly the argv --json reports."""
    doc = harness.invoke([argv[0], "--json", *argv[1:]])
    assert doc.rc == 0, f"{argv!r}: text form exit 0 but --json exit {doc.rc}: {doc.err!r}"
    want = json.loads(doc.out)["argv"]
    got = harness.shell_argv(res.out)
    assert got == want, f"{argv!r}: printed line reads back as {got!r}, --json says {want!r}"
    lines = [line for line in res.out.splitlines() if line.strip()]
    first = next(i for i, line in enumerate(lines) if not line.startswith("#"))
    assert all(line.startswith("#") for line in lines[:first]) and lines[first].startswith("docker run")


def teardown_module(module):
    if COUNTS:
        total = sum(COUNTS.values())
        print(f"\nfuzz: {total} invocations: " + ", ".join(f"{k} {v}" for k, v in sorted(COUNTS.items())))
