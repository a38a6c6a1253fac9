"""Fake hosts for tests: a committed file tree plus device nodes made with mknod.

A fixture host lives in tests/fixtures/hosts/<name>/:
  tree/         files copied as-is into the fake root (version.info, /etc/passwd, ...)
  devices.txt   one device node per line: `name type major minor mode uid gid`
                (type c or b; `#` comments). Nodes cannot live in git, so
                `materialize` creates them with mknod under <tmp>/dev.
Device numbers are kept as written unless `null_numbers=True`, which gives
every node the numbers of /dev/null (1,3) so a container can open them.
"""

from __future__ import annotations

import os
import shutil
import stat
from dataclasses import dataclass
from pathlib import Path

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "hosts"


@dataclass(frozen=True)
class FakeHost:
    name: str
    root: Path      # pass as --root
    dev_root: Path  # pass as --dev-root


def names() -> list[str]:
    return sorted(p.name for p in FIXTURES.iterdir() if p.is_dir())


def parse_devices(text: str) -> list[tuple[str, str, int, int, int, int, int]]:
    out = []
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        name, kind, major, minor, mode, uid, gid = line.split()
        out.append((name, kind, int(major), int(minor), int(mode, 8), int(uid), int(gid)))
    return out


def make_nodes(dev_root: Path, specs, null_numbers: bool = False) -> None:
    dev_root.mkdir(parents=True, exist_ok=True)
    for name, kind, major, minor, mode, uid, gid in specs:
        path = dev_root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if null_numbers:
            major, minor = 1, 3
        flag = stat.S_IFCHR if kind == "c" else stat.S_IFBLK
        os.mknod(path, flag | mode, os.makedev(major, minor))
        os.chown(path, uid, gid)
        os.chmod(path, mode)  # mknod applies the umask


def materialize(name: str, tmp: Path, null_numbers: bool = False) -> FakeHost:
    """Copy fixture host `name` under `tmp` and create its device nodes (needs root)."""
    src = FIXTURES / name
    if not src.is_dir():
        raise FileNotFoundError(f"no fixture host {name!r} (have: {', '.join(names())})")
    root = tmp / name / "root"
    if (src / "tree").is_dir():
        shutil.copytree(src / "tree", root, symlinks=True)
    else:
        root.mkdir(parents=True)
    dev_root = tmp / name / "dev"
    devices = src / "devices.txt"
    make_nodes(dev_root, parse_devices(devices.read_text()) if devices.is_file() else [], null_numbers)
    return FakeHost(name, root, dev_root)
