"""Disk a framework job writes under its output directory, and whether the output's filesystem can hold it.

    converted weights   params x weights-bytes (Megatron kinds; MindFormers reads the Hugging Face directory)
    checkpoints         params x checkpoint bytes (optimizer and RNG state included: a resume needs them) x held,
                        held = min(max(train.keep_checkpoints, 1) + 1, saves): the job keeps the newest
                        keep_checkpoints (the train step prunes older ones) and one more exists while the next one
                        is written
    export              params x weights-bytes: the Hugging Face weights, the final weights without optimizer state

train.keep_checkpoints: 0 keeps no resumable checkpoint once the job is complete: while training the newest one
stays (a stopped job resumes from it), and the export step removes them all once the Hugging Face weights are
written. A MindSpeed-LLM SFT job that saves once (no save_interval) then saves its last iteration without optimizer
and RNG state (Megatron's --no-save-optim --no-save-rng): weights-bytes a parameter, not checkpoint bytes.
`kept_bytes` is what the output holds after the job; `total_bytes` the most it holds while the job runs.

Bytes per parameter come from matrices/jobs.yaml (job_memory: checkpoint-megatron, checkpoint-mindformers,
weights-bytes). The preprocessed data and the logs are small beside these and not counted. `check` reads the
free space of the filesystem that holds (or will hold) the output directory on this machine; where nothing can
be read there (a path only the job's nodes see), it says nothing rather than guess.
"""

from __future__ import annotations

import os

from provisioner.jobs import catalog
from provisioner.jobs.model import Shape
from provisioner.jobs.spec import JobSpec

GB = 10**9  # disks are sold and `df -H` counts in powers of ten


def estimate(matrix, spec: JobSpec, shape: Shape, kind: dict) -> dict:
    """The job's disk need as a JSON-ready dict (bytes, and the parts that make it up)."""
    params = shape.params()
    weights_b = catalog.memory_constant(matrix, "weights-bytes")["fixed"]
    ckpt_row = "checkpoint-mindformers" if kind["launcher"] == "msrun" else "checkpoint-megatron"
    tr = spec.train
    saves = -(-tr.steps // tr.save_every)  # every save_interval, and after the last step when it is no multiple
    optimizer = not weights_only_save(spec, kind)
    per_ckpt = params * (catalog.memory_constant(matrix, ckpt_row)["fixed"] if optimizer else weights_b)
    held = min(max(tr.keep_checkpoints, 1) + 1, saves)
    step_ids = {s["id"] for s in kind["steps"]}
    parts = {
        "weights": params * weights_b if "convert" in step_ids else 0,
        "checkpoints": per_ckpt * held,
        "export": params * weights_b if "export" in step_ids else 0,
    }
    kept = parts["weights"] + parts["export"] + per_ckpt * min(tr.keep_checkpoints, saves)
    return {"total_bytes": sum(parts.values()), "parts_bytes": parts, "checkpoint_bytes": per_ckpt,
            "checkpoints_held": held, "keep_checkpoints": tr.keep_checkpoints, "saves": saves,
            "optimizer_state": optimizer, "kept_bytes": kept}


def weights_only_save(spec: JobSpec, kind: dict) -> bool:
    """A MindSpeed-LLM SFT job that keeps no checkpoint (keep_checkpoints 0) and saves once, at its last iteration:
    that save is written without optimizer and RNG state (--no-save-optim --no-save-rng), as nothing resumes
    from it; the export reads only the weights."""
    return kind["id"] == "mindspeed-llm-sft" and spec.train.keep_checkpoints == 0 \
        and spec.train.save_every == spec.train.steps


def gb(n: float) -> str:
    return f"{n / GB:.0f} GB" if n >= 10 * GB else f"{n / GB:.1f} GB"


def describe(disk: dict) -> str:
    """One line: the total and what makes it up."""
    p = disk["parts_bytes"]
    held, keep = disk["checkpoints_held"], disk["keep_checkpoints"]
    state = "with optimizer state" if disk.get("optimizer_state", True) else "without optimizer state"
    what = [f"{held} checkpoint{'s' if held != 1 else ''} of {gb(disk['checkpoint_bytes'])} {state}"
            f" (train.keep_checkpoints {keep}"
            + (", and one more while the next is written" if held > max(keep, 1) else "") + ")"]
    if p["weights"]:
        what.append(f"converted weights {gb(p['weights'])}")
    if p["export"]:
        what.append(f"final Hugging Face weights {gb(p['export'])}")
    line = f"about {gb(disk['total_bytes'])}: " + ", ".join(what)
    if keep == 0:
        line += f"; {gb(disk['kept_bytes'])} kept after the export (the checkpoints removed)"
    return line


def check(spec: JobSpec, disk: dict, statvfs=None) -> list[str]:
    """Refusals when the filesystem of the output directory cannot hold what the job writes (what an earlier
    run left there counts as written); nothing when the free space cannot be read on this machine."""
    where = _existing(spec.output)
    if where is None:
        return []
    try:
        st = (statvfs or os.statvfs)(where)
    except OSError:
        return []
    free = st.f_bavail * st.f_frsize
    written = _size(spec.output) if where == spec.output else 0
    if free + written >= disk["total_bytes"]:
        return []
    earlier = f" (the earlier run there holds {gb(written)})" if written else ""
    return [f"{spec.at('output')}: the job writes {describe(disk)} under {spec.output}, and its filesystem has"
            f" {gb(free)} free{earlier}; free space, lower train.keep_checkpoints or choose another output"]


def _existing(path: str) -> str | None:
    """The path, or its nearest ancestor that exists (the filesystem the output will be created on)."""
    while path and not os.path.exists(path):
        parent = os.path.dirname(path)
        if parent == path:
            return None
        path = parent
    return path or None


def _size(top: str) -> int:
    total = 0
    for root, _dirs, names in os.walk(top):
        for name in names:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
            except OSError:
                pass
    return total
