"""The few facts of a host that decide which stack it can run: driver version, chips, architecture, OS.

`provision resolve|render|build` read them before resolving; provisioner/resolve/hostfit.py turns them into
constraints. The facts come from the same readers as the audit (provisioner/host/probe.py: version.info, npu-smi,
os-release, /proc), so a build and an audit never disagree about a host.

The read is cheap where it runs most: on a machine without an Ascend driver (a laptop, a CI runner) it is a stat
per driver directory, with no pathlib and no subprocess. Where a driver is found, `npu-smi info` runs (it can take
seconds on a busy server); on a host whose boot id is readable its reading is kept in the provision cache, keyed
by the boot id, the npu-smi binary, the driver's version.info and the matrix's chip rows, so the chips are asked
once per boot. Saved `npu-smi info` output (``npu_smi_outputs``) is read instead of running npu-smi, as the audit
does. With a driver at ``root``, the host's architecture and OS are read there too; without one, ``root`` is not
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
    driver (probe.driver_facts or None), npu_smi (probe.npu_smi_facts plus ``cached``, or None when npu-smi was neither run nor given),
    arch and os (probe.system_facts, only where a driver was found), errors (what could not be read).
    """
    root = str(root)
    live = os.path.realpath(root) == "/"
    facts: dict = {"root": root, "live": live, "driver_dir": driver_dir(root), "driver": None, "npu_smi": None,
                   "arch": None, "arch_source": None, "os": None, "errors": [],
                   "looked": ["/" + d for d in layout.DRIVER_DIRS]}
    outputs = list(npu_smi_outputs or ())
    if facts["driver_dir"] is None and not outputs:
        return facts
    from pathlib import Path

    from provisioner.host import probe

    base = Path(root)

    def section(name: str, fn, *args):
        try:
            return fn(*args)
        except Exception as exc:  # noqa: BLE001 - like the probe: one unreadable part must not stop the rest
            facts["errors"].append(f"{name}: {type(exc).__name__}: {exc}")
            return None

    if facts["driver_dir"] is not None:
        facts["driver"] = section("driver", probe.driver_facts, base)
        system = section("system", probe.system_facts, base, live) or {}
        facts["arch"] = system.get("arch")
        if facts["arch"]:
            arch_file = os.path.join(root, layout.KERNEL_ARCH)
            facts["arch_source"] = f"/{layout.KERNEL_ARCH}" if os.path.isfile(arch_file) else "this machine"
        facts["os"] = system.get("os")
    if outputs or facts["driver_dir"] is not None:
        facts["npu_smi"] = section("npu_smi", _npu_smi, base, outputs, list(chip_rows), timeout, facts["driver"])
    return facts


def _npu_smi(root, outputs: list, chip_rows: list, timeout: float, driver: dict | None) -> dict:
    """probe.npu_smi_facts, read from the cache when this boot's reading is there."""
    from provisioner.host import probe

    key = None if outputs else _cache_key(root, chip_rows, driver)
    if key is not None:
        from provisioner.matrix import cache

        hit = cache.read(key)
        if isinstance(hit, dict) and hit.get("chips"):
            return {**hit, "cached": True}
    facts = probe.npu_smi_facts(root, outputs, True, timeout, chip_rows)
    facts["cached"] = False
    if key is not None and facts.get("chips") and not facts.get("error"):
        from provisioner.matrix import cache

        cache.write(key, facts)
    return facts


def _cache_key(root, chip_rows: list, driver: dict | None) -> str | None:
    """The cache entry name for this boot's npu-smi reading, or None when the host has no readable boot id."""
    import json

    from provisioner.host import hostfs
    from provisioner.matrix import cache

    boot = hostfs.read_text(root / layout.BOOT_ID)
    smi = hostfs.find_npu_smi(root)
    if not boot or not boot.strip() or smi is None:
        return None
    try:
        st = smi.stat()
    except OSError:
        return None
    version_info = json.dumps((driver or {}).get("info"), sort_keys=True)
    rows = json.dumps(chip_rows, sort_keys=True, default=str)
    digest = cache.fingerprint(boot.strip(), str(smi), str(st.st_mtime_ns), str(st.st_size), version_info, rows)
    return f"npu-smi-{digest}.json"
