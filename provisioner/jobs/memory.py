"""Per-chip memory estimate of a framework job, checked against the card's HBM.

    training state   params_per_chip x (fixed + sharded / DP) bytes   (distributed / parallel optimizer)
    activations      34 x seq x micro_batch x hidden / TP per layer, layers of one pipeline stage, times the
                     micro-batches the first 1F1B stage holds (min(PP, micro-batches)); 2 x ... with full
                     recomputation
    logits           8 x seq x micro_batch x vocab / TP (fp32 logits and their gradient, last stage)
    reserve          what the runtime keeps for itself

GRPO (MindSpeed-RL integrated workers) adds the reference model's bf16 weights in the training phase and
checks that the rollout engine's weights leave room for its KV cache inside gpu_memory_utilization.
Constants come from matrices/jobs.yaml (job_memory); the estimate is deliberately simple and says so.
"""

from __future__ import annotations

from provisioner.jobs import catalog
from provisioner.jobs.model import Shape
from provisioner.jobs.spec import JobSpec, Parallel

MB = 1 << 20


def stage_params(shape: Shape, pp: int) -> int:
    """Parameters of the largest pipeline stage: its layers plus the embedding (first) or output layer (last)."""
    layers = -(-shape.layers // pp)
    first = layers * shape.layer_params() + shape.embedding_params()
    last = layers * shape.layer_params() + shape.hidden + (0 if shape.tied else shape.embedding_params())
    if pp == 1:
        return shape.params()
    return max(first, last)


def training_state_bytes(matrix, shape: Shape, par: Parallel, precision_row: str) -> tuple[float, int]:
    row = catalog.memory_constant(matrix, precision_row)
    per_chip = stage_params(shape, par.pipeline) / par.tensor
    per_param = row["fixed"] + row["sharded"] / par.data
    return per_param, int(per_chip * per_param)


def activation_bytes(matrix, shape: Shape, par: Parallel, seq: int, micro_batch: int, recompute: str,
                     micro_batches: int) -> int:
    ident = "recompute-bytes" if recompute == "full" else "activation-bytes"
    per_token_hidden = catalog.memory_constant(matrix, ident)["fixed"]
    layers = -(-shape.layers // par.pipeline)
    in_flight = min(par.pipeline, max(micro_batches, 1))
    return int(per_token_hidden * seq * micro_batch * shape.hidden / par.tensor * layers * in_flight)


def logits_bytes(matrix, shape: Shape, par: Parallel, seq: int, micro_batch: int) -> int:
    per = catalog.memory_constant(matrix, "logits-bytes")["fixed"]
    return int(per * seq * micro_batch * shape.vocab / par.tensor)


def estimate(matrix, spec: JobSpec, shape: Shape, memory_kind: str, precision: str, hbm_mb: int | None) -> dict:
    """The estimate as a JSON-ready dict: parts in MB, total, HBM and whether it fits (None: HBM unknown)."""
    par, tr = spec.parallel, spec.train
    micro_batches = tr.global_batch_size // max(tr.micro_batch_size * par.data, 1)
    if memory_kind == "mindformers":
        state_row = "mindformers-fp32-params"
    else:
        state_row = "megatron-bf16" if precision == "bf16" else "megatron-fp16"
    seq = tr.seq_length
    if memory_kind == "grpo" and spec.grpo:
        # the actor trains on prompt + response, up to vLLM's max_model_len
        seq = max(seq, spec.grpo.max_prompt_length + spec.grpo.max_response_length)
    parts: dict[str, int] = {}
    per_param, parts["training_state"] = training_state_bytes(matrix, shape, par, state_row)
    parts["activations"] = activation_bytes(matrix, shape, par, seq, tr.micro_batch_size, tr.recompute, micro_batches)
    parts["logits"] = logits_bytes(matrix, shape, par, seq, tr.micro_batch_size)
    notes = [f"{per_param:g} bytes per parameter ({state_row}: {catalog.memory_constant(matrix, state_row)['why']})"]
    rollout: dict | None = None
    if memory_kind == "grpo" and spec.grpo:
        # The reference model (same weights, bf16) stays on the chips next to the actor.
        parts["reference_weights"] = int(2 * stage_params(shape, par.pipeline) / par.tensor)
        infer_tp = spec.grpo.infer_tensor_parallel or par.tensor
        weights = 2 * shape.params() / infer_tp
        rollout = {"weights_mb": _mb(weights), "infer_tensor_parallel": infer_tp,
                   "budget_mb": int(spec.grpo.gpu_memory_utilization * hbm_mb) if hbm_mb else None}
        notes.append("rollout: actor, gradients and optimizer are offloaded to host memory while vLLM generates")
    parts["runtime_reserve"] = catalog.memory_constant(matrix, "runtime-reserve-mb")["fixed"] * MB
    total = sum(parts.values())
    out: dict = {
        "parts_mb": {k: _mb(v) for k, v in parts.items()},
        "total_mb": _mb(total),
        "hbm_mb": hbm_mb,
        "params": shape.params(),
        "params_per_chip": int(stage_params(shape, par.pipeline) / par.tensor),
        "parallel": par.label(),
        "fits": None if hbm_mb is None else total <= hbm_mb * MB,
        "notes": notes,
        "problems": [],
    }
    if rollout:
        out["rollout"] = rollout
        if rollout["budget_mb"] is not None and spec.grpo and rollout["weights_mb"] >= rollout["budget_mb"]:
            out["fits"] = False
            out["problems"].append(f"the rollout weights ({rollout['weights_mb']} MB per chip at inference TP {infer_tp})"
                                f" leave no KV cache inside gpu_memory_utilization {spec.grpo.gpu_memory_utilization}"
                                f" ({rollout['budget_mb']} MB)")
    return out


def describe(est: dict) -> str:
    parts = ", ".join(f"{k.replace('_', ' ')} {_gb(v)}" for k, v in est["parts_mb"].items())
    return f"about {_gb(est['total_mb'])} per chip ({parts})"


def suggest(matrix, spec: JobSpec, shape: Shape, memory_kind: str, precision: str, hbm_mb: int,
            valid) -> str | None:
    """The smallest-TP parallelism over the same chips that fits, for the refusal (valid(par) filters shapes)."""
    from dataclasses import replace

    chips = spec.parallel.chips
    options = []
    for tp in _divisors(chips):
        for pp in _divisors(chips // tp):
            par = Parallel(tp, pp, chips // (tp * pp))
            if par == spec.parallel or not valid(par):
                continue
            est = estimate(matrix, replace(spec, parallel=par), shape, memory_kind, precision, hbm_mb)
            if est["fits"]:
                options.append((tp * pp, tp, est["total_mb"], par))
    if not options:
        return None
    _, _, total, par = min(options, key=lambda o: (o[0], o[1]))
    return f"{par.label()} fits (about {_gb(total)} per chip)"


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def _mb(value: float) -> int:
    return int(round(value / MB))


def _gb(mb: int) -> str:
    return f"{mb / 1024:.1f} GB"
