"""Read a host into a HostReport: a plain, JSON-ready dict of facts.

Everything is read under ``root`` (``/`` on a real host, a fixture tree in
tests) and device nodes under ``dev_root`` (``/dev`` when root is ``/``, else
``<root>/dev``). Paths in the report are host paths (``/usr/local/...``), not
paths of the fixture tree. With a root other than ``/``, npu-smi is run from
inside the root (``<root>/usr/local/bin/npu-smi``, a fixture's fake script) and
the Docker engine of this machine is not asked: it belongs to another host.

Nothing here decides what is wrong; provisioner.host.audit does. A section whose
probe fails is recorded in ``probe_errors`` and the rest is still read.
"""

from __future__ import annotations

import os
import platform
import re
import signal
import stat
import subprocess
import time
from pathlib import Path

from provisioner import npusmi
from provisioner.arch import normalize as normalize_arch
from provisioner.host import hostfs

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from provisioner.engine.base import Engine
    from provisioner.shapes import HostReport

SCHEMA = "provision.host/1"
ASCEND = "/usr/local/Ascend"
FIRMWARE_DIR = "/usr/local/Ascend/firmware"
INSTALL_INFO = "/etc/ascend_install.info"
RUNTIME_DIR = "/usr/local/Ascend/Ascend-Docker-Runtime"
RUNTIME_LIST = "/etc/ascend-docker-runtime.d/base.list"
DAEMON_JSON = "/etc/docker/daemon.json"
CDI_DIRS = ("/etc/cdi", "/var/run/cdi")
DOCKER_BINS = ("/usr/bin/docker", "/usr/local/bin/docker", "/usr/bin/dockerd", "/usr/local/bin/dockerd")
_DEVICE = re.compile(r"^(v?davinci\d+|davinci_manager(_docker)?|devmm_svm|hisi_hdc|dvpp_cmdlist|uburma|ummu)$")
_CFG = re.compile(r"^(\w+?)_(running|upgrade|installed)_version=\[(?:[^:\]]*:)?([^\]]*)\]")


def default_dev_root(root: str | Path) -> Path:
    return Path("/dev") if Path(root).resolve() == Path("/") else Path(root) / "dev"


def probe(
    root: str | Path = "/",
    dev_root: str | Path | None = None,
    npu_smi_outputs: list[str | Path] | tuple = (),
    run_npu_smi: bool = True,
    npu_smi_timeout: float = 10.0,
    engine: str = "auto",
    runtime_mounts: list[str] | tuple = (),
    chip_rows: list[dict] | tuple = (),
    run_tree_programs: bool = False,
) -> HostReport:
    """Read ``root`` into a HostReport dict (see docs/json.md, provision.host/1).

    engine: "auto" asks the Docker engine only when root is ``/``; "probe"
    always; "skip" never. chip_rows (matrix `chips`) classify npu-smi names.

    npu-smi runs only from the live root ``/``: another root is another system's disk, and nothing on it
    is ever executed (its npu-smi output is read from `npu_smi_outputs`, or the section says it was not
    run). `run_tree_programs` lifts that for tests whose fake trees carry a stand-in npu-smi.
    """
    root = Path(root)
    is_live = root.resolve() == Path("/")
    dev = Path(dev_root) if dev_root is not None else default_dev_root(root)
    report: HostReport = {"schema": SCHEMA, "root": str(root), "dev_root": str(dev), "live": is_live,
                          "probe_errors": []}

    def section(name: str, fn, *args):
        try:
            return fn(*args)
        except Exception as exc:  # noqa: BLE001 - one bad section must not hide the others
            report["probe_errors"].append({"section": name, "error": f"{type(exc).__name__}: {exc}"})
            return None

    report["system"] = section("system", system_facts, root, is_live)
    report["driver"] = section("driver", driver_facts, root)
    report["firmware"] = section("firmware", firmware_facts, root)
    report["install_info"] = section("install_info", lambda r: hostfs.read_kv(hostfs.under(r, INSTALL_INFO)), root)
    report["cann"] = section("cann", find_cann, root)
    may_run = run_npu_smi and (is_live or run_tree_programs)
    report["npu_smi"] = section("npu_smi", npu_smi_facts, root, list(npu_smi_outputs), may_run, npu_smi_timeout,
                                list(chip_rows))
    if run_npu_smi and not may_run and not npu_smi_outputs and report["npu_smi"]:
        # Found (never run) or absent, as on the live host.
        found = hostfs.find_npu_smi(root)
        report["npu_smi"]["source"] = "not-run" if found else "absent"
        report["npu_smi"]["path"] = _host_path(root, found) if found else None
    report["devices"] = section("devices", device_facts, dev)
    report["account"] = section("account", account_facts, root, report.get("install_info"))
    report["docker"] = section("docker", docker_facts, root, engine == "probe" or (engine == "auto" and is_live))
    report["runtime_paths"] = section("runtime_paths", runtime_path_facts, root, list(runtime_mounts))
    report["shm"] = section("shm", shm_facts, dev)
    return report


# ------------------------------------------------------------------ system


def system_facts(root: Path, is_live: bool) -> dict:
    arch = (hostfs.read_text(hostfs.under(root, "/proc/sys/kernel/arch")) or "").strip()
    kernel = (hostfs.read_text(hostfs.under(root, "/proc/sys/kernel/osrelease")) or "").strip()
    if is_live:
        arch = arch or platform.machine()
        kernel = kernel or platform.release()
    osr = hostfs.os_release(root) or {}
    mem_mb = None
    meminfo = hostfs.read_text(hostfs.under(root, "/proc/meminfo")) or ""
    m = re.search(r"^MemTotal:\s*(\d+)\s*kB", meminfo, re.MULTILINE)
    if m:
        mem_mb = int(m.group(1)) // 1024
    return {
        "arch": normalize_arch(arch) or arch or None,
        "kernel": kernel or None,
        "os": {
            "id": osr.get("ID"),
            "name": osr.get("NAME"),
            "version_id": osr.get("VERSION_ID"),
            "pretty_name": osr.get("PRETTY_NAME"),
        } if osr else None,
        "memory_mb": mem_mb,
    }


# ------------------------------------------------------ driver and firmware


def parse_bracket_pairs(text: str | None) -> list[list[str]]:
    """``[a,b],[c]`` -> [['a', 'b'], ['c']] (version.info ranges); [] for anything else."""
    if not text:
        return []
    return [[p.strip() for p in group.split(",") if p.strip()] for group in re.findall(r"\[([^\[\]]*)\]", text)]


def driver_facts(root: Path) -> dict | None:
    roots = [f"/{rel}" for rel in hostfs.DRIVER_DIRS if (root / rel).is_dir()]
    if not roots:
        return None
    d = hostfs.driver_dir(root)
    host_dir = "/" + str(d.relative_to(root)) if d else roots[0]
    info = hostfs.read_kv(d / "version.info") if d else None
    fw = parse_bracket_pairs((info or {}).get("compatible_version_fw"))
    return {
        "dir": host_dir,
        "roots": roots,
        "info": info,
        "version": (info or {}).get("Version"),
        "package_version": (info or {}).get("package_version"),
        "compatible_firmware": fw[0] if fw and len(fw[0]) == 2 else None,
        "lib64": (d / "lib64").is_dir() if d else False,
    }


def firmware_facts(root: Path) -> dict | None:
    d = hostfs.under(root, FIRMWARE_DIR)
    if not d.is_dir():
        return None
    info = hostfs.read_kv(d / "version.info")
    return {
        "dir": FIRMWARE_DIR,
        "info": info,
        "version": (info or {}).get("Version"),
        "package_version": (info or {}).get("package_version"),
        "compatible_drivers": parse_bracket_pairs((info or {}).get("compatible_version_drv")),
    }


# --------------------------------------------------------------------- CANN


def parse_version_cfg(text: str | None) -> dict[str, dict[str, str]]:
    """``toolkit_running_version=[1.84.15.1.310:6.0.1]`` -> {'toolkit': {'running': '6.0.1'}}."""
    out: dict[str, dict[str, str]] = {}
    for line in (text or "").splitlines():
        m = _CFG.match(line.strip())
        if m and m.group(3).strip():
            out.setdefault(m.group(1), {})[m.group(2)] = m.group(3).strip()
    return out


def _host_path(root: Path, p: Path) -> str:
    try:
        return "/" + str(p.relative_to(root))
    except ValueError:
        return str(p)


def find_cann(root: Path) -> list[dict]:
    """Every CANN install: toolkit (ascend-toolkit/ layout and the CANN >= 8.5 cann/ layout) and nnae.

    Installs seen through several paths (``latest`` and the version dir) are
    reported once, with all their paths.
    """
    base = hostfs.under(root, ASCEND)
    found: dict[tuple, dict] = {}

    def add(kind: str, layout: str, info_path: Path, info: dict | None, version: str | None, cfg: dict | None = None):
        if not version:
            return
        arch = (info or {}).get("arch")
        key = (kind, version.lower(), arch)
        rec = found.get(key)
        host = _host_path(root, info_path)
        if rec is None:
            found[key] = {
                "kind": kind,
                "layout": layout,
                "version": version,
                "arch": arch,
                "innerversion": (info or {}).get("innerversion"),
                "install_path": (info or {}).get("path"),
                "info_file": host,
                "paths": [host],
                "version_cfg": cfg,
            }
        elif host not in rec["paths"]:
            rec["paths"].append(host)
            if cfg and not rec["version_cfg"]:
                rec["version_cfg"] = cfg

    def scan_toolkit_dir(d: Path, layout: str, kind: str = "toolkit", info_name: str = "ascend_toolkit_install.info"):
        infos = sorted(d.glob(f"*-linux/{info_name}")) + ([d / info_name] if (d / info_name).is_file() else [])
        cfg = parse_version_cfg(hostfs.read_text(d / "version.cfg")) or None
        for info_path in infos:
            info = hostfs.read_kv(info_path)
            add(kind, layout, info_path, info, (info or {}).get("version"), cfg)
        if not infos and kind == "toolkit":
            # Older installs: no install.info; the version is in version.cfg or toolkit/version.info.
            version = None
            if cfg:
                part = cfg.get("toolkit") or cfg.get("runtime") or next(iter(cfg.values()))
                version = part.get("running") or part.get("installed") or next(iter(part.values()), None)
            tv = hostfs.read_kv(d / "toolkit" / "version.info")
            version = version or (tv or {}).get("version_dir")
            src = d / "version.cfg" if cfg else d / "toolkit" / "version.info"
            add(kind, layout, src, None, version, cfg)

    if not base.is_dir():
        return []
    tk = base / "ascend-toolkit"
    if tk.is_dir():
        for d in sorted(p for p in tk.iterdir() if p.is_dir()):
            scan_toolkit_dir(d, "ascend-toolkit")
    for d in [base / "cann", *sorted(base.glob("cann-*"))]:
        if d.is_dir():
            scan_toolkit_dir(d, "cann")
    nnae = base / "nnae"
    if nnae.is_dir():
        for d in sorted(p for p in nnae.iterdir() if p.is_dir()):
            scan_toolkit_dir(d, "nnae", kind="nnae", info_name="ascend_nnae_install.info")
    return sorted(found.values(), key=lambda r: (r["kind"], r["info_file"]))


# ------------------------------------------------------------------ npu-smi


def run_command(argv: list[str], timeout: float, env: dict | None = None) -> dict:
    """Run argv in its own session; on timeout kill the whole group (children too)."""
    start = time.monotonic()
    res: dict = {"argv": argv, "rc": None, "stdout": "", "stderr": "", "error": None}
    try:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                                env=env, start_new_session=True)
    except OSError as exc:
        res["error"] = f"cannot run {argv[0]}: {exc.strerror or exc}"
        return res
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except OSError:
            proc.kill()
        out, err = proc.communicate()
        res["error"] = f"timed out after {timeout:g} s"
    res["rc"] = proc.returncode
    res["stdout"] = out.decode("utf-8", errors="replace")
    res["stderr"] = err.decode("utf-8", errors="replace")
    res["seconds"] = round(time.monotonic() - start, 3)
    return res


def npu_smi_facts(root: Path, outputs: list, run: bool, timeout: float, chip_rows: list[dict]) -> dict:
    facts: dict = {"source": None, "path": None, "version": None, "info": None, "mapping": None,
                   "error": None, "notes": []}
    info_text = map_text = None
    if outputs:
        facts["source"] = "file"
        for item in outputs:
            text = hostfs.read_text(item)
            if text is None:
                facts["notes"].append(f"cannot read {item}")
                continue
            if npusmi.is_mapping(text):
                map_text = text
            else:
                info_text = text
    elif run:
        path = hostfs.find_npu_smi(root)
        if path is None:
            facts["source"] = "absent"
        else:
            facts["source"] = "run"
            facts["path"] = _host_path(root, path)
            res = run_command([str(path), "info"], timeout)
            if res["error"] or res["rc"] != 0:
                why = res["error"] or f"exit code {res['rc']}"
                detail = (res["stderr"] or res["stdout"]).strip().splitlines()
                facts["error"] = f"npu-smi info failed: {why}" + (f": {detail[-1][:160]}" if detail else "")
            if res["stdout"].strip():
                info_text = res["stdout"]
    else:
        facts["source"] = "skipped"
    if info_text is not None:
        info = npusmi.parse_info(info_text)
        facts["info"] = info
        facts["version"] = info["version"]
        if info["error"] and not facts["error"]:
            facts["error"] = f"npu-smi printed an error instead of a table: {info['error']}"
    chips = _chips(facts["info"], None, chip_rows)
    # `npu-smi info -m` names chips the table leaves ambiguous or redacted.
    if facts["source"] == "run" and any(c["family"] is None for c in chips) and map_text is None:
        res = run_command([str(hostfs.under(root, facts["path"])), "info", "-m"], timeout)
        if res["rc"] == 0 and not res["error"]:
            map_text = res["stdout"]
        else:
            facts["notes"].append("npu-smi info -m gave no mapping")
    if map_text is not None:
        facts["mapping"] = npusmi.parse_mapping(map_text)
        chips = _chips(facts["info"], facts["mapping"], chip_rows)
    facts["chips"] = chips
    return facts


def _chips(info: dict | None, mapping: dict | None, chip_rows: list[dict]) -> list[dict]:
    if not info:
        return []
    names = {}
    for row in (mapping or {}).get("rows", []):
        if not row["mcu"]:
            names[(row["npu"], row["chip"])] = row["name"]
    out = []
    for chip in info["chips"]:
        memory = npusmi.chip_memory_mb(chip)
        cls = npusmi.classify(chip["name"], memory, chip_rows)
        alt = names.get((chip["npu"], chip["chip"]))
        if cls["family"] is None and alt:
            alt_cls = npusmi.classify(alt, memory, chip_rows)
            if alt_cls["family"] is not None:
                cls = {**alt_cls, "note": f"table name {chip['name']!r}; npu-smi info -m names it {alt!r}"}
        procs = [p for p in info["processes"]
                 if p["npu"] == chip["npu"] and (p["chip"] is None or chip["chip"] is None or p["chip"] == chip["chip"])]
        out.append({**chip, "memory_mb": memory, "model": cls["model"], "family": cls["family"],
                    "class_note": cls["note"], "processes": procs})
    return out


# ------------------------------------------------------- devices and users


def device_facts(dev_root: Path) -> dict:
    try:
        names = tuple(n for n in os.listdir(dev_root) if _DEVICE.match(n))
    except OSError:
        names = ()
    nodes = hostfs.scan_devices(dev_root, names)
    davinci = sorted(int(r["name"][7:]) for r in nodes if r["type"] == "char" and re.fullmatch(r"davinci\d+", r["name"]))
    return {"nodes": nodes, "davinci_ids": davinci}


def account_facts(root: Path, install_info: dict | None) -> dict:
    user = (install_info or {}).get("UserName") or "HwHiAiUser"
    group = (install_info or {}).get("UserGroup") or user
    acct = hostfs.account(root, user)
    if group != user:
        g = hostfs.account(root, group)
        acct["gid"] = g["gid"]
    acct["group"] = group
    return acct


# ------------------------------------------------------------------- docker


def docker_facts(root: Path, probe_engine: bool) -> dict:
    daemon, daemon_error = hostfs.read_json(hostfs.under(root, DAEMON_JSON))
    runtimes: dict = {}
    default_runtime = None
    if isinstance(daemon, dict):
        found = daemon.get("runtimes")
        runtimes = found if isinstance(found, dict) else {}
        default_runtime = daemon.get("default-runtime")
    rt_dir = hostfs.under(root, RUNTIME_DIR)
    rt_info = hostfs.read_kv(rt_dir / "ascend_docker_runtime_install.info") if rt_dir.is_dir() else None
    ascend = runtimes.get("ascend") if isinstance(runtimes.get("ascend"), dict) else None
    facts: dict[str, Any] = {
        "binaries": [p for p in DOCKER_BINS if hostfs.under(root, p).is_file()],
        "daemon_json": {"path": DAEMON_JSON, "present": daemon is not None or daemon_error is not None,
                        "error": daemon_error, "runtimes": sorted(runtimes), "default_runtime": default_runtime},
        "ascend_runtime": {
            "installed": rt_dir.is_dir(),
            "dir": RUNTIME_DIR if rt_dir.is_dir() else None,
            "configured": ascend is not None,
            "path": (ascend or {}).get("path"),
            "default": default_runtime == "ascend",
            "injection_mode": (rt_info or {}).get("injection-mode"),
        },
        "cdi": [_cdi_dir(root, d) for d in CDI_DIRS],
        "engine": engine_facts() if probe_engine else {"probed": False, "reachable": None,
                                                        "why": "the engine of this machine is not the audited host's"},
    }
    engine = facts["engine"]
    if engine.get("reachable"):
        # The live engine knows its runtimes better than daemon.json does.
        facts["ascend_runtime"]["configured"] = facts["ascend_runtime"]["configured"] or "ascend" in engine["runtimes"]
        facts["ascend_runtime"]["default"] = engine.get("default_runtime") == "ascend"
    return facts


def _cdi_dir(root: Path, host_dir: str) -> dict:
    d = hostfs.under(root, host_dir)
    specs, ascend = [], []
    if d.is_dir():
        for p in sorted(d.iterdir()):
            if p.suffix in (".json", ".yaml", ".yml") and p.is_file():
                specs.append(p.name)
                if "ascend.com/npu" in (hostfs.read_text(p, 1 << 16) or ""):
                    ascend.append(p.name)
    return {"dir": host_dir, "exists": d.is_dir(), "specs": specs, "ascend_specs": ascend}


def engine_facts(timeout: float = 3.0, engine: Engine | None = None) -> dict:
    """Ask the local engine (`engine`, else the one at DOCKER_HOST) for its version and runtimes."""
    from provisioner import engine as engines
    from provisioner.engine.errors import EngineError, short

    try:
        eng = engine if engine is not None else engines.connect(timeout, ping=False)
        try:
            info = eng.info()
        finally:
            if engine is None:
                eng.close()
    except EngineError as exc:
        return {"probed": True, "reachable": False, "error": short(exc, 200)}
    return {
        "probed": True,
        "reachable": True,
        "version": info.version,
        "api_version": info.api_version,
        "runtimes": list(info.runtimes),
        "default_runtime": info.default_runtime,
        "cdi_spec_dirs": list(info.cdi_spec_dirs) if info.cdi_spec_dirs is not None else None,
    }


def runtime_path_facts(root: Path, mounts: list[str]) -> dict:
    """Problems Ascend Docker Runtime's cli would refuse a mount for, per path that exists.

    The cli walks the file and every parent: group/other-writable, owner not
    root, or a symlink (unless ASCEND_ALLOW_LINK) each stop the mount.
    """
    listed = hostfs.read_text(hostfs.under(root, RUNTIME_LIST))
    source = RUNTIME_LIST if listed is not None else "matrix"
    paths = [ln.strip() for ln in (listed or "").splitlines() if ln.strip().startswith("/")] if listed else list(mounts)
    problems = []
    checked = []
    for path in paths:
        if "*" in path:
            continue
        chain = hostfs.lstat_chain(root, path)
        if len(chain) != len([p for p in path.split("/") if p]) + 1:
            continue  # missing paths are skipped by the runtime too
        checked.append(path)
        for host, st in chain:
            mode = stat.S_IMODE(st.st_mode)
            why = []
            if stat.S_ISLNK(st.st_mode):
                why.append("symbolic link")
            elif mode & 0o022:
                why.append(f"{'group' if mode & 0o020 else ''}{'/' if mode & 0o020 and mode & 0o002 else ''}"
                           f"{'other' if mode & 0o002 else ''}-writable (mode {oct(mode)})")
            if st.st_uid != 0:
                why.append(f"owned by uid {st.st_uid}, not root")
            if why:
                problems.append({"path": path, "at": host, "problems": why})
    return {"list": source, "checked": checked, "problems": problems}


def shm_facts(dev_root: Path) -> dict | None:
    shm = dev_root / "shm"
    if not shm.is_dir():
        return None
    try:
        st = os.statvfs(shm)
    except OSError:
        return None
    return {"path": "/dev/shm", "total_mb": st.f_blocks * st.f_frsize // (1 << 20),
            "free_mb": st.f_bavail * st.f_frsize // (1 << 20)}
