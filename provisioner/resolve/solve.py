"""Constraints -> one consistent Stack, or a refusal with the real reasons.

Every complete combination the matrix allows for the card's chip is a
*candidate* (torch_npu wheel x CANN x official base image, or MindSpore x CANN
x image). Each user constraint is a predicate on candidates. The best
surviving candidate (fewest soft problems, then newest) becomes the Stack.

When nothing survives, the constraints are examined one by one and in pairs to
say which of them cannot be met or cannot go together, and the smallest sets
of constraints whose removal gives a stack are offered as alternatives.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache

from provisioner.errors import ResolveError
from provisioner.matrix.versions import PyRange, Spec, VersionError, is_patch_of, parse, sort_versions, span
from provisioner.resolve.request import Request

MAX_ALTERNATIVES = 3


_v = parse


@lru_cache(maxsize=512)
def _pyr(text: str) -> PyRange:
    return PyRange(text)


@lru_cache(maxsize=1024)
def _spec(text: str) -> Spec:
    return Spec(text)


def _in_specs(specs, version: str) -> bool:
    return any(_spec(s).matches(_v(version)) for s in specs or ())


def _same(a: str | None, b: str | None) -> bool:
    return a is not None and b is not None and _v(a) == _v(b)


def _same_torch(requested: str, torch: str) -> bool:
    """`--torch 2.1` means any 2.1.x; `--torch 2.5.1+cpu` means 2.5.1."""
    want = _v(requested).public()
    have = _v(torch)
    if len(want.release) < 3 and not want.chain:
        return have.release[: len(want.release)] == want.release
    return have == want


@dataclass
class Constraint:
    name: str
    flag: str
    test: Callable[[dict], bool]
    dim: str  # the candidate field this constraint mostly speaks about


# --------------------------------------------------------------- candidates


class Context:
    """Card, family and the matrix, plus the chip's candidate list (built once)."""

    def __init__(self, matrix, req: Request, card: dict, family: dict):
        self.m = matrix
        self.req = req
        self.card = card
        self.family = family
        self.chip = family.get("image_chip")
        pref = matrix.policy.get("python_preference", [])
        self.py_rank = {p: i for i, p in enumerate(pref)}
        self.os_rank = {o: i for i, o in enumerate(matrix.policy.get("os_preference", []))}
        self._base: list[dict] | None = None
        self._sets: dict[tuple, list[str]] = {}

    # CANN rows a stack may use: releases, plus a pre-release named exactly.
    def cann_rows(self) -> list[dict]:
        rows = []
        for row in self.m.rows("cann"):
            if row["status"] == "release" or (self.req.cann and self.m.cann(self.req.cann) is row):
                rows.append(row)
        return rows

    def images(self, cann_row: dict) -> list[dict]:
        if self.req.base_image:
            # A custom base: its OS and Python are the user's business; offer
            # every Python the preference list knows, the ranges below decide.
            return [
                {"tag": None, "chip": self.chip, "os": "custom", "python": p, "devel": False, "source": []}
                for p in self.py_rank
            ]
        if not self.chip:
            return []
        return [i for i in self.m.images(cann_row["version"], self.chip) if not i["devel"]]

    def no_package_set(self, field: str, version: str, python: str) -> list[str]:
        """A soft problem when no package set (matrices/packages.yaml) covers the framework on this
        Python: such a stack resolves, but its image cannot be rendered without an overlay."""
        key = (field, version, python)
        if key not in self._sets:
            rows = self.m.rows("packages") if "packages" in self.m.data else []
            hits = [r for r in rows if r.get(field) and _in_specs(r[field], version)]
            label = "MindSpore" if field == "mindspore" else "torch"
            self._sets[key] = [] if any(python in _pyr(r["python"]) for r in hits) else [
                f"no package set in matrices/packages.yaml covers {label} {version} on Python {python};"
                " the image needs one (an overlay set; scripts/lock_packages.py resolves it)"]
        return self._sets[key]

    def base(self) -> list[dict]:
        if self._base is None:
            framework = self.req.framework or "pytorch"
            self._base = list(_mindspore(self) if framework == "mindspore" else _pytorch(self))
        return self._base


def _python_ok(py: str, *ranges: str | None) -> bool:
    return all(r is None or py in _pyr(r) for r in ranges)


def _pytorch(ctx: Context):
    m = ctx.m
    canns = [(c, ctx.images(c), [_v(a) for a in [c["version"], *c.get("aliases", [])]]) for c in ctx.cann_rows()]
    for wheel in m.rows("torch_npu"):
        if not wheel.get("cann") or not wheel["on_pypi"]:
            continue  # no published CANN pairing, or pip cannot fetch it: never part of a stack
        release = m.release(wheel.get("product"))
        compat = (release or {}).get("cann_compatible", [])
        # published wheels per CPU architecture where they differ, else the row's range
        wheel_py = (wheel.get("wheels") or {}).get(ctx.req.arch) or wheel.get("python") or m.torch_python(wheel["torch"])
        wheel_cann = _v(wheel["cann"])
        for cann, images, names in canns:
            if not images:
                continue
            paired = wheel_cann in names
            if not paired and not _in_specs(compat, cann["version"]):
                continue
            for img in images:
                if not _python_ok(img["python"], wheel_py, cann.get("python")):
                    continue
                soft = []
                if not paired:
                    soft.append(
                        f"CANN {cann['version']} is in TorchNPU {wheel.get('product')}'s compatible range;"
                        f" torch_npu {wheel['wheel']} is released with CANN {wheel['cann']}"
                    )
                if wheel.get("pairing") == "unconfirmed":
                    soft.append(f"torch_npu {wheel['wheel']}: its CANN {wheel['cann']} pairing is unconfirmed"
                                " (drafted from index metadata; no source pairs it yet)")
                elif wheel.get("cann_inferred") or wheel.get("pairing") == "derived":
                    soft.append(f"torch_npu {wheel['wheel']}: {wheel.get('notes', 'patch build')}")
                elif not wheel.get("in_table", True):
                    soft.append(f"torch_npu {wheel['wheel']} is in no official compatibility table")
                if not cann.get("hdk_paired") and not cann.get("hdk_compatible"):
                    soft.append(f"no HDK driver pairing is published for CANN {cann['version']}")
                soft += ctx.no_package_set("torch", wheel["torch"], img["python"])
                yield {
                    "framework": "pytorch",
                    "wheel": wheel,
                    "torch": wheel["torch"],
                    "torch_npu": wheel["wheel"],
                    "cann": cann["version"],
                    "cann_row": cann,
                    "paired": paired,
                    "image": img,
                    "python": img["python"],
                    "os": img["os"],
                    "soft": soft,
                    "unlisted": _unlisted(img),
                }


def _unlisted(img: dict) -> list[str]:
    """A base image that is not in today's official list: usable, with a warning.
    It ranks after a listed image of the same torch / torch_npu (see `score`), not
    after an older torch: an image published after the recorded list is as real."""
    if img.get("listed", True):
        return []
    return [f"base image {img['tag']} is not in today's cann-container-image list"
            f" ({img.get('evidence') or 'seen elsewhere'}); if it no longer pulls, pass --base-image"]


def _mindspore(ctx: Context):
    for ms in ctx.m.rows("mindspore"):
        cann = ctx.m.cann(ms["cann"])
        if cann is None or cann not in ctx.cann_rows():
            continue
        for img in ctx.images(cann):
            if not _python_ok(img["python"], ms.get("python"), cann.get("python")):
                continue
            soft = []
            if not ms["on_pypi"]:
                soft.append(f"MindSpore {ms['version']} is not on PyPI; install it from the MindSpore release downloads")
            if not ms.get("python"):
                soft.append(f"MindSpore {ms['version']}'s Python range is not confirmed")
            soft += ctx.no_package_set("mindspore", ms["version"], img["python"])
            if ms.get("pairing") in ("unconfirmed", "derived"):
                soft.append(f"MindSpore {ms['version']}: CANN {ms['cann']} pairing is {ms['pairing']}"
                            f" ({ms.get('notes') or 'no source pairs it'})")

            yield {
                "framework": "mindspore",
                "mindspore_row": ms,
                "mindspore": ms["version"],
                "torch": None,
                "torch_npu": None,
                "cann": cann["version"],
                "cann_row": cann,
                "paired": True,
                "image": img,
                "python": img["python"],
                "os": img["os"],
                "soft": soft,
                "unlisted": _unlisted(img),
            }


# ------------------------------------------------------------------ drivers


def hdk_row(matrix, cann_row: dict) -> tuple[dict, bool]:
    """The row whose HDK lists apply: this release's, or else the nearest older
    release's (a later CANN never runs on an older driver than its predecessor).
    Returns (row, inherited)."""
    if cann_row.get("hdk_paired") or cann_row.get("hdk_compatible"):
        return cann_row, False
    me = _v(cann_row["version"])
    older = [r for r in matrix.rows("cann") if r["status"] == "release" and _v(r["version"]) < me
             and (r.get("hdk_paired") or r.get("hdk_compatible"))]
    if not older:
        return cann_row, False
    return max(older, key=lambda r: _v(r["version"]).key), True


def driver_fit(driver: str, cann_row: dict, matrix=None) -> str:
    """ok | newer (than every listed HDK) | unknown (none published) | no."""
    if matrix is not None:
        row, inherited = hdk_row(matrix, cann_row)
        if inherited:
            return "no" if driver_fit(driver, row) == "no" else "unknown"
    listed = list(cann_row.get("hdk_paired", [])) + list(cann_row.get("hdk_compatible", []))
    if not listed:
        return "unknown"
    d = _v(driver)
    exact = [_v(p) for p in cann_row.get("hdk_paired", [])]
    exact += [_v(c) for c in cann_row.get("hdk_compatible", []) if _is_plain(c)]
    if any(d == e or is_patch_of(d, e) for e in exact) or _in_specs(cann_row.get("hdk_compatible"), driver):
        return "ok"  # a patch build (25.0.rc1.1) fits wherever its release (25.0.RC1) is listed
    tops = []
    for item in listed:
        text = item.split("..")[-1].rstrip("*").rstrip(".").lstrip("<>=")
        try:
            tops.append(_v(text))
        except VersionError:
            continue
    if tops and all(d.release[:2] > t.release[:2] or (d.release[:2] == t.release[:2] and d > t) for t in tops):
        return "newer"
    return "no"


def _is_plain(spec: str) -> bool:
    """A spec that is one exact version (no wildcard, range or operator)."""
    return "*" not in spec and ".." not in spec and not any(op in spec for op in "<>=,")


def hdk_summary(cann_row: dict) -> str:
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


# -------------------------------------------------------------- constraints


def _bundles_for(ctx: Context, cand: dict) -> list[dict]:
    pins = dict(ctx.req.pins)
    out = []
    for b in ctx.m.rows("llm_bundles"):
        if b.get("families") and ctx.family["id"] not in b["families"]:
            continue
        if not any(_same_torch(t, cand["torch"]) for t in b["torch"]):
            continue
        canns = b.get("cann", [])
        if not (any(_same(c, cand["cann"]) for c in canns) or _in_specs(b.get("cann_compatible"), cand["cann"])):
            continue
        if cand["python"] not in _pyr(b["python"]):
            continue
        refs = {
            "mindspeed": b["mindspeed_ref"],
            "megatron": b["megatron_ref"],
            "mindspeed_llm": b["mindspeed_llm_ref"],
            "mindspeed_rl": b.get("mindspeed_rl_ref"),
        }
        if any(str(refs.get(k)) != str(v) for k, v in pins.items()):
            continue
        out.append(b)
    return out


def _apex_row(ctx: Context) -> dict:
    return ctx.m.rows("apex")[0]


def _extra_row(ctx: Context, name: str) -> dict | None:
    return next((r for r in ctx.m.rows("extras") if r["name"] == name), None)


def build_constraints(ctx: Context) -> list[Constraint]:
    req = ctx.req
    out: list[Constraint] = []
    if req.cann:
        out.append(Constraint("cann", f"--cann {req.cann}", lambda c: _same(c["cann"], req.cann)
                              or any(_same(a, req.cann) for a in c["cann_row"].get("aliases", [])), "cann"))
    if req.torch:
        out.append(Constraint("torch", f"--torch {req.torch}", lambda c: c["torch"] is not None
                              and _same_torch(req.torch, c["torch"]), "torch"))
    if req.torch_npu:
        out.append(Constraint("torch_npu", f"--torch-npu {req.torch_npu}",
                              lambda c: _same(c["torch_npu"], req.torch_npu), "torch_npu"))
    if req.mindspore:
        out.append(Constraint("mindspore", f"--mindspore {req.mindspore}",
                              lambda c: _same(c.get("mindspore"), req.mindspore), "mindspore"))
    if req.python:
        want = _v(req.python).minor()
        out.append(Constraint("python", f"--python {req.python}", lambda c: _v(c["python"]).minor() == want, "python"))
    if req.os:
        out.append(Constraint("os", f"--os {req.os}", lambda c: c["os"].lower() == req.os.lower(), "os"))
    if req.driver:
        out.append(Constraint("driver", f"--driver {req.driver}",
                              lambda c: driver_fit(req.driver, c["cann_row"], ctx.m) != "no", "cann"))
    if req.dtype:
        ok = req.dtype != "bf16" or ctx.family["bf16"]
        out.append(Constraint("dtype", f"--dtype {req.dtype}", lambda c, ok=ok: ok, "dtype"))
    for extra in req.extras:
        if extra == "apex":
            apex = _apex_row(ctx)
            out.append(Constraint("apex", "--with apex", lambda c, r=apex["python"]: c["python"] in _pyr(r), "python"))
        elif extra == "mindspeed-llm":
            label = "--with mindspeed-llm" + (" (pinned refs)" if req.pins else "")
            out.append(Constraint("mindspeed-llm", label, lambda c: bool(_bundles_for(ctx, c)), "torch"))
        elif extra == "deepspeed":
            row = _extra_row(ctx, "deepspeed")
            out.append(Constraint("deepspeed", "--with deepspeed",
                                  lambda c, r=row: _python_ok(c["python"], r.get("python"))
                                  and (not r.get("torch") or _in_specs(r["torch"], c["torch"])), "python"))
    return out


# ------------------------------------------------------------------ ranking


def penalties(ctx: Context, cand: dict) -> list[str]:
    soft = list(cand["soft"])
    req = ctx.req
    if "apex" in req.extras and cand["torch"]:
        confirmed = _apex_row(ctx).get("torch_confirmed", [])
        if not any(_same(t, cand["torch"]) for t in confirmed):
            soft.append(f"Apex for Ascend with torch {cand['torch']} is unconfirmed (confirmed: {', '.join(confirmed)})")
    if req.driver:
        fit = driver_fit(req.driver, cand["cann_row"], ctx.m)
        if fit == "newer":
            soft.append(f"driver {req.driver} is newer than any HDK listed for CANN {cand['cann']}; unlisted but usually fine")
        elif fit == "unknown":
            soft.append(f"CANN {cand['cann']} has no published HDK pairing, so driver {req.driver} cannot be checked")
    if "mindspeed-llm" in req.extras:
        bundles = _bundles_for(ctx, cand)
        if bundles and all(b.get("status") == "preview" for b in bundles):
            soft.append(f"{bundles[0]['id']} is a preview release")
    return soft


def score(ctx: Context, cand: dict):
    """Larger is better: fewer soft problems, then newest torch/wheel/CANN, then preferences."""
    soft = penalties(ctx, cand)
    newest = (
        _v(cand["torch"]).key if cand["torch"] else _v(cand.get("mindspore") or "0").key,
        _v(cand["torch_npu"]).key if cand["torch_npu"] else (),
    )
    return (
        -len(soft),
        cand["paired"],
        newest,
        not cand["unlisted"],
        _v(cand["cann"]).key,
        -ctx.py_rank.get(cand["python"], 99),
        -ctx.os_rank.get(cand["os"], 99),
    )


def best(ctx: Context, cands: list[dict]) -> dict:
    return max(cands, key=lambda c: score(ctx, c))


# ------------------------------------------------------------- explanation


_DIM_LABEL = {"cann": "CANN", "torch": "torch", "torch_npu": "torch_npu", "python": "Python", "os": "OS",
              "mindspore": "MindSpore", "dtype": "dtype"}


def _values(cands: list[dict], dim: str) -> list[str]:
    vals = {c[dim] for c in cands if c.get(dim)}
    if dim in ("os",):
        return sorted(vals)
    return sort_versions(vals)


def _alone_reason(ctx: Context, con: Constraint) -> str:
    """Why a single constraint cannot be met on this card, in the matrix's words."""
    m, req, fam = ctx.m, ctx.req, ctx.family
    base = ctx.base()
    chip = ctx.chip or fam["id"]
    if con.name == "dtype":
        return (f"{fam['name']} has no bf16 ({fam.get('bf16_note') or 'not supported'});"
                " use --dtype fp16 (with dynamic loss scaling) or an A2/A3 card")
    if con.name == "torch_npu":
        row = m.torch_npu(req.torch_npu)
        prefix = ".".join(str(x) for x in _v(req.torch_npu).release[:3])
        same_torch = [r["wheel"] for r in m.rows("torch_npu") if r.get("cann") and r["torch"] == prefix]
        pypi = [w for w in same_torch if m.torch_npu(w)["on_pypi"]]
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
        return (f"torch_npu {req.torch_npu} (released with CANN {row['cann']}) has no listed base image for chip {chip}"
                " with a Python it supports (pass --base-image to use an image you know)")
    if con.name == "cann":
        row = m.cann(req.cann)
        if row is None:
            known = [r["version"] for r in m.rows("cann") if r["status"] == "release"]
            return f"CANN {req.cann} is not in the matrix (releases: {span(known)})"
        imgs = [i for i in m.images(row["version"], ctx.chip) if not i["devel"]] if ctx.chip else []
        if not req.base_image and not imgs:
            chips = sorted({i["chip"] for i in m.images(row["version"])})
            return (f"no CANN {row['version']} base image for chip {chip} is listed"
                    f" (listed CANN {row['version']} images: {', '.join(chips) or 'none'}); the list holds today's"
                    " official tags and earlier ones seen published, so one may still exist:"
                    " pass --base-image to use an image you know")
        return f"no torch_npu/MindSpore build in the matrix works with CANN {row['version']} on chip {chip}"
    if con.name == "torch":
        wheels = [r for r in m.rows("torch_npu") if r.get("cann") and _same_torch(req.torch, r["torch"])]
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
        if not any(_same(k, req.mindspore) for k in known):
            return f"MindSpore {req.mindspore} is not in the matrix (known: {', '.join(known)})"
        row = next(r for r in m.rows("mindspore") if _same(r["version"], req.mindspore))
        msg = f"MindSpore {req.mindspore} pairs with CANN {row['cann']}"
        if row.get("hdk"):
            msg += f" (HDK {', '.join(row['hdk'])})"
        if req.cann and not _same(req.cann, row["cann"]):
            fits = [r["version"] for r in m.rows("mindspore") if _same(r["cann"], req.cann)]
            msg += f", not with the requested CANN {req.cann}"
            if fits:
                msg += f" (which pairs with MindSpore {', '.join(fits)})"
        return msg + (f"; no CANN {row['cann']} base image for chip {chip} is listed"
                      " (one may still exist: pass --base-image to use an image you know)")
    if con.name == "python":
        return f"no stack for chip {chip} offers Python {req.python} (available: {', '.join(_values(base, 'python'))})"
    if con.name == "os":
        return f"no listed image for chip {chip} runs {req.os} (available: {', '.join(_values(base, 'os'))})"
    if con.name == "driver":
        fits = [r["version"] for r in ctx.cann_rows() if driver_fit(req.driver, r, m) == "ok"]
        where = f"it is paired with or listed for CANN {', '.join(fits)}" if fits else "no CANN release lists it"
        return f"driver {req.driver} is too old for every CANN with an official image for chip {chip}; {where}"
    if con.name == "apex":
        apex = _apex_row(ctx)
        return f"Ascend Apex needs Python {apex['python']} ({apex.get('python_note', '')}), and no stack for chip {chip} offers it"
    if con.name == "mindspeed-llm":
        fams = sorted({f for b in m.rows("llm_bundles") for f in b.get("families", [])})
        if fams and fam["id"] not in fams:
            return f"MindSpeed-LLM does not support {fam['name']} (supported families: {', '.join(fams)})"
        if req.pins:
            return f"no MindSpeed-LLM/RL release set in the matrix uses the pinned refs {dict(req.pins)}"
        return f"no MindSpeed-LLM release set fits any stack for chip {chip}"
    return f"{con.flag} cannot be met on {ctx.card['id']}"


def _describe(ctx: Context, con: Constraint, cands: list[dict], dim: str) -> str | None:
    vals = _values(cands, dim)
    label = _DIM_LABEL.get(dim, dim)
    if con.name == dim:
        if con.name == "cann" and ctx.m.cann(ctx.req.cann):
            row = ctx.m.cann(ctx.req.cann)
            return f"CANN {row['version']} needs HDK {hdk_summary(hdk_row(ctx.m, row)[0])}"
        return None  # "--python 3.11 works with Python 3.11" says nothing
    if con.name == "apex":
        apex = _apex_row(ctx)
        return f"Ascend Apex builds only for Python {apex['python']} ({apex.get('python_note', '')})"
    if con.name == "driver" and dim == "cann":
        fits = [v for v in vals if driver_fit(ctx.req.driver, ctx.m.cann(v), ctx.m) == "ok"]
        return f"driver {ctx.req.driver} fits CANN {span(fits or vals)}"
    if con.name == "cann" and dim != "cann" and ctx.m.cann(ctx.req.cann):
        row = ctx.m.cann(ctx.req.cann)
        if dim in ("torch", "torch_npu", "mindspore", "python", "os"):
            return f"CANN {row['version']} works with {label} {span(vals)}"
    if con.name == "torch" and dim == "cann":
        wheels = {c["torch_npu"]: c["wheel"]["cann"] for c in cands
                  if c["wheel"].get("in_table", True) and c["wheel"]["on_pypi"]}
        released = ", ".join(f"{w} with {c}" for w, c in sorted(wheels.items(), key=lambda i: _v(i[0]).key))
        return f"torch {ctx.req.torch} works with CANN {span(vals)} (torch_npu released: {released})"
    if con.name == "mindspeed-llm":
        bundles = sorted({b["id"] for c in cands for b in _bundles_for(ctx, c)})
        return f"{con.flag} ({', '.join(bundles)}) works with {label} {span(vals)}"
    return f"{con.flag} works with {label} {span(vals)}"


def explain_failure(ctx: Context, cons: list[Constraint], masks: dict[str, list[bool]]) -> list[str]:
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
        parts = [p for p in (_describe(ctx, a, only_a, b.dim), _describe(ctx, b, only_b, a.dim)) if p]
        reasons.append(f"{a.flag} conflicts with {b.flag}: {'; '.join(parts)}")
    if not reasons and good:
        reasons.append("no stack satisfies " + ", ".join(c.flag for c in good) + " together")
    return reasons


# --------------------------------------------------------------------- solve


@dataclass
class Outcome:
    ctx: Context
    cand: dict | None
    reasons: list[str]
    alternatives: list[tuple[list[str], Context, dict]]  # (dropped flags, ctx, candidate)


def _masks(ctx: Context, cons: list[Constraint]) -> dict[str, list[bool]]:
    base = ctx.base()
    return {c.name: [c.test(x) for x in base] for c in cons}


def _pick(ctx: Context, masks: dict[str, list[bool]], names: list[str]) -> dict | None:
    base = ctx.base()
    alive = [x for i, x in enumerate(base) if all(masks[n][i] for n in names)]
    return best(ctx, alive) if alive else None


def solve(matrix, req: Request, card: dict, family: dict) -> Outcome:
    ctx = Context(matrix, req, card, family)
    cons = build_constraints(ctx)
    masks = _masks(ctx, cons)
    names = [c.name for c in cons]
    found = _pick(ctx, masks, names)
    if found is not None:
        return Outcome(ctx, found, [], [])
    reasons = explain_failure(ctx, cons, masks)
    alternatives: list = []
    minimal: list[set] = []
    for size in range(1, min(3, len(cons)) + 1):
        for drop in itertools.combinations(cons, size):
            dropped = {c.name for c in drop}
            if any(s <= dropped for s in minimal):
                continue
            cand = _pick(ctx, masks, [n for n in names if n not in dropped])
            if cand is not None:
                minimal.append(dropped)
                alternatives.append(([c.flag for c in drop], ctx, cand))
        if len(alternatives) >= MAX_ALTERNATIVES:
            break
    # fewest constraints dropped first; among those, the stack with fewest soft problems
    alternatives.sort(key=lambda a: (len(a[0]), len(penalties(a[1], a[2])) + len(a[2].get("unlisted", []))))
    return Outcome(ctx, None, reasons, alternatives[:MAX_ALTERNATIVES])


def training_refusal(family: dict, card: dict) -> str | None:
    if card.get("training") is False:
        return f"{card['name']} is an inference product; it cannot be used for training"
    if not family["training"]:
        note = family.get("training_note") or "it is an inference chip"
        return f"{card['name']} ({family['name']}) cannot train: {note}"
    return None


def resolve(matrix, req: Request):
    """Return a Stack dict, or raise ResolveError with reasons and alternative stacks."""
    from provisioner.resolve.stack import make_stack

    card, family, via_alias = matrix.lookup_card(req.card)
    task = req.task or matrix.policy.get("default_task", "train")
    req = req.replace(task=task)
    refusal = training_refusal(family, card) if task == "train" else None
    outcome = solve(matrix, req, card, family)
    if refusal is None and outcome.cand is not None:
        return make_stack(outcome.ctx, outcome.cand, via_alias=via_alias)

    reasons = [refusal] if refusal else list(outcome.reasons)
    alternatives = [] if refusal else list(outcome.alternatives)
    if refusal:
        # Say what else is wrong on the hardware that can train, and offer that.
        for fallback in matrix.policy.get("training_fallback_cards", []):
            fcard, ffam, _ = matrix.lookup_card(fallback)
            fout = solve(matrix, req.replace(card=fcard["id"]), fcard, ffam)
            if fout.cand is not None:
                alternatives.append(([f"--card {req.card}"], fout.ctx, fout.cand))
            else:
                reasons += [f"on {fcard['id']} too: {r}" for r in fout.reasons]
                alternatives += [([f"--card {req.card}", *d], c, x) for d, c, x in fout.alternatives]
            if alternatives:
                break
    alt_stacks = []
    for dropped, actx, acand in alternatives[:MAX_ALTERNATIVES]:
        stack = make_stack(actx, acand, via_alias=None)
        stack["relaxed"] = dropped
        alt_stacks.append(stack)
    summary = reasons[0] if reasons else "no stack satisfies the request"
    raise ResolveError(summary, reasons=reasons, alternatives=alt_stacks)
