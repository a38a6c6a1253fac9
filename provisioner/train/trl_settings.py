"""Which TRL release ``method: grpo`` runs on, and what the installed release takes for each GRPO setting.

The data is trl_settings.yaml: the oldest TRL the trainer supports and the
first release of each setting value that not every supported TRL has
(``loss_type: dapo``, string ``scale_rewards``). ``problem`` is one line naming
what the installed TRL cannot do for a config (requirements.missing_library
calls it, so a config is refused at load, up front and by ``provision-train
--check``); ``settings`` maps the config onto what that release takes:
``loss_type: auto`` picks the first listed value it has, and a value an older
release spells differently (``scale_rewards`` was a bool before 0.22) is
passed in its spelling. Package metadata only: no torch, no TRL import.
"""

from __future__ import annotations

import functools
import importlib.metadata
from pathlib import Path
from typing import Any

DATA_FILE = Path(__file__).with_name("trl_settings.yaml")


@functools.lru_cache(maxsize=1)
def data() -> dict[str, Any]:
    import yaml

    return yaml.safe_load(DATA_FILE.read_text(encoding="utf-8"))


def installed_version() -> str | None:
    try:
        return importlib.metadata.version("trl")
    except importlib.metadata.PackageNotFoundError:
        return None


def _at_least(have: str, first: str) -> bool:
    from packaging.version import InvalidVersion, Version

    try:
        return Version(have) >= Version(first)
    except InvalidVersion:
        return False


def _row(setting: str, value: Any) -> dict[str, Any] | None:
    return next((r for r in data()["settings"] if r["setting"] == setting and r["value"] == value), None)


def _has(setting: str, value: Any, version: str) -> bool:
    row = _row(setting, value)
    return row is None or _at_least(version, str(row["since"]))


def settings(g: Any, version: str | None = None) -> dict[str, Any]:
    """GRPOConfig's ``loss_type`` and ``scale_rewards`` for these GRPO settings on the installed (or the given)
    TRL, in that release's spelling. Call after ``problem`` found nothing."""
    version = version or installed_version() or "0"
    loss_type = g.loss_type
    if loss_type == "auto":
        loss_type = next((v for v in data()["auto"]["loss_type"] if _has("loss_type", v, version)), loss_type)
    scale: Any = g.scale_rewards
    row = _row("scale_rewards", scale)
    if row is not None and "before" in row and not _at_least(version, str(row["since"])):
        scale = row["before"]
    return {"loss_type": loss_type, "scale_rewards": scale}


def problem(g: Any, version: str | None = None) -> str | None:
    """One line naming what the installed (or the given) TRL cannot do for these GRPO settings, or None."""
    version = version or installed_version()
    if version is None:
        return None  # not installed: requirements.missing_library says so
    table = data()
    if not _at_least(version, str(table["minimum"])):
        return (
            f"config: method: grpo needs TRL >= {table['minimum']} (GRPOConfig.loss_type), the installed one is"
            f" {version}; pip install 'provisioner[grpo]', or run in an image provision builds (its lock has TRL)"
        )
    if g.loss_type == "auto" and not any(_has("loss_type", v, version) for v in table["auto"]["loss_type"]):
        return f"config: grpo.loss_type: auto finds none of {', '.join(table['auto']['loss_type'])} in TRL {version}"
    for setting in ("loss_type", "scale_rewards"):
        value = getattr(g, setting)
        row = _row(setting, value)
        if row is None or "before" in row or _at_least(version, str(row["since"])):
            continue
        usable = [str(r["value"]) for r in table["settings"] if r["setting"] == setting and "before" in r]
        way = "auto (dapo where TRL has it, else bnpo), grpo, bnpo or dr_grpo" if setting == "loss_type" else (
            " or ".join(usable))
        return (
            f"config: grpo.{setting}: {value} needs TRL >= {row['since']}, the installed one is {version}"
            f" ({row['reason'].strip()}); use {way}, or an image with a newer TRL (the torch 2.6+ stacks' package"
            " sets carry one)"
        )
    return None
