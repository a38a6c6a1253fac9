"""Why no stack fits: each constraint that cannot be met alone, each pair that cannot go together,
in the matrix's own words (the reasons of a ResolveError). Where provision's own Python floor (its
Requires-Python, which every image it builds must meet) is what stands in the way, the reason says so.
"""

from __future__ import annotations

import itertools

from provisioner.resolve.candidates import Constraint, Context, apex_row, bundles_for, same, same_torch
from provisioner.resolve.driverfit import driver_fit, hdk_row, hdk_summary
from provisioner.versions import parse, sort_versions, span

TYPE_CHECKING = False
if TYPE_CHECKING:
    from provisioner.shapes import Candidate

_DIM_LABEL = {"cann": "CANN", "torch": "torch", "torch_npu": "torch_npu", "python": "Python", "os": "OS",
              "mindspore": "MindSpore", "dtype": "dtype"}


def _values(cands: list[Candidate], dim: str) -> list[str]:
    vals = {str(v) for c in cands if (v := c.get(dim))}
    if dim in ("os",):
        return sorted(vals)
    return sort_versions(vals)


def floor_words(ctx: Context) -> str:
    """provision's Python floor in words, for a refusal."""
    return (f"provision itself, which every image it builds installs, needs Python {ctx.floor} (its"
            " Requires-Python)")


def _below_floor(ctx: Context, cann_rows: list[dict]) -> tuple[list[str], list[str]] | None:
    """(CANN versions, their listed images' Pythons) when those CANN releases have listed images for the chip but
    none with a Python provision installs on; None when one has, or the base image is the user's."""
    if ctx.req.base_image or not ctx.floor or not ctx.chip:
        return None
    have: set[str] = set()
    canns = []
    for row in cann_rows:
        pys = {i["python"] for i in ctx.m.images(row["version"], ctx.chip) if not i["devel"]}
        if any(ctx.floor_ok(p) for p in pys):
            return None
        if pys:
            have |= pys
            canns.append(row["version"])
    return (canns, sort_versions(have)) if canns else None


def _floor_way(ctx: Context, canns: list[str], have: list[str]) -> str:
    """The listed images of `canns` offer Python `have`, below the floor: that, and the ways forward."""
    chip = ctx.chip or ctx.family["id"]
    fits = sort_versions({c["cann"] for c in ctx.base()})
    return (f"the listed CANN {' and '.join(canns)} images for chip {chip} offer Python {', '.join(have)} only, and"
            f" {floor_words(ctx)}: pass --base-image with a CANN {' or '.join(canns)} image that has such a Python,"
            f" or use a newer CANN (listed images with such a Python: CANN {span(fits)})")


def _alone_reason(ctx: Context, con: Constraint) -> str:
    """Why a single constraint cannot be met on this card, in the matrix's words."""
    m, req, fam = ctx.m, ctx.req, ctx.family
    base = ctx.base()
    chip = ctx.chip or fam["id"]
    if con.name == "dtype":
        return (f"{fam['name']} has no bf16 ({fam.get('bf16_note') or 'not supported'});"
                " use --dtype fp16 (with dynamic loss scaling) or an A2/A3 card")
    if con.name == "torch_npu" and (want := req.torch_npu):
        row = m.torch_npu(want)
        prefix = ".".join(str(x) for x in parse(want).release[:3])
        same_line = [r for r in m.rows("torch_npu") if r.get("cann") and r["torch"] == prefix]
        pypi = [r["wheel"] for r in same_line if r["on_pypi"]]
        hint = f"; torch {prefix} builds on PyPI: {', '.join(sort_versions(pypi))}" if pypi else ""
        if row is None:
            return f"torch_npu {req.torch_npu} is neither on PyPI nor in the official compatibility table{hint}"
        if not row.get("cann"):
            why = f" ({row['notes']})" if row.get("notes") else ""
            return f"torch_npu {req.torch_npu} is on PyPI but has no published CANN pairing{why}{hint}"
        if not row["on_pypi"]:
            return (f"torch_npu {req.torch_npu} (released with CANN {row['cann']}) is not on PyPI: it exists only as a"
                    f" release asset of Ascend/pytorch on gitee/gitcode, so pip cannot install it{hint or '; no build of torch ' + prefix + ' is on PyPI'}"
                    " (if you mirror it into your own index, an overlay row with on_pypi: true makes it usable)")
        if (cann_row := m.cann(row["cann"])) and (low := _below_floor(ctx, [cann_row])) is not None:
            return f"torch_npu {req.torch_npu} (released with CANN {row['cann']}): " + _floor_way(ctx, *low)
        return (f"torch_npu {req.torch_npu} (released with CANN {row['cann']}) has no listed base image for chip {chip}"
                " with a Python it supports (pass --base-image to use an image you know)")
    if con.name == "cann":
        row = m.cann(req.cann)
        if row is None:
            known = [r["version"] for r in m.rows("cann") if r["status"] == "release"]
            return f"CANN {req.cann} is not in the matrix (releases: {span(known)})"
        imgs = [i for i in m.images(row["version"], ctx.chip) if not i["devel"]] if ctx.chip else []
        if not req.base_image and not imgs:
            chips = sorted({c for i in m.images(row["version"]) if (c := i["chip"])})
            return (f"no CANN {row['version']} base image for chip {chip} is listed"
                    f" (listed CANN {row['version']} images: {', '.join(chips) or 'none'}); the list holds today's"
                    " official tags and earlier ones seen published, so one may still exist:"
                    " pass --base-image to use an image you know")
        if (low := _below_floor(ctx, [row])) is not None:
            return f"--cann {req.cann}: " + _floor_way(ctx, *low)
        return f"no torch_npu/MindSpore build in the matrix works with CANN {row['version']} on chip {chip}"
    if con.name == "torch" and (want := req.torch):
        wheels = [r for r in m.rows("torch_npu") if r.get("cann") and same_torch(want, r["torch"])]
        if not wheels:
            lines = sort_versions({r["torch"] for r in m.rows("torch_npu") if r.get("cann")})
            return f"torch {req.torch} has no torch_npu build with a published CANN pairing (torch lines: {', '.join(lines)})"
        pypi = [r for r in wheels if r["on_pypi"]]
        if not pypi:
            return (f"no torch_npu build for torch {req.torch} is on PyPI ({span(r['wheel'] for r in wheels)} exist only"
                    " as release assets of Ascend/pytorch on gitee/gitcode)")
        return (f"torch {req.torch}'s torch_npu builds on PyPI ({span(r['wheel'] for r in pypi)}) need CANN"
                f" {span(r['cann'] for r in pypi)}, none of which has an official image for chip {chip}")
    if con.name == "mindspore":
        known = [r["version"] for r in m.rows("mindspore")]
        if not any(same(k, req.mindspore) for k in known):
            return f"MindSpore {req.mindspore} is not in the matrix (known: {', '.join(known)})"
        row = next(r for r in m.rows("mindspore") if same(r["version"], req.mindspore))
        msg = f"MindSpore {req.mindspore} pairs with CANN {row['cann']}"
        if row.get("hdk"):
            msg += f" (HDK {', '.join(row['hdk'])})"
        if req.cann and not same(req.cann, row["cann"]):
            fits = [r["version"] for r in m.rows("mindspore") if same(r["cann"], req.cann)]
            msg += f", not with the requested CANN {req.cann}"
            if fits:
                msg += f" (which pairs with MindSpore {', '.join(fits)})"
        return msg + (f"; no CANN {row['cann']} base image for chip {chip} is listed"
                      " (one may still exist: pass --base-image to use an image you know)")
    if con.name == "python":
        if req.python and not ctx.floor_ok(req.python):
            return (f"--python {req.python} is below the Python provision runs on: {floor_words(ctx)}"
                    f" (available: {', '.join(_values(base, 'python'))})")
        return f"no stack for chip {chip} offers Python {req.python} (available: {', '.join(_values(base, 'python'))})"
    if con.name == "os":
        return f"no listed image for chip {chip} runs {req.os} (available: {', '.join(_values(base, 'os'))})"
    if con.name == "driver" and (driver := req.driver):
        runs = [r for r in ctx.cann_rows() if driver_fit(driver, r, m) != "no"]
        if runs and (low := _below_floor(ctx, runs)) is not None:
            return (f"driver {req.driver} runs CANN {', '.join(low[0])} (of those with an official image), and "
                    + _floor_way(ctx, *low) + ", which needs an Ascend HDK upgrade")
        fits = [r["version"] for r in ctx.cann_rows() if driver_fit(driver, r, m) == "ok"]
        where = f"it is paired with or listed for CANN {', '.join(fits)}" if fits else "no CANN release lists it"
        return f"driver {req.driver} is too old for every CANN with an official image for chip {chip}; {where}"
    if con.name == "apex":
        apex = apex_row(ctx)
        return f"Ascend Apex needs Python {apex['python']} ({apex.get('python_note', '')}), and no stack for chip {chip} offers it"
    if con.name == "mindformers":
        pairs = ", ".join(f"{r['version']} with MindSpore {r['mindspore']}" for r in m.rows("mindformers"))
        return f"no MindSpore Transformers release in the matrix pairs with a MindSpore stack for chip {chip} ({pairs})"
    if con.name == "mindspeed-llm":
        fams = sorted({f for b in m.rows("llm_bundles") for f in b.get("families", [])})
        if fams and fam["id"] not in fams:
            return f"MindSpeed-LLM does not support {fam['name']} (supported families: {', '.join(fams)})"
        if req.pins:
            return f"no MindSpeed-LLM/RL release set in the matrix uses the pinned refs {dict(req.pins)}"
        return f"no MindSpeed-LLM release set fits any stack for chip {chip}"
    return f"{con.flag} cannot be met on {ctx.card['id']}"


def _describe(ctx: Context, con: Constraint, cands: list[Candidate], dim: str) -> str | None:
    vals = _values(cands, dim)
    label = _DIM_LABEL.get(dim, dim)
    cann_row = ctx.m.cann(ctx.req.cann)
    if con.name == dim:
        if con.name == "cann" and cann_row:
            return f"CANN {cann_row['version']} needs HDK {hdk_summary(hdk_row(ctx.m, cann_row)[0])}"
        return None  # "--python 3.11 works with Python 3.11" says nothing
    if con.name == "apex":
        apex = apex_row(ctx)
        return f"Ascend Apex builds only for Python {apex['python']} ({apex.get('python_note', '')})"
    if con.name == "driver" and dim == "cann" and (driver := ctx.req.driver):
        fits = [v for v in vals if (row := ctx.m.cann(v)) and driver_fit(driver, row, ctx.m) == "ok"]
        return f"driver {ctx.req.driver} fits CANN {span(fits or vals)}"
    if con.name == "cann" and dim != "cann" and cann_row:
        if dim in ("torch", "torch_npu", "mindspore", "python", "os"):
            return f"CANN {cann_row['version']} works with {label} {span(vals)}"
    if con.name == "torch" and dim == "cann":
        wheels = {c["torch_npu"]: c["wheel"]["cann"] for c in cands
                  if c["wheel"].get("in_table", True) and c["wheel"]["on_pypi"]}
        released = ", ".join(f"{w} with {c}" for w, c in sorted(wheels.items(), key=lambda i: parse(i[0]).key))
        return f"torch {ctx.req.torch} works with CANN {span(vals)} (torch_npu released: {released})"
    if con.name == "mindspeed-llm":
        bundles = sorted({b["id"] for c in cands for b in bundles_for(ctx, c)})
        return f"{con.flag} ({', '.join(bundles)}) works with {label} {span(vals)}"
    return f"{con.flag} works with {label} {span(vals)}"


def _images_lack_python(ctx: Context, other: Constraint, canns: list[str], have: list[str], need: str, fit_flag: str,
                        fits: list[str], choose: str = "CANN") -> str:
    """The listed base images of `other`'s stacks (e.g. the official images of one CANN) offer Python `have`, not
    `need`: that, and the ways forward - a base image of that CANN with `need`, or another CANN (or `choose`),
    naming each CANN whose listed images fit `fit_flag` (a list, not a range: a range hides the gaps)."""
    chip = ctx.chip or ctx.family["id"]
    where = (f"the listed CANN {canns[0]} images for chip {chip}" if other.name == "cann" and len(canns) == 1
             else f"the listed base images for chip {chip} with {other.flag}")
    also = "" if ctx.req.python == need else f" (and --python {need})"
    return (f"{where} offer Python {', '.join(have)} only; pass --base-image with a CANN {' or '.join(canns)} image"
            f" that has Python {need}{also}, or choose another {choose} (the listed images fit {fit_flag} with CANN"
            f" {', '.join(fits)})")


def _python_between(ctx: Context, other: Constraint, cands: list[Candidate], ms_cands: list[Candidate]) -> str | None:
    """Why `other` and --with mindspeed-llm cannot go together when only the base images' Python stands between
    them: a set fits `other`'s stacks but for their Python (e.g. the official images of a CANN ship one Python the
    set was not released for). None when something else (torch, CANN, family) is in the way."""
    blocked = [(c, bs) for c in cands if (bs := bundles_for(ctx, c, python=False))]
    if not blocked:
        return None
    sets = {b["id"]: b for _, bs in blocked for b in bs}
    envs = ctx.m.rows("framework_envs") if "framework_envs" in ctx.m.data else []
    locked = sort_versions({str(e["python"]) for e in envs if e["set"] in sets})
    # The Python an image of the set can have: the one its environments are locked for, else its declared range.
    need = locked or sort_versions({str(b["python"]).split("-")[-1] for b in sets.values()})
    have = sort_versions({c["python"] for c, _ in blocked})
    canns = sort_versions({c["cann"] for c, _ in blocked})
    names = ", ".join(sorted(sets, key=lambda s: parse(sets[s].get("release") or "0").key))
    fits = sort_versions({c["cann"] for c in ms_cands})
    return (f"{names} {'needs' if len(sets) == 1 else 'need'} Python {' or '.join(need)}, and "
            + _images_lack_python(ctx, other, canns, have, need[-1], "--with mindspeed-llm", fits, "CANN or set"))


def _cann_without_python(ctx: Context, cann: Constraint, py_cands: list[Candidate]) -> str | None:
    """--cann C with --python P when C's listed images for the chip have no Python P: the images' Python is the
    conflict, not a CANN range (P's CANN span may well contain C). None when they have P (the wheels are in the way)
    or the base image is the user's."""
    row = ctx.m.cann(ctx.req.cann)
    want = ctx.req.python
    if row is None or not want or ctx.req.base_image:
        return None
    have = sort_versions({i["python"] for i in ctx.images(row)})
    if not have or want in have:
        return None
    return _images_lack_python(ctx, cann, [row["version"]], have, want, f"--python {want}",
                               _values(py_cands, "cann"))


def explain_failure(ctx: Context, cons: list[Constraint], masks: dict[str, list[bool]]) -> list[str]:
    """The reasons no candidate survives `cons` (masks: constraint name -> which candidates pass it)."""
    base = ctx.base()
    reasons: list[str] = []
    if not base:
        if not ctx.chip and not ctx.req.base_image:
            return [f"no official CANN base image is built for {ctx.family['name']} (chip tags: 910b, a3, 910, 310p, 950);"
                    " pass --base-image to use your own"]
        return [f"the matrix has no complete stack for {ctx.family['name']}"]
    alone_bad = {c.name for c in cons if not any(masks[c.name])}
    for c in cons:
        if c.name in alone_bad:
            reasons.append(_alone_reason(ctx, c))
    good = [c for c in cons if c.name not in alone_bad]
    for a, b in itertools.combinations(good, 2):
        both = [x and y for x, y in zip(masks[a.name], masks[b.name], strict=True)]
        if any(both):
            continue
        only_a = [c for c, ok in zip(base, masks[a.name], strict=True) if ok]
        only_b = [c for c, ok in zip(base, masks[b.name], strict=True) if ok]
        if "mindspeed-llm" in (a.name, b.name) and "python" not in (a.name, b.name):
            other, cands, ms_cands = (b, only_b, only_a) if a.name == "mindspeed-llm" else (a, only_a, only_b)
            if (why := _python_between(ctx, other, cands, ms_cands)) is not None:
                reasons.append(f"{a.flag} conflicts with {b.flag} on Python: {why}")
                continue
        if {a.name, b.name} == {"cann", "python"}:
            cann, py_cands = (a, only_b) if a.name == "cann" else (b, only_a)
            if (why := _cann_without_python(ctx, cann, py_cands)) is not None:
                reasons.append(f"{a.flag} conflicts with {b.flag}: {why}")
                continue
        parts = [p for p in (_describe(ctx, a, only_a, b.dim), _describe(ctx, b, only_b, a.dim)) if p]
        reasons.append(f"{a.flag} conflicts with {b.flag}: {'; '.join(parts)}")
    if not reasons and good:
        reasons.append("no stack satisfies " + ", ".join(c.flag for c in good) + " together")
    return reasons
