"""Turn a chosen candidate into the Stack: a plain, JSON-ready dict.

Every choice carries a one-line reason in ``explain`` and the sources it rests
on in ``sources``; ``id`` is a hash of the choices only (not of the prose), so
an image tag stays the same when an explanation is reworded.
"""

from __future__ import annotations

import hashlib
import json

from provisioner.errors import ProvisionError
from provisioner.matrix.fields import with_torch
from provisioner.resolve.candidates import Context, bundles_for, mindformers_rows, penalties
from provisioner.resolve.driverfit import driver_fit, hdk_row, hdk_summary
from provisioner.versions import parse, py_range

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any

    from provisioner.shapes import (
        Candidate,
        Stack,
        StackApex,
        StackBaseImage,
        StackDriver,
        StackMindSpore,
        StackTorch,
        StackTorchNpu,
    )

SCHEMA = "provision.stack/1"


def _refs(m, sources) -> list[str]:
    return [m.source_ref(s) for s in (sources or [])]


def _choice_reason(chosen: str, requested: str | None, alternatives: list[str], default_reason: str) -> str:
    if requested:
        return f"{chosen}: as requested"
    if len(alternatives) <= 1:
        return f"{chosen}: {default_reason}"
    others = [a for a in alternatives if a != chosen]
    return f"{chosen}: {default_reason} (also possible: {', '.join(others)})"


def _filled(template: str, torch: str, what: str) -> str:
    """A torch_wheels requirement with the torch version in place; it must still be a requirement (one line,
    exit 2 otherwise: it goes as written into requirements/framework.txt and the printed pip line)."""
    from provisioner.matrix.fields import requirement

    text = with_torch(template, torch)
    try:
        return requirement(text, what, pinned=True)
    except ValueError as exc:
        raise ProvisionError(f"{exc} (with torch {torch})") from None


def _dtype(ctx: Context, framework: str) -> tuple[dict, str | None]:
    fam, req = ctx.family, ctx.req
    note = None
    if req.dtype == "fp32":
        compute, scaling = "fp32", None
        reason = "fp32 as requested (no mixed precision; slowest, most memory)"
    elif req.dtype == "fp16" or not fam["bf16"]:
        compute, scaling = "fp16", "dynamic" if req.task == "train" else None
        if fam["bf16"]:
            reason = "fp16 as requested, with dynamic loss scaling"
            note = f"{fam['name']} supports bf16, which needs no loss scaling; fp16 kept as requested"
        else:
            reason = f"fp16{' with dynamic loss scaling' if scaling else ''}: {fam.get('bf16_note') or 'no bf16 on this chip'}"
    else:
        compute, scaling = "bf16", None
        # torch_npu's own check (IsBF16Supported) is the evidence only for PyTorch stacks.
        why = "per matrices/chips.yaml" if framework == "mindspore" else "torch_npu reports it from Ascend910B1 on"
        reason = f"bf16: {fam['name']} supports bf16 ({why}); no loss scaling needed"
    return {"compute": compute, "loss_scaling": scaling, "reason": reason}, note


def make_stack(ctx: Context, cand: Candidate, via_alias: str | None) -> Stack:
    """The Stack of a chosen candidate: the choices, `explain` (why each), `sources`, `warnings` and `id`."""
    m, req, card, fam = ctx.m, ctx.req, ctx.card, ctx.family
    base = ctx.base()
    explain: dict[str, str] = {}
    sources: dict[str, list[str]] = {}
    warnings: list[str] = []
    notes = list(penalties(ctx, cand)) + list(cand.get("unlisted", []))

    explain["card"] = f"{card['id']}: {card['name']}, {fam['name']}" + (
        f" (chip alias {via_alias!r} selects the family's reference card)" if via_alias else ""
    )
    sources["card"] = _refs(m, card.get("source"))
    if card.get("unconfirmed"):
        warnings.append(f"{card['id']}: not confirmed by a published specification: {', '.join(card['unconfirmed'])}")
    explain["task"] = f"{req.task}: " + ("as requested" if req.task != m.policy.get("default_task") else "the default")
    explain["arch"] = f"{req.arch}: " + ("this machine's architecture (use --arch to target another)"
                                          if req.arch_from_host else "as requested")

    same_stack = [c for c in base if c["cann"] == cand["cann"] and c.get("torch_npu") == cand.get("torch_npu")
                  and c.get("mindspore") == cand.get("mindspore")]
    cann_row = cand["cann_row"]

    # framework parts
    torch: StackTorch | None = None
    torch_npu: StackTorchNpu | None = None
    mindspore: StackMindSpore | None = None
    apex: StackApex | None = None
    extras: dict = {}
    if cand["framework"] == "pytorch":
        wheel = cand["wheel"]
        rule = m.torch_wheel_rule(req.arch, wheel["torch"])
        torch = {
            "version": wheel["torch"],
            "requirement": _filled(rule["requirement"], wheel["torch"], f"torch_wheels {rule['id']}: requirement"),
            "index_url": rule.get("index_url"),
        }
        explain["torch"] = (f"{cand['torch']}: as requested" if req.torch else
                            f"{cand['torch']}: newest torch line with a clean stack for this card")
        pin = (wheel.get("torch_pin") or {}).get(req.arch) or rule["pin"]
        pin = "no torch version" if pin == "none" else with_torch(pin, wheel["torch"])
        explain["torch_requirement"] = (
            f"{torch['requirement']}" + (f" from {torch['index_url']}" if torch["index_url"] else " from PyPI")
            + f": {req.arch} torch_npu {wheel['wheel']} pins {pin}"
            + ("; the +cpu build satisfies it without CUDA libraries"
               if "+cpu" in torch["requirement"] and "+cpu" not in pin else "")
        )
        sources["torch_requirement"] = _refs(m, rule.get("source"))
        torch_npu = {
            "version": wheel["wheel"],
            "requirement": f"torch-npu=={wheel['wheel']}",
            "product": wheel.get("product"),
            "branch": wheel.get("branch"),
            "released_with_cann": wheel["cann"],
            "on_pypi": wheel["on_pypi"],
        }
        what = ", ".join(x for x in (wheel.get("product") and f"TorchNPU {wheel['product']}",
                                     wheel.get("branch") and f"branch {wheel['branch']}") if x)
        explain["torch_npu"] = (f"{wheel['wheel']}: " + ("as requested; " if req.torch_npu else "")
                                + f"the build of torch {wheel['torch']} released with CANN {wheel['cann']}"
                                + (f" ({what})" if what else ""))
        sources["torch_npu"] = _refs(m, wheel.get("source"))
        if cand["paired"]:
            cann_reason = f"torch_npu {wheel['wheel']} is released with it"
        elif cand.get("via_sets"):
            cann_reason = (f"paired with torch_npu {wheel['wheel']} by {', '.join(cand['via_sets'])}'s install guide"
                           f" (TorchNPU {wheel.get('product')} releases it with CANN {wheel['cann']})")
        else:
            rel = m.release(wheel.get("product")) or {}
            cann_reason = (f"within TorchNPU {wheel.get('product')}'s compatible CANN range"
                           f" ({', '.join(rel.get('cann_compatible', []))})")
            sources["cann_range"] = _refs(m, rel.get("source"))
        if "apex" in req.extras:
            row = m.rows("apex")[0]
            apex = {
                "repo": row["repo"],
                "ref": row["ref"],
                "commit": row["commit"],
                "upstream_repo": row.get("upstream_repo"),
                "upstream_commit": row.get("upstream_commit"),
                "setuptools": row["setuptools_pin"],
                "setuptools_max": row["setuptools_max"],
            }
            explain["apex"] = (f"Ascend Apex {row['commit'][:8]} ({row['ref']}) built from source with"
                               f" setuptools=={row['setuptools_pin']}"
                               f" (needs <= {row['setuptools_max']}; Python {row['python']} only)")
            sources["apex"] = _refs(m, row.get("source"))
        if "deepspeed" in req.extras:
            row = next(r for r in m.rows("extras") if r["name"] == "deepspeed")
            extras["deepspeed"] = {"requirement": row["requirement"]}
            explain["deepspeed"] = f"{row['requirement']}: {row.get('notes', '').split(';')[0]}".strip()
            sources["deepspeed"] = _refs(m, row.get("source"))
        if "mindspeed-llm" in req.extras:
            bundles = bundles_for(ctx, cand)
            bundle = max(bundles, key=lambda b: (b.get("status") != "preview",
                                                 any(parse(c) == parse(cand["cann"]) for c in b.get("cann", [])),
                                                 parse(b.get("release") or "0").key))
            extras["mindspeed_llm"] = {
                "set": bundle["id"],
                "kind": bundle["kind"],
                "release": bundle.get("release"),
                "mindspeed": bundle["mindspeed_ref"],
                "megatron": bundle["megatron_ref"],
                "mindspeed_llm": bundle["mindspeed_llm_ref"],
                "mindspeed_rl": bundle.get("mindspeed_rl_ref"),
                # What the image checks out: the refs above are labels, these are the sources.
                "commits": dict(bundle["commits"]),
            }
            if bundle.get("vllm_ascend_ref"):
                extras["mindspeed_llm"]["vllm_ascend"] = bundle["vllm_ascend_ref"]
            explain["mindspeed_llm"] = (f"{bundle['id']}: MindSpeed {bundle['mindspeed_ref']}, Megatron-LM"
                                        f" {bundle['megatron_ref']}, MindSpeed-LLM {bundle['mindspeed_llm_ref']}"
                                        f" (released for torch {', '.join(bundle['torch'])}, Python {bundle['python']})")
            sources["mindspeed_llm"] = _refs(m, bundle.get("source"))
            if (why := apex_left_out(m, bundle["id"], "apex" in req.extras)) is not None:
                warnings.append(why)
    else:
        ms = cand["mindspore_row"]
        mindspore = {"version": ms["version"], "requirement": f"mindspore=={ms['version']}", "on_pypi": ms["on_pypi"]}
        explain["mindspore"] = (f"{ms['version']}: " + ("as requested; " if req.mindspore else "newest MindSpore with an image; ")
                                + f"pairs with CANN {ms['cann']}" + ("" if ms["on_pypi"] else "; not on PyPI"))
        sources["mindspore"] = _refs(m, ms.get("source"))
        cann_reason = f"MindSpore {ms['version']} pairs with it"
        if "mindformers" in req.extras:
            mf = mindformers_rows(ctx, cand)[-1]
            extras["mindformers"] = {"set": f"mindformers-{mf['version']}", "version": mf["version"],
                                     "ref": mf["ref"], "commits": {"mindformers": mf["commit"]}}
            explain["mindformers"] = (f"MindSpore Transformers {mf['version']} ({mf['ref']}, {mf['commit'][:8]}):"
                                      f" the release paired with MindSpore {ms['version']}")
            sources["mindformers"] = _refs(m, mf.get("source"))

    explain["cann"] = f"{cand['cann']}: " + ("as requested; " if req.cann else "") + cann_reason
    sources["cann"] = _refs(m, cann_row.get("source"))

    pythons = sorted({c["python"] for c in same_stack if c["os"] == cand["os"]}, key=lambda p: parse(p).key)
    explain["python"] = _choice_reason(cand["python"], req.python, pythons,
                                       "the only Python every part supports with an official image"
                                       if len(pythons) == 1 else f"first in the preference order (the official images default to {m.policy['python_preference'][0]})")
    oses = sorted({c["os"] for c in same_stack if c["python"] == cand["python"]})
    explain["os"] = _choice_reason(cand["os"], req.os, oses, "first in the preference order"
                                   if len(oses) > 1 else "the only OS with a matching official image")
    if req.host_os:
        explain["host_os"] = f"{req.host_os}: the host OS does not constrain the container OS"

    # base image
    img = cand["image"]
    base_image: StackBaseImage
    regs = m.registries()
    if req.registry:
        regs = sorted(regs, key=lambda r: r["id"] != req.registry)
    if img["tag"]:
        ref = f"{regs[0]['image']}:{img['tag']}"
        base_image = {"ref": ref, "tag": img["tag"], "official": True,
                      "mirrors": [f"{r['image']}:{img['tag']}" for r in regs[1:]]}
        explain["base_image"] = (f"{ref}: official CANN {cand['cann']} image for chip {ctx.chip}, {cand['os']},"
                                 f" Python {cand['python']}" + ("" if img.get("listed", True) else
                                                                " (not in today's list; published earlier or seen in use)"))
        sources["base_image"] = _refs(m, img.get("source"))
    else:
        base_image = {"ref": req.base_image or "", "tag": None, "official": False, "mirrors": []}
        explain["base_image"] = f"{req.base_image}: custom base image as requested (its CANN and Python are not checked)"
        warnings.append(f"custom base image {req.base_image}: make sure it carries CANN {cand['cann']} and Python {cand['python']}")

    hdk_src, inherited = hdk_row(m, cann_row)
    driver: StackDriver = {"paired": list(hdk_src.get("hdk_paired", [])), "compatible": list(hdk_src.get("hdk_compatible", [])),
              "summary": hdk_summary(hdk_src), "inherited_from": hdk_src["version"] if inherited else None}
    explain["driver"] = f"the host's HDK driver must be {driver['summary']}"
    if inherited:
        explain["driver"] += f" (no pairing is published for CANN {cand['cann']}; CANN {hdk_src['version']}'s applies as a floor)"
    if req.driver:
        fit = driver_fit(req.driver, cann_row, m)
        driver["host"] = req.driver
        driver["fit"] = fit
        explain["driver"] += f"; driver {req.driver}: {fit}"

    dtype, dtype_note = _dtype(ctx, cand["framework"])
    explain["dtype"] = dtype["reason"]
    # NPUVARS is torch_npu's source: it says nothing about a MindSpore stack.
    sources["dtype"] = _refs(m, [s for s in (fam.get("source") or [])
                                 if cand["framework"] != "mindspore" or s != "NPUVARS"])
    if dtype_note:
        notes.append(dtype_note)
    if cann_row.get("notes") and "disagree" in cann_row["notes"]:
        notes.append(f"CANN {cann_row['version']}: {cann_row['notes']}")
    if cand["framework"] == "pytorch" and cand["wheel"].get("python") and cand["python"] not in py_range(cand["wheel"]["python"]):
        warnings.append("python outside the wheel's range")  # cannot happen: candidates are filtered

    stack: Stack = {
        "schema": SCHEMA,
        "card": {
            "id": card["id"],
            "name": card["name"],
            "form": card["form"],
            "chips_per_card": card.get("chips_per_card"),
            "chips_per_server": card.get("chips_per_server"),
        },
        "chip": {
            "family": fam["id"],
            "name": fam["name"],
            "image_chip": ctx.chip,
            "device_family": fam["device_family"],
            "k8s_resource": fam.get("k8s_resource"),
            "training": fam["training"] and card.get("training", True) is not False,
            "bf16": fam["bf16"],
        },
        "task": req.task or "",
        "arch": req.arch,
        "os": cand["os"],
        "python": cand["python"],
        "framework": cand["framework"],
        "cann": {"version": cand["cann"], "status": cann_row["status"]},
        "base_image": base_image,
        "driver": driver,
        "torch": torch,
        "torch_npu": torch_npu,
        "mindspore": mindspore,
        "apex": apex,
        "extras": extras,
        "dtype": {"compute": dtype["compute"], "loss_scaling": dtype["loss_scaling"]},
        "profile": req.profile,
        "request": req.to_dict(),
    }
    stack["id"] = stack_id(stack)
    stack["explain"] = explain
    stack["warnings"] = warnings + notes
    stack["sources"] = sources
    return stack


def apex_left_out(m, set_id: str, with_apex: bool) -> str | None:
    """Why a framework image lacks the Ascend Apex its set's install guide installs (llm_bundles `apex: true`),
    when the stack was resolved without --with apex; None when there is nothing to say. One sentence, shown by
    `provision resolve` (a warning) and written into the Dockerfile."""
    bundle = next((b for b in m.rows("llm_bundles") if b["id"] == set_id), None)
    if with_apex or not (bundle or {}).get("apex"):
        return None
    row = m.rows("apex")[0]
    return (f"{set_id}: its install guide also installs Ascend Apex, which this stack leaves out (MindSpeed patches"
            " in NPU versions of the Apex functions Megatron-LM imports, creating them when Apex is absent); add"
            f" --with apex to build it from {row['repo']} ({row['ref']}), which the build must reach")


def summary(stack: Mapping[str, Any]) -> str:
    """One line naming the parts of a stack: card, CANN, framework, Python, Apex and extras."""
    parts = [stack["card"]["id"], f"CANN {stack['cann']['version']}"]
    if (torch := stack.get("torch")) and (torch_npu := stack.get("torch_npu")):
        parts.append(f"torch {torch['version']} + torch_npu {torch_npu['version']}")
    if mindspore := stack.get("mindspore"):
        parts.append(f"MindSpore {mindspore['version']}")
    parts.append(f"Python {stack['python']}")
    if stack.get("apex"):
        parts.append("Apex")
    parts += [name.replace("_", "-") for name in sorted(stack.get("extras") or {})]
    return ", ".join(parts)


_HASHED = ("card", "chip", "task", "arch", "os", "python", "framework", "cann", "base_image", "torch", "torch_npu",
           "mindspore", "apex", "extras", "dtype")


def stack_id(stack: Stack) -> str:
    """Hash of the choices (not the explanations): names images deterministically."""
    body = {k: stack.get(k) for k in _HASHED}
    blob = json.dumps(body, sort_keys=True, separators=(",", ":")).encode()
    return hashlib.sha256(blob).hexdigest()[:16]
