"""The committed fixture hosts (tests/fixtures/hosts/<name>/) and where they are; the builders that turn
one into a root and a dev root live in the package (provisioner.host.fakehost), shared with the demo and
the benchmarks."""

from __future__ import annotations

from pathlib import Path

from provisioner.host import fakehost

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "hosts"


def names() -> list[str]:
    return sorted(p.name for p in FIXTURES.iterdir() if p.is_dir() and (p / "devices.txt").exists())


def materialize(name: str, tmp: Path, nodes: str = "simulated", null_numbers: bool = False) -> fakehost.FakeHost:
    """Fixture host `name` under `tmp`: simulated device nodes (no root), or real ones (nodes="mknod")."""
    if not (FIXTURES / name).is_dir():
        raise FileNotFoundError(f"no fixture host {name!r} (have: {', '.join(names())})")
    return fakehost.materialize(FIXTURES / name, tmp, nodes=nodes, null_numbers=null_numbers)
