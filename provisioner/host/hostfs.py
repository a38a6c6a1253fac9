"""Low-level reads of a host tree, shared by the audit and the device planner.

Everything takes a root (``/`` on a real host, a fixture tree in tests) and a
device root (``/dev`` unless told otherwise), so the code above runs unchanged
on fake hosts. Nothing here raises on a missing or odd file: callers get
``None`` or an empty result and decide what that means.

`lstat` is the one place a host's files are stat-ed. A simulated host
(provisioner.host.fakehost) registers here what its temporary tree cannot be
without root: which placeholder files stand for device nodes (type, numbers,
mode, owner) and that the tree belongs to root. Nothing else is faked, and
nothing above this module can tell a simulated host from a real one.
"""

from __future__ import annotations

import grp
import os
import pwd
import stat
from pathlib import Path

from provisioner.host.layout import DRIVER_DIRS, NPU_SMI_DIRS  # noqa: F401 (re-exported)


def under(root: str | Path, path: str) -> Path:
    """``/usr/x`` inside ``root``."""
    return Path(root) / path.lstrip("/")


def read_kv(path: str | Path) -> dict[str, str] | None:
    """Parse ``key=value`` lines (version.info, ascend_install.info); None if unreadable.

    Blank lines and ``#`` comments are skipped; a line without ``=`` is ignored;
    surrounding quotes on values are dropped.
    """
    try:
        text = Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    out: dict[str, str] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        key, _, value = line.partition("=")
        out[key.strip()] = value.strip().strip('"').strip("'")
    return out


def driver_dir(root: str | Path) -> Path | None:
    """The HDK driver directory: /usr/local/Ascend/driver, or /usr/local/npu/driver on some hosts."""
    for rel in DRIVER_DIRS:
        p = Path(root) / rel
        if p.is_dir():
            return p
    return None


def driver_info(root: str | Path) -> dict[str, str] | None:
    d = driver_dir(root)
    return read_kv(d / "version.info") if d else None


def find_npu_smi(root: str | Path) -> Path | None:
    """Where the host keeps npu-smi (bin on servers, sbin on some installs)."""
    for rel in NPU_SMI_DIRS:
        p = Path(root) / rel / "npu-smi"
        if p.is_file():
            return p
    return None


def _db(path: Path, name: str) -> dict[str, int] | None:
    """Look ``name`` up in a passwd/group style file: {'id': ..., 'gid': ...}."""
    try:
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return None
    for line in lines:
        parts = line.split(":")
        if len(parts) >= 3 and parts[0] == name:
            try:
                out = {"id": int(parts[2])}
                if len(parts) >= 4 and parts[3].isdigit():
                    out["gid"] = int(parts[3])
                return out
            except ValueError:
                return None
    return None


def account(root: str | Path, user: str = "HwHiAiUser") -> dict:
    """uid/gid of the Ascend run user and group from root/etc/passwd and /etc/group."""
    pw = _db(under(root, "/etc/passwd"), user)
    gr = _db(under(root, "/etc/group"), user)
    return {
        "user": user,
        "uid": pw["id"] if pw else None,
        "user_gid": pw.get("gid") if pw else None,
        "gid": gr["id"] if gr else None,
    }


def _name(db, ident: int) -> str | None:
    try:
        return db(ident)[0]
    except (KeyError, OverflowError):
        return None


class SimStat:
    """What `lstat` reports for a simulated path: the st_* fields the readers use."""

    __slots__ = ("st_mode", "st_uid", "st_gid", "st_rdev")

    def __init__(self, st_mode: int, st_uid: int, st_gid: int, st_rdev: int = 0):
        self.st_mode, self.st_uid, self.st_gid, self.st_rdev = st_mode, st_uid, st_gid, st_rdev


# Simulated hosts (see the module docstring): path -> stat of a device node, and tree root -> (uid, gid).
_SIM_NODES: dict[str, SimStat] = {}
_SIM_OWNERS: dict[str, tuple[int, int]] = {}


def simulate(nodes: dict[str, SimStat], owned: dict[str, tuple[int, int]] | None = None) -> None:
    """Register simulated device nodes (path -> SimStat) and trees reported as owned by (uid, gid)."""
    _SIM_NODES.update({_key(p): st for p, st in nodes.items()})
    _SIM_OWNERS.update({os.path.realpath(p): ids for p, ids in (owned or {}).items()})


def forget(prefix: str | Path) -> None:
    """Drop every simulation at or below `prefix`."""
    top = os.path.realpath(prefix)
    for table in (_SIM_NODES, _SIM_OWNERS):
        for key in [k for k in table if k == top or k.startswith(top + os.sep)]:
            del table[key]


def _key(path: str | Path) -> str:
    """A path's identity without following its last component (a link stays the link)."""
    path = os.fspath(path)
    return os.path.join(os.path.realpath(os.path.dirname(path) or "."), os.path.basename(path))


def lstat(path: str | Path) -> os.stat_result | SimStat:
    """os.lstat, or what a simulated host says the path is (OSError when it does not exist)."""
    st = os.lstat(path)
    if not _SIM_NODES and not _SIM_OWNERS:
        return st
    key = _key(path)
    node = _SIM_NODES.get(key)
    if node is not None:
        return node
    owner = next((ids for top, ids in _SIM_OWNERS.items() if key == top or key.startswith(top + os.sep)), None)
    return SimStat(st.st_mode, *owner, st.st_rdev) if owner else st


def scan_devices(dev_root: str | Path, names: tuple[str, ...] | None = None) -> list[dict]:
    """Stat every entry in ``dev_root`` (or only ``names``), without following links.

    Each record: name, path, type (char/block/dir/link/file/other), major,
    minor, mode (octal string), uid, gid and, where this machine knows them,
    owner and group names.
    """
    root = Path(dev_root)
    try:
        entries = sorted(names) if names is not None else sorted(os.listdir(root))
    except OSError:
        return []
    out = []
    for name in entries:
        path = root / name
        try:
            st = lstat(path)
        except OSError:
            continue
        mode = st.st_mode
        kind = ("char" if stat.S_ISCHR(mode) else "block" if stat.S_ISBLK(mode) else "dir" if stat.S_ISDIR(mode)
                else "link" if stat.S_ISLNK(mode) else "file" if stat.S_ISREG(mode) else "other")
        rec = {
            "name": name,
            "path": str(path),
            "type": kind,
            "major": os.major(st.st_rdev) if kind in ("char", "block") else None,
            "minor": os.minor(st.st_rdev) if kind in ("char", "block") else None,
            "mode": oct(stat.S_IMODE(mode)),
            "uid": st.st_uid,
            "gid": st.st_gid,
            "owner": _name(pwd.getpwuid, st.st_uid),
            "group": _name(grp.getgrgid, st.st_gid),
        }
        out.append(rec)
    return out


# --- additions for the host audit (provisioner/host/probe.py) ---------------------


def read_text(path: str | Path, limit: int = 1 << 20) -> str | None:
    """The file's text (at most ``limit`` bytes, undecodable bytes replaced); None if unreadable."""
    try:
        with open(path, "rb") as fh:
            return fh.read(limit).decode("utf-8", errors="replace")
    except OSError:
        return None


def read_json(path: str | Path) -> tuple[object | None, str | None]:
    """(parsed JSON, None), (None, None) when the file is absent, or (None, why) when unreadable."""
    import json

    text = read_text(path)
    if text is None:
        return None, None
    try:
        return json.loads(text), None
    except ValueError as exc:
        return None, f"{Path(path).name}: not valid JSON ({exc})"


def os_release(root: str | Path) -> dict[str, str] | None:
    """/etc/os-release (or /usr/lib/os-release) as a dict: ID, VERSION_ID, PRETTY_NAME, ..."""
    for rel in ("/etc/os-release", "/usr/lib/os-release"):
        kv = read_kv(under(root, rel))
        if kv:
            return kv
    return None


def lstat_chain(root: str | Path, path: str) -> list[tuple[str, os.stat_result | SimStat]]:
    """lstat of every component of ``path`` inside ``root``, from root down: [(host path, stat)].

    Stops at the first component that does not exist. The root directory
    itself comes first (as ``/``).
    """
    out: list[tuple[str, os.stat_result | SimStat]] = []
    parts = [p for p in path.split("/") if p]
    current = Path(root)
    host = "/"
    try:
        out.append((host, lstat(current)))
    except OSError:
        return out
    for part in parts:
        current = current / part
        host = host.rstrip("/") + "/" + part
        try:
            out.append((host, lstat(current)))
        except OSError:
            break
    return out
