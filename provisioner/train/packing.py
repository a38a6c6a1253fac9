"""Pack samples into rows and turn rows into model inputs.

Packed rows carry position ids that restart at 0 for every sample. transformers
reads that as "several sequences in one row": flash attention (CUDA, and
npu_fusion_attention on Ascend) takes its varlen path when the batch is one
flat row, and sdpa/eager build a block-diagonal causal mask. Either way no
token attends across samples, which the packed-vs-unpacked test checks.
Targets are shifted per sample, so a sample's last token never learns the
next sample's first token.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from provisioner.train.chatml import Example

IGNORE = -100


def pack_rows(
    lengths: Sequence[int],
    order: Sequence[int],
    capacity: int,
    window: int = 2048,
    max_items: int | None = None,
) -> list[list[int]]:
    """Best-fit-decreasing packing of samples (in ``order``) into rows of ``capacity`` tokens and at most
    ``max_items`` samples.

    Working in windows of the shuffled order keeps the packing local, so
    every row still mixes randomly chosen samples, while long and short ones
    fill each other's gaps.
    """
    rows: list[list[int]] = []
    for start in range(0, len(order), window):
        chunk = sorted(order[start : start + window], key=lambda i: -lengths[i])
        free: list[tuple[int, int]] = []  # (free tokens, row index), sorted
        for idx in chunk:
            need = lengths[idx]
            pos = bisect.bisect_left(free, (need, -1))
            if pos < len(free):
                space, row = free.pop(pos)
                rows[row].append(idx)
                space -= need
            else:
                rows.append([idx])
                row, space = len(rows) - 1, capacity - need
            if space > 0 and (max_items is None or len(rows[row]) < max_items):
                bisect.insort(free, (space, row))
    return rows


@dataclass
class Batch:
    input_ids: torch.Tensor  # [B, T]
    position_ids: torch.Tensor  # [B, T]
    targets: torch.Tensor  # [B, T], IGNORE where no loss (kept on the host, for inspection)
    attention_mask: torch.Tensor | None  # [B, T] for padded batches, None when packed
    n_tokens: int  # real (non-pad) tokens
    n_targets: int
    seq_lens: list[int]  # lengths of the samples inside, for the FLOP count
    # Flat positions that have a target, and those targets: found here on the host so the
    # loss needs no device-to-host sync to select them.
    target_pos: torch.Tensor = field(default_factory=lambda: torch.empty(0, dtype=torch.long))
    target_ids: torch.Tensor = field(default_factory=lambda: torch.empty(0, dtype=torch.long))

    def __post_init__(self) -> None:
        if self.target_pos.numel() == 0 and self.n_targets:
            flat = self.targets.reshape(-1)
            self.target_pos = (flat != IGNORE).nonzero().squeeze(1)
            self.target_ids = flat.index_select(0, self.target_pos)

    def inputs(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """Positional arguments of ``model.SFTLoss.forward``."""
        return self.input_ids, self.position_ids, self.target_pos, self.target_ids, self.attention_mask

    def to(self, device: torch.device) -> Batch:
        if device.type == "cpu":
            return self

        def move(t: torch.Tensor) -> torch.Tensor:
            return t.pin_memory().to(device, non_blocking=True)

        return Batch(
            move(self.input_ids),
            move(self.position_ids),
            self.targets,
            None if self.attention_mask is None else move(self.attention_mask),
            self.n_tokens,
            self.n_targets,
            self.seq_lens,
            move(self.target_pos),
            move(self.target_ids),
        )


def shifted_targets(ex: Example) -> np.ndarray:
    out = np.full(len(ex), IGNORE, dtype=np.int64)
    out[:-1] = np.where(ex.trained[1:], ex.ids[1:], IGNORE)
    return out


def collate_packed(
    examples: Sequence[Example], rows: Sequence[Sequence[int]], pad_id: int, flat: bool
) -> Batch:
    """Rows of packed samples. ``flat`` joins all rows into one (what varlen flash attention needs);
    otherwise rows are stacked and the short ones padded with a separate dummy sequence."""
    row_ids, row_pos, row_tgt = [], [], []
    seq_lens: list[int] = []
    for row in rows:
        ids = [examples[i].ids for i in row]
        row_ids.append(np.concatenate(ids))
        row_pos.append(np.concatenate([np.arange(len(x)) for x in ids]))
        row_tgt.append(np.concatenate([shifted_targets(examples[i]) for i in row]))
        seq_lens.extend(len(x) for x in ids)
    if flat:
        row_ids, row_pos, row_tgt = (
            [np.concatenate(row_ids)],
            [np.concatenate(row_pos)],
            [np.concatenate(row_tgt)],
        )
    n_tokens = sum(seq_lens)
    width = max(len(r) for r in row_ids)
    B = len(row_ids)
    input_ids = np.full((B, width), pad_id, dtype=np.int64)
    position_ids = np.zeros((B, width), dtype=np.int64)
    targets = np.full((B, width), IGNORE, dtype=np.int64)
    for b in range(B):
        n = len(row_ids[b])
        input_ids[b, :n] = row_ids[b]
        position_ids[b, :n] = row_pos[b]
        targets[b, :n] = row_tgt[b]
        # Padding is its own sequence (positions from 0), so real tokens never see it.
        position_ids[b, n:] = np.arange(width - n)
    return Batch(
        torch.from_numpy(input_ids),
        torch.from_numpy(position_ids),
        torch.from_numpy(targets),
        None,
        n_tokens,
        int((targets != IGNORE).sum()),
        seq_lens,
    )


def collate_padded(
    examples: Sequence[Example], indices: Sequence[int], pad_id: int, multiple: int = 8
) -> Batch:
    """One sample per row, right-padded to the longest (rounded up to ``multiple``)."""
    seqs = [examples[i] for i in indices]
    longest = max(len(s) for s in seqs)
    width = -(-longest // multiple) * multiple
    B = len(seqs)
    input_ids = np.full((B, width), pad_id, dtype=np.int64)
    targets = np.full((B, width), IGNORE, dtype=np.int64)
    attention_mask = np.zeros((B, width), dtype=np.int64)
    for b, s in enumerate(seqs):
        n = len(s)
        input_ids[b, :n] = s.ids
        targets[b, :n] = shifted_targets(s)
        attention_mask[b, :n] = 1
    position_ids = np.broadcast_to(np.arange(width), (B, width)).copy()
    return Batch(
        torch.from_numpy(input_ids),
        torch.from_numpy(position_ids),
        torch.from_numpy(targets),
        torch.from_numpy(attention_mask),
        sum(len(s) for s in seqs),
        int((targets != IGNORE).sum()),
        [len(s) for s in seqs],
    )
