"""The self-test's sizes and counts per device kind (selftest.yaml beside this file), read once for every check
that takes its figures from there (the all-reduce sweep, the HBM stress)."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

DATA_FILE = Path(__file__).with_name("selftest.yaml")


@functools.lru_cache(maxsize=1)
def _all() -> dict[str, Any]:
    import yaml

    return yaml.safe_load(DATA_FILE.read_text(encoding="utf-8"))


def row(section: str, device_type: str) -> dict[str, Any]:
    """The `section` row for this device kind; a kind without its own row takes the NPU's."""
    rows = _all()[section]
    return rows[device_type] if device_type in rows else rows["npu"]
