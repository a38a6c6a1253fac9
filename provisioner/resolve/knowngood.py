"""The known-good fix of a field report, for the host the report was resolved for.

A field-report profile (matrices/profiles.yaml, kind field-report) names the known-good profile that corrects it
(`fixed_by`). The fix is resolved the way the report was: for the same host (its driver, architecture and OS
family, hostfit.py), so it never names an architecture the target does not have. Where the host's driver does not
run the fix (its CANN needs a newer HDK), the fix is the stack after the HDK upgrade, said so with the HDK it needs,
together with the stack nearest to it that the host runs today (the solver's nearest that keeps the host's driver),
if any. A fix for a chip family other than the host's is resolved for another machine of the host's architecture,
and says so.
"""

from __future__ import annotations

from provisioner.errors import ResolveError


def fix(matrix, report: str, options: dict, facts: dict | None) -> dict | None:
    """The fix of field report `report` for the request `options` (its --arch and --driver, facts of the target,
    carry over; its wishes do not) on the host of `facts` (None: no host).

    Returns None when the report names no fix or the fix resolves nowhere, else {profile, stack, host}. Without a
    host, or where the host runs the fix as it is, `stack` is the fix's stack and `host` None. Otherwise `host` is
    {why: the reason in the host's terms, runs_on: "the host" or "another machine", upgrade: {cann, hdk: the HDK
    that CANN lists, in words} of the fix (None when the driver is not what stands in the way), after_upgrade: the fix's stack after that upgrade
    (or None)}, and `stack` the stack nearest to the fix that the host runs today (with `relaxed`: the fix's
    constraints it drops; None when the host runs none), or, on another machine, the fix's stack there.
    """
    from provisioner.resolve import hostfit

    name = matrix.profile(report).get("fixed_by")
    if not name:
        return None
    opts: dict = {"profile": name, **{k: options[k] for k in ("arch", "driver") if options.get(k)}}
    try:
        stack, _ = hostfit.resolve(matrix, opts, facts)
        return {"profile": name, "stack": stack, "host": None}
    except ResolveError as exc:
        refused = exc
    if facts is None or getattr(refused, "host", None) is None:
        return None
    try:
        host_opts, record = hostfit.apply(matrix, opts, facts)
    except ResolveError:  # the fix is for another chip family (or architecture) than the host's
        return _elsewhere(matrix, name, opts, hostfit._record(facts))
    driver = host_opts.get("driver")
    if driver is None or record is None:
        return None
    # the driver the solver was held to: the host's, or the one --driver names for it
    flag = f"--driver {driver}" if opts.get("driver") else f"the host's driver {driver}"
    free = {k: v for k, v in host_opts.items() if k != "driver"}
    try:
        after = hostfit._resolve(matrix, free)
    except ResolveError:
        return None  # not the driver alone: the fix does not resolve for this host at all
    kept = {**record, "constraints": [c for c in record["constraints"] if c["option"] != "driver"]}
    after = hostfit.attach(hostfit._prefer_host_os(matrix, free, kept, after), kept)
    why = next((r for r in refused.reasons if flag in r or f"driver of {hostfit._where(record)}" in r),
               refused.reasons[0])
    # The solver's nearest stacks that keep the host's driver run there today (its own base image counts).
    nearest = next((a for a in refused.alternatives
                    if not any(flag in f or "(after the HDK upgrade)" in f for f in a.get("relaxed", []))), None)
    upgrade = {"cann": after["cann"]["version"], "hdk": hostfit._needs(matrix, after["cann"]["version"])}
    return {"profile": name, "stack": hostfit.attach(nearest, record) if nearest else None,
            "host": {"why": why, "runs_on": "the host", "upgrade": upgrade, "after_upgrade": after}}


def _elsewhere(matrix, name: str, opts: dict, record: dict) -> dict | None:
    """The fix on another machine (the host's chips are of another family): resolved for no host, with the host's
    architecture."""
    from provisioner.resolve import hostfit

    other = dict(opts)
    if record.get("arch") and not other.get("arch"):
        other["arch"] = record["arch"]
    try:
        stack = hostfit._resolve(matrix, other)
    except ResolveError:
        return None
    chips = (record.get("chips") or {}).get("summary") or "no chips it reads"
    why = f"profile {name} is for {stack['chip']['name']} ({stack['card']['id']}), and {hostfit._where(record)} has {chips}"
    return {"profile": name, "stack": stack,
            "host": {"why": why, "runs_on": "another machine", "upgrade": None, "after_upgrade": None}}
