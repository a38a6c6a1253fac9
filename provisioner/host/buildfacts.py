"""The few facts of a host that decide which stack it can run: driver version, chips, architecture, OS.

`provision resolve|render|build` read them before resolving; provisioner/resolve/hostfit.py turns them into
constraints. The facts come from the same readers as the audit (provisioner/host/probe.py: version.info, npu-smi,
os-release, /proc), so a build and an audit never disagree about a host.

The read is cheap where it runs most: on a machine without an Ascend driver (a laptop, a CI runner) it is a stat
per driver directory, with no pathlib and no subprocess. Where a driver is found, `npu-smi info` runs (it can take
seconds on a busy server); on a host whose boot id is readable the facts are kept in the provision cache, keyed by
the boot id and every file they are read from that can change without a reboot (version.info, os-release, the
npu-smi binary) and the matrix's chip rows, so npu-smi is asked once per boot and a warm call reads a few small
files and one cache entry, without importing the probe. Saved `npu-smi info` output (``npu_smi_outputs``) is read
instead of running npu-smi, as the audit does. With a driver at ``root``, the host's architecture and OS are read there too; without one, ``root`` is not
known to be the target host, so neither is reported.
"""

from __future__ import annotations

import os

from provisioner.host import layout


def driver_dir(root: str) -> str | None:
    """The host path of the HDK driver directory under ``root`` (cheap: a stat per candidate), or None."""
    for rel in layout.DRIVER_DIRS:
        if os.path.isdir(os.path.join(root, rel)):
            return "/" + rel
    return None


def read(root: str = "/", npu_smi_outputs=(), chip_rows=(), timeout: float = 10.0) -> dict:
    """Read the facts hostfit needs. Returns a plain dict:

    root, live (root is this machine's /), looked (the driver places tried), driver_dir (host path or None),
    driver (probe.driver_facts or None), npu_smi (probe.npu_smi_facts, or None when npu-smi was neither run nor
    given), arch, arch_source and os (probe.system_facts, only where a driver was found), errors (what could not be
    read), cached (the facts came from this boot's cache entry).
    """
    root = str(root)
    facts: dict = {"root": root, "live": os.path.realpath(root) == "/", "driver_dir": driver_dir(root),
                   "driver": None, "npu_smi": None, "arch": None, "arch_source": None, "os": None, "errors": [],
                   "looked": ["/" + d for d in layout.DRIVER_DIRS], "cached": False}
    outputs = list(npu_smi_outputs or ())
    if facts["driver_dir"] is None and not outputs:
        return facts
    key = None if outputs else _cache_key(root, facts["driver_dir"], chip_rows)
    if key is not None:
        from provisioner.matrix import cache

        hit = cache.read(key)
        if isinstance(hit, dict) and (hit.get("npu_smi") or {}).get("chips"):
            return {**facts, **{k: hit[k] for k in _CACHED if k in hit}, "cached": True}
    _read(facts, outputs, list(chip_rows), timeout)
    if key is not None and (facts["npu_smi"] or {}).get("chips") and not facts["npu_smi"].get("error") \
            and not facts["errors"]:
        from provisioner.matrix import cache

        cache.write(key, {k: facts[k] for k in _CACHED})
    return facts


_CACHED = ("driver", "npu_smi", "arch", "arch_source", "os")


def _read(facts: dict, outputs: list, chip_rows: list, timeout: float) -> None:
    """The full read, through the probe's section readers (they import pathlib, subprocess and the parsers)."""
    from pathlib import Path

    from provisioner.host import probe

    root = facts["root"]
    base = Path(root)

    def section(name: str, fn, *args):
        try:
            return fn(*args)
        except Exception as exc:  # noqa: BLE001 - like the probe: one unreadable part must not stop the rest
            facts["errors"].append(f"{name}: {type(exc).__name__}: {exc}")
            return None

    if facts["driver_dir"] is not None:
        facts["driver"] = section("driver", probe.driver_facts, base)
        system = section("system", probe.system_facts, base, facts["live"]) or {}
        facts["arch"] = system.get("arch")
        if facts["arch"]:
            arch_file = os.path.join(root, layout.KERNEL_ARCH)
            facts["arch_source"] = f"/{layout.KERNEL_ARCH}" if os.path.isfile(arch_file) else "this machine"
        facts["os"] = system.get("os")
    facts["npu_smi"] = section("npu_smi", probe.npu_smi_facts, base, outputs, True, timeout, chip_rows)


def _bytes(path: str) -> bytes | None:
    try:
        with open(path, "rb") as fh:
            return fh.read(1 << 16)
    except OSError:
        return None


def _cache_key(root: str, driver: str, chip_rows) -> str | None:
    """This boot's cache entry for the host at ``root``, or None when it has no readable boot id or no npu-smi.

    The key holds everything the facts are read from that can change without a reboot: the driver's version.info,
    os-release, the npu-smi binary (path, size, mtime) and the matrix's chip rows that classify the chips.
    """
    import json

    boot = (_bytes(os.path.join(root, layout.BOOT_ID)) or b"").strip()
    smi = next((p for p in (os.path.join(root, d, "npu-smi") for d in layout.NPU_SMI_DIRS) if os.path.isfile(p)), None)
    if not boot or smi is None:
        return None
    from provisioner.matrix import cache

    st = os.stat(smi)
    files = [os.path.join(driver.lstrip("/"), "version.info"), "etc/os-release", "usr/lib/os-release", layout.KERNEL_ARCH]
    parts = [boot, *(_bytes(os.path.join(root, f)) for f in files)]
    text = [p.decode("utf-8", "replace") if p is not None else "-" for p in parts]
    rows = json.dumps(list(chip_rows), sort_keys=True, default=str)
    return f"host-{cache.fingerprint(root, smi, str(st.st_mtime_ns), str(st.st_size), *text, rows)}.json"
