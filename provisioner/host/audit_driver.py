"""Audit checks of the Ascend software stack on a host: the probe itself, driver and CANN presence, driver <->
CANN fit (through resolve.driverfit), firmware <-> driver, CANN architecture.

`fit_findings` turns a driver verdict into findings; doctor uses it for the CANN inside a container too.
"""

from __future__ import annotations

from provisioner import arch
from provisioner.host.audit_context import AuditContext
from provisioner.host.findings import Finding, error, info, warning
from provisioner.resolve import driverfit
from provisioner.resolve.driverfit import driver_verdict
from provisioner.versions import V, VersionError, any_match, is_version, spec


def fit_findings(prefix: str, driver: str, cann: str, row: dict, matrix, what: str, card_hint: str) -> list[Finding]:
    try:
        verdict, detail = driver_verdict(driver, row, matrix)
    except VersionError:
        return [warning(f"{prefix}driver-version-unparsable", f"driver version {driver!r} cannot be compared",
                        "check /usr/local/Ascend/driver/version.info (key Version)")]
    needs, src, inherited = driverfit.needs(matrix, row)
    if inherited:
        needs += f" (CANN {src['version']}'s list; none is published for {cann})"
    resolve_hint = f"provision resolve{card_hint} --driver {driver}"
    if verdict == "ok":
        return [info(f"{prefix}driver-cann-ok", f"driver {driver} fits {what} (needs {needs})")]
    if verdict == "patch":
        return [info(f"{prefix}driver-cann-ok", f"driver {driver} fits {what}: {detail}")]
    if verdict == "newer":
        return [warning(f"{prefix}driver-newer-than-listed",
                        f"driver {driver} is newer than every HDK listed for {what} ({needs})",
                        "usually fine; if the NPU fails to initialise, install a listed HDK or a newer CANN")]
    if verdict == "unknown":
        return [info(f"{prefix}driver-cann-unknown",
                     f"no HDK pairing is published for {what}; driver {driver} cannot be checked against it")]
    if verdict == "unlisted":
        return [warning(f"{prefix}driver-unlisted",
                        f"driver {driver} is not listed for {what}: {detail}; it needs {needs}",
                        f"probably fine; for a listed pairing install that HDK, or see `{resolve_hint}`")]
    if verdict == "too-old":
        return [error(f"{prefix}driver-too-old",
                      f"driver {driver} is too old for {what}: it needs {needs}",
                      f"upgrade the Ascend HDK (driver and firmware) to a listed version, or pick a CANN this driver"
                      f" supports: `{resolve_hint}`")]
    return [error(f"{prefix}driver-cann-mismatch",
                  f"driver {driver} does not fit {what} ({detail}): it needs {needs}",
                  f"install a listed HDK, or pick a CANN this driver supports: `{resolve_hint}`")]


def check_probe(ctx: AuditContext):
    for err in ctx.report.get("probe_errors") or []:
        yield warning("probe-failed", f"could not read the host's {err['section']}: {err['error']}",
                      "report this as a bug in provision, with the file that could not be read")


def check_stack_presence(ctx: AuditContext):
    drv, canns = ctx.driver, ctx.canns
    if not drv and not canns and not ctx.chips and not ctx.devices.get("davinci_ids") and \
            ctx.npu_smi.get("source") in ("absent", "not-run", None):
        yield info("no-npu-stack", "no Ascend driver, CANN, npu-smi or /dev/davinci nodes found on this host",
                   "on an NPU host install the Ascend HDK (driver + firmware) first")
        return
    if not drv:
        if canns:
            yield error("cann-without-driver",
                        f"CANN {', '.join(c['version'] for c in canns)} is installed but there is no NPU driver"
                        " (/usr/local/Ascend/driver)",
                        "install the Ascend HDK driver and firmware that the CANN needs (see `provision resolve --driver`)")
        elif ctx.chips or ctx.devices.get("davinci_ids"):
            yield error("driver-missing", "NPU devices are present but no driver directory was found",
                        "install the Ascend HDK driver (/usr/local/Ascend/driver)")
        return
    if not drv.get("info"):
        yield warning("driver-version-unknown", f"{drv['dir']}/version.info is missing or unreadable",
                      "reinstall the driver package; containers and torch_npu read this file")
    elif not drv.get("version"):
        yield warning("driver-version-unknown", f"{drv['dir']}/version.info has no Version key",
                      "reinstall the driver package")
    elif not is_version(drv["version"]):
        yield warning("driver-version-unparsable", f"driver version {drv['version']!r} ({drv['dir']}/version.info)"
                      " is not a version; nothing can be checked against it", "reinstall the driver package")
    if len(drv.get("roots") or []) > 1:
        yield warning("driver-roots-multiple", f"driver directories in several places: {', '.join(drv['roots'])}",
                      f"remove the stale one; {drv['dir']} is the one read here")
    elif drv["dir"] != "/usr/local/Ascend/driver":
        yield info("driver-alternative-root", f"the driver lives in {drv['dir']}, not /usr/local/Ascend/driver",
                   f"mount {drv['dir']} into containers at /usr/local/Ascend/driver")


def check_driver_cann(ctx: AuditContext):
    driver = ctx.driver_version
    if not driver or not is_version(driver):
        return  # check_stack_presence reports a missing or unreadable version
    card_hint = ctx.card_flag
    for inst in ctx.canns:
        what = f"CANN {inst['version']} ({inst['kind']}, {inst['info_file']})"
        row = ctx.matrix.cann(inst["version"])
        if row is None:
            yield info("cann-unknown", f"{what} is not in the matrix; its driver needs cannot be checked",
                       "add a matrix overlay row for it (provision matrix --matrix FILE) if you know its HDK pairing")
            continue
        yield from fit_findings("", driver, inst["version"], row, ctx.matrix, what, card_hint)


def check_driver_images(ctx: AuditContext):
    """A driver that runs no CANN with an official image for the host's chip: every image needs an HDK upgrade
    or a base image of one's own (resolve/hostfit.outlook decides, with the one driver-fit module)."""
    from provisioner.resolve import hostfit

    driver = ctx.driver_version
    if not driver or not is_version(driver):
        return  # check_stack_presence reports a missing or unreadable version
    for fam in ctx.families or ([ctx.card[1]["id"]] if ctx.card else []):
        look = hostfit.outlook(ctx.matrix, driver, ctx.matrix.family(fam))
        if look["fits"] or not look["oldest"]:
            continue
        old, new = look["oldest"], look["newest"]
        what = "is older than every" if look["older"] else "runs no"
        yield warning("driver-fits-no-image",
                      f"driver {driver} {what} CANN with an official image for chip {look['chip']}: the oldest,"
                      f" CANN {old['cann']}, needs HDK {old['needs']}",
                      f"upgrade the Ascend HDK (driver and firmware): CANN {new['cann']}, the newest with an image,"
                      f" lists {new['needs']}; CANN {old['cann']}, the oldest, lists {old['needs']}; or build on your"
                      " own CANN base image (`provision build --base-image IMAGE`)")


def _in_fw_range(fw: str, rng: list[str]) -> bool:
    lo, v, hi = V(rng[0]), V(fw), V(rng[1])  # parse all three first: a bad bound must not hide
    return lo <= v <= hi


def _line_match(driver: V, stem: str) -> bool:
    """Firmware `compatible_version_drv` entries `[X,X.]`: the X line.

    `24.1` is every 24.1 build (rc or final); `23.0.rc3` is that rc and its
    patches; `23.0.0` is read as the final releases of the 23.0 line (23.0.N):
    firmware 7.1.0.11.220 ships in package 23.0.7 yet lists only 23.0.rc3 and
    23.0.0, so its own driver must fall under "23.0.0" (inference from that sample).
    """
    p = V(stem)
    if p.chain:
        return driver.release == p.release and driver.chain[: len(p.chain)] == p.chain
    if len(p.release) <= 2:
        return driver.release[: len(p.release)] == p.release
    if not driver.is_final or driver.release[:2] != p.release[:2]:
        return False
    return p.release[2] == 0 or driver.release[: len(p.release)] == p.release


def driver_accepted_by_firmware(driver: str, pairs: list[list[str]]) -> bool:
    d = V(driver)
    for pair in pairs:
        if not pair:
            continue
        lo = pair[0]
        hi = pair[-1]
        if hi.endswith("."):
            stem = hi.rstrip(".")
            if _line_match(d, stem) or (stem != lo.rstrip(".") and V(lo.rstrip(".")) <= d <= V(stem)):
                return True
        elif len(pair) == 1:
            if _line_match(d, lo):
                return True
        elif V(lo) <= d <= V(hi):
            return True
    return False


def _hdk_for(matrix, driver: str) -> dict | None:
    d = V(driver)
    rows = [r for r in matrix.rows("hdk") if V(r["version"]) == d or spec(f"{r['version']}.*").matches(d)]
    return max(rows, key=lambda r: len(V(r["version"]).release) + len(V(r["version"]).chain), default=None)


def check_firmware(ctx: AuditContext):
    driver, fw = ctx.driver_version, ctx.firmware
    if fw is not None and not fw.get("version"):
        yield warning("firmware-version-unknown", f"{fw['dir']}/version.info is missing or has no Version key",
                      "reinstall the firmware package (same Ascend HDK release as the driver)")
        return
    if fw is not None and not is_version(fw["version"]):
        yield warning("firmware-version-unparsable", f"firmware version {fw['version']!r} is not a version;"
                      " the firmware-driver match was not checked", "reinstall the firmware package")
        return
    if not driver or not is_version(driver):
        return
    if not fw:
        yield info("firmware-version-unknown", "no firmware version.info (/usr/local/Ascend/firmware); the"
                   " firmware-driver match was not checked", "if the NPU fails to start, check the firmware package")
        return
    fw_version = fw["version"]
    checked = False
    try:
        rng = (ctx.driver or {}).get("compatible_firmware")
        src = "the driver's version.info"
        if not rng:
            row = _hdk_for(ctx.matrix, driver)
            spec = (row or {}).get("compatible_firmware")
            if spec:
                checked = True
                if not any_match(spec, fw_version):
                    yield error("firmware-driver-mismatch",
                                f"firmware {fw_version} is outside the range driver {driver} accepts ({', '.join(spec)}, matrix)",
                                "install the firmware released with this driver (same Ascend HDK package)")
        else:
            checked = True
            if not _in_fw_range(fw_version, rng):
                yield error("firmware-driver-mismatch",
                            f"firmware {fw_version} is outside the range driver {driver} accepts"
                            f" ([{rng[0]}, {rng[1]}], {src})",
                            "install the firmware released with this driver (same Ascend HDK package)")
        pairs = fw.get("compatible_drivers") or []
        if pairs:
            checked = True
            if not driver_accepted_by_firmware(driver, pairs):
                shown = ",".join(f"[{','.join(p)}]" for p in pairs)
                yield error("firmware-driver-mismatch",
                            f"firmware {fw_version} does not accept driver {driver} (its compatible_version_drv is {shown})",
                            "install the driver and firmware of one Ascend HDK release (firmware first, then driver)")
        else:
            row = next((r for r in ctx.matrix.rows("firmware") if V(r["version"]) == V(fw_version)), None)
            if row:
                checked = True
                if not any_match(row["compatible_drivers"], driver):
                    yield error("firmware-driver-mismatch",
                                f"firmware {fw_version} does not accept driver {driver}"
                                f" ({', '.join(row['compatible_drivers'])}, matrix)",
                                "install the driver and firmware of one Ascend HDK release")
    except VersionError as exc:
        yield warning("firmware-version-unparsable", f"firmware/driver versions cannot be compared: {exc}",
                      "check the Version keys of the driver and firmware version.info files")
        return
    if not checked:
        yield info("firmware-range-unknown", f"neither driver {driver} nor firmware {fw_version} states a compatible"
                   " range; the match was not checked")


def check_cann_arch(ctx: AuditContext):
    host = ctx.arch
    for inst in ctx.canns:
        built_for = arch.normalize(inst.get("arch"))
        if host and built_for and built_for != host:
            yield warning("cann-arch-mismatch",
                          f"CANN {inst['version']} ({inst['kind']}) is built for {built_for} but this host is {host}",
                          f"reinstall the {host} package of CANN {inst['version']}")
