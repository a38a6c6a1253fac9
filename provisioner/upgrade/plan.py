"""A host upgrade plan (`provision upgrade`): from the host's driver, firmware and CANN to a target stack, in the
order Huawei's guides give (the HDK before CANN; firmware then driver on an installed host; reboot where the
installers ask), then the image rebuild and the checks; what keeps running on the new driver, and the rollback.

Every order, command form and sentence comes from matrices/upgrade.yaml; "does driver X run CANN Y" from
provisioner/resolve/driverfit.py. Commands are filled only with values checked here (versions, the chip word,
the architecture) and quoted; a command the data marks as a documented form, not an exact one, says so.
A target the card cannot reach is refused (ResolveError) with why and the nearest target that works.
"""

from __future__ import annotations

import shlex

from provisioner import validate
from provisioner.errors import ProvisionError, ResolveError

SCHEMA = "provision.upgrade/1"
TARGET_KEYS = ("to_cann", "to_torch", "to_torch_npu", "to_set")


def _ver(text: str, what: str) -> str:
    from provisioner.versions import V, VersionError

    validate.version_text(text, what)
    try:
        V(text)
    except VersionError:
        raise ProvisionError(f"{what}: not a version: {text!r}") from None
    return text


def facts_of(report: dict) -> dict:
    """The host facts a plan needs from a HostReport (host/probe.py), checked: values from another host's tree."""
    from provisioner import arch as arches

    drv = report.get("driver") or {}
    fw = report.get("firmware") or {}
    system = report.get("system") or {}
    out: dict = {"driver": None, "firmware": None, "arch": arches.normalize(system.get("arch")), "cann": [], "notes": [],
           "families": sorted({c["family"] for c in ((report.get("npu_smi") or {}).get("chips") or []) if c.get("family")})}
    for key, value in (("driver", drv.get("version")), ("firmware", fw.get("version"))):
        if value is None:
            continue
        try:
            out[key] = _ver(value, f"the host's {key} version")
        except ProvisionError as exc:
            out["notes"].append(f"{exc}; not used")
    for item in report.get("cann") or []:
        try:
            out["cann"].append({"kind": validate.name(item.get("kind"), "CANN kind"),
                                "version": _ver(item.get("version"), "an installed CANN version")})
        except (ProvisionError, validate.Invalid, TypeError) as exc:
            out["notes"].append(f"an installed CANN was not read: {exc}")
    return out


def target_options(matrix, card: str, target: dict, arch: str | None, extra: dict) -> dict:
    """The resolve options of the target (--to-set NAME: its framework set's CANN and torch)."""
    opts: dict = {"card": card, "arch": arch, **{k: v for k, v in extra.items() if v not in (None, (), [])}}
    if target.get("to_cann"):
        opts["cann"] = target["to_cann"]
    if target.get("to_torch"):
        opts["torch"] = target["to_torch"]
    if target.get("to_torch_npu"):
        opts["torch_npu"] = target["to_torch_npu"]
    if target.get("to_set"):
        name = validate.name(target["to_set"], "--to-set")
        bundle = next((b for b in matrix.rows("llm_bundles") if b["id"] == name), None)
        if bundle is None:
            known = ", ".join(b["id"] for b in matrix.rows("llm_bundles"))
            raise ProvisionError(f"--to-set {name}: not a framework set of matrices/mindspeed.yaml (known: {known})")
        opts["extras"] = tuple(dict.fromkeys([*opts.get("extras", ()), "mindspeed-llm"]))
        if bundle.get("torch") and not opts.get("torch"):
            opts["torch"] = bundle["torch"][0]
        if bundle.get("cann") and not opts.get("cann"):
            from provisioner.versions import sort_versions

            opts["cann"] = sort_versions(bundle["cann"])[-1]
    return opts


def _resolve(matrix, opts: dict) -> dict:
    from provisioner.resolve import cached, request

    opts = dict(opts)
    profile = opts.pop("profile", None)
    return dict(cached.cached_resolve(matrix, request.build(matrix, profile=profile, **opts)))


def card_hdks(matrix, family: str) -> list[dict]:
    """The HDK rows of matrices/hdk.yaml that apply to a chip family (no chips list: every family), oldest first."""
    from provisioner.versions import V

    rows = [r for r in matrix.rows("hdk") if not r.get("chips") or family in r["chips"]]
    return sorted(rows, key=lambda r: V(r["version"]).key)


def pick_hdk(matrix, family: str, cann_row: dict) -> dict | None:
    """The HDK to install for a CANN row: a card HDK the row lists as paired first, else the newest that fits."""
    from provisioner.resolve import driverfit
    from provisioner.versions import V

    fit = [r for r in card_hdks(matrix, family) if driverfit.driver_fit(r["version"], cann_row, matrix) == "ok"]
    if not fit:
        return None
    src = driverfit.hdk_row(matrix, cann_row)[0]
    paired = {str(V(p)) for p in src.get("hdk_paired", [])}
    return max(fit, key=lambda r: (str(V(r["version"])) in paired, V(r["version"]).key))


def _nearest(matrix, family: str, opts: dict, asked: str | None) -> tuple[str, str] | None:
    """(CANN, HDK) of the release nearest the asked one that resolves for the card and a card HDK runs."""
    from provisioner.versions import V

    rows = sorted((r for r in matrix.rows("cann") if r["status"] == "release"), key=lambda r: V(r["version"]).key)
    if asked:
        # the newest release not beyond the asked one first (nearest below), then the ones above it, nearest first
        want = V(asked)
        rows = [r for r in reversed(rows) if V(r["version"]) <= want] + [r for r in rows if V(r["version"]) > want]
    else:
        rows.reverse()
    for row in rows:
        hdk = pick_hdk(matrix, family, row)
        if hdk is None:
            continue
        try:
            _resolve(matrix, {**opts, "cann": row["version"]})
        except ProvisionError:
            continue
        return row["version"], hdk["version"]
    return None


def _retry(card: str, cann: str, extra: dict) -> str:
    """The `provision upgrade` line of the nearest target, with the request's other options (validated values)."""
    words = ["provision", "upgrade", "--card", card, "--to-cann", cann]
    for key in ("task", "python"):
        if extra.get(key):
            words += [f"--{key}", validate.single_line(extra[key], f"--{key}", 64)]
    if extra.get("extras"):
        words += ["--with", ",".join(validate.single_line(e, "--with", 64) for e in extra["extras"])]
    return " ".join(shlex.quote(w) for w in words)


def _fill(text: str, values: dict) -> str:
    """A command or package name of the data with validated values in place ({name} only; nothing else expands)."""
    import re

    def put(m):
        if m.group(1) not in values:
            raise ProvisionError(f"matrices/upgrade.yaml: unknown placeholder {{{m.group(1)}}} in {text!r}")
        return values[m.group(1)]

    return re.sub(r"\{([a-z_]+)\}", put, text)


def _steps(matrix, stage: str, values: dict, first: bool = False, cann: str | None = None) -> list[dict]:
    from provisioner.versions import any_match

    rows = [r for r in matrix.rows("upgrade_steps") if r["stage"] == stage
            and (not r.get("cann") or (cann is not None and any_match(r["cann"], cann)))]
    rows.sort(key=lambda r: (r.get("order_first") or r["order"]) if first else r["order"])
    out = []
    for row in rows:
        quoted = {k: shlex.quote(v) for k, v in values.items()}
        package = _fill(row["package"], values)
        validate.single_line(package, "package name", 256)
        commands = [_fill(c, {**quoted, "package": shlex.quote(package)}) for c in row["commands"]]
        out.append({"stage": stage, "id": row["id"], "package": package, "commands": commands,
                    "exact": bool(row.get("exact")), "notes": row.get("notes"),
                    "source": [matrix.source_ref(s) for s in row.get("source") or []]})
    return out


def fact(matrix, ident: str) -> dict:
    row = next((r for r in matrix.rows("upgrade_facts") if r["id"] == ident), None)
    if row is None:
        raise ProvisionError(f"matrices/upgrade.yaml: upgrade_facts has no {ident!r} row")
    return {"id": ident, "says": row["says"], "source": [matrix.source_ref(s) for s in row.get("source") or []]}


def plan(matrix, host: dict, card: str, target: dict, extra: dict | None = None, current: dict | None = None) -> dict:
    """The provision.upgrade/1 document for `host` (facts_of) to `target` (TARGET_KEYS), or ResolveError."""
    from provisioner.resolve import driverfit
    from provisioner.resolve.stack import summary

    card_row, family, _ = matrix.lookup_card(card)
    fam = family["id"]
    if host["families"] and fam not in host["families"]:
        have = ", ".join(matrix.family(f)["name"] for f in host["families"])
        raise ProvisionError(f"--card {card} is {family['name']}, but the host's chips are {have}")
    if not any(target.get(k) for k in TARGET_KEYS):
        raise ProvisionError("name the target: --to-cann V, --to-torch V, --to-torch-npu V or --to-set NAME")
    opts = target_options(matrix, card_row["id"], target, host["arch"], extra or {})
    asked = opts.get("cann")
    try:
        stack = _resolve(matrix, opts)
    except ResolveError as exc:
        near = _nearest(matrix, fam, {k: v for k, v in opts.items() if k != "cann"}, asked)
        reasons = list(exc.reasons)
        if near:
            reasons.append(f"nearest target that works: CANN {near[0]} (HDK {near[1]}): "
                           + _retry(card_row["id"], near[0], extra or {}))
        raise ResolveError(f"{card_row['id']} cannot reach the target: {reasons[0]}", reasons=reasons) from None
    got = ((stack.get("extras") or {}).get("mindspeed_llm") or {}).get("set")
    if target.get("to_set") and got != target["to_set"]:
        raise ResolveError(f"--to-set {target['to_set']}: the matrix resolves {summary(stack)} with framework set"
                           f" {got} instead; name the set's torch and CANN with --to-torch / --to-cann")
    cann = stack["cann"]["version"]
    cann_row = matrix.cann(cann)
    driver, notes = host["driver"], list(host["notes"])
    fit = driverfit.driver_fit(driver, cann_row, matrix) if driver else "none"
    hdk = None
    if fit != "ok":
        hdk = pick_hdk(matrix, fam, cann_row)
        if hdk is None:
            known = card_hdks(matrix, fam)
            newest = known[-1]["version"] if known else "none"
            near = _nearest(matrix, fam, {k: v for k, v in opts.items() if k != "cann"}, cann)
            reasons = [f"CANN {cann} needs HDK {driverfit.needs(matrix, cann_row)[0]}; the newest HDK"
                       f" matrices/hdk.yaml lists for {family['name']} is {newest}, which does not run it"]
            if near:
                reasons.append(f"nearest target that works: CANN {near[0]} (HDK {near[1]}): "
                               + _retry(card_row["id"], near[0], extra or {}))
            raise ResolveError(reasons[0], reasons=reasons)
        if fit == "newer":
            notes.append(f"the host driver {driver} is newer than every HDK CANN {cann} lists: it usually runs it;"
                         f" the plan installs {hdk['version']}, which CANN {cann} lists")
    arch = host["arch"] or stack["arch"]
    chip_row = next((r for r in matrix.rows("upgrade_hdk_chips") if r["family"] == fam), None)
    chip = validate.name(chip_row["chip"], "upgrade_hdk_chips chip") if chip_row else "<chip_type>"
    if chip_row is None:
        notes.append(f"no published package name shows the chip word of {family['name']}: <chip_type> stands for"
                     " it (the name of the package you download)")
    steps: list[dict] = []
    hdk_doc = {"from": driver, "to": hdk["version"] if hdk else driver, "needed": hdk is not None,
               "fit_now": fit, "firmware_from": host["firmware"], "firmware_to": None}
    if hdk is not None:
        fws = hdk.get("firmware") or []
        firmware = fws[0] if len(fws) == 1 else "<firmware version of HDK " + hdk["version"] + ">"
        hdk_doc["firmware_to"] = fws[0] if len(fws) == 1 else None
        values = {"chip": chip, "driver": _ver(hdk["version"], "HDK version"), "arch": arch,
                  "firmware": _ver(firmware, "firmware version") if len(fws) == 1 else firmware}
        for s in _steps(matrix, "hdk", values, first=driver is None):
            s["title"] = (f"{'install' if driver is None else 'upgrade'} the {s['id']} to HDK {hdk['version']}"
                          + (f" (firmware {firmware})" if s["id"] == "firmware" else ""))
            steps.append(s)
        reboot = fact(matrix, "reboot")
        steps.append({"stage": "hdk", "id": "reboot", "title": "reboot if the installers ask for it (stop every"
                      " NPU job and container first)", "commands": ["reboot", "npu-smi info"], "exact": True,
                      "notes": reboot["says"], "source": reboot["source"], "package": None})
    cann_doc = _cann_steps(matrix, host, cann, chip, arch, steps)
    steps += _image_steps(stack, card_row["id"])
    stays = _stays_valid(matrix, family, hdk_doc["to"], current)
    rollback = _rollback(matrix, host, hdk, chip, arch) if hdk is not None else None
    order = [fact(matrix, "npu-before-cann"), fact(matrix, "hdk-order")]
    return {"schema": SCHEMA, "status": "ok", "card": card_row["id"],
            "host": {"driver": driver, "firmware": host["firmware"], "arch": host["arch"], "cann": host["cann"]},
            "target": {"summary": summary(stack), "cann": cann, "request": stack.get("request"), "stack": stack},
            "hdk": hdk_doc, "cann": cann_doc, "steps": steps, "order": order, "stays_valid": stays,
            "rollback": rollback, "notes": notes}


def _cann_steps(matrix, host: dict, cann: str, chip: str, arch: str, steps: list) -> dict:
    installed = [c for c in host["cann"] if c["kind"] in ("toolkit", "nnal")]
    doc = {"installed": host["cann"], "to": cann, "on_host": bool(installed)}
    if not installed:
        doc["note"] = (f"no CANN is installed on the host: containers take CANN {cann} from the image (no host step)")
        return doc
    if all(c["version"] == cann for c in installed):
        doc["note"] = f"the host's CANN is {cann} already"
        return doc
    values = {"chip": chip, "cann": _ver(cann, "CANN version"), "arch": arch}
    kinds = {c["kind"] for c in installed}
    for s in _steps(matrix, "cann", values, cann=cann):
        if s["id"] == "nnal" and "nnal" not in kinds:
            continue
        if s["id"] != "nnal" and "toolkit" not in kinds:
            continue
        s["title"] = f"CANN {cann} on the host: {s['id']}"
        steps.append(s)
    doc["note"] = fact(matrix, "kernels-removed")["says"]
    return doc


def build_line(stack: dict, card: str) -> str:
    """`provision build` for the target, from the stack's own (validated) choices."""
    words = ["provision", "build", "--card", card, "--cann", stack["cann"]["version"], "--python", stack["python"]]
    if stack.get("torch"):
        words += ["--torch", stack["torch"]["version"], "--torch-npu", stack["torch_npu"]["version"]]
    if stack.get("mindspore"):
        words += ["--mindspore", stack["mindspore"]["version"]]
    extras = sorted(n.replace("_", "-") for n in (stack.get("extras") or {}))
    if stack.get("apex"):
        extras = ["apex", *extras]
    if extras:
        words += ["--with", ",".join(extras)]
    for w in words[2:]:
        validate.single_line(w, "build option", 128)
    return " ".join(shlex.quote(w) for w in words)


def _image_steps(stack: dict, card: str) -> list[dict]:
    from provisioner.image import recipes, render

    tag = validate.image_ref(render.image_tag(stack, recipes.choose(stack)), "image tag")
    q = shlex.quote
    return [
        {"stage": "image", "id": "build", "title": f"rebuild the image on CANN {stack['cann']['version']}",
         "commands": [build_line(stack, card)], "exact": True, "package": None, "source": [],
         "notes": f"prints the tag ({tag} on this matrix)"},
        {"stage": "check", "id": "checks", "title": "check the host and the new image before the long run",
         "commands": [f"provision audit --card {q(card)} --image {q(tag)}",
                      f"provision selftest --card {q(card)} --devices all --image {q(tag)}"],
         "exact": True, "package": None, "source": [], "notes": "audit: driver, firmware, CANN fit; selftest: chips,"
         " attention, optimizer, HCCL and three training steps"},
    ]


def _stays_valid(matrix, family: dict, driver: str | None, current: dict | None) -> dict:
    """Which CANN releases with an official image for the chip run on the driver after the upgrade."""
    from provisioner.resolve import driverfit
    from provisioner.versions import V

    out: dict = {"driver": driver, "runs": [], "newer": [], "stops": [], "current": None}
    chip = family.get("image_chip")
    if not driver or not chip:
        return out
    for row in sorted(matrix.rows("cann"), key=lambda r: V(r["version"]).key):
        if row["status"] != "release" or not matrix.images(row["version"], chip):
            continue
        fit = driverfit.driver_fit(driver, row, matrix)
        (out["stops"] if fit == "no" else out["newer"] if fit == "newer" else out["runs"]).append(row["version"])
    if current:
        row, judge_with = driverfit.stack_row(matrix, current)
        cann = (current.get("cann") or {}).get("version")
        fit = driverfit.driver_fit(driver, row, judge_with) if row else "unknown"
        out["current"] = {"cann": cann, "id": current.get("id"), "fit": fit}
    return out


def _rollback(matrix, host: dict, hdk: dict, chip: str, arch: str) -> dict:
    """Back to the host's HDK: the same procedure with its packages (firmware, then driver)."""
    driver = host["driver"]
    doc = fact(matrix, "rollback")
    if not driver:
        return {**doc, "steps": []}
    firmware = host["firmware"]
    if firmware is None:
        row = next((r for r in matrix.rows("hdk") if r["version"].lower() == driver.lower()), None)
        fws = (row or {}).get("firmware") or []
        firmware = fws[0] if len(fws) == 1 else f"<firmware version installed with {driver}>"
    values = {"chip": chip, "driver": driver, "firmware": firmware, "arch": arch}
    return {**doc, "to": driver, "firmware": firmware, "steps": _steps(matrix, "hdk", values)}


def render(doc: dict) -> str:
    """The plan for people: target, then numbered steps with their commands, then what stays valid and rollback."""
    h, hdk = doc["host"], doc["hdk"]
    out = [f"upgrade {doc['card']}: driver {h['driver'] or 'none'}, firmware {h['firmware'] or 'unknown'}, CANN on"
           f" the host: {', '.join(c['kind'] + ' ' + c['version'] for c in h['cann']) or 'none'}",
           f"target: {doc['target']['summary']}",
           (f"HDK: {hdk['from'] or 'none'} -> {hdk['to']}" + (f" (firmware {hdk['firmware_to']})" if hdk['firmware_to'] else "")
            if hdk["needed"] else f"HDK: driver {hdk['from']} runs CANN {doc['target']['cann']} ({hdk['fit_now']}): no HDK step"),
           ""]
    out += [f"order: {o['says']}" for o in doc["order"]]
    out.append("")
    for n, step in enumerate(doc["steps"], 1):
        out.append(f"{n}. [{step['stage']}] {step['title']}")
        out += [f"     {c}" for c in step["commands"]]
        if not step["exact"]:
            out.append("     (the documented form: check the package name against your download)")
        if step.get("notes"):
            out.append(f"     note: {step['notes']}")
    out.append(f"\nCANN: {doc['cann'].get('note', '')}")
    sv = doc["stays_valid"]
    if sv["driver"]:
        out.append(f"on driver {sv['driver']}: images of CANN {', '.join(sv['runs']) or 'none'} run (listed);"
                   f" {', '.join(sv['newer']) or 'none'} run on a driver newer than they list (usually fine);"
                   f" {', '.join(sv['stops']) or 'none'} stop")
        if sv["current"]:
            c = sv["current"]
            out.append(f"the current image (CANN {c['cann']}): {'keeps running' if c['fit'] != 'no' else 'stops running'}"
                       f" on it ({c['fit']})")
    rb = doc["rollback"]
    if rb:
        out.append(f"\nrollback to HDK {rb.get('to')}: {rb['says']}")
        for s in rb["steps"]:
            out += [f"     {c}" for c in s["commands"] if "--check" not in c and "chmod" not in c]
    out += [f"note: {n}" for n in doc["notes"]]
    return "\n".join(out)
