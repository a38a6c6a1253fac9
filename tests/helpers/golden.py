"""Golden files: compare text with a committed file, or rewrite the file when PROVISION_REGEN is set.

    PROVISION_REGEN=1 .venv/bin/python -m pytest PATH      (then review the diff before committing)
"""

from __future__ import annotations

import os
from pathlib import Path

REGEN = bool(os.environ.get("PROVISION_REGEN"))


def check(path: Path, text: str, what: str | None = None) -> None:
    """`text` must equal the golden file at `path` (rewritten instead under PROVISION_REGEN=1)."""
    what = what or path.name
    if REGEN:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        return
    assert path.is_file(), f"no golden file {what}; run with PROVISION_REGEN=1 and review it"
    assert text == path.read_text(encoding="utf-8"), f"{what} differs from its golden file; regenerate with" \
        " PROVISION_REGEN=1 if intended"
