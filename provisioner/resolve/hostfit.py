"""The host a stack is for -> resolve constraints, and the record of why (`stack["host"]`).

An image has to run where it is deployed. `provision resolve|render|build` therefore read that host first (this
machine's ``/`` by default, another host's files with ``--root DIR`` / ``--npu-smi-output FILE``, as the audit
does; provisioner/host/buildfacts.py reads them) and this module turns the facts into constraints:

- card: the chips npu-smi shows pick the chip family, and the family's reference card stands in for ``--card``
  when every chip belongs to one family. A ``--card`` (or a profile's card) of another family than the chips
  present is refused with both named.
- driver: the Version of the driver's version.info limits CANN to the releases that driver runs (the solver's
  driver constraint; ``--driver`` still overrides it, with a note). When that driver runs no CANN with an official
  image for the chip, the refusal says so, names the HDK upgrade that opens the newest stack and the newest stack
  the driver runs today (on your own base image).
- arch: the host's architecture; an ``--arch`` naming another one is refused.
- os: a preference, not a limit: where the chosen stack also has an official image of the host's OS family (same
  CANN, framework and Python), that image is taken.

``--for-host none`` (or PROVISION_FOR_HOST=none when no host option is given) reads no host: the stack is the
newest for the request, as when building for another machine. A host without an Ascend driver constrains nothing
and says so in one line. Every value taken from the host, or checked against it, is listed in the record with its
reason; the record becomes ``stack["host"]`` (it is not part of the stack id: the same choices give the same tag).
The record names no path of the machine that resolves: another host's files are "the host read from --root" and its
``root`` is null (``/`` for this machine), since stacks become image labels.

This module does not import provisioner.host (the host package imports resolve, not the reverse): callers read
the facts and pass them in. Whether a driver runs a CANN release is asked of the one driver-fit module,
provisioner/resolve/driverfit.py (imported where it is used: a warm resolve on the fast path needs none of it).
"""

from __future__ import annotations

import re

from provisioner.arch import normalize
from provisioner.errors import ProvisionError, ResolveError

FOR_HOST = ("this", "none")
ENV = "PROVISION_FOR_HOST"
BASE_PLACEHOLDER = "IMAGE"
# What the resolver is asked with in its place (a base image must be a valid image reference).
BASE_PROBE = "your/cann-base-image"


# ------------------------------------------------------------------ target


def target(for_host: str | None, root: str | None, npu_smi_outputs=(), environ=None) -> dict | None:
    """Which host to read: {'root', 'npu_smi_outputs'}, or None to read none (--for-host none)."""
    outputs = list(npu_smi_outputs or ())
    explicit = root is not None or bool(outputs)
    mode = for_host
    if mode is None and not explicit:
        mode = (environ or {}).get(ENV) or "this"
        if mode not in FOR_HOST:
            raise ProvisionError(f"{ENV}={mode!r}: use this or none")
    if mode == "none":
        if explicit:
            given = "--root" if root is not None else "--npu-smi-output"
            raise ProvisionError(f"--for-host none reads no host; drop {given} (or use --for-host this)")
        return None
    return {"root": root or "/", "npu_smi_outputs": outputs}


# ------------------------------------------------------------------- apply


def _chips(facts: dict) -> list[dict]:
    return list(((facts.get("npu_smi") or {}).get("chips")) or [])


def chip_summary(chips: list[dict]) -> str:
    """'8 x 910B2' or '4 x 910B2, 4 x 910B' (npu-smi names, in order of appearance)."""
    counts: dict[str, int] = {}
    for chip in chips:
        name = chip.get("name") or "?"
        counts[name] = counts.get(name, 0) + 1
    return ", ".join(f"{n} x {name}" for name, n in counts.items())


def _host_paths(facts: dict, text):
    """``text`` with the paths of another host's files on this machine made the host's own (/tmp/x/tree/etc -> /etc)."""
    root = str(facts["root"]).rstrip("/")
    return text.replace(root + "/", "/").replace(root, "/") if text and root and not facts.get("live") else text


def _record(facts: dict) -> dict:
    drv = facts.get("driver") or {}
    smi = facts.get("npu_smi")
    chips = _chips(facts)
    version = drv.get("version")
    osr = facts.get("os") or {}
    record: dict = {
        "root": "/" if facts.get("live", facts["root"] in ("/", "")) else None,
        "found": bool(facts.get("driver_dir") or chips),
        "driver": ({"version": version, "file": f"{drv.get('dir')}/version.info"} if version else None),
        "chips": None,
        "arch": facts.get("arch"),
        "os": osr.get("pretty_name") or osr.get("name"),
        "constraints": [],
        "notes": [],
        "_os": facts.get("os"),
        "_arch_source": facts.get("arch_source"),
    }
    if smi is not None:
        record["chips"] = {
            "summary": chip_summary(chips) or None,
            "families": sorted({c["family"] for c in chips if c.get("family")}),
            "unknown": sorted({c.get("name") or "?" for c in chips if not c.get("family")}),
            "source": "saved npu-smi output" if smi.get("source") == "file" else "npu-smi info",
            "error": _host_paths(facts, smi.get("error")) or _smi_missing(smi.get("source"), chips),
        }
    return record


def _smi_missing(source: str | None, chips: list[dict]) -> str | None:
    """Why no chip reading came, when npu-smi itself reported no error."""
    if chips:
        return None
    if source == "absent":
        return "npu-smi not found"
    if source == "not-run":
        return "npu-smi is not run for another system's tree: pass its saved output with --npu-smi-output"
    return None


def _where(record: dict) -> str:
    """The host in words. Another host's files are "the host read from --root", never their path on this machine:
    the record goes into image labels, which must not carry the build machine's paths."""
    return "this host" if record["root"] == "/" else "the host read from --root"


def _add(record: dict, option: str, value, source: str, kind: str, why: str) -> None:
    record["constraints"].append({"option": option, "value": value, "from": source, "kind": kind, "why": why})


def apply(matrix, options: dict, facts: dict | None) -> tuple[dict, dict | None]:
    """Resolve options plus what the host decides -> (options, record); (options, None) without a host.

    Raises ResolveError when the request names a card or an architecture the host does not have, and
    ProvisionError when the card cannot be told (no --card and chips of several families or unknown names).
    """
    opts = dict(options)
    if facts is None:
        return opts, None
    record = _record(facts)
    where = _where(record)
    if not record["found"]:
        looked = ", ".join(facts.get("looked") or ())
        if not opts.get("card") and not opts.get("profile"):
            raise ProvisionError(f"--card is required: no Ascend driver found on {where} (looked for {looked}),"
                                 " so its chips are not known")
        record["notes"].append(f"no Ascend driver found on {where} (looked for {looked}): the stack is not limited"
                               " by a host driver (--root DIR reads another host's files; --for-host none builds for"
                               " another machine)")
        return opts, record
    prof = matrix.profile(opts["profile"])["constraints"] if opts.get("profile") else {}
    for error in facts.get("errors") or ():
        record["notes"].append(f"part of {where} could not be read: {_host_paths(facts, error)}")
    _apply_card(matrix, opts, prof, record, where)
    _apply_driver(opts, record, where, facts)
    _apply_arch(opts, prof, record, where)
    smi = record["chips"]
    if smi and smi["error"]:
        record["notes"].append(f"the chips of {where} were not read: {smi['error']}")
    return opts, record


def _apply_card(matrix, opts: dict, prof: dict, record: dict, where: str) -> None:
    chips = record["chips"] or {}
    families = chips.get("families") or []
    unknown = chips.get("unknown") or []
    shown = chips.get("summary")
    named = opts.get("card") or prof.get("card")
    if named:
        card, family, _ = matrix.lookup_card(named)
        who = f"--card {named}" if opts.get("card") else f"profile {opts['profile']} (card {card['id']})"
        if families and family["id"] not in families:
            have = ", ".join(matrix.family(f)["name"] for f in families)
            refs = ", ".join(matrix.family(f)["reference_card"] for f in families)
            raise ResolveError(
                f"{who} is {family['name']}, but {where} has {have} (npu-smi: {shown}): use --card {refs} (or"
                f" another card of that family), or --for-host none to build for another machine",
                alternatives=[])
        if families:
            _add(record, "card", card["id"], "request", "check",
                 f"{family['name']}, as the chips of {where} ({shown})")
        return
    if not families and not unknown:
        why = chips.get("error") or "npu-smi shows no chips"
        raise ProvisionError(f"--card is required: the chips of {where} could not be read ({why})")
    if unknown:
        raise ProvisionError(f"--card is required: npu-smi on {where} names chips the matrix does not know"
                             f" ({', '.join(unknown)}); name the card (or add the chip name in a matrix overlay)")
    if len(families) > 1:
        have = "; ".join(f"{matrix.family(f)['name']}: --card {matrix.family(f)['reference_card']}" for f in families)
        raise ProvisionError(f"--card is required: {where} has chips of several families ({shown}); name the one the"
                             f" image is for ({have})")
    family = matrix.family(families[0])
    opts["card"] = family["reference_card"]
    _add(record, "card", family["reference_card"], "host", "limit",
         f"{shown} ({chips['source']}), all {family['name']}: the family's reference card (every card of the family"
         " gets the same software; --card names yours)")


def _apply_driver(opts: dict, record: dict, where: str, facts: dict) -> None:
    drv = record["driver"]
    if drv is None:
        if facts.get("driver_dir"):
            record["notes"].append(f"the driver of {where} has no readable version ({facts['driver_dir']}/version.info):"
                                   " CANN is not limited by it")
        else:
            record["notes"].append(f"no Ascend driver found on {where}: CANN is not limited by a driver (the chips come"
                                   " from the saved npu-smi output; --driver names the target's)")
        return
    from provisioner import validate
    from provisioner.versions import V, VersionError

    # The grammar --driver is held to (request._check): a host value that fails it is the host's, never --driver's.
    try:
        validate.version_text(drv["version"], "driver")
        V(drv["version"])
    except (VersionError, validate.Invalid):
        record["notes"].append(f"the driver version of {where}, {drv['version']!r} ({drv['file']}), is not a version:"
                               " CANN is not limited by it (--driver names it)")
        return
    if opts.get("driver"):
        if opts["driver"] != drv["version"]:
            record["notes"].append(f"--driver {opts['driver']} as requested; {where} has driver {drv['version']}"
                                   f" ({drv['file']}): the image will not run there until that driver is installed")
        return
    opts["driver"] = drv["version"]
    _add(record, "driver", drv["version"], "host", "limit",
         f"{drv['file']} of {where}: only CANN releases this driver runs")


def _apply_arch(opts: dict, prof: dict, record: dict, where: str) -> None:
    have = record["arch"]
    named = opts.get("arch") or prof.get("arch")
    if not have:
        if not named:
            record["notes"].append("the architecture of the target host is not known; this machine's is used (--arch names it)")
        return
    if named:
        if normalize(named) and normalize(named) != have:
            raise ResolveError(f"--arch {named} does not run on {where}, which is {have}: drop --arch, or use"
                               " --for-host none to build for another machine")
        return
    opts["arch"] = have
    source = record.get("_arch_source")
    _add(record, "arch", have, "host", "limit", f"the architecture of {where}" + (f" ({source})" if source else ""))


# ----------------------------------------------------------------- resolve


def resolve(matrix, options: dict, facts: dict | None) -> tuple[dict, dict | None]:
    """(stack, record) for the request on the host of ``facts`` (None: no host). Refusals raise ResolveError
    with the record as ``exc.host``; bad input raises ProvisionError."""
    try:
        opts, record = apply(matrix, options, facts)
    except ResolveError as exc:
        exc.host = _record(facts) if facts is not None else None
        raise
    try:
        stack = _resolve(matrix, opts)
    except ResolveError as exc:
        if record is None:
            raise
        err = refusal(matrix, opts, record, exc)
        err.host = record
        raise err from None
    if record is None:
        return stack, None
    stack = _prefer_host_os(matrix, opts, record, stack)
    return attach(stack, record), record


def _resolve(matrix, opts: dict) -> dict:
    from provisioner.resolve import request
    from provisioner.resolve.cached import cached_resolve

    opts = dict(opts)
    profile = opts.pop("profile", None)
    return dict(cached_resolve(matrix, request.build(matrix, profile=profile, **opts)))


def _try(matrix, opts: dict) -> dict | None:
    try:
        return _resolve(matrix, opts)
    except ProvisionError:
        return None


def _host_driver(record: dict) -> str | None:
    return next((c["value"] for c in record["constraints"] if c["option"] == "driver" and c["from"] == "host"), None)


def refusal(matrix, opts: dict, record: dict, exc: ResolveError) -> ResolveError:
    """The solver's refusal, told in terms of the host: its driver is "the host's driver", and a driver that runs
    no CANN with an official image gets the upgrade that opens the newest stack and what it runs today."""
    driver = _host_driver(record)
    if driver is None:
        return exc
    flag, host_flag = f"--driver {driver}", f"the host's driver {driver}"
    reasons = [r.replace(flag, host_flag) for r in exc.reasons]
    alternatives = [{**a, "relaxed": [host_flag if f == flag else f for f in a.get("relaxed", [])]}
                    for a in exc.alternatives]
    prof = matrix.profile(opts["profile"])["constraints"] if opts.get("profile") else {}
    named = opts.get("card") or prof.get("card")
    family = matrix.lookup_card(named)[1] if named else None
    if family is None or opts.get("base_image") or prof.get("base_image"):
        return ResolveError(reasons[0], reasons=reasons, alternatives=alternatives)
    from provisioner.resolve.candidates import project_python

    floor = project_python()  # every image installs provision: an image below its Python floor opens nothing
    try:
        look = outlook(matrix, driver, family, floor)
    except ValueError:  # an unparsable driver version: the solver's words stand
        look = None
    if not look or look["fits"] or not look["oldest"]:
        return ResolveError(reasons[0], reasons=reasons, alternatives=alternatives)
    from provisioner.resolve.stack import summary

    chip = look["chip"]
    oldest = look["oldest"]
    what = "is older than every" if look["older"] else "runs no"
    # CANN releases whose images all have an older Python are left out: the words say so where any were.
    with_py = f" with the Python provision needs ({floor}, its Requires-Python)" if look["below"] else ""
    first = (f"the driver of {_where(record)}, {driver} ({record['driver']['file']}), {what} CANN with an official"
             f" image for chip {chip}{with_py}: the oldest, CANN {oldest['cann']}, needs HDK {oldest['needs']}")
    if look["below_floor"]:
        first += (f" (the driver runs CANN {', '.join(look['below_floor'])}, whose listed images have an older"
                  " Python)")
    out = [first]
    alts = []
    free = {k: v for k, v in opts.items() if k != "driver"}
    newest = _try(matrix, free)
    if newest is not None:
        needs = _needs(matrix, newest["cann"]["version"])
        out.append(f"to open the newest stack ({summary(newest)} on {newest['base_image']['ref']}), upgrade the"
                   f" Ascend HDK (driver and firmware) to one CANN {newest['cann']['version']} lists: {needs}")
        if newest["cann"]["version"] != oldest["cann"]:
            out.append(f"the smallest upgrade that opens an official image is to one CANN {oldest['cann']} lists:"
                       f" {oldest['needs']}")
        alts.append({**newest, "relaxed": [f"{host_flag} (after the HDK upgrade)"]})
    today = _try(matrix, {**opts, "base_image": BASE_PROBE})
    if today is not None:
        # Shown as the placeholder the hint names (the probe only stands in for a valid reference).
        today = {**today, "base_image": {**today["base_image"], "ref": BASE_PLACEHOLDER}}
        cann = today["cann"]["version"]
        none = (f"no official CANN {cann} image for chip {chip} with Python {floor} is listed" if
                cann in look["below_floor"] else f"no official CANN {cann} image for chip {chip} is listed")
        out.append(f"the newest stack driver {driver} runs today: {summary(today)}, on your own CANN {cann} base image"
                   f" (--base-image {BASE_PLACEHOLDER}) with Python {today['python']}: {none}")
        alts.append({**today, "relaxed": [f"an official base image (pass --base-image {BASE_PLACEHOLDER}: your own"
                                          f" CANN {cann} image)"]})
    else:
        out.append(f"no stack in the matrix runs on driver {driver}, not even on your own base image")
    out += [r for r in reasons if driver not in r]
    return ResolveError(out[0], reasons=out, alternatives=alts or alternatives)


def _needs(matrix, cann: str) -> str:
    from provisioner.resolve import driverfit

    row = matrix.cann(cann)
    return driverfit.needs(matrix, row)[0] if row else "no published HDK pairing"


def outlook(matrix, driver: str, family: dict, floor: str = "") -> dict:
    """How a driver stands against the CANN releases with an official image for a family's chip (with `floor`, a
    Requires-Python specifier: an image with a Python that meets it).

    Returns {chip, fits: CANN versions it runs (a fit other than "no"), oldest / newest: {cann, needs} of the
    oldest and newest CANN with an image (None without any), older: the driver is older than every HDK listed
    for the oldest, below: CANN versions whose images all have a Python below `floor`, below_floor: those of them
    the driver runs}. Raises ValueError (VersionError) for a driver version that cannot be compared.
    """
    from provisioner.resolve import driverfit
    from provisioner.resolve.candidates import floor_ok
    from provisioner.versions import V

    chip = family.get("image_chip")
    rows = []
    below = []
    if chip:
        for row in matrix.rows("cann"):
            if row["status"] != "release":
                continue
            pythons = [i["python"] for i in matrix.images(row["version"], chip) if not i["devel"]]
            if any(floor_ok(floor, p) for p in pythons):
                rows.append(row)
            elif pythons:
                below.append(row)
    rows.sort(key=lambda r: V(r["version"]).key)
    fits = [r["version"] for r in rows if driverfit.driver_fit(driver, r, matrix) != "no"]
    below_fits = [r["version"] for r in sorted(below, key=lambda r: V(r["version"]).key)
                  if driverfit.driver_fit(driver, r, matrix) != "no"]

    def needs(row):
        return {"cann": row["version"], "needs": driverfit.needs(matrix, row)[0]}

    low = driverfit.lowest(driverfit.hdk_row(matrix, rows[0])[0]) if rows else None
    return {"chip": chip, "fits": fits, "oldest": needs(rows[0]) if rows else None,
            "newest": needs(rows[-1]) if rows else None, "older": low is not None and V(driver) < low,
            "below": [r["version"] for r in below], "below_floor": below_fits}


# ----------------------------------------------------------------- OS family


def os_family(name: str | None) -> str | None:
    """'openEuler' -> 'openeuler', 'ubuntu22.04' -> 'ubuntu' (the letters an image OS name starts with)."""
    m = re.match(r"[a-z]+", (name or "").lower())
    return m.group(0) if m else None


def _prefer_host_os(matrix, opts: dict, record: dict, stack: dict) -> dict:
    """The same stack on an official image of the host's OS family, where one exists."""
    osr = record.get("_os") or {}
    fam = os_family(osr.get("id"))
    prof = matrix.profile(opts["profile"])["constraints"] if opts.get("profile") else {}
    if not fam or opts.get("os") or prof.get("os") or not stack["base_image"]["official"]:
        return stack
    shown = record["os"] or osr.get("id")
    if os_family(stack["os"]) == fam:
        _add(record, "os", stack["os"], "host", "preference", f"of the family of the host's OS ({shown})")
        return stack
    chip = stack["chip"]["image_chip"]
    images = [i for i in matrix.images(stack["cann"]["version"], chip)
              if not i["devel"] and i["python"] == stack["python"] and os_family(i["os"]) == fam]
    if not images:
        record["_os_note"] = (f"no official image of the family of the host's OS ({shown}) carries this stack; the"
                              " container OS need not match the host's")
        return stack
    same = [i["os"] for i in images if i["os"] == f"{fam}{osr.get('version_id')}"]
    order = matrix.policy.get("os_preference", [])
    pick = same[0] if same else min((i["os"] for i in images), key=lambda o: (order.index(o) if o in order else 99, o))
    other = _try(matrix, {**opts, "os": pick})
    keys = ("cann", "torch", "torch_npu", "mindspore", "python", "apex", "extras", "card", "arch")
    if other is None or any(other.get(k) != stack.get(k) for k in keys):
        record["_os_note"] = (f"the {pick} image of the family of the host's OS ({shown}) would change the stack;"
                              f" {stack['os']} is kept")
        return stack
    _add(record, "os", pick, "host", "preference",
         f"the family of the host's OS ({shown}); {stack['os']} would give the same stack")
    return other


# ------------------------------------------------------------------ record


def attach(stack: dict, record: dict) -> dict:
    """A copy of ``stack`` with ``host`` (the public record) and explanations naming what came from the host."""
    stack = dict(stack)
    if not record["found"]:  # nothing came from the host; the one-line note says so
        stack["host"] = public(record)
        return stack
    explain = dict(stack["explain"])
    for con in record["constraints"]:
        opt, value = con["option"], con["value"]
        if con["from"] == "host" and opt == "card":
            explain["card"] += f"; from the host: {con['why']}"
        elif opt == "driver":
            explain["driver"] += f" (the host's driver, {record['driver']['file']})"
        elif opt == "arch":
            explain["arch"] = f"{value}: {con['why']}"
        elif opt == "os":
            explain["os"] = f"{value}: {con['why']}"
    if record.get("_os_note"):
        explain["os"] += f"; {record['_os_note']}"
    stack["explain"] = {"host": host_line(record), **explain}
    stack["host"] = public(record)
    return stack


def public(record: dict | None) -> dict | None:
    """The record as stacks and JSON documents carry it."""
    if record is None:
        return None
    return {k: v for k, v in record.items() if not k.startswith("_")}


def host_line(record: dict) -> str:
    """One line: what was read and what it decided."""
    who = "this machine" if record["root"] == "/" else "read from --root"
    if not record["found"]:
        return f"{who}: no Ascend driver found; nothing is limited by the host"
    parts = []
    if record["driver"]:
        parts.append(f"driver {record['driver']['version']}")
    chips = record["chips"] or {}
    if chips.get("summary"):
        parts.append(f"{chips['summary']} ({', '.join(chips['families'] + chips['unknown'])})")
    if record["arch"]:
        parts.append(record["arch"])
    if record["os"]:
        parts.append(record["os"])
    took = [c["option"] for c in record["constraints"] if c["from"] == "host"]
    tail = f"; from it: {', '.join(took)}" if took else ""
    return f"{who}: {', '.join(parts)}{tail} (--for-host none builds for another machine)"
