"""Candidates: every complete combination the matrix allows for a card's chip, the constraints that filter
them, and the ranking that picks one.

A *candidate* is torch_npu wheel x CANN x official base image (or MindSpore x
CANN x image), as a plain dict with the rows it came from. Each user
constraint is a predicate on candidates (``Constraint``); ``penalties`` lists
a candidate's soft problems and ``score`` orders the survivors: fewest soft
problems, then newest. The solver (solve.py) and the Stack (stack.py) build on
this; the explanations of a refusal live in explain.py.

Every image this project builds installs provision itself (the trainer, doctor), so an image's Python must
meet provision's own Requires-Python (pyproject.toml, read from the installed metadata by
provisioner.version): a candidate whose Python is below that floor is no candidate. The explanations name
the floor where it is what stands in the way.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

from provisioner.errors import ProvisionError
from provisioner.resolve.driverfit import driver_fit
from provisioner.resolve.request import Request
from provisioner.versions import any_match, parse, py_range

TYPE_CHECKING = False
if TYPE_CHECKING:
    from provisioner.matrix.loader import Matrix
    from provisioner.shapes import Candidate, Image


def in_specs(specs, version: str | None) -> bool:
    return version is not None and any_match(specs, version)


def same(a: str | None, b: str | None) -> bool:
    return a is not None and b is not None and parse(a) == parse(b)


def same_torch(requested: str, torch: str) -> bool:
    """`--torch 2.1` means any 2.1.x; `--torch 2.5.1+cpu` means 2.5.1."""
    want = parse(requested).public()
    have = parse(torch)
    if len(want.release) < 3 and not want.chain:
        return have.release[: len(want.release)] == want.release
    return have == want


# --------------------------------------------------------------- candidates


class Context:
    """Card, family and the matrix, plus the chip's candidate list (built once)."""

    def __init__(self, matrix: Matrix, req: Request, card: dict, family: dict):
        self.m = matrix
        self.req = req
        self.card = card
        self.family = family
        self.chip = family.get("image_chip")
        pref = matrix.policy.get("python_preference", [])
        self.py_rank = {p: i for i, p in enumerate(pref)}
        self.os_rank = {o: i for i, o in enumerate(matrix.policy.get("os_preference", []))}
        self._base: list[Candidate] | None = None
        self._sets: dict[tuple, list[str]] = {}
        self.floor = project_python()

    def floor_ok(self, python: str) -> bool:
        """Whether provision itself installs on `python` (its Requires-Python)."""
        return floor_ok(self.floor, python)

    # CANN rows a stack may use: releases, plus a pre-release named exactly.
    def cann_rows(self) -> list[dict]:
        rows = []
        for row in self.m.rows("cann"):
            if row["status"] == "release" or (self.req.cann and self.m.cann(self.req.cann) is row):
                rows.append(row)
        return rows

    def images(self, cann_row: dict) -> list[Image]:
        if self.req.base_image:
            # A custom base: its OS and Python are the user's business; offer
            # every Python the preference list knows, the ranges below decide.
            custom: list[Image] = []
            for python in self.py_rank:
                custom.append({"tag": None, "chip": self.chip, "os": "custom", "python": python, "devel": False,
                               "source": []})
            return custom
        if not self.chip:
            return []
        return [i for i in self.m.images(cann_row["version"], self.chip) if not i["devel"]]

    def no_package_set(self, field: str, version: str, python: str) -> list[str]:
        """A soft problem when no package set (matrices/packages.yaml) covers the framework on this
        Python: such a stack resolves, but its image cannot be rendered without an overlay."""
        key = (field, version, python)
        if key not in self._sets:
            rows = self.m.rows("packages") if "packages" in self.m.data else []
            hits = [r for r in rows if r.get(field) and in_specs(r[field], version)]
            label = "MindSpore" if field == "mindspore" else "torch"
            self._sets[key] = [] if any(python in py_range(r["python"]) for r in hits) else [
                f"no package set in matrices/packages.yaml covers {label} {version} on Python {python};"
                " the image needs one (an overlay set; scripts/lock_packages.py resolves it)"]
        return self._sets[key]

    def set_pairings(self) -> dict[tuple, list[str]]:
        """(torch_npu wheel, CANN) -> the MindSpeed sets whose own install guide pairs them (`torch_npu_pairings`
        of matrices/mindspeed.yaml) where no TorchNPU table does. Only a request for such a set
        (`--with mindspeed-llm`) gets them: a plain stack stays on TorchNPU's own pairings."""
        out: dict[tuple, list[str]] = {}
        if "mindspeed-llm" not in self.req.extras:
            return out
        for b in self.m.rows("llm_bundles"):
            if b.get("families") and self.family["id"] not in b["families"]:
                continue
            for p in b.get("torch_npu_pairings") or []:
                for cann in p["cann"]:
                    out.setdefault((parse(p["wheel"]).key, parse(cann).key), []).append(b["id"])
        return out

    def base(self) -> list[Candidate]:
        if self._base is None:
            framework = self.req.framework or "pytorch"
            self._base = list(_mindspore(self) if framework == "mindspore" else _pytorch(self))
        return self._base


def project_python() -> str:
    """provision's own Requires-Python (``>=3.10``), the floor of every image's Python ("" when unknown)."""
    from provisioner.version import requires_python

    return requires_python()


def floor_ok(floor: str, python: str) -> bool:
    """Whether Python `python` (``3.9``) meets the specifier `floor` (``>=3.10``; "" meets all)."""
    if not floor:
        return True
    major, minor = parse(python).minor()
    return _floor_set(floor).contains(f"{major}.{minor}", prereleases=True)


def _floor_set(floor: str):
    from packaging.specifiers import InvalidSpecifier, SpecifierSet

    cached = _FLOORS.get(floor)
    if cached is None:
        try:
            cached = _FLOORS[floor] = SpecifierSet(floor)
        except InvalidSpecifier:
            raise ProvisionError(f"provision's own Requires-Python {floor!r} (pyproject.toml requires-python) is"
                                 " not a version specifier: fix it there (an installed copy: reinstall it)") from None
    return cached


_FLOORS: dict = {}


def python_ok(py: str, *ranges: str | None) -> bool:
    return all(r is None or py in py_range(r) for r in ranges)


def _pytorch(ctx: Context) -> Iterator[Candidate]:
    m = ctx.m
    canns = [(c, ctx.images(c), [parse(a) for a in [c["version"], *c.get("aliases", [])]]) for c in ctx.cann_rows()]
    set_pairings = ctx.set_pairings()
    for wheel in m.rows("torch_npu"):
        if not wheel.get("cann") or not wheel["on_pypi"]:
            continue  # no published CANN pairing, or pip cannot fetch it: never part of a stack
        release = m.release(wheel.get("product"))
        compat = (release or {}).get("cann_compatible", [])
        # published wheels per CPU architecture where they differ, else the row's range
        wheel_py = (wheel.get("wheels") or {}).get(ctx.req.arch) or wheel.get("python") or m.torch_python(wheel["torch"])
        wheel_cann = parse(wheel["cann"])
        for cann, images, names in canns:
            if not images:
                continue
            paired = wheel_cann in names
            via_sets = [] if paired else set_pairings.get((parse(wheel["wheel"]).key, parse(cann["version"]).key), [])
            if not paired and not via_sets and not in_specs(compat, cann["version"]):
                continue
            for img in images:
                if not python_ok(img["python"], wheel_py, cann.get("python")) or not ctx.floor_ok(img["python"]):
                    continue
                soft = []
                if via_sets:
                    soft.append(
                        f"torch_npu {wheel['wheel']} with CANN {cann['version']} is paired by {', '.join(via_sets)}'s"
                        f" install guide only (TorchNPU {wheel.get('product')} releases it with CANN {wheel['cann']})"
                    )
                elif not paired:
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
                    "via_sets": via_sets,
                }


def _unlisted(img: Image) -> list[str]:
    """A base image that is not in today's official list: usable, with a warning.
    It ranks after a listed image of the same torch / torch_npu (see `score`), not
    after an older torch: an image published after the recorded list is as real."""
    if img.get("listed", True):
        return []
    return [f"base image {img['tag']} is not in today's cann-container-image list"
            f" ({img.get('evidence') or 'seen elsewhere'}); if it no longer pulls, pass --base-image"]


def _mindspore(ctx: Context) -> Iterator[Candidate]:
    for ms in ctx.m.rows("mindspore"):
        cann = ctx.m.cann(ms["cann"])
        if cann is None or cann not in ctx.cann_rows():
            continue
        for img in ctx.images(cann):
            if not python_ok(img["python"], ms.get("python"), cann.get("python")) or not ctx.floor_ok(img["python"]):
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



# -------------------------------------------------------------- constraints


@dataclass
class Constraint:
    """One user constraint: a predicate on candidates, the flag that set it, the dimension it speaks about."""

    name: str
    flag: str
    test: Callable[[Candidate], bool]
    dim: str  # the candidate field this constraint mostly speaks about


def bundles_for(ctx: Context, cand: Candidate, python: bool = True) -> list[dict]:
    """The MindSpeed-LLM/RL release sets that fit a candidate (and the pinned refs, if any); with python=False,
    those that would fit it but for its Python (what a refusal names when only the Python stands between)."""
    pins = dict(ctx.req.pins)
    torch = cand.get("torch")
    out: list[dict] = []
    if torch is None:
        return out  # MindSpore stacks carry no MindSpeed
    via_sets = cand.get("via_sets")
    for b in ctx.m.rows("llm_bundles"):
        if b.get("families") and ctx.family["id"] not in b["families"]:
            continue
        if via_sets and b["id"] not in via_sets:
            continue  # a pairing only that set's guide states carries that set alone
        if not any(same_torch(t, torch) for t in b["torch"]):
            continue
        canns = b.get("cann", [])
        if not (any(same(c, cand["cann"]) for c in canns) or in_specs(b.get("cann_compatible"), cand["cann"])):
            continue
        if python and cand["python"] not in py_range(b["python"]):
            continue
        refs = {
            "mindspeed": b["mindspeed_ref"],
            "megatron": b["megatron_ref"],
            "mindspeed_llm": b["mindspeed_llm_ref"],
            "mindspeed_rl": b.get("mindspeed_rl_ref"),
        }
        commits = b.get("commits") or {}
        if any(not _pin_matches(str(v), refs.get(k), commits.get(k)) for k, v in pins.items()):
            continue
        out.append(b)
    return out


def _pin_matches(pin: str, ref, commit) -> bool:
    """A --pin names a checkout by its label (branch/tag) or by its commit (7 or more hex digits)."""
    if ref is not None and pin == str(ref):
        return True
    return bool(commit) and len(pin) >= 7 and str(commit).startswith(pin.lower())


def mindformers_rows(ctx: Context, cand: Candidate) -> list[dict]:
    """MindSpore Transformers releases paired with the candidate's MindSpore."""
    if not cand.get("mindspore") or "mindformers" not in ctx.m.data:
        return []
    return [r for r in ctx.m.rows("mindformers") if same(r["mindspore"], cand["mindspore"])
            and (not r.get("python") or cand["python"] in py_range(r["python"]))]


def apex_row(ctx: Context) -> dict:
    return ctx.m.rows("apex")[0]


def extra_row(ctx: Context, name: str) -> dict | None:
    return next((r for r in ctx.m.rows("extras") if r["name"] == name), None)


def build_constraints(ctx: Context) -> list[Constraint]:
    """One Constraint per constraint of the request (the value each tests is bound when it is built)."""
    req = ctx.req
    out: list[Constraint] = []
    if (cann := req.cann):
        out.append(Constraint("cann", f"--cann {cann}", lambda c: same(c["cann"], cann)
                              or any(same(a, cann) for a in c["cann_row"].get("aliases", [])), "cann"))
    if (torch := req.torch):
        out.append(Constraint("torch", f"--torch {torch}", lambda c: (have := c["torch"]) is not None
                              and same_torch(torch, have), "torch"))
    if (torch_npu := req.torch_npu):
        out.append(Constraint("torch_npu", f"--torch-npu {torch_npu}",
                              lambda c: same(c["torch_npu"], torch_npu), "torch_npu"))
    if (mindspore := req.mindspore):
        out.append(Constraint("mindspore", f"--mindspore {mindspore}",
                              lambda c: same(c.get("mindspore"), mindspore), "mindspore"))
    if req.python:
        want = parse(req.python).minor()
        out.append(Constraint("python", f"--python {req.python}", lambda c: parse(c["python"]).minor() == want, "python"))
    if (os_name := req.os):
        out.append(Constraint("os", f"--os {os_name}", lambda c: c["os"].lower() == os_name.lower(), "os"))
    if (driver := req.driver):
        out.append(Constraint("driver", f"--driver {driver}",
                              lambda c: driver_fit(driver, c["cann_row"], ctx.m) != "no", "cann"))
    if req.dtype:
        ok = req.dtype != "bf16" or bool(ctx.family["bf16"])
        out.append(Constraint("dtype", f"--dtype {req.dtype}", lambda c: ok, "dtype"))
    for extra in req.extras:
        if extra == "apex":
            out.append(Constraint("apex", "--with apex", _python_in(apex_row(ctx)["python"]), "python"))
        elif extra == "mindspeed-llm":
            label = "--with mindspeed-llm" + (" (pinned refs)" if req.pins else "")
            out.append(Constraint("mindspeed-llm", label, lambda c: bool(bundles_for(ctx, c)), "torch"))
        elif extra == "mindformers":
            out.append(Constraint("mindformers", "--with mindformers", lambda c: bool(mindformers_rows(ctx, c)),
                                  "mindspore"))
        elif extra == "deepspeed":
            out.append(Constraint("deepspeed", "--with deepspeed", _fits_extra(extra_row(ctx, "deepspeed") or {}),
                                  "python"))
    return out


def _python_in(python_range: str) -> Callable[[Candidate], bool]:
    return lambda c: c["python"] in py_range(python_range)


def _fits_extra(row: dict) -> Callable[[Candidate], bool]:
    """An extras row's Python range and torch specs as a test."""
    return lambda c: python_ok(c["python"], row.get("python")) and (
        not row.get("torch") or in_specs(row["torch"], c["torch"]))


# ------------------------------------------------------------------ ranking


def penalties(ctx: Context, cand: Candidate) -> list[str]:
    soft = list(cand["soft"])
    req = ctx.req
    if "apex" in req.extras and cand["torch"]:
        confirmed = apex_row(ctx).get("torch_confirmed", [])
        if not any(same(t, cand["torch"]) for t in confirmed):
            soft.append(f"Apex for Ascend with torch {cand['torch']} is unconfirmed (confirmed: {', '.join(confirmed)})")
    if req.driver:
        fit = driver_fit(req.driver, cand["cann_row"], ctx.m)
        if fit == "newer":
            soft.append(f"driver {req.driver} is newer than any HDK listed for CANN {cand['cann']}; unlisted but usually fine")
        elif fit == "unknown":
            soft.append(f"CANN {cand['cann']} has no published HDK pairing, so driver {req.driver} cannot be checked")
    if "mindspeed-llm" in req.extras:
        bundles = bundles_for(ctx, cand)
        if bundles and all(b.get("status") == "preview" for b in bundles):
            soft.append(f"{bundles[0]['id']} is a preview release")
        # `--with mindspeed-llm` (mindspeed-rl is its alias) asks for MindSpeed-LLM: a candidate that only a
        # MindSpeed-RL set fits ranks below one a MindSpeed-LLM set fits, unless the request pins the checkouts
        # (the MindSpeed-RL profiles do: the pins then choose the set).
        if bundles and not req.pins and all(b.get("kind") == "mindspeed-rl" for b in bundles):
            soft.append(f"{bundles[0]['id']} is a MindSpeed-RL set, chosen where no MindSpeed-LLM set fits (pins of"
                        " its checkouts, as the mindspeed-rl profiles have, choose it outright)")
    return soft


def score(ctx: Context, cand: Candidate) -> tuple:
    """Larger is better: fewer soft problems, then newest torch/wheel/CANN, then preferences."""
    soft = penalties(ctx, cand)
    newest = (
        parse(cand["torch"]).key if cand["torch"] else parse(cand.get("mindspore") or "0").key,
        parse(cand["torch_npu"]).key if cand["torch_npu"] else (),
    )
    return (
        -len(soft),
        cand["paired"],
        newest,
        not cand["unlisted"],
        parse(cand["cann"]).key,
        -ctx.py_rank.get(cand["python"], 99),
        -ctx.os_rank.get(cand["os"], 99),
    )


def best(ctx: Context, cands: list[Candidate]) -> Candidate:
    return max(cands, key=lambda c: score(ctx, c))
