"""Packing, collation and the resumable micro-batch stream."""

from __future__ import annotations

import random

import numpy as np

from provisioner.train.chatml import Example
from provisioner.train.packing import IGNORE, collate_packed, collate_padded, pack_rows
from provisioner.train.sampler import MicroBatchStream, steps_for_epochs


def _examples(lengths, seed=0):
    rng = np.random.default_rng(seed)
    out = []
    for n in lengths:
        trained = np.zeros(n, dtype=bool)
        trained[n // 2 :] = True  # second half is the "answer"
        out.append(Example(rng.integers(10, 1000, n).astype(np.int32), trained))
    return out


def test_pack_rows_uses_each_sample_once_within_capacity():
    rng = random.Random(0)
    lengths = [rng.randint(5, 300) for _ in range(2000)]
    order = list(range(len(lengths)))
    rng.shuffle(order)
    rows = pack_rows(lengths, order, 512)
    flat = sorted(i for row in rows for i in row)
    assert flat == list(range(len(lengths)))
    assert all(sum(lengths[i] for i in row) <= 512 for row in rows)
    fill = sum(lengths) / (len(rows) * 512)
    assert fill > 0.95, fill  # best-fit keeps padding waste small


def test_collate_packed_restarts_positions_and_never_targets_across_samples():
    exs = _examples([5, 3, 4])
    b = collate_packed(exs, [[0, 1], [2]], pad_id=0, flat=False)
    assert b.input_ids.shape == (2, 8) and b.attention_mask is None
    assert b.position_ids[0].tolist() == [0, 1, 2, 3, 4, 0, 1, 2]
    assert b.position_ids[1].tolist() == [0, 1, 2, 3, 0, 1, 2, 3]  # padding is its own sequence
    t = b.targets[0].tolist()
    assert t[4] == IGNORE and t[7] == IGNORE  # last token of each sample predicts nothing
    assert t[1:4] == exs[0].ids[2:5].tolist() and t[0] == IGNORE  # shifted, masked prompt
    assert b.targets[1, 4:].eq(IGNORE).all()
    assert b.n_tokens == 12 and b.seq_lens == [5, 3, 4]
    assert b.n_targets == sum(e.n_targets for e in exs)
    flat = collate_packed(exs, [[0, 1], [2]], pad_id=0, flat=True)
    assert flat.input_ids.shape == (1, 12)  # one row, no padding at all
    assert flat.position_ids[0].tolist() == [0, 1, 2, 3, 4, 0, 1, 2, 0, 1, 2, 3]


def test_collate_padded():
    exs = _examples([5, 11])
    b = collate_padded(exs, [0, 1], pad_id=7)
    assert b.input_ids.shape == (2, 16)
    assert b.attention_mask.sum().item() == 16 and b.input_ids[0, 5:].eq(7).all()
    assert b.targets[0, 4:].eq(IGNORE).all() and b.n_targets == exs[0].n_targets + exs[1].n_targets


def test_stream_is_deterministic_and_resumable():
    lengths = [random.Random(i).randint(10, 200) for i in range(300)]
    a = MicroBatchStream(lengths, 2, 256, packing=True, seed=5)
    b = MicroBatchStream(lengths, 2, 256, packing=True, seed=5)
    seq_a = [a.get(i) for i in range(0, 400, 3)]
    seq_b = [b.get(i) for i in range(399, -1, -1)][::-1][::3]  # other order, same answers
    assert seq_a == seq_b
    # Each epoch uses every sample exactly once and differs from the previous one.
    e0, e1 = a.epoch(0), a.epoch(1)
    for plan in (e0, e1):
        assert sorted(i for mb in plan for row in mb for i in row) == list(range(300))
    assert e0 != e1
    assert a.locate(len(e0)) == (1, 0) and a.locate(len(e0) - 1) == (0, len(e0) - 1)
    assert MicroBatchStream(lengths, 2, 256, packing=True, seed=6).epoch(0) != e0


def test_stream_unpacked_and_epoch_steps():
    s = MicroBatchStream([10] * 10, 3, 64, packing=False, seed=0)
    assert [len(mb) for mb in s.epoch(0)] == [3, 3, 3, 1]
    assert steps_for_epochs(s, 2.0, per_step=2) == 4
    assert steps_for_epochs(s, 0.5, per_step=1) == 2


def test_ranks_split_the_same_global_sequence():
    # Global micro-batch i goes to rank i % W: together the ranks take a contiguous block.
    G, W, step = 2, 2, 3
    consumed = step * G * W
    per_rank = {r: [consumed + g * W + r for g in range(G)] for r in range(W)}
    assert sorted(i for ids in per_rank.values() for i in ids) == list(range(consumed, consumed + G * W))
