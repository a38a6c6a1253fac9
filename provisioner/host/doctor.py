"""`provision doctor`: inside a container, check what a training run needs.

For a MindSpore stack, MindSpore instead (provisioner/host/doctor_mindspore.py).
torch and torch_npu importable and paired (and matching the image's Stack
label), CANN libraries loadable, the host driver mapped in, NPU devices
visible and numbered as expected, bf16, launch variables sane, /dev/shm.
Same Finding format and exit codes as `provision audit`. With no NPU (a CPU
machine, a build host) every missing part is reported honestly, never a crash.
The facts come from doctor_facts.py (torch only ever in a child process).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from provisioner import chipids
from provisioner.host import doctor_mindspore
from provisioner.host.doctor_facts import AUTOLOAD, DRIVER, INSTALL_INFO, STACK_ENV, STACK_FILE, gather
from provisioner.host.findings import counts, error, exit_code, info, ordered, run_checks, warning

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping

    from provisioner.matrix.loader import Matrix

SCHEMA = "provision.doctor/1"

# ------------------------------------------------------------------ checks


@dataclass
class DoctorContext:
    facts: dict
    matrix: Matrix | None
    env: dict = field(default_factory=dict)

    @property
    def stack(self) -> dict:
        return (self.facts.get("stack") or {}).get("stack") or {}

    @property
    def torch(self) -> dict:
        return self.facts.get("torch") or {}


def _pub(version: str | None) -> str | None:
    return version.split("+", 1)[0] if version else None


def check_stack_label(ctx: DoctorContext):
    st = ctx.facts.get("stack") or {}
    if st.get("error"):
        yield warning("stack-label-unreadable", f"{st['source']}: {st['error']}",
                      "rebuild the image with `provision build` (it writes the stack file)")
    elif not st.get("stack"):
        yield info("stack-label-missing", f"no stack description ({STACK_FILE} or ${STACK_ENV}); versions are checked"
                   " against each other only", "images built by `provision build` carry one")


def check_torch(ctx: DoctorContext):
    t = ctx.torch
    if t.get("error"):
        yield error("torch-probe-failed", t["error"], "run `python -c 'import torch'` to see the full error")
        return
    torch = t.get("torch") or {}
    npu = t.get("torch_npu") or {}
    want = ctx.stack
    framework = want.get("framework") or "pytorch"
    if framework != "pytorch":
        return
    if not torch.get("dist_version"):
        yield error("torch-missing", "torch is not installed", _install_hint(want, "torch"))
        return
    if torch.get("import_error"):
        yield error("torch-import-failed", f"import torch fails: {torch['import_error']}",
                    f"if the error names libhccl.so or torch_npu, CANN is missing: set {AUTOLOAD}=0 for CPU-only use,"
                    " or use an image built on the official CANN base")
        return
    if not npu.get("dist_version"):
        yield error("torch-npu-missing", f"torch_npu is not installed (torch {torch['version']} can only use the CPU)",
                    _install_hint(want, "torch_npu"))
    else:
        # The wheel's own pin (Requires-Dist) decides; the matrix row is the fallback.
        pin = [r.split(";")[0].strip() for r in npu.get("requires") or [] if r.split(";")[0].strip().startswith("torch")]
        row = ctx.matrix.torch_npu(npu["dist_version"]) if ctx.matrix is not None else None
        if pin and not _requirement_ok(pin[0], torch["version"]):
            yield error("torch-pair-mismatch", f"torch_npu {npu['dist_version']} requires {pin[0]} but torch"
                        f" {torch['version']} is installed", f"pip install '{pin[0]}'")
        elif not pin and row and _pub(torch["version"]) != _pub(row["torch"]):
            yield error("torch-pair-mismatch", f"torch_npu {npu['dist_version']} is built for torch {row['torch']},"
                        f" but torch {torch['version']} is installed", f"pip install torch=={row['torch']}")
        elif pin or row:
            basis = f"it requires {pin[0]}" if pin else f"the matrix pairs it with torch {(row or {}).get('torch')}"
            yield info("torch-pair-ok", f"torch {torch['version']} with torch_npu {npu['dist_version']} ({basis})")
        if npu.get("import_error"):
            cann_hint = ("CANN is missing in this container: build it FROM the official CANN base image"
                         " (provision build picks it)" if not ctx.facts.get("cann_present") else
                         "check LD_LIBRARY_PATH (source the toolkit's set_env.sh) and the driver mounts")
            yield error("torch-npu-import-failed", f"import torch_npu fails: {npu['import_error']}", cann_hint)
    for key, have in (("torch", torch.get("version")), ("torch_npu", npu.get("dist_version"))):
        expect = (want.get(key) or {}).get("version") if isinstance(want.get(key), dict) else None
        if expect and have and _pub(have) != _pub(expect):
            yield error("stack-drift", f"{key} {have} is installed but the image's stack says {expect}",
                        f"reinstall {key}=={expect} or rebuild the image")
        elif expect and not have:
            pass  # reported as missing above


def _install_hint(stack: dict, key: str) -> str:
    part = stack.get(key) if isinstance(stack.get(key), dict) else None
    if part and part.get("requirement"):
        idx = f" --index-url {part['index_url']}" if part.get("index_url") else ""
        return f"pip install '{part['requirement']}'{idx}"
    return f"install {key} matching your CANN (`provision resolve` gives the pair)"


def _requirement_ok(req: str, version: str) -> bool:
    from packaging.requirements import InvalidRequirement, Requirement
    from packaging.version import InvalidVersion, Version

    try:
        r = Requirement(req.split(";")[0].strip())
        return r.specifier.contains(Version(version), prereleases=True)
    except (InvalidRequirement, InvalidVersion):
        return True


def check_cann(ctx: DoctorContext):
    canns = ctx.facts.get("cann") or []
    want = (ctx.stack.get("cann") or {}).get("version")
    if not canns:
        yield error("cann-missing", "no CANN toolkit in this container (/usr/local/Ascend/ascend-toolkit or /usr/local/"
                    "Ascend/cann)", "build the image FROM the official CANN base image (provision build picks it),"
                    " or mount a CANN install and source its set_env.sh")
        return
    if want:
        from provisioner.versions import V

        if not any(V(c["version"]) == V(want) for c in canns):
            yield error("stack-drift", f"CANN {', '.join(c['version'] for c in canns)} is installed but the image's"
                        f" stack says {want}", "rebuild the image")


def check_libraries(ctx: DoctorContext):
    cann = bool(ctx.facts.get("cann"))
    for lib in ctx.facts.get("libraries") or []:
        if lib["loaded"] is not False or ctx.matrix is None:  # without a matrix no library is listed
            continue
        row = next(r for r in ctx.matrix.rows("audit_libraries") if r["name"] == lib["name"])
        sev = {"error": error, "warning": warning, "info": info}[row["severity"]]
        where = f"; it exists in {', '.join(lib['found_in'])} but is not on the library path" if lib["found_in"] else ""
        fix = row["fix"]
        if lib["found_in"]:
            fix = (f"add {lib['found_in'][0]} to LD_LIBRARY_PATH (the toolkit's set_env.sh does)"
                   if lib["provided_by"] == "cann" else f"add {lib['found_in'][0]} to LD_LIBRARY_PATH")
        if lib["provided_by"] == "cann" and not cann:
            where += " (no CANN installed)"
        yield sev("library-missing", f"cannot load {lib['name']} ({lib['provided_by']}){where}", fix)


def check_driver(ctx: DoctorContext):
    drv = ctx.facts.get("driver")
    if not drv:
        yield error("driver-not-mapped", f"{DRIVER} is not in the container",
                    f"mount it: -v {DRIVER}:{DRIVER}:ro (or run with --runtime ascend, which maps driver/lib64)")
        return
    if not drv.get("lib64"):
        yield error("driver-not-mapped", f"{DRIVER}/lib64 is missing", f"mount -v {DRIVER}:{DRIVER}:ro")
    if not drv.get("version"):
        yield warning("driver-version-not-mapped", f"{DRIVER}/version.info is not mapped",
                      f"mount -v {DRIVER}/version.info:{DRIVER}/version.info:ro and -v {INSTALL_INFO}:{INSTALL_INFO}:ro"
                      " (torch_npu.utils.get_cann_version reads both)")
    elif not ctx.facts.get("install_info"):
        yield warning("install-info-not-mapped", f"{INSTALL_INFO} is not mapped",
                      f"mount -v {INSTALL_INFO}:{INSTALL_INFO}:ro (torch_npu.utils.get_cann_version reads it)")
    if drv.get("version") and ctx.matrix is not None:
        from provisioner.host.audit_driver import fit_findings

        for inst in ctx.facts.get("cann") or []:
            row = ctx.matrix.cann(inst["version"])
            if row is not None:
                yield from fit_findings("", drv["version"], inst["version"], row, ctx.matrix,
                                         f"CANN {inst['version']} in this container", "")


def check_devices(ctx: DoctorContext):
    dev = ctx.facts.get("devices") or {}
    ids = dev.get("davinci_ids") or []
    if not ids:
        yield error("no-npu-devices", "no /dev/davinciN in this container: it cannot use an NPU",
                    "start it with --device /dev/davinciN (plus davinci_manager, devmm_svm, hisi_hdc) or"
                    " --runtime ascend -e ASCEND_VISIBLE_DEVICES=...; `provision run-cmd` writes the line")
        return
    names = {n["name"] for n in dev.get("nodes", [])}
    missing = [n for n in _needed_nodes(ctx) if n not in names]
    if missing:
        yield error("device-nodes-missing", f"/dev/{', /dev/'.join(missing)} not in the container",
                    "add --device for each (the runtime adds them); without them the NPU cannot be opened")
    closed = [n["name"] for n in dev.get("nodes", []) if n.get("accessible") is False]
    if closed:
        yield error("device-permission", f"this user (uid {os.getuid()}) cannot open {', '.join(closed)}",
                    "run as root, or add the nodes' group (the host's HwHiAiUser gid) with --group-add")
    visible = ctx.env.get("ASCEND_VISIBLE_DEVICES")
    if visible:
        want, unread = chipids.read(visible, names=False)  # names (npu-1) cannot be compared here
        if not unread and want != ids:
            yield warning("devices-unexpected", f"ASCEND_VISIBLE_DEVICES={visible} but the container has"
                          f" /dev/davinci{ids}", "the runtime keeps host numbers: check the device list")
    count = (ctx.torch.get("npu") or {}).get("count")
    if count is not None and (ctx.torch.get("npu") or {}).get("available") and count != len(ids) and \
            not ctx.env.get("ASCEND_RT_VISIBLE_DEVICES"):
        yield warning("device-count-mismatch", f"torch sees {count} NPU(s) but {len(ids)} /dev/davinci node(s) exist",
                      "check ASCEND_RT_VISIBLE_DEVICES and the device mounts")
    rt = ctx.env.get("ASCEND_RT_VISIBLE_DEVICES")
    if rt:
        vals = chipids.plain(rt.replace(" ", ""))
        if vals is None or vals != sorted(set(vals)) or any(v >= len(ids) for v in vals):
            yield warning("rt-visible-devices-invalid",
                          f"ASCEND_RT_VISIBLE_DEVICES={rt}: must be ascending container-local ids below {len(ids)}",
                          "use 0..N-1 in ascending order, or unset it")


DEFAULT_NODES = ("davinci_manager", "devmm_svm", "hisi_hdc")


def _family(ctx: DoctorContext) -> str | None:
    """The chip family: the image's Stack says it, else torch_npu's device name (None when neither does)."""
    family = (ctx.stack.get("chip") or {}).get("family") if isinstance(ctx.stack.get("chip"), dict) else None
    name = (ctx.torch.get("npu") or {}).get("name")
    if not family and name and ctx.matrix is not None:
        from provisioner.npusmi import classify

        family = classify(name, None, ctx.matrix.rows("chips"))["family"]
    return family if isinstance(family, str) else None


def _needed_nodes(ctx: DoctorContext) -> tuple[str, ...]:
    """Manager nodes for the chip family (_family), else the 910/A2/A3/310P set."""
    if ctx.matrix is None:
        return DEFAULT_NODES
    family = _family(ctx)
    row = next((r for r in ctx.matrix.rows("audit_device_nodes") if r["family"] == family), None)
    return tuple(row["nodes"]) if row else DEFAULT_NODES


def check_npu(ctx: DoctorContext):
    npu = ctx.torch.get("npu") or {}
    if npu.get("error"):
        yield error("npu-query-failed", f"torch.npu fails: {npu['error']}", "check the driver mounts and device nodes")
    elif (ctx.torch.get("torch_npu") or {}).get("version") and npu.get("available") is False:
        yield error("npu-unavailable", "torch_npu imports but torch.npu.is_available() is False",
                    "map the devices and the driver into the container; check `npu-smi info` on the host")


def check_bf16(ctx: DoctorContext):
    npu = ctx.torch.get("npu") or {}
    dtype = ctx.stack.get("dtype")
    want = dtype.get("compute") if isinstance(dtype, dict) else None
    if not npu.get("available"):
        yield info("bf16-not-checked", "no usable NPU, so bf16 support was not checked")
        return
    if npu.get("bf16"):
        yield info("bf16-supported", f"{npu.get('name')}: bf16 supported")
    elif want == "bf16":
        yield error("bf16-unsupported", f"{npu.get('name')} has no bf16 but the image's stack trains in bf16",
                    "train in fp16 with loss scaling (rebuild with --dtype fp16) or use an A2/A3 chip")
    else:
        yield info("bf16-unsupported", f"{npu.get('name')}: no bf16 (fp16 with loss scaling is used)")


def check_env(ctx: DoctorContext):
    """Launch variables (host.launchvars): values in range (for this chip family), known names under
    HCCL_* / TORCH_HCCL_*, interfaces that exist here."""
    if ctx.matrix is None:
        return
    from provisioner.host import launchvars

    rules = launchvars.rules(ctx.matrix)
    for issue in launchvars.check(ctx.matrix, ctx.env, _family(ctx)):
        if issue.problem == launchvars.INVALID and rules[issue.name]["kind"] == "ids":
            continue  # ASCEND_RT_VISIBLE_DEVICES has its own check against the mapped chips (check_devices)
        if issue.problem == launchvars.INVALID:
            yield warning("env-invalid", issue.message, issue.remedy)
        elif issue.problem == launchvars.UNKNOWN:
            yield warning("env-unknown", issue.message, issue.remedy)
        else:
            yield info("env-legacy", issue.message, issue.remedy)
    for name, rule in rules.items():
        value = ctx.env.get(name)
        if value is not None and rule["kind"] == "ifname" and not launchvars.value_problem(rule, value):
            missing = _missing_interface(value.strip())
            if missing:
                yield warning("env-invalid", f"{name}={value}: {missing}", rule.get("notes") or "fix or unset it")


def _missing_interface(value: str) -> str | None:
    """HCCL_SOCKET_IFNAME-style value (prefixes, =exact, ^exclude) matching no interface of this machine."""
    names = [n for n in value.lstrip("^").lstrip("=").split(",") if n]
    exact = value.lstrip("^").startswith("=")
    net = Path("/sys/class/net")
    if net.is_dir() and not value.startswith("^"):
        have = os.listdir(net)
        if not any((h == n) if exact else h.startswith(n) for n in names for h in have):
            return f"no network interface matches (have: {', '.join(sorted(have))})"
    return None


def check_shm(ctx: DoctorContext):
    shm = ctx.facts.get("shm")
    row = next((r for r in ctx.matrix.rows("audit_limits") if r["id"] == "shm_min_mb"), None) if ctx.matrix else None
    if shm and row and shm["total_mb"] < row["value"]:
        yield warning("shm-small", f"/dev/shm is {shm['total_mb']} MB, below {row['value']} MB",
                      "start the container with --ipc=host or --shm-size=16g")


CHECKS = [
    ("stack-label", check_stack_label),
    ("torch", check_torch),
    ("mindspore", doctor_mindspore.check_mindspore),
    ("cann", check_cann),
    ("libraries", check_libraries),
    ("driver", check_driver),
    ("devices", check_devices),
    ("npu", check_npu),
    ("bf16", check_bf16),
    ("env", check_env),
    ("shm", check_shm),
]


def run(root: str | Path = "/", dev_root: str | Path | None = None, env: Mapping[str, str] | None = None,
        stack_file: str | None = None, matrix=None, python: str | None = None, timeout: float = 180.0) -> dict:
    """Gather the container's facts and check them; the provision.doctor/1 document."""
    env_map = os.environ if env is None else env
    facts = gather(root, dev_root, env_map, stack_file, matrix, python, timeout)
    found = ordered(run_checks(CHECKS, DoctorContext(facts, matrix, dict(env_map))))
    return {
        "schema": SCHEMA,
        "facts": facts,
        "findings": [f.to_dict() for f in found],
        "summary": counts(found),
        "exit_code": exit_code(found),
    }
