"""The shape of the house (docs/architecture.md): no import circles, no import from a package above, the
Docker SDK only in engine/, no oversized or undocumented module, and a resolver cache that notices any
change to the code it depends on."""

from __future__ import annotations

import ast
import os
import re

import pytest

from tests.helpers import imports

# The layers, bottom up: a package may import its own modules and those of packages on a lower layer,
# never one on its own layer or above. "" is the base (the package's top-level modules: errors, paths, npusmi,
# arch, chipids, text, shapes). A new package must be given its place here (and in docs/architecture.md).
LAYERS = {
    "": 0,
    "matrix": 1,
    "engine": 1,
    "resolve": 2,
    "train": 2,
    "explain": 2,
    "host": 3,
    "image": 3,
    "devices": 4,
    "upgrade": 4,
    "preflight": 4,
    "jobs": 5,
    "launch": 6,
    "demo": 7,
    "cli": 8,
}
# The trainer runs inside images: only the demo (which prepares a training job) may import it, and anyone its
# torch-free config schema (provision k8s --config checks a trainer config before it ships it).
TRAIN_USERS = {"train", "demo"}
TRAIN_SCHEMA = {"provisioner.train.config", "provisioner.train.errors"}
SIZE_LIMIT = 550  # lines; ../shared/tools/house.py flags a module above this
SDK_CALL = re.compile(r"\.containers\.(create|run|get|list)\(|\.api\.(build|inspect_image|inspect_container|"
                      r"containers|info)\(|\.images\.(get|pull|tag|list)\(")


def package_of(module: str, mods: dict) -> str:
    """'provisioner.host.audit' -> 'host'; a top-level module or the package itself -> ''."""
    parts = module.split(".")
    if len(parts) == 1 or (len(parts) == 2 and mods[module].name != "__init__.py"):
        return ""
    return parts[1]


def upward_imports(edges: dict[str, set[str]], mods: dict) -> list[str]:
    """Every import from a package on the same layer or above (and of the trainer by others)."""
    out = []
    for m, targets in edges.items():
        pm = package_of(m, mods)
        for o in targets:
            po = package_of(o, mods)
            if po == pm:
                continue
            if LAYERS[po] >= LAYERS[pm] or (po == "train" and pm not in TRAIN_USERS and o not in TRAIN_SCHEMA):
                out.append(f"{m} -> {o} ({pm or 'base'} on layer {LAYERS[pm]}, {po or 'base'} on {LAYERS[po]})")
    return sorted(out)


@pytest.fixture(scope="module")
def edges():
    return imports.graph()


def test_no_import_circles(edges):
    found = imports.cycles(edges)
    assert not found, "import circles:\n" + "\n".join(" <-> ".join(c) for c in found)


def test_no_module_imports_from_a_package_above(edges):
    mods = imports.modules()
    unknown = sorted({package_of(m, mods) for m in edges} - set(LAYERS))
    assert not unknown, f"packages without a layer in LAYERS (and docs/architecture.md): {unknown}"
    upward = upward_imports(edges, mods)
    assert not upward, "imports from a package on the same layer or above:\n" + "\n".join(upward)


def test_the_rules_catch_an_upward_import_and_a_circle(tmp_path):
    """The checks above can fail: a small package with one lazy upward import that closes a circle."""
    pkg = tmp_path / "provisioner"
    (pkg / "matrix").mkdir(parents=True)
    (pkg / "cli").mkdir()
    for f in (pkg / "__init__.py", pkg / "matrix" / "__init__.py", pkg / "cli" / "__init__.py"):
        f.write_text('"""x"""\n')
    (pkg / "matrix" / "a.py").write_text("def f():\n    from provisioner.cli import b\n")
    (pkg / "cli" / "b.py").write_text("from provisioner.matrix import a\n")
    edges = imports.graph(pkg)
    assert edges["provisioner.matrix.a"] == {"provisioner.cli", "provisioner.cli.b"}
    assert imports.cycles(edges) == [["provisioner.cli.b", "provisioner.matrix.a"]]
    assert upward_imports(edges, imports.modules(pkg)) == [
        "provisioner.matrix.a -> provisioner.cli (matrix on layer 1, cli on 8)",
        "provisioner.matrix.a -> provisioner.cli.b (matrix on layer 1, cli on 8)",
    ]


def test_docker_sdk_only_in_the_engine_package():
    offenders = []
    for module, path in imports.modules().items():
        if module.startswith("provisioner.engine"):
            continue
        text = path.read_text(encoding="utf-8")
        names = imports.imported_names(module, path)
        if any(n == "docker" or n.startswith("docker.") for n in names) or SDK_CALL.search(text):
            offenders.append(module)
    assert not offenders, f"docker-py used outside provisioner/engine/: {offenders}"


def test_modules_are_small_and_say_what_they_own():
    big, undocumented = [], []
    for module, path in imports.modules().items():
        text = path.read_text(encoding="utf-8")
        if text.count("\n") > SIZE_LIMIT:
            big.append(f"{module} ({text.count(chr(10))} lines)")
        if path.name != "__main__.py" and not ast.get_docstring(ast.parse(text)):
            undocumented.append(module)
    assert not big, f"modules over {SIZE_LIMIT} lines (split them): {big}"
    assert not undocumented, f"modules without a docstring saying what they own: {undocumented}"


def test_the_cache_fingerprint_covers_every_module_the_resolver_runs(edges):
    """The matrix/resolve cache fingerprints whole packages; the resolver must not reach outside them."""
    from provisioner.matrix import loader

    covered = {os.path.realpath(f) for f in loader.code_files()}
    mods = imports.modules()
    for entry in ("provisioner.resolve.solve", "provisioner.resolve.cached", "provisioner.matrix.loader"):
        reached = imports.closure(edges, entry)
        missing = sorted(m for m in reached if os.path.realpath(mods[m]) not in covered)
        assert not missing, f"{entry} runs code the cache fingerprint does not cover: {missing}"


def test_touching_any_dependency_invalidates_the_cache(edges):
    from provisioner.matrix import loader

    layers = loader.layer_paths()
    before = loader.fingerprint(layers)
    mods = imports.modules()
    for module in sorted(imports.closure(edges, "provisioner.resolve.solve")):
        path = mods[module]
        st = os.stat(path)
        try:
            os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))
            assert loader.fingerprint(layers) != before, f"touching {module} left the cache key unchanged"
        finally:
            os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert loader.fingerprint(layers) == before


def test_a_warm_resolution_is_redone_after_a_code_change(tmp_path, monkeypatch):
    """End to end: the cached stack is used while nothing changes, and recomputed once a module changes."""
    from provisioner.matrix import cache, loader
    from provisioner.resolve import cached, driverfit, request

    monkeypatch.setenv("PROVISION_CACHE", str(tmp_path))
    m = loader.load()
    req = request.build(m, card="300T-A2", arch="x86_64")
    stack = cached.cached_resolve(m, req)
    files = sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("resolve-"))
    assert len(files) == 1
    planted = {"status": "ok", "stack": {**stack, "id": "planted"}}
    cache.write(files[0], planted)
    assert cached.cached_resolve(loader.load(), req)["id"] == "planted"  # served from the cache
    st = os.stat(driverfit.__file__)
    try:
        os.utime(driverfit.__file__, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))
        assert cached.cached_resolve(loader.load(), req)["id"] == stack["id"]  # a new key: resolved again
    finally:
        os.utime(driverfit.__file__, ns=(st.st_atime_ns, st.st_mtime_ns))
