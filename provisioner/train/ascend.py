"""What the trainer knows about Ascend chips and about the NPU support of the installed libraries.

Every decision reads the chip (the SoC name torch_npu reports, and torch_npu's own answers for bf16 and
Inf/NaN mode) or the installed library's version, against the data in ascend.yaml; nothing is assumed
from the torch or CANN line. No torch import here: callers pass what they read from torch_npu.
"""

from __future__ import annotations

import functools
import importlib.metadata
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

DATA_FILE = Path(__file__).with_name("ascend.yaml")


@functools.lru_cache(maxsize=1)
def data() -> dict[str, Any]:
    return yaml.safe_load(DATA_FILE.read_text(encoding="utf-8"))


@dataclass(frozen=True)
class SocFamily:
    id: str
    title: str
    fusion_attention: bool
    jit_compile: bool | None  # the compile mode for npu_jit_compile: auto; None: CANN's default


def soc_family(soc_name: str) -> SocFamily | None:
    """The family of an SoC name such as "Ascend910B3" or "Ascend910_9392"; None when unknown."""
    for row in data()["soc_families"]:
        names = row.get("names") or []
        if soc_name in names or (row.get("pattern") and re.search(row["pattern"], soc_name)):
            return SocFamily(row["id"], row["title"], bool(row["fusion_attention"]), row.get("jit_compile"))
    return None


def max_varlen_sequences() -> int:
    return int(data()["npu_fusion_attention"]["max_varlen_sequences"])


def installed_version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def transformers_has(feature: str, version: str | None = None) -> bool:
    """Does the installed (or the given) transformers release have ``feature`` (a key of ascend.yaml's
    transformers table)? Unknown versions count as not having it."""
    from packaging.version import InvalidVersion, Version

    first = data()["transformers"][feature]
    have = version if version is not None else installed_version("transformers")
    if have is None:
        return False
    try:
        return Version(have) >= Version(str(first))
    except InvalidVersion:
        return False


def transformers_first(feature: str) -> str:
    return str(data()["transformers"][feature])
