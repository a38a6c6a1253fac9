"""Render a JobPlan's files from templates/jobs/: the driver, one script per step, the framework configs.

    templates/jobs/run.sh.j2                    -> run.sh (the driver every node runs)
    templates/jobs/<kind>/<step template>       -> steps/NN-<step>.sh (names from matrices/jobs.yaml)
    templates/jobs/<kind>/configs/<name>.j2     -> configs/<name> (every file there)
    provisioner/jobs/dataconv.py                -> tools/dataconv.py (a data format converted first)

Values reach shell scripts through the `shq` filter (shell quoting) and YAML configs through `json`
(a JSON scalar is a valid YAML scalar); the job file was checked before (paths are plain, env values
have no quotes), so quoting is a second guard, not the only one.
"""

from __future__ import annotations

import json
from dataclasses import asdict

TEMPLATES = "jobs"
RAY_PORT = 6379  # Ray's default GCS port (ray start --head --port); KubeRay uses the same
RAY_DASHBOARD_PORT = 8265  # Ray's default dashboard / job-submission port
DATACONV = "tools/dataconv.py"  # provisioner/jobs/dataconv.py, for a data format converted before preprocessing


def _env():
    from provisioner.image.templates import template_env

    env = template_env()
    env.filters["json"] = lambda v: json.dumps(v, ensure_ascii=True)
    env.filters["num"] = _num
    return env


def _num(value) -> str:
    """A number as configs write it: 1000000.0 -> 1000000, 1e-06 stays."""
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    return f"{value:.10g}" if isinstance(value, float) else str(value)


def context(plan, handler: dict) -> dict:
    from provisioner.jobs.disk import weights_only_save

    spec, shape, par = plan.spec, plan.shape, spec_parallel(plan)
    fw_key = plan.framework["id"].replace("-", "_")
    fwmodel = dict(plan.model_row.get(fw_key) or {})
    tr = asdict(spec.train)
    tr["save_every"] = spec.train.save_every
    tr["weights_only_save"] = weights_only_save(spec, plan.kind)  # the last save without optimizer / RNG state
    tr["min_lr"] = spec.train.min_lr if spec.train.min_lr is not None else spec.train.lr / 10
    tr["micro_batches"] = spec.train.global_batch_size // (spec.train.micro_batch_size * spec.parallel.data)
    grpo = None
    if spec.grpo:
        grpo = asdict(spec.grpo)
        grpo["infer_tp"] = spec.grpo.infer_tensor_parallel or spec.parallel.tensor
        grpo["max_model_len"] = spec.grpo.max_prompt_length + spec.grpo.max_response_length
        grpo["reward"] = list(spec.grpo.reward)
    hbm = plan.memory.get("hbm_mb")
    return {
        "job": {"name": spec.name, "kind": plan.kind["id"], "title": plan.kind["title"],
                "source": spec.source.rsplit("/", 1)[-1]},
        "paths": plan.paths,
        "steps": [s.to_dict() | {"template": row["template"]} for s, row in zip(plan.steps, plan.kind["steps"], strict=True)],
        "model": {**shape.to_dict(), "path": spec.model, "head_dim": shape.head_dim},
        "fwmodel": fwmodel,
        "scripts": dict(plan.scripts),
        "flags": sorted(plan.flags),  # templates test for a flag by name (job_flags); the text is the template's
        "data": {"path": spec.data.path, "format": spec.data.format, "handler": handler["handler"],
                 "input": plan.paths["data_input"], "convert": handler.get("convert"),
                 "map_keys": dict(spec.data.map_keys) or dict(handler.get("map_keys") or {}),
                 "prompt_type": spec.data.prompt_type or fwmodel.get("prompt_type")},
        "tools": {"dataconv": f"{plan.paths['job_dir']}/{DATACONV}"},
        "par": par,
        "train": tr,
        "grpo": grpo,
        "precision": plan.precision,
        "checkout": plan.checkout,
        "env": sorted(plan.env.items()),
        "storage": spec.storage,
        "wait_timeout": spec.wait_timeout,
        "ports": {"ray": _ray_port(), "dashboard": _dashboard_port()},
        # MindSpore's max_device_memory: the HBM less what the runtime keeps (as the upstream configs do)
        "device_memory_gb": (hbm - plan.memory["parts_mb"]["runtime_reserve"]) // 1024 if hbm else None,
    }


def spec_parallel(plan) -> dict:
    p = plan.spec.parallel
    return {"tp": p.tensor, "pp": p.pipeline, "dp": p.data, "chips": p.chips, "nnodes": plan.nnodes,
            "nproc": plan.chips_per_node, "world": plan.world, "sequence_parallel": p.tensor > 1}


def _ray_port() -> int:
    return RAY_PORT


def _dashboard_port() -> int:
    return RAY_DASHBOARD_PORT


def files(plan, handler: dict) -> dict[str, str]:
    """Every file of the job directory, by path relative to it."""
    from provisioner.image.templates import render_in

    env = _env()
    ctx = context(plan, handler)
    kind = plan.kind["id"]
    out: dict[str, str] = {}

    def render(name: str, **extra) -> str:
        return render_in(env, name, {**ctx, **extra}, f"job kind {kind}")

    for step in ctx["steps"]:
        out[step["script"]] = render(f"{TEMPLATES}/{kind}/{step['template']}", step=step)
    out["run.sh"] = render(f"{TEMPLATES}/run.sh.j2")
    for name in config_templates(kind):
        out[f"configs/{name[:-3]}"] = render(f"{TEMPLATES}/{kind}/configs/{name}")
    if handler.get("convert"):
        out[DATACONV] = dataconv_source()
    return out


def dataconv_source() -> str:
    """provisioner/jobs/dataconv.py as the job runs it (standard library only, so any image's Python runs it)."""
    from pathlib import Path

    return (Path(__file__).with_name("dataconv.py")).read_text(encoding="utf-8")


def config_templates(kind: str) -> list[str]:
    """The config templates of a kind: every *.j2 under templates/jobs/<kind>/configs/ (subfolders kept)."""
    from provisioner.paths import data_dir

    base = data_dir("templates") / TEMPLATES / kind / "configs"
    if not base.is_dir():
        return []
    return sorted(str(p.relative_to(base)) for p in base.rglob("*.j2"))
