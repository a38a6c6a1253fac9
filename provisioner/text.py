"""Plain-text helpers every layer may use: an aligned table, text folded onto one line."""

from __future__ import annotations


def one_line(text: object) -> str:
    """`text` with every run of white space (newlines too) folded into one space."""
    return " ".join(str(text).split())


def table(rows: list[list], headers: list[str]) -> str:
    """A plain aligned text table."""
    cells = [[("" if c is None else str(c)) for c in row] for row in [headers, *rows]]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = []
    for n, row in enumerate(cells):
        lines.append("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
        if n == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)
