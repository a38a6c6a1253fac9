"""What `provision doctor` reads inside a container: the Python packages (torch, torch_npu, by a child
process; MindSpore through doctor_mindspore.py when the image's stack is MindSpore), the image's stack
file, CANN and the driver as mapped in, device nodes, the libraries the matrix lists, the launch
environment and /dev/shm. Nothing here decides what is wrong; doctor.py does.

torch is never imported in this process: a child Python imports it (with
TORCH_DEVICE_BACKEND_AUTOLOAD=0 when no CANN is present, since torch >= 2.5
auto-loads torch_npu, which then fails on libhccl.so) and reports as JSON. A
child that crashes, hangs or prints nonsense is reported as such.
"""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

from provisioner.host import doctor_mindspore, hostfs
from provisioner.host import probe as host

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping

STACK_FILE = "/etc/provision/stack.json"
STACK_ENV = "PROVISION_STACK"
STACK_FILE_ENV = "PROVISION_STACK_FILE"
DRIVER = "/usr/local/Ascend/driver"
INSTALL_INFO = "/etc/ascend_install.info"
_MARK = "PROVISION-DOCTOR-PROBE:"
AUTOLOAD = "TORCH_DEVICE_BACKEND_AUTOLOAD"


# ------------------------------------------------------------ torch probe


def _probe_main() -> None:  # pragma: no cover - runs in the child process (tested through run())
    """Import torch (and torch_npu) and print what works, as one JSON line."""
    from importlib import metadata

    out: dict = {"torch": {}, "torch_npu": {}, "npu": {}}
    for dist, key in (("torch", "torch"), ("torch-npu", "torch_npu")):
        try:
            out[key]["dist_version"] = metadata.version(dist)
            # Only the pin on torch itself (not torchvision, torch-xyz).
            out[key]["requires"] = [r for r in (metadata.requires(dist) or [])
                                    if re.match(r"torch(?![\w.-])", r.split(";")[0].strip())]
        except metadata.PackageNotFoundError:
            out[key]["dist_version"] = None
    try:
        import torch

        out["torch"]["version"] = torch.__version__
    except BaseException as exc:  # noqa: BLE001 - report any import failure
        out["torch"]["import_error"] = f"{type(exc).__name__}: {exc}"
        print(_MARK + json.dumps(out), flush=True)
        return
    if out["torch_npu"]["dist_version"]:
        try:
            import torch_npu  # noqa: F401

            out["torch_npu"]["version"] = getattr(torch_npu, "__version__", None)
        except BaseException as exc:  # noqa: BLE001
            out["torch_npu"]["import_error"] = f"{type(exc).__name__}: {exc}"
        else:
            try:
                out["npu"]["available"] = bool(torch.npu.is_available())
                out["npu"]["count"] = int(torch.npu.device_count())
                out["npu"]["cann"] = getattr(torch.version, "cann", None)
                if out["npu"]["available"]:
                    out["npu"]["bf16"] = bool(torch.npu.is_bf16_supported())
                    out["npu"]["name"] = torch.npu.get_device_name(0)
            except BaseException as exc:  # noqa: BLE001
                out["npu"]["error"] = f"{type(exc).__name__}: {exc}"
    print(_MARK + json.dumps(out), flush=True)


def torch_probe(python: str, env: Mapping[str, str], cann_present: bool, timeout: float) -> dict:
    child_env = dict(env)
    if not cann_present and AUTOLOAD not in child_env:
        child_env[AUTOLOAD] = "0"
    code = "from provisioner.host.doctor_facts import _probe_main; _probe_main()"
    res = host.run_command([python, "-c", code], timeout, env=child_env)
    facts: dict = {"autoload_disabled": child_env.get(AUTOLOAD) == "0", "python": python}
    line = next((ln for ln in res["stdout"].splitlines() if ln.startswith(_MARK)), None)
    if line is None:
        tail = (res["stderr"] or res["stdout"]).strip().splitlines()
        why = res["error"] or f"exit code {res['rc']}"
        facts["error"] = f"the torch probe failed ({why})" + (f": {tail[-1][:200]}" if tail else "")
        return facts
    try:
        facts.update(json.loads(line[len(_MARK):]))
    except ValueError:
        facts["error"] = "the torch probe printed unreadable output"
    return facts


# ------------------------------------------------------------------ facts


def load_stack(root: Path, env: Mapping[str, str], stack_file: str | None) -> dict:
    """The image's Stack: $PROVISION_STACK (JSON), else the stack file the build writes."""
    if env.get(STACK_ENV):
        try:
            return {"source": f"${STACK_ENV}", "stack": json.loads(env[STACK_ENV]), "error": None}
        except ValueError as exc:
            return {"source": f"${STACK_ENV}", "stack": None, "error": f"not valid JSON ({exc})"}
    path = stack_file or env.get(STACK_FILE_ENV) or STACK_FILE
    data, err = hostfs.read_json(hostfs.under(root, path) if path.startswith("/") else path)
    if data is None and err is None:
        return {"source": None, "stack": None, "error": None}
    if err is None and not isinstance(data, dict):
        err = "not a JSON object"
    return {"source": path, "stack": data if err is None else None, "error": err}


def library_facts(root: Path, rows: list[dict], live: bool) -> list[dict]:
    import ctypes

    out = []
    for row in rows:
        found = [d for d in row["dirs"] if hostfs.under(root, d).joinpath(row["name"]).exists()]
        rec = {"name": row["name"], "provided_by": row["provided_by"], "found_in": found, "loaded": None, "error": None}
        if live:
            try:
                ctypes.CDLL(row["name"])
                rec["loaded"] = True
            except OSError as exc:
                rec["loaded"] = False
                rec["error"] = " ".join(str(exc).split())[:200]
        out.append(rec)
    return out


def gather(root: str | Path = "/", dev_root: str | Path | None = None, env: Mapping[str, str] | None = None,
           stack_file: str | None = None, matrix=None, python: str | None = None, timeout: float = 180.0) -> dict:
    root = Path(root)
    env = os.environ if env is None else env
    live = root.resolve() == Path("/")
    dev = Path(dev_root) if dev_root is not None else host.default_dev_root(root)
    facts: dict = {"root": str(root), "dev_root": str(dev), "live": live, "python": sys.version.split()[0]}
    facts["in_container"] = (hostfs.under(root, "/.dockerenv").exists() or hostfs.under(root, "/run/.containerenv").exists()
                             or "ASCEND_DOCKER_RUNTIME" in env)
    facts["stack"] = load_stack(root, env, stack_file)
    facts["cann"] = host.find_cann(root)
    facts["driver"] = host.driver_facts(root)
    facts["install_info"] = hostfs.under(root, INSTALL_INFO).is_file()
    facts["devices"] = host.device_facts(dev)
    for node in facts["devices"]["nodes"]:
        node["accessible"] = os.access(node["path"], os.R_OK | os.W_OK) if live else None
    rows = matrix.rows("audit_libraries") if matrix is not None else []
    facts["libraries"] = library_facts(root, rows, live)
    cann_present = bool(facts["cann"]) or any(r["loaded"] for r in facts["libraries"] if r["provided_by"] == "cann")
    facts["cann_present"] = cann_present
    facts["torch"] = torch_probe(python or sys.executable, env, cann_present, timeout)
    if ((facts["stack"] or {}).get("stack") or {}).get("framework") == "mindspore":
        npu_usable = cann_present and bool(facts["devices"]["davinci_ids"])
        facts["mindspore"] = doctor_mindspore.probe(python or sys.executable, env, npu_usable, timeout)
    facts["env"] = {k: env[k] for k in sorted(env) if k.startswith(("HCCL_", "ASCEND_", "GLOO_", AUTOLOAD))}
    facts["shm"] = host.shm_facts(dev)
    facts["summary"] = _summary(facts)
    return facts


def _summary(f: dict) -> dict:
    t = f["torch"]
    torch_v = (t.get("torch") or {}).get("version") or ("not importable" if (t.get("torch") or {}).get("dist_version")
                                                          else "not installed")
    npu = t.get("torch_npu") or {}
    npu_v = npu.get("version") or npu.get("dist_version") or "not installed"
    if npu.get("import_error"):
        npu_v += " (import fails)"
    ids = f["devices"]["davinci_ids"]
    stack = (f["stack"] or {}).get("stack") or {}
    return {
        "python": f["python"],
        "torch": torch_v,
        "torch_npu": npu_v,
        **({"MindSpore": (f.get("mindspore") or {}).get("mindspore", {}).get("version") or "not importable"}
           if "mindspore" in f else {}),
        "CANN": ", ".join(f"{c['version']} ({c['kind']})" for c in f["cann"]) or "not found",
        "driver": (f["driver"] or {}).get("version") or ("mapped, no version.info" if f["driver"] else "not mapped"),
        "devices": ", ".join(f"davinci{i}" for i in ids) or "none",
        "stack": f"{stack.get('id')} from {f['stack']['source']}" if stack else "no stack label",
        "/dev/shm": f"{f['shm']['total_mb']} MB" if f.get("shm") else "not measured",
    }
