"""Fake hosts in a temporary directory, for tests, the demo and benchmarks: a host root and a dev root that
every reader (probe, audit, device planner, launch) takes as it would take `/` and `/dev`.

A fixture host is a directory holding
  tree/         files copied as-is into the fake root (version.info, /etc/passwd, npu-smi stand-ins, ...)
  devices.txt   one device node per line: `name type major minor mode uid gid` (type c or b; `#` comments)
  modes.txt     `path mode` lines for modes git cannot keep (group-writable files), optional; every other
                path gets the mode a root install gives it, whatever the checkout's umask

Device nodes are made in one of two ways:
- "mknod": real nodes (needs root), which a container can open; with `null_numbers` every node gets
  /dev/null's numbers, so nothing real is touched.
- "simulated": empty placeholder files that provisioner.host.hostfs reports as the nodes they stand for
  (type, numbers, mode, owner), and the copied tree reported as root's, as a root copy would be. No root
  needed; the code above hostfs runs unchanged.
npu-smi is never faked in Python: a host gets a stand-in script that prints real saved output
(`install_npu_smi`), and the probe runs it as it runs the real one.
"""

from __future__ import annotations

import os
import shutil
import stat
from dataclasses import dataclass
from pathlib import Path

from provisioner.host import hostfs

MODES = ("mknod", "simulated")
NULL = (1, 3)  # /dev/null's numbers
NPU_SMI_SCRIPT = """#!/bin/sh
# Stand-in for npu-smi in a fake host tree: prints saved output. Only `info` and `info -m`.
dir="$(dirname "$0")/../share/npu-smi-fixture"
case "$*" in
  "info") if [ -f "$dir/info.txt" ]; then exec cat "$dir/info.txt"; fi ;;
  "info -m") if [ -f "$dir/info-m.txt" ]; then exec cat "$dir/info-m.txt"; fi ;;
esac
echo "npu-smi fixture: no saved output for: $*" >&2
exit 2
"""


@dataclass(frozen=True)
class Node:
    """One device node of a fake host."""

    name: str  # path under the dev root: davinci0, uburma/uburma0
    kind: str  # c | b
    major: int
    minor: int
    mode: int
    uid: int
    gid: int


@dataclass(frozen=True)
class FakeHost:
    name: str
    root: Path  # pass as --root
    dev_root: Path  # pass as --dev-root
    nodes: str = "simulated"  # how its device nodes were made (MODES)


def parse_devices(text: str) -> list[Node]:
    """devices.txt lines as Nodes."""
    out = []
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        name, kind, major, minor, mode, uid, gid = line.split()
        out.append(Node(name, kind, int(major), int(minor), int(mode, 8), int(uid), int(gid)))
    return out


def default_nodes() -> str:
    """mknod as root, simulated otherwise."""
    return "mknod" if os.geteuid() == 0 else "simulated"


def make_nodes(dev_root: Path, nodes: list[Node], how: str = "simulated", null_numbers: bool = False) -> None:
    """Create `nodes` under `dev_root`, really (mknod) or as simulated placeholders (see the module docstring)."""
    if how not in MODES:
        raise ValueError(f"how={how!r}: expected one of {MODES}")
    dev_root.mkdir(parents=True, exist_ok=True)
    simulated: dict[str, hostfs.SimStat] = {}
    for n in nodes:
        path = dev_root / n.name
        path.parent.mkdir(parents=True, exist_ok=True)
        major, minor = NULL if null_numbers else (n.major, n.minor)
        flag = stat.S_IFCHR if n.kind == "c" else stat.S_IFBLK
        if how == "mknod":
            os.mknod(path, flag | n.mode, os.makedev(major, minor))
            os.chown(path, n.uid, n.gid)
        else:
            path.touch()
            simulated[str(path)] = hostfs.SimStat(flag | n.mode, n.uid, n.gid, os.makedev(major, minor))
        os.chmod(path, n.mode)  # mknod applies the umask
    if simulated:
        hostfs.simulate(simulated)


def installed_modes(root: Path) -> None:
    """The modes a root install leaves (directories 0755, files 0644, 0755 if executable), whatever the
    checkout's umask gave the fixture files (git archives and group umasks make them group-writable)."""
    for path in [root, *root.rglob("*")]:
        if path.is_symlink():
            continue
        if path.is_dir():
            os.chmod(path, 0o755)
        else:
            os.chmod(path, 0o755 if path.stat().st_mode & 0o111 else 0o644)


def apply_modes(src: Path, root: Path) -> None:
    """modes.txt of a fixture host: `path mode` lines applied to the copied tree."""
    spec = src / "modes.txt"
    if not spec.is_file():
        return
    for line in spec.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            rel, mode = line.split()
            os.chmod(root / rel, int(mode, 8))


def materialize(src: Path, dest: Path, nodes: str | None = None, null_numbers: bool = False) -> FakeHost:
    """Copy fixture host directory `src` under `dest` (root/ and dev/) and make its device nodes.

    `nodes`: "mknod" or "simulated" (default: mknod as root, else simulated).
    """
    how = nodes or default_nodes()
    src = Path(src)
    if not src.is_dir():
        raise FileNotFoundError(f"no fixture host at {src}")
    root = Path(dest) / src.name / "root"
    if (src / "tree").is_dir():
        shutil.copytree(src / "tree", root, symlinks=True)
    else:
        root.mkdir(parents=True)
    installed_modes(root)
    apply_modes(src, root)
    dev_root = Path(dest) / src.name / "dev"
    devices = src / "devices.txt"
    make_nodes(dev_root, parse_devices(devices.read_text()) if devices.is_file() else [], how, null_numbers)
    if how == "simulated":
        hostfs.simulate({}, owned={str(root): (0, 0)})
    return FakeHost(src.name, root, dev_root, how)


def install_npu_smi(root: Path, info: str | None = None, mapping: str | None = None) -> Path:
    """Put an npu-smi stand-in at root/usr/local/bin/npu-smi printing `info` / `mapping` (saved real output).

    With neither, it fails the way npu-smi does on a host whose chips it cannot read.
    """
    share = root / "usr" / "local" / "share" / "npu-smi-fixture"
    share.mkdir(parents=True, exist_ok=True)
    for name, text in (("info.txt", info), ("info-m.txt", mapping)):
        if text is not None:
            (share / name).write_text(text)
    script = root / "usr" / "local" / "bin" / "npu-smi"
    script.parent.mkdir(parents=True, exist_ok=True)
    script.write_text(NPU_SMI_SCRIPT)
    script.chmod(0o755)
    return script


def card_host(base: Path, matrix, card: str, chips: int, driver: str | None = None, account_id: int = 1000,
              nodes: str | None = None) -> FakeHost:
    """A host with `chips` chips of `card` made from the matrix alone (no fixture directory).

    Node names come from the card's device family in matrices/devices.yaml (the chip nodes and the required
    shared nodes), with /dev/null's numbers (a container can open them and nothing real is touched), owned by
    the driver's run account (uid/gid `account_id`, mode 0660) as on real hosts. The
    root holds an empty driver tree whose version.info names `driver` (empty when None), the install info,
    /usr/local/dcmi and an npu-smi that cannot read chips.
    """
    _, family, _ = matrix.lookup_card(card)
    dfam = next(r for r in matrix.rows("device_families") if r["id"] == family["device_family"])
    names = [dfam["chip_node"].format(id=i) for i in range(chips)]
    names += [row["name"] for row in dfam["nodes"] if row["need"] == "required"]
    root = Path(base) / "root"
    user = hostfs.account(root)["user"]
    (root / "etc").mkdir(parents=True)
    (root / "etc" / "passwd").write_text(
        f"root:x:0:0::/root:/bin/sh\n{user}:x:{account_id}:{account_id}::/home/{user}:/bin/sh\n")
    (root / "etc" / "group").write_text(f"root:x:0:\n{user}:x:{account_id}:\n")
    driver_dir = root / hostfs.DRIVER_DIRS[0]
    (driver_dir / "lib64").mkdir(parents=True)
    (driver_dir / "version.info").write_text(f"Version={driver}\n" if driver else "")
    install = "/" + str(Path(hostfs.DRIVER_DIRS[0]).parent)
    (root / "etc" / "ascend_install.info").write_text(f"Driver_Install_Path_Param={install}\n")
    (root / "usr" / "local" / "dcmi").mkdir(parents=True)
    install_npu_smi(root)
    installed_modes(root)
    how = nodes or default_nodes()
    dev = Path(base) / "dev"
    make_nodes(dev, [Node(n, "c", *NULL, 0o660, account_id, account_id) for n in names], how)
    if how == "simulated":
        hostfs.simulate({}, owned={str(root): (0, 0)})
    return FakeHost(card, root, dev, how)
