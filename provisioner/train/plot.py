"""The training-curve PNG written at the end of a run, drawn with matplotlib.

One panel for the loss (train line, eval points), titled, with labelled axes;
GRPO runs get a second panel with the mean reward per step. matplotlib is part
of the trainer's dependencies; where it is missing the run says so and writes
no picture (the metrics file has every number).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

Point = tuple[float, float]
log = logging.getLogger("provision-train")


def loss_curve(
    path: Path,
    train: Sequence[Point],
    eval_: Sequence[Point] = (),
    rewards: Sequence[Point] = (),
    title: str | None = None,
) -> bool:
    """Write the figure; False (and a log line) when there is nothing to draw or no matplotlib."""
    if not train and not eval_ and not rewards:
        return False
    try:
        fig = figure(train, eval_, rewards, title)
    except ImportError:
        log.info(f"matplotlib is not installed: no {path.name} (pip install matplotlib)")
        return False
    import matplotlib.pyplot as plt

    fig.savefig(path)
    plt.close(fig)
    return True


def figure(
    train: Sequence[Point], eval_: Sequence[Point] = (), rewards: Sequence[Point] = (), title: str | None = None
):  # -> matplotlib.figure.Figure (matplotlib is imported lazily)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = 2 if rewards else 1
    fig, axes = plt.subplots(panels, 1, figsize=(8, 4.8 if panels == 1 else 7.2), dpi=100, sharex=True, squeeze=False)
    ax = axes[0][0]
    if train:
        ax.plot([p[0] for p in train], [p[1] for p in train], color="tab:blue", label="train loss")
    if eval_:
        ax.plot([p[0] for p in eval_], [p[1] for p in eval_], "o", color="tab:orange", label="eval loss", zorder=3)
    ax.set_ylabel("loss (mean per target token)" if not rewards else "policy loss")
    ax.set_title(title or "training loss")
    ax.grid(alpha=0.3)
    if train or eval_:
        ax.legend()
    if rewards:
        rax = axes[1][0]
        rax.plot([p[0] for p in rewards], [p[1] for p in rewards], color="tab:green", label="mean reward")
        rax.set_ylabel("reward")
        rax.grid(alpha=0.3)
        rax.legend()
    axes[-1][0].set_xlabel("optimizer step")
    fig.tight_layout()
    return fig
