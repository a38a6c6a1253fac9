"""HostReport (+ an image's Stack) x Matrix -> Findings.

Each check is a small function of an AuditContext returning findings; the
registry CHECKS runs them in order through findings.run_checks, so a check
that raises becomes a `check-crashed` finding and the audit goes on. Facts
(which HDK a CANN needs, chip families, thresholds) come from the matrix.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

from provisioner.host.findings import Finding, counts, error, exit_code, info, ordered, run_checks, warning
from provisioner.matrix.versions import Spec, V, VersionError, any_match, is_patch_of

SCHEMA = "provision.audit/1"
MODES = ("runtime", "devices", "cdi")
_ARCH = {"x86_64": "x86_64", "amd64": "x86_64", "aarch64": "aarch64", "arm64": "aarch64"}


@dataclass
class AuditOptions:
    card: str | None = None
    task: str | None = None       # train / inference; None = the matrix policy's default
    mode: str | None = None       # how containers will get the NPU: runtime / devices / cdi
    image: str | None = None      # image reference, for messages
    image_stack: dict | None = None


@dataclass
class AuditContext:
    report: dict
    matrix: object
    options: AuditOptions = field(default_factory=AuditOptions)
    recommendation: dict | None = None

    # ---- facts the checks share
    @property
    def driver(self) -> dict | None:
        return self.report.get("driver")

    @property
    def driver_version(self) -> str | None:
        return (self.driver or {}).get("version")

    @property
    def firmware(self) -> dict | None:
        return self.report.get("firmware")

    @property
    def canns(self) -> list[dict]:
        return self.report.get("cann") or []

    @property
    def npu_smi(self) -> dict:
        return self.report.get("npu_smi") or {}

    @property
    def chips(self) -> list[dict]:
        return self.npu_smi.get("chips") or []

    @property
    def devices(self) -> dict:
        return self.report.get("devices") or {"nodes": [], "davinci_ids": []}

    @property
    def arch(self) -> str | None:
        return ((self.report.get("system") or {}).get("arch"))

    @cached_property
    def families(self) -> list[str]:
        return sorted({c["family"] for c in self.chips if c.get("family")})

    @cached_property
    def task(self) -> str:
        if self.options.task:
            return self.options.task
        if self.options.image_stack and self.options.image_stack.get("task"):
            return self.options.image_stack["task"]
        return self.matrix.policy.get("default_task", "train")

    @cached_property
    def card(self) -> tuple[dict, dict] | None:
        if not self.options.card:
            return None
        card, family, _ = self.matrix.lookup_card(self.options.card)
        return card, family

    @property
    def has_npu_hints(self) -> bool:
        return bool(self.driver or self.chips or self.devices.get("davinci_ids"))

    def limit(self, ident: str) -> int | None:
        row = next((r for r in self.matrix.rows("audit_limits") if r["id"] == ident), None)
        return row["value"] if row else None

    def family_name(self, fam: str) -> str:
        try:
            return self.matrix.family(fam)["name"]
        except StopIteration:
            return fam


def _chip_label(chips: list[dict], host_chips: list[dict] | None = None) -> str:
    """'NPU 3' or, where an NPU holds several chips on this host (A3, 310 cards), 'NPU 3 chip 1'."""
    every = host_chips if host_chips is not None else chips
    npus = [c["npu"] for c in every]
    return ", ".join(f"NPU {c['npu']}" + (f" chip {c['chip']}" if c.get("chip") is not None and npus.count(c["npu"]) > 1
                                           else "") for c in chips)


# ------------------------------------------------------------ driver fit


def _exact_listed(row: dict) -> list[str]:
    out = []
    for item in [*row.get("hdk_paired", []), *row.get("hdk_compatible", [])]:
        if any(ch in item for ch in "*<>=") or ".." in item:
            continue
        out.append(item)
    return out


def _lowest(row: dict) -> V | None:
    lows = []
    for item in [*row.get("hdk_paired", []), *row.get("hdk_compatible", [])]:
        text = item.split("..")[0].rstrip("*").rstrip(".").lstrip("<>=")
        try:
            lows.append(V(text))
        except VersionError:
            continue
    return min(lows) if lows else None


def driver_verdict(driver: str, cann_row: dict, matrix) -> tuple[str, str]:
    """How a host driver fits a CANN row: (verdict, detail).

    verdict: ok | patch (a patch build of a listed HDK) | newer | unknown |
    unlisted (same release line as a listed HDK, later build) | too-old | mismatch.
    Wraps resolve.driver_fit, which knows the matrix's rules, and refines its "no".
    """
    from provisioner.resolve.solve import driver_fit, hdk_row

    fit = driver_fit(driver, cann_row, matrix)
    row = hdk_row(matrix, cann_row)[0] if matrix is not None else cann_row
    d = V(driver)
    listed = []
    for item in _exact_listed(row):
        try:
            listed.append(V(item))
        except VersionError:
            continue
    if fit == "ok":
        base = next((lv for lv in listed if is_patch_of(d, lv)), None)
        return ("patch", f"a patch build of the listed {base}") if base and d not in listed else ("ok", "")
    if fit != "no":
        return fit, ""
    same_line = [lv for lv in listed if lv.release[:2] == d.release[:2] and d > lv]
    if same_line:
        return "unlisted", f"a later build of the {d.release[0]}.{d.release[1]} line ({max(same_line)} is listed)"
    low = _lowest(row)
    if low is not None and d < low:
        return "too-old", f"older than every listed HDK (lowest {low})"
    return "mismatch", "between the listed HDK versions"


def _fit_findings(prefix: str, driver: str, cann: str, row: dict, matrix, what: str, card_hint: str) -> list[Finding]:
    from provisioner.resolve.solve import hdk_row, hdk_summary

    try:
        verdict, detail = driver_verdict(driver, row, matrix)
    except VersionError:
        return [warning(f"{prefix}driver-version-unparsable", f"driver version {driver!r} cannot be compared",
                        "check /usr/local/Ascend/driver/version.info (key Version)")]
    src, inherited = hdk_row(matrix, row) if matrix is not None else (row, False)
    needs = hdk_summary(src)
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


# ------------------------------------------------------------------ checks


def check_probe(ctx: AuditContext):
    for err in ctx.report.get("probe_errors") or []:
        yield warning("probe-failed", f"could not read the host's {err['section']}: {err['error']}",
                      "report this as a bug in provision, with the file that could not be read")


def check_stack_presence(ctx: AuditContext):
    drv, canns = ctx.driver, ctx.canns
    if not drv and not canns and not ctx.chips and not ctx.devices.get("davinci_ids") and \
            ctx.npu_smi.get("source") in ("absent", None):
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
    elif not _parsable(drv["version"]):
        yield warning("driver-version-unparsable", f"driver version {drv['version']!r} ({drv['dir']}/version.info)"
                      " is not a version; nothing can be checked against it", "reinstall the driver package")
    if len(drv.get("roots") or []) > 1:
        yield warning("driver-roots-multiple", f"driver directories in several places: {', '.join(drv['roots'])}",
                      f"remove the stale one; {drv['dir']} is the one read here")
    elif drv["dir"] != "/usr/local/Ascend/driver":
        yield info("driver-alternative-root", f"the driver lives in {drv['dir']}, not /usr/local/Ascend/driver",
                   f"mount {drv['dir']} into containers at /usr/local/Ascend/driver")


def _parsable(text: str | None) -> bool:
    try:
        V(text)  # type: ignore[arg-type]
        return True
    except VersionError:
        return False


def check_driver_cann(ctx: AuditContext):
    driver = ctx.driver_version
    if not driver or not _parsable(driver):
        return  # check_stack_presence reports a missing or unreadable version
    card_hint = _card_flag(ctx)
    for inst in ctx.canns:
        what = f"CANN {inst['version']} ({inst['kind']}, {inst['info_file']})"
        row = ctx.matrix.cann(inst["version"])
        if row is None:
            yield info("cann-unknown", f"{what} is not in the matrix; its driver needs cannot be checked",
                       "add a matrix overlay row for it (provision matrix --matrix FILE) if you know its HDK pairing")
            continue
        yield from _fit_findings("", driver, inst["version"], row, ctx.matrix, what, card_hint)


def check_driver_images(ctx: AuditContext):
    """A driver that runs no CANN with an official image for the host's chip: every image needs an HDK upgrade
    or a base image of one's own (resolve/hostfit.outlook decides, with the one driver-fit function)."""
    from provisioner.resolve import hostfit

    driver = ctx.driver_version
    if not driver or not _parsable(driver):
        return
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
    rows = [r for r in matrix.rows("hdk") if V(r["version"]) == d or Spec(f"{r['version']}.*").matches(d)]
    return max(rows, key=lambda r: len(V(r["version"]).release) + len(V(r["version"]).chain), default=None)


def check_firmware(ctx: AuditContext):
    driver, fw = ctx.driver_version, ctx.firmware
    if fw is not None and not fw.get("version"):
        yield warning("firmware-version-unknown", f"{fw['dir']}/version.info is missing or has no Version key",
                      "reinstall the firmware package (same Ascend HDK release as the driver)")
        return
    if fw is not None and not _parsable(fw["version"]):
        yield warning("firmware-version-unparsable", f"firmware version {fw['version']!r} is not a version;"
                      " the firmware-driver match was not checked", "reinstall the firmware package")
        return
    if not driver or not _parsable(driver):
        return
    if not fw:
        yield info("firmware-version-unknown", "no firmware version.info (/usr/local/Ascend/firmware); the"
                   " firmware-driver match was not checked", "if the NPU fails to start, check the firmware package")
        return
    fw_version = fw["version"]
    checked = False
    try:
        rng = ctx.driver.get("compatible_firmware")
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
        arch = _ARCH.get(str(inst.get("arch") or "").lower())
        if host and arch and arch != host:
            yield warning("cann-arch-mismatch",
                          f"CANN {inst['version']} ({inst['kind']}) is built for {arch} but this host is {host}",
                          f"reinstall the {host} package of CANN {inst['version']}")


def check_npu_smi(ctx: AuditContext):
    smi = ctx.npu_smi
    source = smi.get("source")
    if source == "absent":
        if not ctx.has_npu_hints:
            return  # nothing NPU here at all: check_stack_presence says so once
        yield warning("npu-smi-absent", "npu-smi not found (/usr/local/bin, /usr/local/sbin, /usr/bin, /usr/sbin); chips"
                  " and their health were not read",
                  "npu-smi comes with the Ascend driver package; or pass saved output with --npu-smi-output FILE")
        return
    for note in smi.get("notes") or []:
        if note.startswith("cannot read"):
            yield warning("npu-smi-output-unreadable", note, "check the --npu-smi-output path")
    if smi.get("error"):
        yield warning("npu-smi-failed", smi["error"],
                      "ret -8005/-8020 means another process or container holds the device: free it;"
                      " otherwise check the driver (dmesg, npu-smi info as root)")
    info_ = smi.get("info") or {}
    warns = info_.get("warnings") or []
    if info_ and not info_.get("chips") and not smi.get("error"):
        yield warning("npu-smi-unparsed", f"npu-smi output not understood: {'; '.join(warns) or 'no chip rows'}",
                      "report the output to provision (a new npu-smi layout); pass --json to see what was read")
    elif warns:
        yield warning("npu-smi-partly-unparsed", f"{len(warns)} npu-smi line(s) not understood, e.g. {warns[0]}",
                      "report the output to provision; the chips that were read are still checked")
    mapping = smi.get("mapping") or {}
    bad = sorted({r["chip"] for r in mapping.get("rows", []) if r["npu"] == -1})
    if bad:
        yield warning("npu-unavailable", f"npu-smi info -m lists chip(s) {bad} with NPU ID -1 (unavailable)",
                      "check the card's seating, power and driver logs")


def check_chip_health(ctx: AuditContext):
    bad = [c for c in ctx.chips if (c.get("health") or "").upper() not in ("OK", "WARNING")]
    warn = [c for c in ctx.chips if (c.get("health") or "").upper() == "WARNING"]
    if bad:
        states = ", ".join(sorted({c["health"] for c in bad}))
        yield error("chip-unhealthy", f"{_chip_label(bad, ctx.chips)}: health {states}",
                    "exclude these chips from jobs; check `npu-smi info -t health -i <npu>` and the device logs")
    if warn:
        yield warning("chip-health-warning", f"{_chip_label(warn, ctx.chips)}: health Warning",
                      "see `npu-smi info -t health -i <npu>`; avoid these chips for long runs until cleared")


def check_chip_busy(ctx: AuditContext):
    busy = [c for c in ctx.chips if c.get("processes")]
    if busy:
        procs = "; ".join(f"{_chip_label([c], ctx.chips)}: " + ", ".join(f"pid {p['pid']} {p['name']}" for p in c["processes"])
                          for c in busy)
        yield warning("chip-busy", f"chip(s) in use: {procs}",
                      "a chip serves one container at a time (npu-smi/dcmi -8005 otherwise): stop those processes or"
                      " pick other chips")


def check_chip_family(ctx: AuditContext):
    unknown = [c for c in ctx.chips if not c.get("family")]
    if unknown:
        names = sorted({c["name"] for c in unknown})
        yield warning("chip-unknown", f"chip name(s) {', '.join(names)} not in the matrix ({_chip_label(unknown, ctx.chips)})",
                      "pass --card to say what the host is, or add the name to a matrix overlay (chips: npu_smi_names)")
    notes = sorted({c["class_note"] for c in ctx.chips if c.get("family") and c.get("class_note")})
    for note in notes:
        yield info("chip-memory-unexpected", note)
    if len(ctx.families) > 1:
        per = "; ".join(f"{ctx.family_name(f)}: {_chip_label([c for c in ctx.chips if c.get('family') == f], ctx.chips)}"
                        for f in ctx.families)
        yield warning("chips-mixed-families", f"chips of different families on one host ({per})",
                      "give each job chips of one family only (select /dev/davinciN per job); images are per family")


def check_training(ctx: AuditContext):
    if ctx.task != "train":
        return
    if ctx.card and ctx.card[0].get("training") is False:
        card = ctx.card[0]
        yield error("card-inference-only", f"{card['name']} is an inference product; it cannot be used for training",
                    "train on an A2/A3 training product, or use --task inference")
    cannot = [f for f in ctx.families if not ctx.matrix.family(f)["training"]]
    for fam in cannot:
        row = ctx.matrix.family(fam)
        chips = [c for c in ctx.chips if c.get("family") == fam]
        note = row.get("training_note") or "an inference chip"
        fallback = ", ".join(ctx.matrix.policy.get("training_fallback_cards", []))
        yield error("chip-inference-only", f"{_chip_label(chips, ctx.chips)} ({row['name']}) cannot train: {note}",
                    f"train on a training product ({fallback}); keep this host for inference (--task inference)")


def check_card(ctx: AuditContext):
    if not ctx.card:
        return
    card, family = ctx.card
    if not ctx.chips:
        yield info("card-not-verified", f"--card {ctx.options.card}: no chips were read, so the card could not be"
                   " checked against the host")
        return
    found = ctx.families
    if found and family["id"] not in found:
        names = ", ".join(f"{ctx.family_name(f)}" for f in found)
        chips = ", ".join(sorted({c["name"] for c in ctx.chips}))
        yield error("card-family-mismatch",
                    f"--card {ctx.options.card} is {family['name']}, but this host has {names} (npu-smi names: {chips})",
                    "use the card this host really has (`provision matrix --section cards`), or audit the right host")


def _node(ctx: AuditContext, name: str) -> dict | None:
    return next((n for n in ctx.devices.get("nodes", []) if n["name"] == name), None)


def check_devices(ctx: AuditContext):
    ids = ctx.devices.get("davinci_ids") or []
    chips = ctx.chips
    if chips and not ids:
        yield error("device-nodes-missing", f"npu-smi shows {len(chips)} chip(s) but there is no /dev/davinciN node",
                    "load the driver (reinstall the HDK or reboot); /dev/davinciN appear when the driver is up")
        return
    if not ids:
        return
    needed: list[str] = []
    for fam in ctx.families or []:
        row = next((r for r in ctx.matrix.rows("audit_device_nodes") if r["family"] == fam), None)
        for n in (row or {}).get("nodes", []):
            if n not in needed:
                needed.append(n)
    if not ctx.families:
        needed = ["davinci_manager"]
    missing = [n for n in needed if not (_node(ctx, n) or (n == "davinci_manager" and _node(ctx, "davinci_manager_docker")))]
    if missing:
        yield error("device-nodes-missing", f"/dev/{', /dev/'.join(missing)} missing",
                    "the driver creates these; reinstall the HDK driver or reload it")
    smi = (ctx.npu_smi.get("info") or {})
    phys = sorted({c["phy_id"] for c in chips if c.get("phy_id") is not None})
    if chips and smi.get("second_id") and phys and phys != ids:
        yield warning("device-ids-mismatch", f"npu-smi {smi['second_id']} ids {phys} differ from /dev/davinci ids {ids}",
                      "check that the driver is fully loaded; select devices by /dev/davinciN")
    elif chips and len(chips) != len(ids):
        yield warning("device-ids-mismatch", f"npu-smi shows {len(chips)} chip(s) but there are {len(ids)} /dev/davinciN"
                      f" nodes ({ids})", "check that the driver is fully loaded and all chips are up")
    gid = (ctx.report.get("account") or {}).get("gid")
    closed: dict[str, list[str]] = {}
    other_group: dict[int, list[str]] = {}
    for rec in ctx.devices.get("nodes", []):
        if rec["type"] != "char":
            continue
        mode = int(rec["mode"], 8)
        if mode & 0o060 != 0o060:
            closed.setdefault(rec["mode"], []).append(rec["name"])
        elif gid is not None and rec["gid"] != gid:
            other_group.setdefault(rec["gid"], []).append(rec["name"])
    if closed:
        text = "; ".join(f"{_node_names(names)} (mode {mode})" for mode, names in closed.items())
        yield warning("device-not-group-readable", f"device nodes not group read/write: {text}",
                      "only root can open them; containers running as a non-root user fail: restore mode 0660"
                      " and group HwHiAiUser (reinstalling the driver does)")
    if other_group:
        text = "; ".join(f"{_node_names(names)} (gid {g})" for g, names in other_group.items())
        yield info("device-group-unexpected", f"device nodes not in the HwHiAiUser group (gid {gid}): {text}",
                   "non-root containers need the nodes' group as a supplementary group")


def _node_names(names: list[str]) -> str:
    """davinci0..davinci7 + others -> 'davinci0-7, davinci_manager'."""
    from provisioner.host.audit_report import id_ranges

    ids = sorted(int(n[7:]) for n in names if n.startswith("davinci") and n[7:].isdigit())
    rest = [n for n in names if not (n.startswith("davinci") and n[7:].isdigit())]
    return ", ".join(([f"davinci{id_ranges(ids)}"] if ids else []) + rest)


def check_account(ctx: AuditContext):
    if not ctx.has_npu_hints:
        return
    acct = ctx.report.get("account") or {}
    user, group = acct.get("user", "HwHiAiUser"), acct.get("group", "HwHiAiUser")
    if acct.get("uid") is None and acct.get("gid") is None:
        yield warning("hwhiaiuser-missing", f"neither user nor group {user} exists (/etc/passwd, /etc/group)",
                      "the driver installer creates them; reinstall the driver with --install-username/--install-usergroup"
                      " or create both (uid/gid 1000 on most hosts)")
    elif acct.get("gid") is None:
        yield warning("hwhiaiuser-group-missing", f"group {group} is missing from /etc/group",
                      f"create it (groupadd -g <gid> {group}) with the gid the device nodes carry")
    elif acct.get("uid") is None:
        yield info("hwhiaiuser-user-missing", f"user {user} is missing from /etc/passwd (group {group} exists)",
                   "containers can run as root or add the group; the driver installer normally creates the user")


def check_docker(ctx: AuditContext):
    dk = ctx.report.get("docker") or {}
    mode = ctx.options.mode
    engine = dk.get("engine") or {}
    if engine.get("probed") and not engine.get("reachable"):
        sev = warning if mode else info
        yield sev("docker-engine-unreachable", f"Docker engine not reachable: {engine.get('error')}",
                  "start dockerd (systemctl start docker) or set DOCKER_HOST")
    daemon = dk.get("daemon_json") or {}
    if daemon.get("error"):
        yield warning("docker-daemon-json-invalid", f"{daemon['path']}: {daemon['error']}",
                      "fix the JSON; dockerd refuses to start with an invalid daemon.json")
    rt = dk.get("ascend_runtime") or {}
    if mode == "runtime":
        if not rt.get("installed") and not rt.get("configured"):
            yield error("ascend-runtime-missing", "--mode runtime needs Ascend Docker Runtime, which is not installed",
                        "install Ascend-docker-runtime (--install-scene=docker), or use --mode devices")
        elif not rt.get("configured"):
            yield error("ascend-runtime-missing", "Ascend Docker Runtime is installed but not registered in"
                        " /etc/docker/daemon.json (runtimes.ascend)", "rerun its installer, then restart dockerd")
        elif not rt.get("default"):
            yield info("ascend-runtime-not-default", "Ascend Docker Runtime is registered but not the default runtime",
                       "pass --runtime ascend to docker run (provision does)")
    elif mode == "cdi":
        if not any(d.get("ascend_specs") for d in dk.get("cdi") or []):
            dirs = ", ".join(d["dir"] for d in dk.get("cdi") or [])
            yield error("cdi-spec-missing", f"--mode cdi: no CDI spec for ascend.com/npu in {dirs}",
                        "write one with `provision cdi` into /etc/cdi, or use --mode devices")
    elif ctx.has_npu_hints and not rt.get("installed") and not rt.get("configured"):
        yield info("ascend-runtime-missing", "Ascend Docker Runtime is not installed",
                   "containers get the NPU through explicit --device and -v flags (provision run-cmd)")


def check_runtime_paths(ctx: AuditContext):
    rp = ctx.report.get("runtime_paths") or {}
    problems = rp.get("problems") or []
    if not problems:
        return
    rt = (ctx.report.get("docker") or {}).get("ascend_runtime") or {}
    if ctx.options.mode == "runtime" or rt.get("default"):
        sev = error
    elif rt.get("installed") or rt.get("configured"):
        sev = warning
    else:
        sev = info
    for p in problems:
        yield sev("runtime-mount-refused",
                  f"Ascend Docker Runtime would refuse to mount {p['path']}: {p['at']} is {', '.join(p['problems'])}",
                  f"chmod go-w {p['at']} and keep it owned by root" if "symbolic" not in " ".join(p["problems"])
                  else f"replace the symlink {p['at']} by the real path, or set ASCEND_ALLOW_LINK=True")


def check_shm(ctx: AuditContext):
    shm = ctx.report.get("shm")
    limit = ctx.limit("shm_min_mb")
    if not shm or limit is None:
        return
    if shm["total_mb"] < limit:
        yield warning("shm-small", f"/dev/shm is {shm['total_mb']} MB, below {limit} MB",
                      "give training containers --ipc=host or --shm-size of several GB (data loaders and HCCL use it)")


# ------------------------------------------------------------------- image


def check_image(ctx: AuditContext):
    stack = ctx.options.image_stack
    if stack is None:
        return
    ref = ctx.options.image or "the image"
    if not isinstance(stack, dict) or not isinstance(stack.get("cann"), dict) or not isinstance(stack.get("chip"), dict):
        yield error("image-label-invalid", f"{ref}: label org.provision.stack is not a provision stack",
                    "rebuild the image with `provision build`")
        return
    problems = 0
    arch = _ARCH.get(str(stack.get("arch") or "").lower())
    if arch and ctx.arch and arch != ctx.arch:
        problems += 1
        yield error("image-arch-mismatch", f"{ref} is built for {arch}; this host is {ctx.arch}",
                    f"build for this host: provision build --arch {ctx.arch}")
    fam = stack["chip"].get("family")
    if fam and ctx.families and fam not in ctx.families:
        problems += 1
        yield error("image-chip-mismatch",
                    f"{ref} is built for {ctx.family_name(fam)}; this host has"
                    f" {', '.join(ctx.family_name(f) for f in ctx.families)}",
                    "build an image for this host's chip (--card of this host)")
    cann = stack["cann"].get("version")
    driver = ctx.driver_version
    if cann and driver:
        label = stack.get("driver") or {}
        row = ctx.matrix.cann(cann)
        if label.get("paired") or label.get("compatible"):
            # The label carries the HDK list it was built against: trust it over this matrix.
            row = {"version": cann, "status": "release", "hdk_paired": label.get("paired", []),
                   "hdk_compatible": label.get("compatible", [])}
            matrix = None
        else:
            matrix = ctx.matrix
        if row is not None:
            for f in _fit_findings("image-", driver, cann, row, matrix, f"{ref} (CANN {cann})", _card_flag(ctx)):
                if f.severity == "error":
                    problems += 1
                yield f
    elif cann and not driver:
        problems += 1
        yield error("image-no-driver", f"{ref} needs an NPU driver for CANN {cann}; none is installed here",
                    "install the Ascend HDK driver and firmware")
    if stack.get("task") == "train" and ctx.families and not any(ctx.matrix.family(f)["training"] for f in ctx.families):
        problems += 1
    if problems:
        yield from _recommend(ctx, stack)
    else:
        yield info("image-fits", f"{ref} (CANN {cann}, {ctx.family_name(fam) if fam else 'chip ?'}, {arch}) can run on"
                   " this host")


def _card_flag(ctx: AuditContext) -> str:
    card = _host_card(ctx)
    return f" --card {card}" if card else ""


def _host_card(ctx: AuditContext) -> str | None:
    if ctx.options.card:
        return ctx.options.card
    if len(ctx.families) == 1:
        return ctx.matrix.family(ctx.families[0])["reference_card"]
    return None


def recommend(ctx: AuditContext, stack: dict | None = None) -> dict:
    """The stack the matrix would pick for this host (card, driver, arch), or why there is none."""
    from provisioner.errors import ProvisionError
    from provisioner.matrix import cache
    from provisioner.resolve import request

    card = _host_card(ctx)
    if card is None:
        return {"stack": None, "reason": "the host's chip family is not known (pass --card)"}
    options = {"card": card, "driver": ctx.driver_version, "arch": ctx.arch, "task": ctx.task}
    if stack and stack.get("framework"):
        options["framework"] = stack["framework"]
    try:
        req = request.build(ctx.matrix, **options)
        return {"stack": cache.cached_resolve(ctx.matrix, req), "reason": None, "request": options}
    except ProvisionError as exc:
        return {"stack": None, "reason": str(exc), "request": options}


def _recommend(ctx: AuditContext, stack: dict):
    rec = recommend(ctx, stack)
    ctx.recommendation = rec
    flags = " ".join(f"--{k} {v}" for k, v in (rec.get("request") or {}).items() if v)
    if rec["stack"] is None:
        yield info("image-recommendation", f"the matrix has no stack for this host: {rec['reason']}")
        return
    s = rec["stack"]
    tn = f", torch_npu {s['torch_npu']['version']}" if s.get("torch_npu") else ""
    ms = f", MindSpore {s['mindspore']['version']}" if s.get("mindspore") else ""
    yield info("image-recommendation",
               f"for this host the matrix recommends CANN {s['cann']['version']} on {s['base_image']['ref']}{tn}{ms}"
               f" (Python {s['python']})", f"provision build {flags}")


# ---------------------------------------------------------------- registry

CHECKS = [
    ("probe", check_probe),
    ("stack-presence", check_stack_presence),
    ("driver-cann", check_driver_cann),
    ("driver-images", check_driver_images),
    ("firmware", check_firmware),
    ("cann-arch", check_cann_arch),
    ("npu-smi", check_npu_smi),
    ("chip-health", check_chip_health),
    ("chip-busy", check_chip_busy),
    ("chip-family", check_chip_family),
    ("training", check_training),
    ("card", check_card),
    ("devices", check_devices),
    ("account", check_account),
    ("docker", check_docker),
    ("runtime-paths", check_runtime_paths),
    ("shm", check_shm),
    ("image", check_image),
]


def audit(report: dict, matrix, options: AuditOptions | None = None, checks=None) -> dict:
    """Run the checks on a HostReport; returns the provision.audit/1 document."""
    ctx = AuditContext(report, matrix, options or AuditOptions())
    if ctx.options.card:
        _ = ctx.card  # an unknown --card is bad input (exit 2), not a crashed check
    found = ordered(run_checks(checks if checks is not None else CHECKS, ctx))
    return {
        "schema": SCHEMA,
        "host": report,
        "options": {"card": ctx.options.card, "task": ctx.task, "mode": ctx.options.mode, "image": ctx.options.image},
        "image": ({"ref": ctx.options.image, "stack_id": (ctx.options.image_stack or {}).get("id"),
                   "recommended": ctx.recommendation} if ctx.options.image_stack is not None else None),
        "findings": [f.to_dict() for f in found],
        "summary": counts(found),
        "exit_code": exit_code(found),
    }


def chip_rows(matrix) -> list[dict]:
    return matrix.rows("chips")


def runtime_mounts(matrix) -> list[str]:
    return [r["path"] for r in matrix.rows("audit_runtime_mounts")]
