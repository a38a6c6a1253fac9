"""JobSpec + matrix + image stack + chips -> a validated JobPlan with every step script rendered.

Validation happens here, up front, before any container starts: the parallelism must use exactly the
chips of the launch, the model's heads / KV heads / FFN / vocabulary must split over TP and its layers
over PP, the batch sizes must split over DP, the image's stack must carry the job's framework, the
launch variables must be known and in range, and the per-chip memory estimate must fit the card's HBM.
Every refusal becomes one line (JobRefused joins the reasons).

The plan's files (step scripts, the driver run.sh, framework configs) are rendered from
templates/jobs/ by provisioner.jobs.render and written under <output>/provision-job/ by the launcher, or into a ConfigMap by
`provision k8s --job`.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field, replace

from provisioner.errors import ProvisionError
from provisioner.jobs import catalog, memory
from provisioner.jobs import disk as jobdisk
from provisioner.jobs import model as models
from provisioner.jobs.spec import JobSpec, Parallel

SCHEMA = "provision.job/1"
JOB_DIR = "provision-job"
DRIVER = "run.sh"


class JobRefused(ProvisionError):
    """The job cannot run as written; the message names every reason."""

    def __init__(self, reasons: list[str]):
        super().__init__("; ".join(reasons))
        self.reasons = reasons


@dataclass(frozen=True)
class Step:
    id: str
    title: str
    run: str  # once | distributed | ray
    outputs: tuple[str, ...]
    script: str  # file under <job dir>/steps/

    def to_dict(self) -> dict:
        return {"id": self.id, "title": self.title, "run": self.run, "outputs": list(self.outputs),
                "script": f"steps/{self.script}"}


@dataclass
class JobPlan:
    spec: JobSpec
    kind: dict
    framework: dict
    model_row: dict
    shape: models.Shape
    card: dict
    chips_per_node: int
    nnodes: int
    precision: str
    memory: dict
    paths: dict
    steps: list[Step]
    env: dict
    checkout: str
    release: str | None
    scripts: dict = field(default_factory=dict)  # the framework's scripts for its release (job_scripts)
    flags: frozenset = frozenset()  # the framework flags its release takes (job_flags)
    disk: dict = field(default_factory=dict)  # what the job writes under its output (provisioner.jobs.disk)
    files: dict = field(default_factory=dict)  # path under the job dir -> text
    notes: list[str] = field(default_factory=list)

    @property
    def job_dir(self) -> str:
        return self.paths["job_dir"]

    @property
    def world(self) -> int:
        return self.chips_per_node * self.nnodes

    def digest(self) -> str:
        """Hash of every rendered file: the same job renders the same scripts."""
        h = hashlib.sha256()
        for name in sorted(self.files):
            h.update(name.encode() + b"\0" + self.files[name].encode() + b"\0")
        return h.hexdigest()[:16]

    def to_dict(self) -> dict:
        return {
            "schema": SCHEMA,
            "job": self.spec.to_dict(),
            "kind": self.kind["id"],
            "title": self.kind["title"],
            "framework": {"id": self.framework["id"], "name": self.framework["name"], "checkout": self.checkout,
                          "release": self.release},
            "model": self.shape.to_dict(),
            "card": self.card,
            "chips_per_node": self.chips_per_node,
            "nnodes": self.nnodes,
            "parallel": self.spec.parallel.label(),
            "precision": self.precision,
            "memory": self.memory,
            "disk": self.disk,
            "paths": self.paths,
            "steps": [s.to_dict() for s in self.steps],
            "env": dict(self.env),
            "files": sorted(self.files),
            "digest": self.digest(),
            "notes": list(self.notes),
        }


# ---------------------------------------------------------------------------------------------- build


def build(matrix, spec: JobSpec, card: str, chips_per_node: int, nnodes: int = 1, stack: dict | None = None,
          image: str = "the image", framework: dict | None = None) -> JobPlan:
    """Validate `spec` for this launch and render its files; JobRefused lists every reason it cannot run.

    `stack`: the image's Stack (its label); `framework`: its framework labels (image.labels.framework_from_labels),
    when it has them."""
    kind = catalog.kind(matrix, spec.kind, spec.at("kind"))
    fw = catalog.framework(matrix, kind)
    card_row, family, _ = matrix.lookup_card(card)
    reasons: list[str] = []
    notes: list[str] = [f"{image}: {n}" for n in (framework or {}).get("notes") or []]  # labels it could not use
    par = spec.parallel

    world = chips_per_node * nnodes
    if par.chips != world:
        where = f"{chips_per_node} chip(s)" + (f" x {nnodes} nodes" if nnodes > 1 else "")
        reasons.append(f"{spec.at('parallel')}: {par.label()} uses {par.chips} chips but the launch has {world}"
                       f" ({where}); make tensor x pipeline x data = {world}")
    if spec.storage == "local" and nnodes > 1:
        # Megatron / MindSpeed / MindFormers write each rank's checkpoint shards on the node the rank runs on
        # (the iteration tracker on node 0 only): no node would hold a whole checkpoint to resume or export.
        reasons.append(f"{spec.at('storage')}: storage: local on {nnodes} nodes leaves each node only its own ranks'"
                       " checkpoint shards (no node can resume or export the model); put the output on a filesystem"
                       " every node mounts at the same path and write storage: shared")
    if kind["id"] == "mindspeed-rl-grpo" and spec.grpo is None:
        spec = replace(spec, grpo=_default_grpo())
    if kind["id"] != "mindspeed-rl-grpo" and spec.grpo is not None:
        reasons.append(f"{spec.at('grpo')}: grpo: belongs to mindspeed-rl-grpo jobs, not {kind['id']}")

    reasons += data_option_reasons(spec, kind)
    if spec.train.keep_checkpoints == 0 and not any(s["id"] == "export" for s in kind["steps"]):
        reasons.append(f"{spec.at('train.keep_checkpoints')}: keep_checkpoints 0 removes the checkpoints once the"
                       f" final weights are exported, and {kind['id']} jobs export nothing (their checkpoints are"
                       " the result): keep at least 1")

    config_path = spec.model_config or os.path.join(spec.model, "config.json")
    where = spec.at("model_config" if spec.model_config else "model")
    mtype = models.model_type(config_path)
    model_row = catalog.model_row(matrix, mtype, where) if mtype else None
    shape = models.read(config_path, where, bool(model_row and model_row["qkv_bias"]))
    if model_row is None:
        model_row = catalog.model_row(matrix, shape.model_type, where)
    reasons += shape_reasons(spec, shape, par)
    reasons += batch_reasons(spec, kind, shape)
    structural = bool(reasons)  # the memory estimate means nothing for a split that cannot run

    why_not = catalog.stack_carries(stack, fw, framework)
    if why_not:
        reasons.append(f"{image} cannot run a {kind['id']} job: {why_not}; build an image with {fw['name']}:"
                       f" {catalog.build_hint(fw, card_row['id'])}")
    precision = _precision(stack, family)
    if stack and (stack.get("chip") or {}).get("family") not in (None, family["id"]):
        reasons.append(f"{image} was built for chip family {stack['chip']['family']}, the launch is on {family['id']}")

    env, env_notes, env_reasons = job_env(matrix, kind, spec)
    notes += env_notes
    reasons += env_reasons
    handler = catalog.data_handler(matrix, fw["id"], spec.data.format, spec.at("data.format"))
    if handler.get("map_keys") and spec.data.map_keys:
        reasons.append(f"{spec.at('data.map_keys')}: data.map_keys does not apply to format {spec.data.format}: its"
                       f" conversion writes the fields {handler['handler']} reads; remove it")
    kind = with_steps_for(kind, handler)

    hbm = hbm_mb(matrix, card_row)
    est = memory.estimate(matrix, spec, shape, kind["memory"], precision, hbm["mb"])
    if hbm["note"]:
        notes.append(hbm["note"])
    if est["fits"] is False and not structural:
        hint = memory.suggest(matrix, spec, shape, kind["memory"], precision, hbm["mb"],
                              lambda p: not shape_reasons(spec, shape, p) and not batch_reasons(replace(spec, parallel=p), kind, shape))
        extra = "; ".join(est["problems"])
        reasons.append(
            f"{spec.at('parallel')}: a {shape.billions()} {spec.kind} with {par.label()} needs {memory.describe(est)},"
            f" more than the {hbm['mb'] / 1024:.0f} GB HBM of a {card_row['id']} chip" + (f" ({extra})" if extra else "")
            + (f"; {hint}" if hint else "; no tensor/pipeline split of these chips fits: use more chips or recompute: full"))
    if reasons:
        raise JobRefused(reasons)

    release = catalog.release(stack, fw)
    # the release's own launch variables sit between the job kind's and the job file's
    env = {**env, **{k: v for k, v in catalog.release_env(matrix, fw, release).items() if k not in dict(spec.env)}}
    gap = catalog.example_gap(matrix, fw, model_row["model_type"], release, shape.params())
    if gap:
        notes.append(gap)
    fw_scripts, why_not = catalog.scripts(matrix, fw["id"], model_row["model_type"], release, framework)
    if why_not:
        reasons.append(f"{image} cannot run a {kind['id']} job: {why_not}; build an image with one of those"
                       f" releases: {catalog.build_hint(fw, card_row['id'])}")
    if reasons:
        raise JobRefused(reasons)

    checkout = catalog.checkout(fw, spec.framework_dir, framework)
    plan = JobPlan(spec=spec, kind=kind, framework=fw, model_row=model_row, shape=shape,
                   card={"id": card_row["id"], "name": card_row["name"], "family": family["id"]},
                   chips_per_node=chips_per_node, nnodes=nnodes, precision=precision, memory=est,
                   paths=paths(spec, kind, handler), steps=[], env=env, checkout=checkout, release=release, notes=notes,
                   scripts=fw_scripts, flags=catalog.flags(matrix, fw, stack),
                   disk=jobdisk.estimate(matrix, spec, shape, kind))
    plan.steps = steps(plan)
    plan.files = render_files(plan, handler)
    return plan


def _default_grpo():
    from provisioner.jobs.spec import Grpo

    return Grpo()


def with_steps_for(kind: dict, handler: dict) -> dict:
    """The kind with the steps this data format runs: a step marked `when: convert` only for a format whose
    job_data_formats row names a conversion (the data step, before preprocessing)."""
    rows = [r for r in kind["steps"] if r.get("when") != "convert" or handler.get("convert")]
    return kind if len(rows) == len(kind["steps"]) else {**kind, "steps": rows}


def data_option_reasons(spec: JobSpec, kind: dict) -> list[str]:
    """data.map_keys / data.prompt_type given to a kind whose templates do not read them (job_kinds data_options
    in matrices/jobs.yaml): refused, or the job would run on the data's unrenamed fields without a word."""
    used = set(kind.get("data_options") or ())
    given = {"map_keys": bool(spec.data.map_keys), "prompt_type": spec.data.prompt_type is not None}
    return [f"{spec.at('data.' + key)}: data.{key} is not used by {kind['id']} jobs (their preprocessing reads the"
            f" {spec.data.format} format's own fields and template); remove it" + (
                " and rename the data's fields to the format's" if key == "map_keys" else "")
            for key in ("map_keys", "prompt_type") if given[key] and key not in used]


def shape_reasons(spec: JobSpec, shape: models.Shape, par: Parallel) -> list[str]:
    """What the model's shape forbids for this split (Megatron/MindFormers divide these over TP and PP)."""
    at = spec.at("parallel")
    tp, pp = par.tensor, par.pipeline
    out = []
    for what, value in (("attention heads", shape.heads), ("KV heads (query groups)", shape.kv_heads),
                        ("FFN size", shape.ffn), ("vocabulary", shape.vocab)):
        if value % tp:
            out.append(f"{at}: tensor parallel {tp} does not divide the model's {what} ({value})")
    if shape.layers % pp:
        out.append(f"{at}: pipeline parallel {pp} does not divide the model's {shape.layers} layers")
    if tp > 1 and spec.train.seq_length % tp:
        out.append(f"{spec.at('train.seq_length')}: seq_length {spec.train.seq_length} must be a multiple of tensor"
                   f" parallel {tp} (sequence parallelism splits the sequence over TP)")
    return out


def batch_reasons(spec: JobSpec, kind: dict, shape: models.Shape) -> list[str]:
    tr, par = spec.train, spec.parallel
    out = []
    if tr.global_batch_size % (tr.micro_batch_size * par.data):
        out.append(f"{spec.at('train.global_batch_size')}: global_batch_size {tr.global_batch_size} must be a"
                   f" multiple of micro_batch_size x data parallel = {tr.micro_batch_size * par.data}")
    if kind["id"] == "mindspeed-rl-grpo" and spec.grpo:
        g = spec.grpo
        # MindSpeed-RL saves only every save_interval iterations (trainer/grpo_trainer_hybrid.py): the last
        # iteration must be one of them, or the job's result is never written.
        if tr.steps % tr.save_every:
            out.append(f"{spec.at('train.save_interval')}: save_interval {tr.save_every} must divide steps {tr.steps}"
                       " (MindSpeed-RL saves only at multiples of save_interval)")
        if (tr.global_batch_size * g.n_samples_per_prompt) % tr.micro_batch_size:
            out.append(f"{spec.at('train.micro_batch_size')}: global_batch_size x n_samples_per_prompt must be a multiple"
                       f" of micro_batch_size {tr.micro_batch_size}")
        infer_tp = g.infer_tensor_parallel or par.tensor
        if par.chips % infer_tp:
            out.append(f"{spec.at('grpo.infer_tensor_parallel')}: infer_tensor_parallel {infer_tp} must divide the"
                       f" {par.chips} chips")
        elif tr.global_batch_size % (par.chips // infer_tp):
            out.append(f"{spec.at('train.global_batch_size')}: global_batch_size {tr.global_batch_size} must be a"
                       f" multiple of the rollout data parallel size {par.chips // infer_tp} (chips / infer_tensor_parallel)")
        if shape.heads % infer_tp:
            out.append(f"{spec.at('grpo.infer_tensor_parallel')}: infer_tensor_parallel {infer_tp} does not divide the"
                       f" model's {shape.heads} attention heads")
        if g.max_prompt_length + g.max_response_length < tr.seq_length:
            out.append(f"{spec.at('train.seq_length')}: seq_length {tr.seq_length} exceeds max_prompt_length +"
                       f" max_response_length = {g.max_prompt_length + g.max_response_length} (vLLM max_model_len)")
    return out


def _precision(stack: dict | None, family: dict) -> str:
    compute = ((stack or {}).get("dtype") or {}).get("compute")
    if compute in ("bf16", "fp16"):
        return compute
    return "bf16" if family["bf16"] else "fp16"


def hbm_mb(matrix, card: dict) -> dict:
    """The card's HBM per chip: the card row's memory_mb, else the smallest of its chip models' hbm_mb."""
    if card.get("memory_mb"):
        return {"mb": card["memory_mb"], "note": None}
    chips = {c["model"]: c for c in matrix.rows("chips")}
    known = [chips[m]["hbm_mb"] for m in card.get("chip_models", []) if m in chips and chips[m].get("hbm_mb")]
    if known:
        note = None if len(set(known)) == 1 else (f"{card['id']} chips come with {sorted(set(known))} MB HBM;"
                                                  f" the memory estimate is checked against the smallest")
        return {"mb": min(known), "note": note}
    return {"mb": None, "note": f"no HBM size is known for {card['id']}; the memory estimate was not checked"}


def job_env(matrix, kind: dict, spec: JobSpec) -> tuple[dict, list[str], list[str]]:
    """The kind's launch variables with the job file's on top, checked against the matrix's launch-variable
    rules: (env, notes, refusals)."""
    from provisioner.host import launchvars

    env = dict(kind.get("env") or {})
    env.update(dict(spec.env))
    notes, reasons = [], []
    for issue in launchvars.check(matrix, dict(spec.env)):
        at = spec.at(f"env.{issue.name}")
        if issue.severity == "error":
            reasons.append(f"{at}: {issue.message}")
        else:
            notes.append(f"{at}: {issue.message}")
    return env, notes, reasons


def paths(spec: JobSpec, kind: dict, handler: dict | None = None) -> dict:
    out = spec.output
    convert = (handler or {}).get("convert")
    par = spec.parallel
    job_dir = f"{out}/{JOB_DIR}"
    if kind["launcher"] == "msrun":
        # MindFormers loads the Hugging Face safetensors directory itself (no converted copy)
        weights, checkpoints = spec.model, f"{out}/mindformers"
    else:
        weights = f"{out}/weights/mcore-tp{par.tensor}-pp{par.pipeline}"
        checkpoints = f"{out}/checkpoints/tp{par.tensor}-pp{par.pipeline}"
    return {
        "output": out,
        "job_dir": job_dir,
        "configs": f"{job_dir}/configs",
        "logs": f"{job_dir}/logs",
        "model": spec.model,
        "data": spec.data.path,
        # what preprocessing reads: the data step's output for a format converted first (JSON lines)
        "data_input": f"{out}/data-{convert}/{convert}.jsonl" if convert else spec.data.path,
        "weights": weights,
        "data_dir": f"{out}/data",
        "data_prefix": f"{out}/data/{spec.data.format}",
        "checkpoints": checkpoints,
        "export": f"{out}/hf",
    }


def mounts(spec: JobSpec) -> list[tuple[str, str, str]]:
    """What a job's containers mount, each at its own path: [(role, path, "ro" | "rw")].

    The model directory and the data file's directory read-only, the output directory read-write. The data
    directory is left out when the model or the output directory holds it; a read-write output inside the
    read-only data directory gets its own mount inside that one. `launch --job` (Docker binds) and `k8s --job`
    (hostPath volumes) both mount this list, so a layout behaves the same in both; Docker and the CRI runtimes
    mount a parent before the paths inside it, whatever the order here."""
    data_dir = os.path.dirname(spec.data.path)
    out = [("model", spec.model, "ro")]
    if not _under(data_dir, spec.model) and not _under(data_dir, spec.output):
        out.append(("data", data_dir, "ro"))
    out.append(("output", spec.output, "rw"))
    return out


def _under(path: str, parent: str) -> bool:
    return path == parent or path.startswith(parent.rstrip("/") + "/")


def steps(plan: JobPlan) -> list[Step]:
    fields = {k: v for k, v in plan.paths.items()}
    out = []
    for n, row in enumerate(plan.kind["steps"], 1):
        outputs = tuple(o.format(**fields) for o in row["outputs"])
        out.append(Step(row["id"], row["title"], row["run"], outputs, f"{n:02d}-{row['id']}.sh"))
    return out


# -------------------------------------------------------------------------------------------- render


def render_files(plan: JobPlan, handler: dict) -> dict[str, str]:
    from provisioner.jobs import render

    return render.files(plan, handler)


def existing_outputs(plan: JobPlan, exists=os.path.exists) -> dict[str, bool]:
    """step id -> whether all its outputs exist (as seen from this machine)."""
    return {s.id: all(exists(o) for o in s.outputs) for s in plan.steps}


def previous_run(plan: JobPlan, exists=os.path.exists) -> list[str]:
    """Outputs of an earlier run in the output directory (what `resume: false` refuses to mix with)."""
    found = [o for s in plan.steps for o in s.outputs if exists(o)]
    if exists(os.path.join(plan.job_dir, DRIVER)):
        found.append(os.path.join(plan.job_dir, DRIVER))
    return found


def job_json(plan: JobPlan) -> str:
    return json.dumps(plan.to_dict(), indent=2, sort_keys=False) + "\n"
