"""Does host driver X run CANN Y: the one answer the resolver, the audit, doctor and the device planner share.

A CANN row of the matrix lists the Ascend HDK drivers it is paired with
(``hdk_paired``) and those it is compatible with (``hdk_compatible``, specs).
A release without a list inherits the nearest older release's as a floor.

- ``driver_fit`` gives the resolver's coarse answer: ok | newer | unknown | no.
- ``driver_verdict`` refines a "no" for people: unlisted (a later build of a
  listed line), too-old, or mismatch, and tells a patch build apart.
- ``label_row`` reads the HDK list an image's stack label carries, which wins
  over the local matrix when a host is checked against that image.
"""

from __future__ import annotations

from provisioner.versions import V, VersionError, any_match, is_patch_of, parse

FITS = ("ok", "newer", "unknown", "no")
VERDICTS = ("ok", "patch", "newer", "unknown", "unlisted", "too-old", "mismatch")


def hdk_row(matrix, cann_row: dict) -> tuple[dict, bool]:
    """The row whose HDK lists apply: this release's, or else the nearest older
    release's (a later CANN never runs on an older driver than its predecessor).
    Returns (row, inherited)."""
    if cann_row.get("hdk_paired") or cann_row.get("hdk_compatible"):
        return cann_row, False
    me = parse(cann_row["version"])
    older = [r for r in matrix.rows("cann") if r["status"] == "release" and parse(r["version"]) < me
             and (r.get("hdk_paired") or r.get("hdk_compatible"))]
    if not older:
        return cann_row, False
    return max(older, key=lambda r: parse(r["version"]).key), True


def driver_fit(driver: str, cann_row: dict, matrix=None) -> str:
    """ok | newer (than every listed HDK) | unknown (none published) | no.

    With `matrix`, a row without a list is judged by the inherited floor: a
    driver below it is "no", anything else "unknown".
    """
    if matrix is not None:
        row, inherited = hdk_row(matrix, cann_row)
        if inherited:
            return "no" if driver_fit(driver, row) == "no" else "unknown"
    listed = list(cann_row.get("hdk_paired", [])) + list(cann_row.get("hdk_compatible", []))
    if not listed:
        return "unknown"
    d = parse(driver)
    exact = [parse(p) for p in cann_row.get("hdk_paired", [])]
    exact += [parse(c) for c in cann_row.get("hdk_compatible", []) if _is_plain(c)]
    if any(d == e or is_patch_of(d, e) for e in exact) or any_match(cann_row.get("hdk_compatible"), driver):
        return "ok"  # a patch build (25.0.rc1.1) fits wherever its release (25.0.RC1) is listed
    tops = []
    for item in listed:
        text = item.split("..")[-1].rstrip("*").rstrip(".").lstrip("<>=")
        try:
            tops.append(parse(text))
        except VersionError:
            continue
    if tops and all(d.release[:2] > t.release[:2] or (d.release[:2] == t.release[:2] and d > t) for t in tops):
        return "newer"
    return "no"


def _is_plain(spec: str) -> bool:
    """A spec that is one exact version (no wildcard, range or operator)."""
    return "*" not in spec and ".." not in spec and not any(op in spec for op in "<>=,")


def hdk_summary(cann_row: dict) -> str:
    """The HDK list of a row in words: '24.1.rc3 (paired); also 24.1.*'."""
    paired = cann_row.get("hdk_paired", [])
    compat = [c for c in cann_row.get("hdk_compatible", []) if c not in paired]
    if not paired and not compat:
        return "no published HDK pairing"
    parts = []
    if paired:
        parts.append(f"{' or '.join(paired)} (paired)")
    if compat:
        parts.append(", ".join(compat))
    return "; also ".join(parts)


def needs(matrix, cann_row: dict) -> tuple[str, dict, bool]:
    """(what the row needs in words, the row the list comes from, inherited)."""
    src, inherited = hdk_row(matrix, cann_row) if matrix is not None else (cann_row, False)
    return hdk_summary(src), src, inherited


def _exact_listed(row: dict) -> list[V]:
    out = []
    for item in [*row.get("hdk_paired", []), *row.get("hdk_compatible", [])]:
        if any(ch in item for ch in "*<>=") or ".." in item:
            continue
        try:
            out.append(V(item))
        except VersionError:
            continue
    return out


def lowest(row: dict) -> V | None:
    """The lowest HDK version a row lists (a range's or wildcard's floor), None when none parses."""
    lows = []
    for item in [*row.get("hdk_paired", []), *row.get("hdk_compatible", [])]:
        text = item.split("..")[0].rstrip("*").rstrip(".").lstrip("<>=")
        try:
            lows.append(V(text))
        except VersionError:
            continue
    return min(lows) if lows else None


def driver_verdict(driver: str, cann_row: dict, matrix=None) -> tuple[str, str]:
    """How a host driver fits a CANN row: (verdict, detail), verdict one of VERDICTS.

    ok | patch (a patch build of a listed HDK) | newer | unknown |
    unlisted (same release line as a listed HDK, later build) | too-old | mismatch.
    Raises VersionError when `driver` is not a version.
    """
    fit = driver_fit(driver, cann_row, matrix)
    row = hdk_row(matrix, cann_row)[0] if matrix is not None else cann_row
    d = V(driver)
    listed = _exact_listed(row)
    if fit == "ok":
        base = next((lv for lv in listed if is_patch_of(d, lv)), None)
        return ("patch", f"a patch build of the listed {base}") if base and d not in listed else ("ok", "")
    if fit != "no":
        return fit, ""
    same_line = [lv for lv in listed if lv.release[:2] == d.release[:2] and d > lv]
    if same_line:
        return "unlisted", f"a later build of the {d.release[0]}.{d.release[1]} line ({max(same_line)} is listed)"
    low = lowest(row)
    if low is not None and d < low:
        return "too-old", f"older than every listed HDK (lowest {low})"
    return "mismatch", "between the listed HDK versions"


def _label_lists(label_driver: dict) -> tuple[list[str], list[str]] | str:
    """(paired, compatible) of a stack label's driver part, or why they cannot be used (one line)."""
    from provisioner.versions import Spec

    out: list[list[str]] = []
    for key, check in (("paired", V), ("compatible", Spec)):
        items = label_driver.get(key) or []
        if not isinstance(items, list):
            return f"driver.{key} is not a list ({type(items).__name__})"
        for item in items:
            try:
                check(item)
            except VersionError:
                shown = repr(item) if len(repr(item)) <= 40 else repr(item)[:37] + "..."
                return f"driver.{key} holds {shown}, not a version{' spec' if key == 'compatible' else ''}"
        out.append(list(items))
    return out[0], out[1]


def label_row(cann: str, label_driver: dict | None, notes: list[str] | None = None) -> dict | None:
    """A CANN row built from the HDK list an image's stack label carries (None when it carries none).

    The label holds the list the image was built against; checking a host
    against the image trusts it over this machine's matrix (pass matrix=None).
    Lists that do not parse are not used: None, and why goes to `notes`.
    """
    label_driver = label_driver if isinstance(label_driver, dict) else {}
    if not (label_driver.get("paired") or label_driver.get("compatible")):
        return None
    lists = _label_lists(label_driver)
    if isinstance(lists, str):
        if notes is not None:
            notes.append(f"the image's stack label: {lists}; its HDK list is not used")
        return None
    return {"version": cann, "status": "release", "hdk_paired": lists[0], "hdk_compatible": lists[1]}


def stack_row(matrix, stack: dict, notes: list[str] | None = None) -> tuple[dict | None, object]:
    """(CANN row, matrix to pass on) for judging a host against an image's Stack.

    The HDK list the stack carries wins (matrix None: nothing to inherit); else
    this matrix's row for the stack's CANN, or (None, matrix) when it has none.
    A list that does not parse counts as none (why goes to `notes`).
    """
    cann = (stack.get("cann") or {}).get("version")
    if not cann:
        return None, matrix
    row = label_row(cann, stack.get("driver"), notes)
    if row is not None:
        return row, None
    return matrix.cann(cann), matrix
