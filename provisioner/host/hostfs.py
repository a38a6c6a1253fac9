"""Low-level reads of a host tree, shared by the audit and the device planner.

Everything takes a root (``/`` on a real host, a fixture tree in tests) and a
device root (``/dev`` unless told otherwise), so the code above runs unchanged
on fake hosts. Nothing here raises on a missing or odd file: callers get
``None`` or an empty result and decide what that means.
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
            st = path.lstat()
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


def davinci_ids(dev_root: str | Path) -> list[int]:
    """Physical chip ids N of the /dev/davinciN character devices present."""
    ids = []
    for rec in scan_devices(dev_root):
        name = rec["name"]
        if rec["type"] == "char" and name.startswith("davinci") and name[7:].isdigit():
            ids.append(int(name[7:]))
    return sorted(ids)


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


def lstat_chain(root: str | Path, path: str) -> list[tuple[str, os.stat_result]]:
    """lstat of every component of ``path`` inside ``root``, from root down: [(host path, stat)].

    Stops at the first component that does not exist. The root directory
    itself comes first (as ``/``).
    """
    out: list[tuple[str, os.stat_result]] = []
    parts = [p for p in path.split("/") if p]
    current = Path(root)
    host = "/"
    try:
        out.append((host, current.lstat()))
    except OSError:
        return out
    for part in parts:
        current = current / part
        host = host.rstrip("/") + "/" + part
        try:
            out.append((host, current.lstat()))
        except OSError:
            break
    return out
