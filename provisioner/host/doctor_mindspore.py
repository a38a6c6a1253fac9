"""`provision doctor` for an image whose stack is MindSpore: import, device, a run_check, pairings.

Like the torch probe, MindSpore is never imported in the doctor's own process:
a child Python imports it, selects the Ascend device (the CPU when there is no
CANN or NPU, reported as such), runs the computation `mindspore.run_check()`
runs (an element-wise product of two small tensors, compared with its known
result) and reports as one JSON line. The checks then hold the versions against
the image's stack (MindSpore, MindSpore Transformers) and the matrix (the CANN
each MindSpore release pairs with, matrices/mindspore.yaml).
"""

from __future__ import annotations

import json

from provisioner.host import probe as host
from provisioner.host.findings import error, info, warning

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping

_MARK = "PROVISION-DOCTOR-MINDSPORE:"


def _probe_main(device: str) -> None:  # pragma: no cover - runs in the child process (tested through run())
    """Import MindSpore (and MindSpore Transformers), pick `device`, compute, print JSON."""
    from importlib import metadata

    out: dict = {"mindspore": {}, "mindformers": {}, "device": {"wanted": device}, "check": {}}
    for dist, key in (("mindspore", "mindspore"), ("mindformers", "mindformers")):
        try:
            out[key]["dist_version"] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[key]["dist_version"] = None
    try:
        import mindspore as ms

        out["mindspore"]["version"] = ms.__version__
    except BaseException as exc:  # noqa: BLE001 - report any import failure
        out["mindspore"]["import_error"] = f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}"
        print(_MARK + json.dumps(out), flush=True)
        return
    if out["mindformers"]["dist_version"]:
        try:
            import mindformers

            out["mindformers"]["version"] = getattr(mindformers, "__version__", None)
        except BaseException as exc:  # noqa: BLE001
            out["mindformers"]["import_error"] = f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}"
    try:
        if hasattr(ms, "set_device"):
            ms.set_device(device)
        else:
            ms.set_context(device_target=device)
        out["device"]["target"] = ms.get_context("device_target")
    except BaseException as exc:  # noqa: BLE001
        out["device"]["error"] = f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}"
        print(_MARK + json.dumps(out), flush=True)
        return
    try:
        import numpy as np

        a = np.arange(1, 5, dtype=np.float32).reshape(2, 2)
        got = (ms.Tensor(a) * ms.Tensor(a)).asnumpy()
        out["check"]["ok"] = bool(np.allclose(got, a * a))
        out["check"]["result"] = got.tolist()
    except BaseException as exc:  # noqa: BLE001
        out["check"]["error"] = f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}"
    print(_MARK + json.dumps(out), flush=True)


def probe(python: str, env: Mapping[str, str], npu_usable: bool, timeout: float) -> dict:
    device = "Ascend" if npu_usable else "CPU"
    code = f"from provisioner.host.doctor_mindspore import _probe_main; _probe_main({device!r})"
    res = host.run_command([python, "-c", code], timeout, env=dict(env))
    line = next((ln for ln in res["stdout"].splitlines() if ln.startswith(_MARK)), None)
    if line is None:
        tail = (res["stderr"] or res["stdout"]).strip().splitlines()
        why = res["error"] or f"exit code {res['rc']}"
        return {"error": f"the MindSpore probe failed ({why})" + (f": {tail[-1][:200]}" if tail else "")}
    try:
        return json.loads(line[len(_MARK):])
    except ValueError:
        return {"error": "the MindSpore probe printed unreadable output"}


def check_mindspore(ctx):
    """Findings for a MindSpore stack (nothing for a PyTorch one)."""
    want = ctx.stack
    if want.get("framework") != "mindspore":
        return
    facts = ctx.facts.get("mindspore") or {}
    if facts.get("error"):
        yield error("mindspore-probe-failed", facts["error"], "run `python -c 'import mindspore'` to see the full error")
        return
    ms = facts.get("mindspore") or {}
    expect = (want.get("mindspore") or {}).get("version")
    if not ms.get("dist_version"):
        yield error("mindspore-missing", "MindSpore is not installed", f"pip install mindspore=={expect}" if expect
                    else "install the MindSpore release paired with the CANN (matrices/mindspore.yaml)")
        return
    if ms.get("import_error"):
        yield error("mindspore-import-failed", f"import mindspore fails: {ms['import_error']}",
                    "if it names a CANN library (libge_runner, libascendcl), source CANN's set_env.sh or use an image"
                    " built on the official CANN base")
        return
    if expect and ms["dist_version"] != expect:
        yield error("stack-drift", f"MindSpore {ms['dist_version']} is installed but the image's stack says {expect}",
                    "rebuild the image")
    yield from _pairing(ctx, ms["dist_version"])
    mf_want = ((want.get("extras") or {}).get("mindformers") or {}).get("version")
    mf = facts.get("mindformers") or {}
    if mf_want and not mf.get("dist_version"):
        yield error("mindformers-missing", f"MindSpore Transformers {mf_want} is not installed",
                    "rebuild the image with `provision build --recipe mindspore`")
    elif mf.get("import_error"):
        yield error("mindformers-import-failed", f"import mindformers fails: {mf['import_error']}",
                    "run `python -c 'import mindformers'` to see the full error")
    elif mf_want and mf["dist_version"] != mf_want:
        yield error("stack-drift", f"MindSpore Transformers {mf['dist_version']} is installed but the image's stack"
                    f" says {mf_want}", "rebuild the image")
    elif mf.get("dist_version"):
        yield info("mindformers-ok", f"MindSpore Transformers {mf['dist_version']} imports")
    dev = facts.get("device") or {}
    if dev.get("error"):
        yield error("mindspore-device", f"MindSpore cannot use device {dev['wanted']}: {dev['error']}",
                    "check the NPU devices and driver mapped into the container (provision run-cmd)")
        return
    check = facts.get("check") or {}
    where = dev.get("target") or dev.get("wanted")
    if check.get("ok"):
        yield info("mindspore-run-check", f"run_check computation correct on {where}")
    else:
        yield error("mindspore-run-check", f"the run_check computation on {where} failed:"
                    f" {check.get('error') or check.get('result')}", "run `python -c 'import mindspore;"
                    " mindspore.run_check()'` for MindSpore's own report")
    if where != "Ascend":
        yield warning("mindspore-no-npu", "MindSpore ran on the CPU: no usable CANN and NPU device in this container",
                      "start it with the NPU devices and driver mapped (provision run-cmd) on an NPU host")


def _pairing(ctx, version: str):
    if ctx.matrix is None:
        return
    row = next((r for r in ctx.matrix.rows("mindspore") if r["version"] == version), None)
    canns = [c["version"] for c in ctx.facts.get("cann") or []]
    if row is None:
        yield warning("mindspore-unknown", f"MindSpore {version} is not in the matrix; its CANN pairing is unchecked",
                      "add it in a matrix overlay (matrices/mindspore.yaml)")
        return
    if not canns:
        return  # the cann check reports the missing toolkit
    from provisioner.versions import V

    if any(V(c) == V(row["cann"]) for c in canns):
        yield info("mindspore-cann-ok", f"MindSpore {version} pairs with CANN {row['cann']}, which is installed")
    else:
        yield error("mindspore-cann-mismatch", f"MindSpore {version} pairs with CANN {row['cann']}, but CANN"
                    f" {', '.join(canns)} is installed", "use the image built for this CANN, or the MindSpore"
                    " release paired with it (provision resolve --framework mindspore --cann ...)")
