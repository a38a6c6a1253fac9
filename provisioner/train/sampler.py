"""A deterministic, resumable stream of micro-batches.

Epoch e is a fixed function of (data, seed, e): shuffle, pack into rows,
shuffle rows, group rows into micro-batches. Epochs follow each other with
no gap, so the whole run is one indexed stream and resuming needs only the
number of micro-batches already consumed. Global micro-batch i goes to rank
``i % world_size``; the index does not depend on the world size, so a run
may resume on a different number of cards.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from provisioner.train.packing import pack_rows


class MicroBatchStream:
    def __init__(
        self,
        lengths: Sequence[int],
        micro_batch_size: int,
        max_seq_len: int,
        packing: bool,
        seed: int,
        shuffle: bool = True,
        max_seqs: int | None = None,
    ) -> None:
        if not lengths:
            raise ValueError("no samples")
        self.lengths = list(lengths)
        self.micro_batch_size = micro_batch_size
        self.max_seq_len = max_seq_len
        self.packing = packing
        self.seed = seed
        self.shuffle = shuffle
        # At most so many samples in one micro-batch (a flat packed batch is one varlen attention call).
        self.max_seqs = max_seqs
        self._plans: dict[int, list[list[list[int]]]] = {}
        self._starts: list[int] = [0]  # _starts[e]: stream index where epoch e begins

    def epoch(self, e: int) -> list[list[list[int]]]:
        """Micro-batches of epoch ``e``: each a list of rows, each row a list of sample indices."""
        if e not in self._plans:
            if len(self._plans) > 2:
                self._plans.pop(min(self._plans))
            self._plans[e] = self._plan(e)
        return self._plans[e]

    def _plan(self, e: int) -> list[list[list[int]]]:
        n = len(self.lengths)
        rng = np.random.default_rng([self.seed, e])
        order = rng.permutation(n).tolist() if self.shuffle else list(range(n))
        if self.packing:
            rows = pack_rows(self.lengths, order, self.max_seq_len, max_items=self.max_seqs)
            if self.shuffle:
                rows = [rows[i] for i in rng.permutation(len(rows)).tolist()]
        else:
            rows = [[i] for i in order]
        return group_rows(rows, self.micro_batch_size, self.max_seqs)

    def epoch_size(self, e: int) -> int:
        return len(self.epoch(e))

    def locate(self, index: int) -> tuple[int, int]:
        """(epoch, offset within epoch) of stream position ``index``."""
        while self._starts[-1] <= index:
            e = len(self._starts) - 1
            self._starts.append(self._starts[-1] + self.epoch_size(e))
        e = int(np.searchsorted(self._starts, index, side="right")) - 1
        return e, index - self._starts[e]

    def get(self, index: int) -> list[list[int]]:
        e, off = self.locate(index)
        return self.epoch(e)[off]


def group_rows(rows: list[list[int]], per_batch: int, max_seqs: int | None) -> list[list[list[int]]]:
    """Consecutive rows into micro-batches of at most ``per_batch`` rows and ``max_seqs`` samples."""
    if max_seqs is None:
        return [rows[i : i + per_batch] for i in range(0, len(rows), per_batch)]
    out: list[list[list[int]]] = []
    batch: list[list[int]] = []
    seqs = 0
    for row in rows:
        if batch and (len(batch) == per_batch or seqs + len(row) > max_seqs):
            out.append(batch)
            batch, seqs = [], 0
        batch.append(row)
        seqs += len(row)
    if batch:
        out.append(batch)
    return out


def steps_for_epochs(stream: MicroBatchStream, num_epochs: float, per_step: int) -> int:
    """Optimizer steps that cover ``num_epochs`` of data, ``per_step`` micro-batches each."""
    whole = int(num_epochs)
    total = sum(stream.epoch_size(e) for e in range(whole))
    frac = num_epochs - whole
    if frac > 0:
        total += int(round(frac * stream.epoch_size(whole)))
    return max(1, -(-total // per_step))
