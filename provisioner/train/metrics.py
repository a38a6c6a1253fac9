"""Step metrics: the JSON-lines log, the FLOP/MFU estimate and the rank-0 progress bar.

FLOPs of one micro-batch (PaLM-style model FLOPs; recomputation from
gradient checkpointing is not counted, so this is MFU, not HFU):
  T = tokens, M = tokens with a target, s_i = length of sample i, L = layers,
  d = heads * head_dim, N_body = matmul parameters below the output head,
  N_head = output-head parameters, N_lora = adapter parameters.
  full: 6*N_body*T + 6*N_head*M + 12*L*d*sum(s_i^2)
  lora: (4*N_body + 6*N_lora)*T + 4*N_head*M + 12*L*d*sum(s_i^2)
Frozen weights cost forward (2) plus the input gradient (2) but no weight
gradient; the head runs only where there is a target (see model.SFTLoss);
the attention term counts QK^T and AV over each sample's own length.
"""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from provisioner.train.model import FlopShape

PEAKS_FILE = Path(__file__).with_name("peaks.yaml")


def micro_batch_flops(shape: FlopShape, seq_lens: Sequence[int], n_targets: int) -> float:
    tokens = sum(seq_lens)
    attn = 12.0 * shape.layers * shape.attn_width * sum(s * s for s in seq_lens)
    if shape.full:
        return 6.0 * shape.body_params * tokens + 6.0 * shape.head_params * n_targets + attn
    linear = (4.0 * shape.body_params + 6.0 * shape.adapter_params) * tokens
    return linear + 4.0 * shape.head_params * n_targets + attn


def peak_tflops(device_name: str, device_type: str, precision: str, override: float | None) -> float | None:
    """Peak TFLOP/s of one device: config, then environment, then peaks.yaml; None if unknown."""
    if override is not None:
        return override
    env = os.environ.get("PROVISION_PEAK_TFLOPS")
    if env:
        try:
            return float(env)
        except ValueError:
            pass
    if device_type == "cpu":
        return None
    table = yaml.safe_load(PEAKS_FILE.read_text()) or []
    for row in table:
        if re.search(str(row["match"]), device_name, re.IGNORECASE):
            value = row.get(precision)
            return float(value) if value is not None else None
    return None


class MetricsLog:
    """Rank 0 appends one JSON object per logged step; a resume drops lines past the checkpoint."""

    def __init__(self, path: Path, resume_step: int | None) -> None:
        self.path = path
        kept: list[str] = []
        if resume_step is not None and path.exists():
            for line in path.read_text().splitlines():
                try:
                    if json.loads(line).get("step", 0) <= resume_step:
                        kept.append(line)
                except ValueError:
                    break  # a line cut by the kill: everything after it is gone too
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text("".join(k + "\n" for k in kept))
        os.replace(tmp, path)
        self._fh = open(path, "a", buffering=1)

    def write(self, record: dict[str, Any]) -> None:
        self._fh.write(json.dumps(record, separators=(",", ":")) + "\n")

    def close(self) -> None:
        self._fh.close()


def read_metrics(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


class Progress:
    """tqdm on rank 0 when asked, or by default when stderr is a terminal."""

    def __init__(self, enabled: bool | str, total: int, initial: int) -> None:
        on = sys.stderr.isatty() if enabled == "auto" else bool(enabled)
        self._bar = None
        if on:
            from tqdm import tqdm

            self._bar = tqdm(total=total, initial=initial, unit="step", dynamic_ncols=True, file=sys.stderr)

    def update(self, step: int, loss: float | None, tokens_per_s: float | None) -> None:
        if self._bar is None:
            return
        self._bar.n = step
        post = {}
        if loss is not None:
            post["loss"] = f"{loss:.4f}"
        if tokens_per_s is not None:
            post["tok/s"] = f"{tokens_per_s:.0f}"
        self._bar.set_postfix(post, refresh=True)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
