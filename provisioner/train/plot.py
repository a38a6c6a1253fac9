"""The loss-curve PNG written at the end of a run.

matplotlib draws it when installed; otherwise a small built-in renderer
(zlib + a 3x5 digit font for the tick labels) does, so the trainer needs no
plotting dependency inside the image.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Sequence
from pathlib import Path

Point = tuple[float, float]

TRAIN = (31, 119, 180)
EVAL = (255, 127, 14)


def loss_curve(path: Path, train: Sequence[Point], eval_: Sequence[Point] = ()) -> None:
    if not train and not eval_:
        return
    try:
        _with_matplotlib(path, train, eval_)
    except ImportError:
        _builtin(path, train, eval_)


def _with_matplotlib(path: Path, train: Sequence[Point], eval_: Sequence[Point]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.8), dpi=100)
    if train:
        ax.plot(
            [p[0] for p in train], [p[1] for p in train], color=[c / 255 for c in TRAIN], label="train loss"
        )
    if eval_:
        ax.plot(
            [p[0] for p in eval_],
            [p[1] for p in eval_],
            "o-",
            color=[c / 255 for c in EVAL],
            label="eval loss",
        )
    ax.set_xlabel("step")
    ax.set_ylabel("loss")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


_FONT = {
    "0": "111101101101111",
    "1": "010110010010111",
    "2": "111001111100111",
    "3": "111001111001111",
    "4": "101101111001001",
    "5": "111100111001111",
    "6": "111100111101111",
    "7": "111001001001001",
    "8": "111101111101111",
    "9": "111101111001111",
    ".": "000000000000010",
    "-": "000000111000000",
    "e": "000111111100111",
}


class _Canvas:
    def __init__(self, w: int, h: int) -> None:
        self.w, self.h = w, h
        self.px = bytearray(b"\xff" * (w * h * 3))

    def set(self, x: int, y: int, rgb: tuple[int, int, int]) -> None:
        if 0 <= x < self.w and 0 <= y < self.h:
            i = (y * self.w + x) * 3
            self.px[i : i + 3] = bytes(rgb)

    def line(self, x0: int, y0: int, x1: int, y1: int, rgb: tuple[int, int, int], width: int = 1) -> None:
        dx, dy = abs(x1 - x0), -abs(y1 - y0)
        sx, sy = (1 if x0 < x1 else -1), (1 if y0 < y1 else -1)
        err = dx + dy
        while True:
            for ox in range(width):
                for oy in range(width):
                    self.set(x0 + ox, y0 + oy, rgb)
            if x0 == x1 and y0 == y1:
                return
            e2 = 2 * err
            if e2 >= dy:
                err += dy
                x0 += sx
            if e2 <= dx:
                err += dx
                y0 += sy

    def text(self, x: int, y: int, s: str, rgb: tuple[int, int, int], scale: int = 2) -> None:
        for ch in s:
            bits = _FONT.get(ch)
            if bits is not None:
                for r in range(5):
                    for c in range(3):
                        if bits[r * 3 + c] == "1":
                            for a in range(scale):
                                for b in range(scale):
                                    self.set(x + c * scale + a, y + r * scale + b, rgb)
            x += 4 * scale

    def png(self) -> bytes:
        raw = b"".join(b"\x00" + bytes(self.px[y * self.w * 3 : (y + 1) * self.w * 3]) for y in range(self.h))

        def chunk(tag: bytes, data: bytes) -> bytes:
            return (
                struct.pack(">I", len(data))
                + tag
                + data
                + struct.pack(">I", zlib.crc32(tag + data) & 0xFFFFFFFF)
            )

        ihdr = struct.pack(">IIBBBBB", self.w, self.h, 8, 2, 0, 0, 0)
        return (
            b"\x89PNG\r\n\x1a\n"
            + chunk(b"IHDR", ihdr)
            + chunk(b"IDAT", zlib.compress(raw, 6))
            + chunk(b"IEND", b"")
        )


def _fmt(v: float) -> str:
    return f"{v:.3g}".replace("+", "")


def _builtin(path: Path, train: Sequence[Point], eval_: Sequence[Point]) -> None:
    W, H, left, right, top, bottom = 800, 480, 80, 20, 20, 40
    cv = _Canvas(W, H)
    pts = list(train) + list(eval_)
    xs, ys = [p[0] for p in pts], [p[1] for p in pts]
    x0, x1 = min(xs), max(xs)
    y0, y1 = min(ys), max(ys)
    if x1 == x0:
        x1 = x0 + 1
    if y1 == y0:
        y0, y1 = y0 - 0.5, y1 + 0.5
    pad = (y1 - y0) * 0.05
    y0, y1 = y0 - pad, y1 + pad

    def to_px(p: Point) -> tuple[int, int]:
        px = left + (p[0] - x0) / (x1 - x0) * (W - left - right)
        py = top + (y1 - p[1]) / (y1 - y0) * (H - top - bottom)
        return int(round(px)), int(round(py))

    grid, axis = (225, 225, 225), (60, 60, 60)
    for i in range(6):
        gy = top + i * (H - top - bottom) // 5
        cv.line(left, gy, W - right, gy, grid)
        cv.text(4, gy - 5, _fmt(y1 - i * (y1 - y0) / 5), axis)
        gx = left + i * (W - left - right) // 5
        cv.line(gx, top, gx, H - bottom, grid)
        cv.text(gx - 8, H - bottom + 10, _fmt(x0 + i * (x1 - x0) / 5), axis)
    cv.line(left, top, left, H - bottom, axis)
    cv.line(left, H - bottom, W - right, H - bottom, axis)
    for series, rgb in ((train, TRAIN), (eval_, EVAL)):
        prev = None
        for p in series:
            cur = to_px(p)
            if prev is not None:
                cv.line(*prev, *cur, rgb, width=2)
            elif len(series) == 1:
                cv.line(cur[0] - 2, cur[1], cur[0] + 2, cur[1], rgb, width=3)
            prev = cur
    path.write_bytes(cv.png())
